"""The offline evaluation's claims: eval.teacher_forced (Phase 1: the fine-tune's init predicts
the dump clearly above chance) and eval.live_agreement (the probe: the accept length that
evaluation predicts for the served chain is the one measured)."""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import json
import math
from collections.abc import Sequence

from specgate.claims import ids, inputs
from specgate.claims import result as claims
from specgate.claims import spec as spec_claims
from specgate.claims.result import Attachment, ClaimResult
from specgate.core.errors import CheckpointError, DataError
from specgate.core.profile import Profile
from specgate.model.evaluate import (
    ALL,
    DEFAULT_STEPS,
    GroupPrediction,
    ServedPrediction,
    compare_table,
    predict_served,
    served_table,
    teacher_forced,
)
from specgate.results import bench, stats
from specgate.results.bench import Measurement, RequestSample
from specgate.results.live import LiveResults

PHASE = "phase1"
# "Clearly below random": the initial loss must beat the uniform guess by 10 %.
RANDOM_MARGIN = 0.9


def eval_device(profile: Profile) -> str:
    """[eval] device, with "auto" resolved: cuda when torch sees a GPU, else cpu."""
    import torch

    wanted = profile.eval.device
    if wanted == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if wanted.startswith("cuda"):
        index = int(wanted.partition(":")[2] or 0)
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if index >= count:
            raise ValueError(f"[eval] device = {wanted!r}, but torch sees "
                             f"{count or 'no'} CUDA device{'s' if count != 1 else ''} here "
                             "(use 'cpu', or 'auto' for cuda when there is one)")
    return wanted


def teacher_forced_claim(profile: Profile) -> ClaimResult:
    """eval.teacher_forced: the init (else the drafter) predicts the dump clearly above chance."""
    cid = ids.TEACHER_FORCED.id
    found = inputs.paths(profile, cid, PHASE, "hidden_states")
    if isinstance(found, ClaimResult):
        return found
    dump = found[0]
    init = profile.resolve(profile.finetune.init)
    # A fine-tune keeps the init's lm_head but labels with the data's map: evaluate it so.
    data_map = profile.resolve(profile.finetune.vocab_map)
    subjects = [(init, data_map)] if init is not None else []
    subjects += [(p, None) for p in (profile.drafter_path, profile.reference_path)
                 if p is not None]
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
    target = profile.target_path
    try:
        device = eval_device(profile)
        reports = [teacher_forced(path, dump, steps=steps, target_path=target, vocab_map=vmap,
                                  device=device)
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
               f"predicted accept length {main.accept_length:.2f} at {steps} steps "
               + ("(greedy serving replayed over the dump's answers"
                  f"; the chain model averaged over every position says "
                  f"{main.chain_accept_length:.2f})" if main.served_verifies else
                  "(the chain model: no answer to replay serving over)")
               + "".join(f"; note: {n}" for n in main.notes))
    return claims.judged(
        ok, cid, PHASE, message, observed=round(loss0, 4), expected=f"< {limit:.4f}",
        unit="nats", details={"reports": [r.to_json() for r in reports]},
        attachments=(Attachment("teacher-forced comparison", compare_table(reports), "csv"),
                     Attachment("teacher-forced report",
                                json.dumps([r.to_json() for r in reports], indent=2), "json")))


# -- eval.live_agreement: the offline prediction against the live measurement -----------------

LIVE_PHASE = "phase0"
LIVE_AGREEMENT = ids.LIVE_AGREEMENT.id
# A category's measured figure needs at least this many requests to be compared.
MIN_REQUESTS = 2
SIMULATED_NOTE = ("; this server is specgate's simulator, whose acceptance is synthetic (set "
                  "per draft position in the drafter's specgate_sim.json), so no hidden-state "
                  "dump predicts it and the claim is left to real deployments")


