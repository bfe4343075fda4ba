"""Phase 1 claims about a fine-tune: its init checkpoint, vocab alignment and training logs."""

from __future__ import annotations

import io
import math

from specgate.claims import ids, inputs
from specgate.claims import result as claims
from specgate.claims.result import Attachment, ClaimResult
from specgate.claims.weights import tensor_parity
from specgate.core.errors import CheckpointError
from specgate.core.profile import Profile
from specgate.io.checkpoint import open_drafter
from specgate.io.metrics_log import MetricsLog, read_metrics
from specgate.io.vocab_maps import compare as compare_maps
from specgate.io.vocab_maps import load_map, required_count

PHASE = "phase1"
# "Clearly below random": the first loss must beat the uniform guess ln(Vd) by 10 %.
LOSS_MARGIN = 0.9


def init_parity_claim(profile: Profile) -> ClaimResult:
    cid = ids.INIT_PARITY.id
    # The tensors a fine-tune's loader leaves out (SpecForge's and the seeds' --finetune-from)
    # are the frozen ones: the vocab map is the new data's, embed_tokens comes from the target.
    loaded = inputs.prepare(profile, cid, PHASE, ["init", "drafter"], lambda a, b: (
        a, b, tensor_parity(open_drafter(a), open_drafter(b))))
    if isinstance(loaded, ClaimResult):
        return loaded
    init_path, drafter_path, parity = loaded
    total = len(parity.matched) + len(parity.missing) + len(parity.mismatched)
    skipped = f"skipped as a fine-tune loader does: {_names(parity.frozen) or 'none'}"
    problems = [f"{n}: init {a}, drafter {b}" for n, a, b in parity.mismatched]
    problems += [f"{n}: no such tensor in the drafter" for n in parity.missing]
    if problems:
        message = (f"{init_path}: {len(problems)} of {total} trainable tensors have no same-shape,"
                   f" same-dtype place in {drafter_path} ({'; '.join(problems[:6])}"
                   f"{'; …' if len(problems) > 6 else ''}); a loader would drop or fail on them. "
                   f"Names were normalised (midlayer.* ≡ layers.0.*); {skipped}")
    else:
        fresh = (f"; {len(parity.extra)} drafter tensor(s) not in init start from their own "
                 f"initialisation: {_names(parity.extra)}" if parity.extra else "")
        message = (f"{init_path}: all {total} trainable tensors load into {drafter_path} with the"
                   f" same shape and dtype (midlayer.* ≡ layers.0.*); {skipped}{fresh}")
    return claims.judged(
        not problems, cid, PHASE, message, observed=len(parity.matched), expected=f"= {total}",
        unit="tensors", details={**claims.listed("skipped", parity.frozen),
                                 **claims.listed("missing", parity.missing),
                                 **claims.listed("mismatched", [list(m) for m in
                                                                parity.mismatched]),
                                 **claims.listed("fresh", parity.extra), "compared": total,
                                 "names_normalised": True},
        fail_reason="shape_mismatch" if parity.mismatched else "missing_tensor")


def _names(names: tuple[str, ...], shown: int = 6) -> str:
    """A few names for a message, and how many more there are (the details list them)."""
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


def vocab_alignment_claim(profile: Profile) -> ClaimResult:
    cid = ids.VOCAB_ALIGNMENT.id
    loaded = inputs.prepare(profile, cid, PHASE, ["init", "vocab_map"],
                            lambda a, b: (a, b, load_map(a), load_map(b)))
    if isinstance(loaded, ClaimResult):
        return loaded
    init_path, map_path, init_map, data_map = loaded
    cmp = compare_maps(init_map, data_map)
    vd = cmp.reference_draft_vocab_size
    need = required_count(profile.thresholds.d2t_match_min, vd)
    matches = cmp.d2t_positional_matches
    same_size = cmp.draft_vocab_size == vd
    ok = same_size and matches >= need
    head = (f"{init_path}: d2t matches {map_path} at {matches} of {vd} draft positions "
            f"({matches / vd:.1%})" if vd else f"{map_path}: the map is empty")
    if ok:
        message = (f"{head}: lm_head rows of the init score the tokens the training data "
                   f"expects at those positions")
    else:
        size = ("" if same_size else f"; the init's draft vocabulary has "
                f"{cmp.draft_vocab_size} positions, the data's {vd}")
        message = (f"{head}{size}: at {vd - matches} positions the init's lm_head row scores a "
                   f"different target token than training will label it with, so the fine-tune "
                   f"starts from wrong predictions on the training tokens that fall there "
                   f"(how far the first loss is from random ln({vd}) = "
                   f"{math.log(max(vd, 1)):.2f} depends on how many tokens those positions "
                   f"carry: `finetune.initial_loss` says). The maps share {cmp.shared_tokens} "
                   f"tokens: "
                   f"run `specgate remap-vocab --from {init_path} --to {map_path} --out NEW` to "
                   f"move those rows to the data's positions, then fine-tune from NEW")
    return claims.judged(
        ok, cid, PHASE, message, observed=matches, expected=f">= {need}", unit="positions",
        fail_reason="size_differs" if not same_size else "misaligned",
        details={"shared_tokens": cmp.shared_tokens, "draft_vocab_size": vd,
                 "init_draft_vocab_size": cmp.draft_vocab_size,
                 "first_mismatch": cmp.first_mismatch,
                 "remap": ["specgate", "remap-vocab", "--from", str(init_path), "--to",
                           str(map_path)]},
        attachments=(Attachment("vocab alignment", cmp.table_csv(), "csv"),))


