"""Phase 1 eval.teacher_forced: the fine-tune's init predicts the dump clearly above chance."""

from __future__ import annotations

import json
import math

from specgate.claims import inputs
from specgate.claims import result as claims
from specgate.claims.result import Attachment, ClaimResult
from specgate.core.errors import CheckpointError, DataError
from specgate.core.profile import Profile
from specgate.model.evaluate import DEFAULT_STEPS, compare_table, teacher_forced

PHASE = "phase1"
# "Clearly below random": the initial loss must beat the uniform guess by 10 %.
RANDOM_MARGIN = 0.9


def teacher_forced_claim(profile: Profile) -> ClaimResult:
    """eval.teacher_forced: the init (else the drafter) predicts the dump clearly above chance."""
    cid = "eval.teacher_forced"
    found = inputs.paths(profile, cid, PHASE, "hidden_states")
    if isinstance(found, ClaimResult):
        return found
    dump = found[0]
    init = profile.resolve(profile.finetune.init)
    # A fine-tune keeps the init's lm_head but labels with the data's map: evaluate it so.
    data_map = profile.resolve(profile.finetune.vocab_map)
    subjects = [(init, data_map)] if init is not None else []
    subjects += [(p, None) for p in (profile.resolve(profile.drafter.path),
                                     profile.resolve(profile.drafter.reference)) if p is not None]
    subjects = list(dict.fromkeys(subjects))
    if not subjects:
        return claims.skipped(cid, PHASE, "no drafter to evaluate: give [finetune] init or "
                              "[drafter] path")
    try:
        import torch  # noqa: F401
    except ImportError:
        return claims.broken(cid, PHASE, "the offline evaluation needs torch: pip install "
                             "'specgate[eval]' (or torch) in this environment",
                             reason="missing_dependency")
    steps = profile.speculative.num_steps or DEFAULT_STEPS
    target = profile.resolve(profile.target.path)
    try:
        reports = [teacher_forced(path, dump, steps=steps, target_path=target, vocab_map=vmap)
                   for path, vmap in subjects]
    except (DataError, CheckpointError, KeyError, ValueError, RuntimeError) as exc:
        return claims.broken(cid, PHASE, f"the evaluation could not run: {exc}")
    main = reports[0]
    limit = RANDOM_MARGIN * main.random_loss
    loss0 = main.steps[0].loss if main.steps else float("nan")
    accs = ", ".join(f"{s.accuracy:.1%}" for s in main.steps)
    ok = math.isfinite(loss0) and loss0 < limit
    verdict = ("clearly below random" if ok else
               "not clearly below random: the drafter predicts this data no better than a "
               "uniform guess; check finetune.vocab_alignment (a shifted map makes every lm_head "
               "row score another token) and the dump's capture layers (data.capture_layers)")
    message = (f"{main.drafter} on {main.dump}: step-0 loss {loss0:.3f} vs "
               f"ln({main.draft_vocab_size}) = {main.random_loss:.3f}, {verdict}; "
               f"top-1 accuracy per draft step {accs}; "
               f"predicted accept length {main.accept_length:.2f} at {steps} steps"
               + "".join(f"; note: {n}" for n in main.notes))
    return claims.judged(
        ok, cid, PHASE, message, observed=round(loss0, 4), expected=f"< {limit:.4f}",
        unit="nats", details={"reports": [r.to_json() for r in reports]},
        attachments=(Attachment("teacher-forced comparison", compare_table(reports), "csv"),
                     Attachment("teacher-forced report",
                                json.dumps([r.to_json() for r in reports], indent=2), "json")))