@dataclasses.dataclass(frozen=True)
class Agreement:
    """One group's predicted and measured accept length (Σ completion / Σ verify), compared."""

    group: str
    predicted: GroupPrediction | None  # None: no dump sample in this category
    requests: int
    prompts: int
    completion_mean: float | None  # mean completion tokens of the measured requests
    measured: stats.Summary | None  # None: nothing measured in this category
    tolerance: float

    @property
    def per_request(self) -> float | None:
        """The prediction as SGLang counts it, at the measured mean completion count."""
        if self.predicted is None or self.completion_mean is None or self.completion_mean <= 1:
            return None
        return self.predicted.per_request(self.completion_mean)

    @property
    def interval(self) -> tuple[float, float] | None:
        """The measured interval (the mean twice when there is none)."""
        m = self.measured
        if m is None or not math.isfinite(m.mean):
            return None
        return (m.ci_low, m.ci_high) if m.has_interval else (m.mean, m.mean)

    @property
    def bounds(self) -> tuple[float, float] | None:
        """The measured interval widened by the tolerance: [lo·(1 − tol), hi·(1 + tol)]."""
        found = self.interval
        if found is None:
            return None
        return found[0] * (1.0 - self.tolerance), found[1] * (1.0 + self.tolerance)

    @property
    def why_not_judged(self) -> str:
        if self.predicted is None:
            return "no dump sample of this category"
        if not self.predicted.judged:
            return self.predicted.note
        if self.requests < MIN_REQUESTS:
            return f"too few requests ({self.requests} < {MIN_REQUESTS})"
        if self.per_request is None or self.bounds is None:
            return "no verify pass measured"
        return ""

    @property
    def why_code(self) -> str:
        """why_not_judged as a reason code (the claim's `reason` when it is skipped)."""
        if self.predicted is None:
            return "no_dump_sample"
        if not self.predicted.judged:
            return "too_few_tokens"
        if self.requests < MIN_REQUESTS:
            return "too_few_requests"
        if self.per_request is None or self.bounds is None:
            return "nothing_measured"
        return ""

    @property
    def relative_error(self) -> float | None:
        """prediction ÷ measured mean − 1: > 0 when the offline evaluation is optimistic."""
        pred, m = self.per_request, self.measured
        if pred is None or m is None or not m.mean > 0:
            return None
        return pred / m.mean - 1.0

    @property
    def verdict(self) -> str:
        """agrees, optimistic or pessimistic; or why the group is not judged."""
        why = self.why_not_judged
        if why:
            return why
        pred, bounds = self.per_request, self.bounds
        if pred is None or bounds is None:  # why_not_judged says so; kept for the types
            return "no verify pass measured"
        if pred > bounds[1]:
            return "optimistic"
        if pred < bounds[0]:
            return "pessimistic"
        return "agrees"

    @property
    def judged(self) -> bool:
        return not self.why_not_judged

    def short(self) -> str:
        """`chat 1.52 vs 1.40 [1.31, 1.49] optimistic +8.6 %` (for the message)."""
        pred, interval, err = self.per_request, self.interval, self.relative_error
        if pred is None or interval is None or self.measured is None:
            return f"{self.group}: {self.why_not_judged}"
        figures = (f"{self.group} {pred:.2f} vs {self.measured.mean:.2f} "
                   f"[{interval[0]:.2f}, {interval[1]:.2f}]")
        if not self.judged:
            return f"{figures}, not judged: {self.why_not_judged}"
        return f"{figures} {self.verdict}" + (f" {err:+.1%}" if err is not None else "")

    def to_json(self) -> dict[str, object]:
        bounds = self.bounds
        return {"group": self.group,
                "dump_samples": self.predicted.samples if self.predicted else 0,
                "dump_positions": self.predicted.positions if self.predicted else 0,
                "predicted_per_verify": _r(self.predicted.per_verify if self.predicted
                                           else None),
                "predicted_per_request": _r(self.per_request),
                "measured": self.measured.to_json() if self.measured else None,
                "widened": [_r(bounds[0]), _r(bounds[1])] if bounds else None,
                "requests": self.requests, "prompts": self.prompts,
                "completion_tokens_mean": _r(self.completion_mean),
                "relative_error": _r(self.relative_error), "judged": self.judged,
                "verdict": self.verdict}


