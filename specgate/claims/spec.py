"""The speculative claims: spec.accept_len, spec.breakeven and spec.speedup."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Sequence
from typing import Any

from specgate.claims import ids
from specgate.claims import result as claims
from specgate.claims.figures import latency_lines
from specgate.claims.live_run import (
    PHASE,
    assess,
    attach_files,
    blocked,
    covering,
    failure_cause,
    first_line,
    gpu_noted,
    gpu_threat,
    judge_covered,
    levelled,
    needs,
    not_held_at,
    queued_at,
    reused_baseline,
    sim,
)
from specgate.claims.result import Attachment, ClaimResult
from specgate.core.profile import Profile
from specgate.io.jsonl import json_safe
from specgate.plot import curve as curve_plot
from specgate.plot import live as live_plots
from specgate.results import bench, decidable, drift, latency, stats
from specgate.results import curve as curves
from specgate.results.bench import Measurement
from specgate.results.live import ConfigRun, LiveResults

# Below this the drafter almost never lands a token: speculation is configured but not working.
NOT_WIRED_ACCEPT_LEN = 1.05


NOT_WIRED_HINT = ("accept length ≈ 1.00 means the drafter's tokens are never accepted: it is not "
                  "wired in (wrong --speculative-algorithm, missing d2t/t2d in the checkpoint, or "
                  "the aux hidden-state layers are not captured), or it was trained for another "
                  "target")


def _steps(profile: Profile, run: ConfigRun) -> int | None:
    steps = profile.speculative.num_steps or run.server_info.get("speculative_num_steps")
    return int(steps) if steps else None


def targets_table(cycle_ms: float, baseline_tps: float, measured_accept: float,
                  targets: list[float], steps: int | None) -> str:
    """Accept length (and equal per-step conditional rate) needed for each tok/s target."""
    lines = [f"cycle time {cycle_ms:.3f} ms (measured); tok/s = accept length / cycle time",
             f"chain depth {steps if steps else '?'} draft steps; conditional rate a assumes "
             "τ = Σ_(k=0..steps) a^k with equal rates",
             f"{'tok/s':>10}  {'accept length':>14}  {'rate a':>8}  note"]
    rows = [(baseline_tps, "break-even (baseline tok/s)")]
    rows += [(t, "target") for t in targets]
    rows.append((measured_accept / (cycle_ms / 1000.0), "measured"))
    for tps, note in rows:
        tau = stats.required_accept_len(tps, cycle_ms / 1000.0)
        if note == "measured":
            tau = measured_accept
        rate = stats.required_rate(tau, steps) if steps else None
        rate_text = f"{rate:.3f}" if rate is not None else "n/a"
        if steps and rate is None:
            note += f" (unreachable with {steps} steps: max accept length {steps + 1})"
        lines.append(f"{tps:>10.1f}  {tau:>14.3f}  {rate_text:>8}  {note}")
    return "\n".join(lines)


def spec_measurement(cid: str, live: LiveResults, *,
                     timed: bool = True) -> Measurement | ClaimResult:
    """The speculative measurement, or the broken claim every live claim that reads it gives:
    the server's failure with its log tail, bursts (when timed), or missing spec fields."""
    got = needs(live.speculative, cid, live, timed=timed)
    if isinstance(got, ClaimResult):
        return got
    if got.spec_fields_missing:
        return blocked(cid, live, f"the speculative server reported no spec_verify_ct on "
                       f"{got.spec_fields_missing} of {len(got.samples)} responses: SGLang "
                       "omits it only when no verify pass ran (a request that ended at its first "
                       "token), so speculation is not active (check "
                       "--speculative-algorithm in /server_info), or this build names the "
                       "field differently", attachments=attach_files(live, live.speculative))
    return got


def _decode_accept(spec: Measurement) -> stats.Summary:
    """Tokens per verify over decode (Σ(completion − 1)/Σverify), the break-even comparand."""
    return spec.stat("tau_decode") or spec.stats["accept_len"]