def draft_vocab_size(profile: Profile) -> tuple[int, str] | None:
    """Vd and where it came from: the drafter's config, the init's, or [drafter.expect]."""
    for section, path in (("[drafter] path", profile.drafter_path),
                          ("[finetune] init", profile.resolve(profile.finetune.init))):
        if path is None:
            continue
        try:
            config = open_drafter(path).config
        except CheckpointError:
            continue
        vd = config.get("draft_vocab_size") or config.get("vocab_size")
        if isinstance(vd, int) and vd > 1:
            return vd, f"{section} {path}"
    expected = profile.drafter.expect.get("draft_vocab_size")
    if isinstance(expected, int) and expected > 1:
        return expected, "[drafter.expect] draft_vocab_size"
    return None


def initial_loss_claim(profile: Profile) -> ClaimResult:
    cid = ids.INITIAL_LOSS.id
    found = inputs.paths(profile, cid, PHASE, "log")
    if isinstance(found, ClaimResult):
        return found
    sized = draft_vocab_size(profile)
    if sized is None:
        return claims.broken(cid, PHASE, "the draft vocabulary size is unknown: give [drafter] "
                             "path, [finetune] init or [drafter.expect] draft_vocab_size",
                             reason="vocab_size_unknown")
    log = inputs.load(cid, PHASE, lambda: read_metrics(found[0]))
    if isinstance(log, ClaimResult):
        return log
    return judge_initial_loss(log, *sized)


def judge_initial_loss(log: MetricsLog, vd: int, vd_source: str = "") -> ClaimResult:
    cid = ids.INITIAL_LOSS.id
    row = log.first_loss()
    if row is None or row.loss is None:
        return claims.broken(cid, PHASE, f"{log.path}: no record carries a loss",
                             reason="no_loss")
    random_loss = math.log(vd)
    limit = LOSS_MARGIN * random_loss
    where = f"{log.path}:{row.line} (epoch {row.epoch:g}, step {row.step})"
    finite = math.isfinite(row.loss)
    ok = finite and row.loss < limit
    why = "nonfinite_loss" if not finite else ("worse_than_random" if row.loss > random_loss
                                              else "near_random")
    label = "NaN" if math.isnan(row.loss) else ("Inf" if row.loss > 0 else "-Inf")
    if not finite:
        tail = (f"the loss is {label}: training diverged or "
                "the log is corrupt; check the learning rate and the data at that step, or the "
                "line itself")
    elif ok:
        tail = "the init predicts the training data better than a uniform guess"
    elif row.loss > random_loss:
        tail = (f"that is worse than a uniform guess over the draft vocabulary, which scores "
                f"ln({vd}) = {random_loss:.2f}: the init is confidently wrong, typically because "
                f"its lm_head rows score other tokens than the data's map says (check "
                f"finetune.vocab_alignment; fix with `specgate remap-vocab`). If the log sums "
                f"the loss over several draft steps, compare it with that many × {random_loss:.2f}")
    else:
        tail = ("that is about what a uniform guess over the draft vocabulary scores: the init "
                "carries no usable knowledge of this data (check finetune.vocab_alignment and "
                "the capture layers)")
    message = (f"{where}: first logged loss {row.loss:.3f} vs random ln({vd}) = "
               f"{random_loss:.3f} (needs < {limit:.3f}); {tail}")
    # A float NaN in `observed` would make verdict.json invalid JSON (and NaN != NaN in history).
    return claims.judged(ok, cid, PHASE, message, observed=round(row.loss, 4) if finite else None,
                         expected=f"< {limit:.4f}", unit="nats", fail_reason=why,
                         details={"random_loss": round(random_loss, 4), "draft_vocab_size": vd,
                                  "draft_vocab_size_from": vd_source, "line": row.line,
                                  "epoch": row.epoch, "step": row.step,
                                  "loss": round(row.loss, 4) if finite else label})