def _r(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 4)


def _measured(samples: Sequence[RequestSample], confidence: float) -> stats.Summary | None:
    """Σ completion / Σ verify of some requests, with the jackknife interval over prompts."""
    if not samples:
        return None
    units = list(bench.per_prompt(samples).values())
    return stats.jackknife(units, functools.partial(bench.metric_of, "accept_len"), confidence)


def agreements(prediction: ServedPrediction, spec: Measurement, tolerance: float,
               overall: stats.Summary) -> tuple[Agreement, list[Agreement]]:
    """The overall comparison (against the measurement's own accept length) and one per
    category that the dump or the live run has, in name order."""
    def group(name: str, predicted: GroupPrediction | None, samples: Sequence[RequestSample],
              measured: stats.Summary | None) -> Agreement:
        n = len(samples)
        mean = sum(s.completion_tokens for s in samples) / n if n else None
        return Agreement(name, predicted, n, len({s.prompt_id for s in samples}), mean,
                         measured, tolerance)

    whole = group(ALL, prediction.overall, spec.samples, overall)
    names = sorted({s.category for s in spec.samples} | set(prediction.categories))
    per_category = []
    for name in names:
        chosen = [s for s in spec.samples if s.category == name]
        per_category.append(group(name, prediction.categories.get(name), chosen,
                                  _measured(chosen, spec.confidence)))
    return whole, per_category


# A prompt whose served walk yields under this many tokens per verify accepts (almost) no draft:
# the drafter is blind to that prompt's text (on real SGLang, a drafter's 7 of 40 prompts
# predicted at exactly 1.000 measured 1.01: benchmarks/results/2026-12-01-h200-tiny-llama-64l/).
BLIND_PER_VERIFY = 1.1
# A dump sample scored at fewer chain positions says little about its prompt: its answer was cut
# short (an end of sequence, or a near-tie where the dump's forward and generation disagree), and
# a walk over a couple of positions ends at the dump's end, one token per verify, whatever the
# drafter does. Such prompts are listed but not ranked or called blind.
MIN_PROMPT_POSITIONS = 20


@dataclasses.dataclass(frozen=True)
class PromptAgreement:
    """One prompt: the dump sample's predicted accept length against its measured one."""

    prompt_id: str
    category: str
    predicted_per_verify: float
    predicted: float  # per request, at this prompt's mean completion count
    measured: float  # Σ completion / Σ verify over the prompt's requests
    measured_decode: float  # (Σ completion − requests) / Σ verify: what the walk predicts
    requests: int
    positions: int  # the dump sample's scored chain positions
    dump_answer: int = 0  # tokens of the dump sample's answer
    # tokens the served answer (the first of its requests with output_ids) shares with the
    # dump's from the start; None when no whole-answer output_ids came back for it, or the dump
    # sample has no answer to compare
    same: int | None = None
    served_tokens: float = 0.0  # mean completion tokens of the prompt's served answers
    served_ids: int | None = None  # length of the served answer compared (its output_ids)

    @property
    def cut_short(self) -> bool:
        """The dump's answer is shorter than the served one: its generator stopped it where
        its own forward disagreed at a near-tie (or it ended), so past that token it does not
        say what was served. False when the dump's answer is not known (no loss mask)."""
        return 0 < self.dump_answer < self.served_tokens

    @property
    def ranked(self) -> bool:
        return self.positions >= MIN_PROMPT_POSITIONS

    @property
    def diverged(self) -> bool:
        """The served answer leaves the dump's before either ends: past that token the
        prediction is about a text that was not served. (A served answer that stops earlier,
        at max_new_tokens, and is a prefix of the dump's has not left it.)"""
        return (self.same is not None and self.served_ids is not None
                and self.same < min(self.dump_answer, self.served_ids))

    @property
    def blind(self) -> bool:
        return self.ranked and self.predicted_per_verify < BLIND_PER_VERIFY

    def to_json(self) -> dict[str, object]:
        return {"prompt_id": self.prompt_id, "category": self.category,
                "predicted_per_verify": _r(self.predicted_per_verify),
                "predicted_per_request": _r(self.predicted), "measured": _r(self.measured),
                "measured_decode": _r(self.measured_decode), "requests": self.requests,
                "dump_positions": self.positions, "ranked": self.ranked,
                "dump_answer_tokens": self.dump_answer, "same_answer_tokens": self.same,
                "served_tokens": _r(self.served_tokens), "cut_short": self.cut_short}