@dataclasses.dataclass(frozen=True)
class BreakEven:
    """Break-even and speed-up, both from the one paired ratio of decode tok/s.

    Decode tok/s = τ / cycle, so τ ≥ cycle × baseline tok/s (break-even) exactly when
    speculative ÷ baseline tok/s ≥ 1: the two claims test one hypothesis on one interval and
    cannot contradict each other. The break-even accept length and its interval are that
    ratio's, expressed in accept length: τ ÷ ratio.
    """

    ratio: stats.Summary  # the one judged: with the launch-to-launch spread when covered
    tau: float  # decode-only accept length, Σ(completion − 1) / Σ verify
    cycle_ms: float
    baseline_tps: float
    covered: drift.Covered | None = None  # the ratio over prompts and passes, and its cover

    @property
    def breakeven(self) -> float:
        return self.tau / self.ratio.mean

    @property
    def breakeven_ci(self) -> tuple[float | None, float | None]:
        if not self.ratio.has_interval or self.ratio.ci_low <= 0:
            return None, None
        return self.tau / self.ratio.ci_high, self.tau / self.ratio.ci_low

    def to_json(self) -> dict[str, Any]:
        low, high = self.breakeven_ci
        return {"speedup": self.ratio.to_json(), "tau_decode": self.tau,
                "cycle_ms": self.cycle_ms, "baseline_tps": self.baseline_tps,
                "breakeven": self.breakeven, "breakeven_ci": [low, high]}


def _breakeven(live: LiveResults, spec: Measurement) -> BreakEven | None:
    base = live.baseline.measurement
    tau, cycle = spec.stat("tau_decode"), spec.stat("cycle_ms")
    if base is None or base.stat("tps") is None or tau is None or cycle is None:
        return None
    ratio = bench.speedup(spec, base)
    if _unpaired(ratio, spec, base) or ratio.mean <= 0:
        return None
    covered = drift.cover(ratio, live.launch_coverage, "speedup")
    return BreakEven(covered.judged, tau.mean, cycle.mean, base.stats["tps"].mean, covered)


def _judge_breakeven(be: BreakEven) -> tuple[bool, str, str]:
    """Break-even is judged on the speed-up's interval against 1."""
    if be.covered is None:
        ok, how = assess(be.ratio, 1.0, strict=True)
        return ok, how, ""
    return judge_covered(be.covered, 1.0, strict=True)


def _unpaired(ratio: stats.Summary, spec: Measurement, base: Measurement) -> str | None:
    """Why the paired speed-up cannot be judged: fewer than two prompts timed on both servers
    (no interval: a gate does not pass on a bare point estimate), or a ratio that is not finite."""
    if ratio.n >= 2 and math.isfinite(ratio.mean):
        return None
    shared = sorted({s.prompt_id for s in spec.samples} & {s.prompt_id for s in base.samples})
    return (f"the speed-up pairs each prompt's speculative and baseline requests, and "
            f"{len(shared)} prompt(s) were timed on both servers ({ratio.n} usable): at least two "
            "are needed for an interval; run the same prompts on both (the [bench] prompt "
            "selection) with answers longer than one token")


def _targets_attachment(profile: Profile, live: LiveResults,
                        spec: Measurement) -> tuple[Attachment, ...]:
    """The targets table, when the cycle time was measured (none without timed decode)."""
    base = live.baseline.measurement
    base_tps = base.stats["tps"].mean if base and "tps" in base.stats else math.nan
    cycle, accept = spec.stat("cycle_ms"), spec.stat("accept_len")
    if cycle is None or accept is None:
        return ()
    text = targets_table(cycle.mean, base_tps, accept.mean,
                         list(profile.thresholds.tps_targets), _steps(profile, live.speculative))
    return (Attachment("required accept length for tok/s targets", text, "text"),)


