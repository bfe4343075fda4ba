"""The baseline's claim: perf.baseline_tps, single-stream decode tok/s without speculation."""

from __future__ import annotations

from typing import Any

from specgate.claims import ids
from specgate.claims import result as claims
from specgate.claims.live_run import (
    PHASE,
    attach_files,
    blocked,
    covering,
    deployment_text,
    judge_covered,
    levelled,
    needs,
    sim,
)
from specgate.claims.result import ClaimResult
from specgate.core.profile import Profile
from specgate.plot import live as live_plots
from specgate.results import drift, latency, stats
from specgate.results.live import ConfigRun, LiveResults


def _baseline_is_speculative(run: ConfigRun) -> str | None:
    m = run.measurement
    # The raw field: a one-token answer counts zero verifies without carrying spec fields.
    with_spec = sum(1 for s in m.samples if s.spec_verify_ct is not None) if m else 0
    algo = run.server_info.get("speculative_algorithm")
    if algo not in (None, "", "None", "none"):
        return f"/server_info reports speculative_algorithm = {algo!r}"
    if with_spec:
        return f"{with_spec} responses carried spec_verify_ct"
    return None


@levelled
def baseline_tps_claim(profile: Profile, live: LiveResults, *,
                       thresholded: bool = True) -> ClaimResult:
    """perf.baseline_tps: decode tok/s per request without speculation ≥ baseline_tps_min, at
    the gate's concurrency (single stream by default); thresholded=False reports the figures
    only (another level: the threshold is the gate's)."""
    cid = ids.BASELINE_TPS.id
    got = needs(live.baseline, cid, live)
    if isinstance(got, ClaimResult):
        return got
    attachments = (*attach_files(live, live.baseline),
                   live_plots.tps_repeats(live.baseline.measurement, None))
    secretly = _baseline_is_speculative(live.baseline)
    if secretly:
        return blocked(cid, live, f"the baseline server is speculative ({secretly}); a "
                       "baseline must run without --speculative-algorithm, otherwise tok/s "
                       "is not a baseline. Check [server] baseline_args or --baseline-url.",
                       attachments=attachments)
    tps = got.stat("tps")
    if tps is None:
        return blocked(cid, live, "the baseline pass produced no decode tokens to time "
                       "(every completion was a single token?)", attachments=attachments)
    covered = drift.cover(tps, live.launch_coverage, "baseline")
    judged = covered.judged
    passes = (f"{got.repeats} repeats of {len(got.samples) // max(got.repeats, 1)} prompts "
              f"({got.stop_reason})")
    figures = (f"baseline {tps.mean:.1f} tok/s, {stats.percent(judged.confidence)} % CI "
               f"[{judged.ci_low:.1f}, {judged.ci_high:.1f}] with launch-to-launch spread "
               f"([{tps.ci_low:.1f}, {tps.ci_high:.1f}] over prompts and passes alone, CV "
               f"{tps.cv * 100:.1f} %, n = {tps.n}), {passes}" if tps.has_interval else
               f"baseline {tps.describe('tok/s', 1)}, {passes}")
    threshold = profile.thresholds.baseline_tps_min
    found = live.deployment
    details: dict[str, Any] = {"tps": covered.judged.to_json(), "tps_within_launch": tps.to_json(),
                               "launch_spread": covered.details(), "template": got.template,
                               "deployment": found.to_json(),
                               "latency": latency.table(None, got.samples, got.concurrency)}
    total = got.stat("total_tps")
    if got.concurrency > 1 and total is not None:
        figures += (f"; per request, with {got.load_text()}; the server's total output "
                    f"{total.describe('tok/s', 1)}")
        details["total_tps"] = total.to_json()
    reuse = live.baseline.reuse
    if reuse.get("reused"):
        figures += (f"; REUSED: measured {reuse.get('measured_at')} "
                    f"({float(reuse.get('age_h', 0.0)):.1f} h ago), not launched this run; "
                    f"safe because {reuse.get('why_safe')}")
    elif reuse:
        figures += f"; measured fresh this run ({reuse.get('why')})"
    if reuse:
        details["baseline_reuse"] = dict(reuse)
    if not thresholded:
        return claims.skipped(cid, PHASE, sim(live) + f"{figures}; reported, not judged: "
                              "[thresholds] baseline_tps_min applies at the gate's concurrency"
                              + deployment_text(live),
                              observed=round(tps.mean, 2), unit="tok/s", details=details,
                              attachments=attachments, reason="reported")
    if threshold is None:
        return claims.skipped(cid, PHASE, sim(live) + f"{figures}; no [thresholds] "
                              "baseline_tps_min is set, so there is nothing to judge"
                              + covering(covered) + deployment_text(live),
                              observed=round(tps.mean, 2), unit="tok/s", details=details,
                              attachments=attachments)
    ok, how, fail_reason = judge_covered(covered, threshold)
    word = "meets" if ok else "does not meet"
    return claims.judged(ok, cid, PHASE, sim(live) + f"{figures}: {word} the minimum "
                         f"{threshold:g} tok/s — {how}{covering(covered)}"
                         + deployment_text(live),
                         observed=round(tps.mean, 2), expected=f">= {threshold:g}", unit="tok/s",
                         details=details, attachments=attachments, fail_reason=fail_reason)