def prompt_agreements(prediction: ServedPrediction,
                      spec: Measurement) -> list[PromptAgreement]:
    """Each measured prompt that has a dump sample of the same name (the probe's prompt id), in
    the order the probe ran them; prompts without a verify pass are left out."""
    categories = {s.prompt_id: s.category for s in spec.samples}
    served: dict[str, tuple[int, ...]] = {}
    for s in spec.samples:
        if s.output_ids and s.prompt_id not in served:
            served[s.prompt_id] = s.output_ids
    rows = []
    for pid, totals in bench.per_prompt(spec.samples).items():
        predicted = prediction.samples.get(pid)
        if predicted is None:
            continue
        answer = prediction.answers.get(pid, ())
        ids = served.get(pid)
        same = None if ids is None or not answer else _common_prefix(answer, ids)
        mean = totals.completion_tokens / totals.requests
        measured = bench.metric_of("accept_len", [totals])
        decode = bench.metric_of("tau_decode", [totals])
        if mean <= 1 or not (math.isfinite(measured) and math.isfinite(decode)):
            continue
        rows.append(PromptAgreement(pid, categories[pid], predicted.per_verify,
                                    predicted.per_request(mean), measured, decode,
                                    totals.requests, predicted.positions, len(answer), same,
                                    mean, None if ids is None else len(ids)))
    return rows


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def prompt_summary(rows: Sequence[PromptAgreement]) -> str:
    """`; per prompt (40 in both): rank correlation 0.91; ...blind...` for the message."""
    ranked = [r for r in rows if r.ranked]
    if len(ranked) < 3:
        return ""
    # per verify on both sides: tokens per verify pass in decode, free of the prefill token
    rho = stats.spearman([r.predicted_per_verify for r in ranked],
                         [r.measured_decode for r in ranked])
    short = len(rows) - len(ranked)
    left_out = (f"; {short} more left out, their dump answers scored at under "
                f"{MIN_PROMPT_POSITIONS} positions" if short else "")
    text = (f"; per prompt ({len(ranked)} in the dump and the probe{left_out}): rank "
            "correlation " + (f"{rho:.2f}" if math.isfinite(rho)
                              else "undefined (one side is constant)"))
    blind = [r for r in ranked if r.blind]
    if blind:
        names = ", ".join(r.prompt_id for r in blind[:5]) + (
            f" and {len(blind) - 5} more" if len(blind) > 5 else "")
        low, high = f"{min(r.measured for r in blind):.2f}", f"{max(r.measured for r in blind):.2f}"
        measured = f"{low} on each" if low == high else f"{low} to {high}"
        text += (f"; the offline walk predicts almost no accepted draft (< {BLIND_PER_VERIFY:g} "
                 f"per verify) on {len(blind)}: {names}; measured {measured} there")
    return text + _divergence_summary(ranked)