@levelled
def accept_len_claim(profile: Profile, live: LiveResults) -> ClaimResult:
    """spec.accept_len: Σ completion_tokens / Σ spec_verify_ct ≥ accept_len_min (or break-even)."""
    cid = ids.ACCEPT_LEN.id
    got = spec_measurement(cid, live, timed=profile.thresholds.accept_len_min == "breakeven")
    if isinstance(got, ClaimResult):
        return got
    accept = got.stat("accept_len")
    if accept is None:
        return blocked(cid, live, f"no verify pass ran in {len(got.samples)} speculative answers "
                       "(every one ended at its first token), so there is no accept length; "
                       "raise [bench] max_new_tokens or use prompts that get longer answers",
                       attachments=attach_files(live, live.speculative))
    tau = got.stat("tau_decode")
    attachments = (*attach_files(live, live.speculative, live.baseline),
                   *_targets_attachment(profile, live, got),
                   *live_plots.present(live_plots.per_prompt(got), live_plots.per_category(got),
                                       live_plots.per_position(got)))
    per_cat = ", ".join(f"{c} {v:.2f}" for c, v in sorted(got.per_category_accept_len.items()))
    figures = (f"accept length {accept.describe(digits=3)} over {len(got.samples)} requests"
               f" (decode-only {tau.mean:.3f}; {got.stop_reason})" if tau
               else f"accept length {accept.describe()}")
    positions = bench.position_acceptance(got)
    details: dict[str, Any] = {"accept_len": accept.to_json(),
                               "per_category": got.per_category_accept_len,
                               "template": got.template,
                               "accept_pos": [p.to_json() for p in positions]}
    if positions:
        figures += ("; accepted at draft " + ", ".join(
            f"{k} {p.mean:.3f}" for k, p in enumerate(positions, 1)))
    if accept.mean < NOT_WIRED_ACCEPT_LEN:
        return claims.failed(cid, PHASE, sim(live) + f"{figures}: {NOT_WIRED_HINT}",
                             observed=round(accept.mean, 3), expected=_expected(profile),
                             unit="tokens/verify", details=details, attachments=attachments)
    configured = profile.thresholds.accept_len_min
    if configured is None:
        return claims.skipped(cid, PHASE, sim(live) + f"{figures}; no [thresholds] "
                              "accept_len_min is set", observed=round(accept.mean, 3),
                              unit="tokens/verify", details=details, attachments=attachments)
    if configured == "breakeven":
        threat = gpu_threat(cid, live)
        if threat is not None:
            return threat
        be = _breakeven(live, got)
        if be is None:
            return blocked(cid, live, "accept_len_min = \"breakeven\" needs the baseline "
                           "tok/s, which was not measured: "
                           + (first_line(live.baseline) or "?"),
                           cause=failure_cause(live.baseline), attachments=attachments)
        threshold, label = be.breakeven, f"the measured break-even {be.breakeven:.3f}"
        # Judged as spec.breakeven is: on the paired speed-up's interval against 1, and
        # recorded like it, in decode-only accept length (what break-even is computed from).
        ok, how, fail_reason = _judge_breakeven(be)
        if not fail_reason:
            how = _in_accept_length_units(how, be)
        if be.covered is not None:
            how += covering(be.covered)
            details["launch_spread"] = be.covered.details()
        observed = be.tau
    else:
        threshold, label = float(configured), f"the minimum {float(configured):g}"
        ok, how = assess(accept, threshold)
        fail_reason = ""
        observed = accept.mean
    word = "reaches" if ok else "does not reach"
    return claims.judged(ok, cid, PHASE, sim(live) + f"{figures}: {word} {label} — {how}. "
                         f"Per category: {per_cat}",
                         observed=round(observed, 3), expected=f">= {threshold:.3f}",
                         unit="tokens/verify", details=details, attachments=attachments,
                         fail_reason=fail_reason)