def progress_claim(profile: Profile) -> ClaimResult:
    cid = ids.PROGRESS.id
    logs = inputs.prepare(profile, cid, PHASE, ["log", "reference_log"],
                          lambda a, b: (read_metrics(a), read_metrics(b)))
    if isinstance(logs, ClaimResult):
        return logs
    return judge_progress(*logs)


def judge_progress(log: MetricsLog, ref: MetricsLog) -> ClaimResult:
    """Accuracy epoch by epoch, over the epochs both logs have finished (see finished_epochs):
    the last accuracy of an epoch still training is no match for a finished one."""
    cid = ids.PROGRESS.id
    mine, theirs = log.accuracy_by_epoch(), ref.accuracy_by_epoch()
    for which, acc in ((log.path, mine), (ref.path, theirs)):
        if not acc:
            return claims.broken(cid, PHASE, f"{which}: no record carries an accuracy",
                                 reason="no_accuracy", details={"log": str(which)})
    shared = sorted(set(mine) & set(theirs))
    if not shared:
        return claims.skipped(cid, PHASE, f"the logs share no epoch yet ({log.path}: epochs "
                              f"{sorted(mine)}; {ref.path}: epochs {sorted(theirs)})",
                              reason="no_shared_epoch",
                              details={"epochs": sorted(mine), "reference_epochs": sorted(theirs)})
    done_mine, done_theirs = log.finished_epochs(), ref.finished_epochs()
    epochs = [e for e in shared if e in done_mine and e in done_theirs]
    left_out = {e: [str(p) for p, done in ((log.path, done_mine), (ref.path, done_theirs))
                    if e not in done]
                for e in shared if e not in epochs}
    omitted = "; ".join(f"epoch {e} left out, unfinished in {' and '.join(where)}"
                        for e, where in left_out.items())
    if not epochs:
        return claims.skipped(cid, PHASE, f"the logs share no finished epoch yet (shared epochs "
                              f"{shared}; {omitted}). An epoch counts as finished once a later "
                              "one is logged, or, for the last, once it spans as many steps as "
                              "the epoch before it", reason="no_finished_epoch",
                              details={"epochs": [], "shared": shared,
                                       "left_out": {str(e): w for e, w in left_out.items()}})
    compared = (f"compared epochs {_ranges(epochs)}, finished in both logs"
                + (f"; {omitted}" if omitted else ""))
    table = io.StringIO()
    table.write("epoch,finetune_accuracy,reference_accuracy,gap\n")
    for e in epochs:
        table.write(f"{e},{mine[e]:.4f},{theirs[e]:.4f},{mine[e] - theirs[e]:+.4f}\n")
    behind = [e for e in epochs if mine[e] < theirs[e]]
    last = epochs[-1]
    if behind:
        worst = min(behind, key=lambda e: mine[e] - theirs[e])
        message = (f"{log.path}: the fine-tune trails the from-scratch reference {ref.path} at "
                   f"{len(behind)} of {len(epochs)} shared epochs; at epoch {worst} its accuracy "
                   f"is {mine[worst]:.1%} against {theirs[worst]:.1%} (epoch {last}: "
                   f"{mine[last]:.1%} vs {theirs[last]:.1%}). The init is a worse starting point "
                   f"than random weights for this data: train from scratch or pick another init "
                   f"({compared})")
        observed = round(mine[worst], 4)
        expected = f">= {theirs[worst]:.4f}"
        judged_epoch = worst
    else:
        message = (f"{log.path}: the fine-tune's accuracy is at or above the from-scratch "
                   f"reference's at all {len(epochs)} shared epochs (epoch {last}: "
                   f"{mine[last]:.1%} vs {theirs[last]:.1%}; {compared})")
        observed = round(mine[last], 4)
        expected = f">= {theirs[last]:.4f}"
        judged_epoch = last
    return claims.judged(not behind, cid, PHASE, message, observed=observed, expected=expected,
                         unit="accuracy", fail_reason="behind_reference",
                         details={"epochs": epochs, "behind": behind, "epoch": judged_epoch,
                                  "last": {"epoch": last, "accuracy": round(mine[last], 4),
                                           "reference_accuracy": round(theirs[last], 4)},
                                  "left_out": {str(e): w for e, w in left_out.items()}},
                         attachments=(Attachment("accuracy by epoch", table.getvalue(), "csv"),))


def _ranges(epochs: list[int]) -> str:
    """0, 1, 2, 5 → "0–2, 5"."""
    parts: list[str] = []
    start = prev = epochs[0]
    for e in [*epochs[1:], None]:
        if e is not None and e == prev + 1:
            prev = e
            continue
        parts.append(str(start) if start == prev else f"{start}–{prev}")
        if e is not None:
            start = prev = e
    return ", ".join(parts)