def _divergence_summary(ranked: Sequence[PromptAgreement]) -> str:
    """How many served answers left the dump's answer, and how far off the prediction was on
    those against the rest: a greedy answer that differs (a near-tie decided otherwise by
    another kernel) is another text, with its own acceptance."""
    def off(rows: Sequence[PromptAgreement]) -> str:
        errors = sorted(abs(r.predicted_per_verify - r.measured_decode) / r.measured_decode
                        for r in rows if r.measured_decode > 0)
        return f"{100 * errors[len(errors) // 2]:.0f} %" if errors else "n/a"

    known = [r for r in ranked if r.same is not None]
    if not known and any(r.served_ids is not None for r in ranked):
        return ("; no dump answer to compare the served answers' token ids with")
    if not known:
        cut = [r for r in ranked if r.cut_short]
        whole = [r for r in ranked if r.dump_answer and not r.cut_short]
        split = (f" (the dump's answer is as long as the served one on {len(whole)}: median "
                 f"error per verify {off(whole)}; cut short on {len(cut)}, where the dump's "
                 f"generator and its own forward split at a near-tie that serving may decide "
                 f"otherwise: {off(cut)})" if cut and whole else "")
        return ("; no whole-answer output_ids came back from the server (none sent, or not one "
                "per completion token), so whether it served the dump's answers is not known"
                + split)

    left = [r for r in known if r.diverged]
    kept = [r for r in known if not r.diverged]
    if not left:
        return (f"; every served answer is the dump's over all its tokens ({len(kept)} "
                f"prompts; median error per verify {off(kept)})")
    where = sorted(r.same for r in left if r.same is not None)
    return (f"; the served answer leaves the dump's on {len(left)} of {len(known)} prompts "
            f"(after {where[0]} to {where[-1]} tokens, median {where[len(where) // 2]}): median "
            f"error per verify {off(left)} there, {off(kept)} where it is the dump's")


def prompt_csv(rows: Sequence[PromptAgreement]) -> str:
    """Predicted and measured per prompt, one row each."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["prompt_id", "category", "predicted_per_verify", "predicted_per_request",
                     "measured_accept_len", "measured_decode_per_verify", "requests",
                     "dump_positions", "dump_answer_tokens", "served_tokens", "cut_short",
                     "same_answer_tokens"])
    for r in rows:
        writer.writerow([r.prompt_id, r.category, f"{r.predicted_per_verify:.4f}",
                         f"{r.predicted:.4f}", f"{r.measured:.4f}", f"{r.measured_decode:.4f}",
                         r.requests, r.positions, r.dump_answer, f"{r.served_tokens:g}",
                         int(r.cut_short), "" if r.same is None else r.same])
    return out.getvalue()


def agreement_csv(rows: Sequence[Agreement]) -> str:
    """Predicted and measured side by side, one row per group."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["group", "predicted_per_request", "measured_accept_len", "ci_low",
                     "ci_high", "widened_low", "widened_high", "relative_error", "verdict",
                     "predicted_per_verify", "dump_samples", "dump_positions", "requests",
                     "prompts", "completion_tokens_mean"])

    def num(value: float | None, digits: int = 4) -> str:
        return "" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"

    for a in rows:
        interval, bounds = a.interval, a.bounds
        writer.writerow([
            a.group, num(a.per_request), num(a.measured.mean if a.measured else None),
            num(interval[0] if interval else None), num(interval[1] if interval else None),
            num(bounds[0] if bounds else None), num(bounds[1] if bounds else None),
            num(a.relative_error), a.verdict,
            num(a.predicted.per_verify if a.predicted else None),
            a.predicted.samples if a.predicted else 0,
            a.predicted.positions if a.predicted else 0, a.requests, a.prompts,
            num(a.completion_mean, 2)])
    return out.getvalue()


def _served_chain(profile: Profile, live: LiveResults) -> tuple[int | None, int | None]:
    """(draft steps, topk) of the served config: the profile's, else the server's own."""
    info = live.speculative.server_info

    def number(value: object) -> int | None:
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    steps = profile.speculative.num_steps or number(info.get("speculative_num_steps"))
    topk = profile.speculative.eagle_topk or number(info.get("speculative_eagle_topk"))
    return steps, topk