def _in_accept_length_units(how: str, be: BreakEven) -> str:
    """assess's sentence about the paired speed-up against 1, said of the accept length against
    the break-even interval (the same test: τ clears break-even exactly when the ratio clears 1)."""
    low, high = be.breakeven_ci
    if low is None or high is None:
        return how
    span = f"[{low:.3f}, {high:.3f}]"
    pct = stats.percent(be.ratio.confidence)
    if how.startswith("the whole"):
        side = "above" if "clears" in how else "below"
        return (f"the decode-only accept length {be.tau:.3f} lies {side} the whole {pct} % "
                f"interval of the break-even {span}")
    if how.startswith("inconclusive"):
        return (f"inconclusive at {pct} %: the break-even's interval {span} contains the "
                f"decode-only accept length {be.tau:.3f}")
    return how


def _expected(profile: Profile) -> str | None:
    value = profile.thresholds.accept_len_min
    return None if value is None else f">= {value}"


@levelled
def breakeven_claim(profile: Profile, live: LiveResults) -> ClaimResult:
    """spec.breakeven: measured accept length ≥ cycle time × baseline tok/s."""
    return gpu_threat(ids.BREAKEVEN.id, live) or gpu_noted(_breakeven_claim(profile, live), live)


def _breakeven_claim(profile: Profile, live: LiveResults) -> ClaimResult:
    cid = ids.BREAKEVEN.id
    got = spec_measurement(cid, live)
    if isinstance(got, ClaimResult):
        return got
    base = needs(live.baseline, cid, live)
    if isinstance(base, ClaimResult):
        return base
    be = _breakeven(live, got)
    if be is None:
        why = (_unpaired(bench.speedup(got, base), got, base)
               or "the baseline tok/s or the speculative cycle time was not measured")
        return blocked(cid, live, f"the break-even cannot be judged: {why}")
    # Decode tok/s = tokens per verify over decode ÷ cycle time, so the accept length that
    # break-even compares with excludes the token prefill produced (SPEC's Σcompletion/Σverify
    # counts it, and reads a little high: 2.02 for a drafter whose cycles yield 2.00).
    ms = f"{be.cycle_ms:.1f}" if be.cycle_ms >= 10 else f"{be.cycle_ms:.2f}"
    low, high = be.breakeven_ci
    pct = stats.percent(be.ratio.confidence)
    interval = (f", {pct} % CI [{low:.2f}, {high:.2f}] (paired over {be.ratio.n} prompts, with "
                "launch-to-launch spread)" if low is not None and high is not None else "")
    arithmetic = (f"cycle {ms} ms × {be.baseline_tps:.1f} tok/s = break-even "
                  f"{be.breakeven:.2f}{interval}; measured {be.tau:.2f} tokens per verify in "
                  f"decode ({got.stats['accept_len'].mean:.2f} counting the prefill token)"
                  f"{reused_baseline(live)}")
    ok, how, fail_reason = _judge_breakeven(be)
    if ok:
        tail = "the drafter makes serving faster"
    elif be.ratio.mean < 1.0:
        tail = "the drafter makes serving slower"
    else:
        tail = "not shown to beat the baseline"
    how = how.replace("clears 1", "clears break-even").replace("below 1", "below break-even")
    covers = covering(be.covered) if be.covered is not None else ""
    attachments = (*attach_files(live, live.speculative, live.baseline),
                   *_targets_attachment(profile, live, got),
                   Attachment("break-even.json", json.dumps(json_safe(be.to_json()), indent=1),
                              "json"),
                   live_plots.breakeven(be.cycle_ms, be.baseline_tps, got,
                                        profile.thresholds.tps_targets))
    details: dict[str, Any] = {"cycle_ms": round(be.cycle_ms, 4),
                               "baseline_tps": round(be.baseline_tps, 3),
                               "breakeven": round(be.breakeven, 4),
                               "breakeven_ci": [_r(low), _r(high)],
                               "speedup_ci": [_r(be.ratio.ci_low), _r(be.ratio.ci_high)],
                               "confidence": be.ratio.confidence}
    if be.covered is not None:
        details["launch_spread"] = be.covered.details()
    return claims.judged(ok, cid, PHASE, sim(live) + f"{arithmetic}: {tail} "
                         f"(speed-up {be.ratio.mean:.3f}: {how}){covers}",
                         observed=round(be.tau, 3), expected=f">= {be.breakeven:.3f}",
                         unit="tokens/verify", details=details, attachments=attachments,
                         fail_reason=fail_reason)


def _r(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else round(value, 4)


def _spread(rows: Sequence[bench.PromptSpeedup], threshold: float) -> str:
    """Where the prompts fall against the threshold: a wide paired interval comes from them."""
    if len(rows) < 2:
        return ""
    median = statistics.median(r.speedup for r in rows)
    behind = [r for r in rows if r.speedup <= threshold]
    if not behind:
        return (f"; per prompt {rows[0].speedup:.2f}× to {rows[-1].speedup:.2f}× (median "
                f"{median:.2f}×), above {threshold:g} on all {len(rows)}")

    def one(r: bench.PromptSpeedup) -> str:
        tau = f", accept length {r.accept_len:.2f}" if r.accept_len is not None else ""
        return f"{r.prompt_id} {r.speedup:.2f}×{tau}"

    named = "; ".join(one(r) for r in behind[:3])
    more = f"; {len(behind) - 3} more" if len(behind) > 3 else ""
    return (f"; per prompt (median {median:.2f}×) not above {threshold:g} on {len(behind)} of "
            f"{len(rows)}: {named}{more}")


@levelled
def speedup_claim(profile: Profile, live: LiveResults, *, attach: bool = True) -> ClaimResult:
    """spec.speedup: speculative ÷ baseline decode tok/s > speedup_min, with its interval
    (attach=False leaves out the files and chart: the verdict alone, for many trials).

    The decode speed-up decides: it is what the drafter changes (both servers prefill the
    same prompts), it is the figure break-even is stated in, and with N requests held in flight
    on both sides the server's decode throughput is N times the per-request rate, so the ratio
    is the servers' too. The total speed-up (output tok/s, prefill and waiting included) is
    stated beside it: where prefill weighs much (long prompts, short answers) it is smaller.
    """
    return gpu_threat(ids.SPEEDUP.id, live) or gpu_noted(
        _speedup_claim(profile, live, attach=attach), live)


def _speedup_claim(profile: Profile, live: LiveResults, *, attach: bool) -> ClaimResult:
    cid = ids.SPEEDUP.id
    spec = needs(live.speculative, cid, live)
    if isinstance(spec, ClaimResult):
        return spec
    base = needs(live.baseline, cid, live)
    if isinstance(base, ClaimResult):
        return base
    if spec.stat("tps") is None or base.stat("tps") is None:
        return blocked(cid, live, "a pass produced no decode tokens to time")
    ratio = bench.speedup(spec, base)
    unpaired = _unpaired(ratio, spec, base)
    if unpaired:
        return blocked(cid, live, unpaired)
    threshold = profile.thresholds.speedup_min
    covered = drift.cover(ratio, live.launch_coverage, "speedup")
    judged = covered.judged
    ok, how, fail_reason = judge_covered(covered, threshold, strict=True)
    pct = stats.percent(ratio.confidence)
    interval = (f", {pct} % CI [{judged.ci_low:.3f}, {judged.ci_high:.3f}] with "
                f"launch-to-launch spread ([{ratio.ci_low:.3f}, {ratio.ci_high:.3f}] over "
                f"prompts and passes alone: paired jackknife over {ratio.n} prompts)"
                if ratio.has_interval else "")
    slower = " — the drafter makes serving slower" if ratio.mean < 1.0 else ""
    rows = bench.speedup_by_prompt(spec, base)
    could = decidable.decidable(covered, threshold, min(spec.repeats, base.repeats))
    details: dict[str, Any] = {"speedup": judged.to_json(),
                               "speedup_within_launch": ratio.to_json(),
                               "launch_spread": covered.details(),
                               "spec_tps": spec.stats["tps"].to_json(),
                               "baseline_tps": base.stats["tps"].to_json(),
                               "per_prompt": [r.to_json() for r in rows],
                               "decidable": could.to_json() if could else None}
    total = _total_speedup(spec, base, details)
    details["latency"] = latency.table(spec.samples, base.samples, spec.concurrency)
    total += latency_text(details["latency"])
    attachments: tuple[Attachment, ...] = ()
    if attach:
        attachments = (*attach_files(live, live.speculative, live.baseline),
                       live_plots.tps_repeats(base, spec))
    curve = ""
    if len(live.levels) > 1 and live.scope is None:
        found = curves.curve(live)
        details["curve"] = found.to_json()
        curve = f". Against concurrency ({', '.join(map(str, live.levels))}): " \
                f"{found.crossover.text}"
        queued = {n: q for n in live.levels for q in [queued_at(live, n)[1]] if q}
        if queued:
            details["queued_levels"] = {str(n): q for n, q in queued.items()}
            caps = sorted({f"the {config} server's is {q[config]['max_running_requests']}"
                           for q in queued.values() for config in q})
            above = [n for n in queued if n != live.gate_level]  # the gate's own: said below
            if above:
                curve += (f"; at {', '.join(map(str, above))} in flight requests wait in a "
                          f"server's queue (max_running_requests: {', '.join(caps)})")
        unheld = {n: seen for n in live.levels for seen in [not_held_at(live, n)[1]] if seen}
        if unheld:
            details["not_held_levels"] = {str(n): seen for n, seen in unheld.items()}
            which = "; ".join(f"at {n} in flight the {' and '.join(seen)} "
                              f"server{'s' if len(seen) > 1 else ''}" for n, seen in unheld.items())
            curve += (f"; {which} did not run the requests held in flight at once (requests "
                      "decoded far faster than the fastest at the smallest level), so "
                      f"{'that point is' if len(unheld) == 1 else 'those points are'} not a "
                      "batch's")
        if attach:
            attachments = (*attachments,
                           curve_plot.attachment(found, simulated=live.simulated))
    message = (f"speculative {spec.stats['tps'].mean:.1f} tok/s ÷ baseline "
               f"{base.stats['tps'].mean:.1f} tok/s = speedup {ratio.mean:.3f}{interval}; "
               f"required > {threshold:g}: {how}{slower}"
               f"{'; ' + could.text() if could else ''}{_spread(rows, threshold)}{total}"
               f"{reused_baseline(live)}{covering(covered)}{curve}")
    return claims.judged(ok, cid, PHASE, sim(live) + message, observed=round(ratio.mean, 4),
                         expected=f"> {threshold:g}", unit="x", details=details,
                         attachments=attachments if attach else (), fail_reason=fail_reason)


def latency_text(table: dict[str, Any]) -> str:
    """The latency a user compares with sglang.bench_serving, in words (reported, not judged):
    speculative decoding can trade time to first token for time per token."""
    said = [f"{label} {text}" for label, text in latency_lines(table)]
    if not said:
        return ""
    return ("; latency per request as sglang.bench_serving reports it (reported): "
            + "; ".join(said))


def _total_speedup(spec: Measurement, base: Measurement, details: dict[str, Any]) -> str:
    """The total speed-up (output tok/s, prefill and waiting included) in words, its figures
    added to details; the decode speed-up is the one judged."""
    ratio = bench.speedup(spec, base, "total_tps")
    spec_total, base_total = spec.stat("total_tps"), base.stat("total_tps")
    if not math.isfinite(ratio.mean) or spec_total is None or base_total is None:
        return ""
    details.update(total_speedup=ratio.to_json(), spec_total_tps=spec_total.to_json(),
                   baseline_total_tps=base_total.to_json())
    interval = (f", {stats.percent(ratio.confidence)} % CI [{ratio.ci_low:.3f}, "
                f"{ratio.ci_high:.3f}] over prompts and passes" if ratio.has_interval else "")
    load = f" ({spec.load_text()})" if spec.concurrency > 1 else ""
    return (f"; total output {spec_total.mean:.1f} ÷ {base_total.mean:.1f} tok/s = "
            f"{ratio.mean:.3f}{interval}, prefill and waiting included (reported; the decode "
            f"speed-up is judged){load}")