def live_agreement_claim(profile: Profile, live: LiveResults) -> ClaimResult:
    """eval.live_agreement: the accept length the offline evaluation predicts for the served
    chain lies within the measured interval, widened by [eval] tolerance."""
    cid = LIVE_AGREEMENT
    sim = "[simulated server] " if live.simulated else ""
    simulated = live.simulated or profile.is_simulated
    dump = profile.resolve(profile.eval.hidden_states)
    if dump is None:
        return claims.skipped(cid, LIVE_PHASE, sim + "no [eval] hidden_states in the profile (a "
                              "hidden-state dump of the served target on the probe's prompts), "
                              "so there is no offline prediction to compare"
                              + (SIMULATED_NOTE if simulated else ""),
                              details={"missing_input": "eval.hidden_states"})
    if simulated:
        return claims.skipped(cid, LIVE_PHASE, sim + f"[eval] hidden_states {dump} is given, but "
                              "the server is specgate's simulator: its acceptance is set per "
                              "draft position in the drafter's specgate_sim.json, not computed "
                              "from the drafter's weights, so no offline prediction can agree or "
                              "disagree with it; the claim is judged against real SGLang",
                              reason="simulated_acceptance", details={"dump": str(dump)})
    steps, topk = _served_chain(profile, live)
    if topk is not None and topk > 1:
        return claims.skipped(cid, LIVE_PHASE, sim + f"the served config is a tree (eagle_topk = "
                              f"{topk}): the offline chain model predicts topk 1 only, since a "
                              "chain's acceptance cannot tell how often a second-ranked draft "
                              "token would have been right", reason="tree_not_modelled",
                              details={"eagle_topk": topk})
    drafter = profile.drafter_path
    if drafter is None:
        return claims.skipped(cid, LIVE_PHASE, sim + "no drafter given ([drafter] path or "
                              "--drafter) to evaluate on the dump",
                              details={"missing_input": "drafter"})
    spec = spec_claims.spec_measurement(cid, live, timed=False)
    if isinstance(spec, ClaimResult):
        return spec
    measured = spec.stat("accept_len")
    if measured is None:
        return claims.broken(cid, LIVE_PHASE, sim + f"no verify pass ran in {len(spec.samples)} "
                             "speculative answers (every one ended at its first token), so "
                             "there is no measured accept length to compare with")
    if steps is None or topk is None:
        return claims.skipped(cid, LIVE_PHASE, sim + "the served chain is not known: neither "
                              "[speculative] num_steps / eagle_topk nor the server's "
                              "/server_info give them; set them in the profile")
    try:
        import torch  # noqa: F401
    except ImportError:
        return claims.broken(cid, LIVE_PHASE, "the offline evaluation needs torch: pip install "
                             "'specgate[eval]' (or torch) in this environment",
                             reason="missing_dependency")
    tolerance = profile.eval.tolerance
    names = {s.prompt_id: s.category for s in spec.samples}
    try:
        prediction = predict_served(drafter, dump, steps=steps,
                                    target_path=profile.target_path,
                                    names=names, min_tokens=profile.eval.min_tokens,
                                    device=eval_device(profile), by_sample=set(names))
    except (DataError, CheckpointError, KeyError, ValueError, RuntimeError) as exc:
        return claims.broken(cid, LIVE_PHASE, f"the offline prediction could not be made from "
                             f"[eval] hidden_states {dump} and the drafter {drafter}: {exc}")
    whole, per_category = agreements(prediction, spec, tolerance, measured)
    return _judge_agreement(cid, sim, prediction, spec, whole, per_category, tolerance)


def _judge_agreement(cid: str, sim: str, prediction: ServedPrediction, spec: Measurement,
                     whole: Agreement, per_category: Sequence[Agreement],
                     tolerance: float) -> ClaimResult:
    pct = stats.percent(spec.confidence)
    rows = [whole, *per_category]
    prompts = prompt_agreements(prediction, spec)
    details: dict[str, object] = {
        "steps": prediction.steps, "tolerance": tolerance, "confidence": spec.confidence,
        "overall": whole.to_json(), "per_category": {a.group: a.to_json() for a in per_category},
        "per_prompt": [p.to_json() for p in prompts], "prediction": prediction.to_json()}
    attachments = (
        Attachment("predicted vs measured.csv", agreement_csv(rows), "csv"),
        *((Attachment("predicted vs measured per prompt.csv", prompt_csv(prompts), "csv"),)
          if prompts else ()),
        Attachment("offline prediction", served_table(prediction), "text"),
        Attachment("offline prediction.json", json.dumps(prediction.to_json(), indent=2),
                   "json"))
    categories = "; ".join(a.short() for a in per_category)
    tail = (f". Per category (predicted vs measured [{pct} % CI]): {categories}"
            if categories else "")
    notes = prompt_summary(prompts) + "".join(f"; note: {n}" for n in prediction.notes)
    pred, bounds, m = whole.per_request, whole.bounds, whole.measured
    if not whole.judged or pred is None or bounds is None or m is None:
        shown = f"predicted {pred:.3f} per request; " if pred is not None else ""
        code = whole.why_code or "nothing_measured"
        advice = {"too_few_tokens": f" in [eval] hidden_states {prediction.dump} (raise the "
                                    "dump's size or lower [eval] min_tokens)",
                  "no_dump_sample": f" in [eval] hidden_states {prediction.dump}",
                  }.get(code, " by the probe")
        return claims.skipped(cid, LIVE_PHASE, sim + f"{shown}not judged: "
                              f"{whole.why_not_judged or 'nothing to compare'}{advice}"
                              f"{tail}{notes}", reason=code,
                              observed=_r(pred), unit="tokens/verify", details=details,
                              attachments=attachments)
    interval = (f"{pct} % CI [{m.ci_low:.3f}, {m.ci_high:.3f}]" if m.has_interval
                else "no interval (one prompt)")
    steps = f"{prediction.steps} draft step{'s' if prediction.steps != 1 else ''}"
    figures = (f"offline prediction {pred:.3f} vs measured {m.mean:.3f}, {interval} over "
               f"{whole.requests} requests (accept length as SGLang counts it, completion "
               f"tokens / verify passes; the prediction is {prediction.overall.per_verify:.3f} "
               f"tokens per verify pass of {steps}, "
               + (f"replaying greedy serving over {prediction.overall.verifies} verify passes "
                  f"of the dump (the chain model averaged over all "
                  f"{prediction.overall.positions} positions would say "
                  f"{prediction.overall.chain_model:.3f})" if prediction.overall.verifies else
                  f"the chain model over {prediction.overall.positions} positions (the dump "
                  "has no answer to replay serving over)")
               + f", at the measured mean of {whole.completion_mean:.1f} completion tokens "
               "per request)")
    err = whole.relative_error or 0.0
    widened = f"[{bounds[0]:.3f}, {bounds[1]:.3f}]"
    verdict = whole.verdict
    if verdict == "agrees":
        how = (f"the offline evaluation agrees with serving: the prediction lies within the "
               f"measured interval widened by {tolerance:.0%}, {widened} (it is {err:+.1%} off "
               "the measured mean)")
    else:
        side = "above" if verdict == "optimistic" else "below"
        hint = ("the dump is easier than what the server answered (other prompts, another chat "
                "template or target), or serving loses acceptance that teacher forcing cannot "
                "see (sampling at temperature > 0, precision, the server's own answers "
                "differing from the dump's text)" if verdict == "optimistic" else
                "the live answers are easier to draft than the dump's text (other prompts, "
                "repetitive answers), or the dump comes from another target")
        how = (f"the offline evaluation is {verdict}: it predicts {abs(err):.1%} "
               f"{'more' if err > 0 else 'less'} than measured, {side} the measured interval "
               f"widened by {tolerance:.0%}, {widened}; {hint}. Capture the dump from the "
               "served target on the probe's prompts with its chat template")
    return claims.judged(verdict == "agrees", cid, LIVE_PHASE,
                         sim + f"{figures}: {how}{tail}{notes}", fail_reason=verdict,
                         observed=round(pred, 3), expected=f"within {widened}",
                         unit="tokens/verify", details=details, attachments=attachments)
