"""The live Phase 0 claims: environment, baseline tok/s, accept length, break-even and speedup."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Concatenate, ParamSpec

from specgate.claims import ids
from specgate.claims import result as claims
from specgate.claims.result import Attachment, ClaimResult
from specgate.core import files
from specgate.core.profile import Profile
from specgate.core.redact import mask_env
from specgate.io.jsonl import json_safe
from specgate.plot import curve as curve_plot
from specgate.plot import live as live_plots
from specgate.results import bench, drift, held, stats
from specgate.results import curve as curves
from specgate.results.bench import Measurement
from specgate.results.live import ConfigRun, LiveResults
from specgate.serving import gpu

PHASE = "phase0"
# Below this the drafter almost never lands a token: speculation is configured but not working.
NOT_WIRED_ACCEPT_LEN = 1.05
NOT_WIRED_HINT = ("accept length ≈ 1.00 means the drafter's tokens are never accepted: it is not "
                  "wired in (wrong --speculative-algorithm, missing d2t/t2d in the checkpoint, or "
                  "the aux hidden-state layers are not captured), or it was trained for another "
                  "target")


P = ParamSpec("P")


def _sim(live: LiveResults) -> str:
    """The message's opening: a simulated server, and the concurrency when it is not the
    single stream of a profile without [bench] concurrency."""
    where = f"at {live.gate_level} in flight: " if live.per_level else ""
    return ("[simulated server] " if live.simulated else "") + where


def _levelled(claim: Callable[Concatenate[Profile, LiveResults, P], ClaimResult]
              ) -> Callable[Concatenate[Profile, LiveResults, P], ClaimResult]:
    """details["concurrency"] on a claim judged where [bench] concurrency is set: the level
    (requests in flight) its figures were measured at."""
    def judged_at(profile: Profile, live: LiveResults, /, *args: P.args,
                  **kwargs: P.kwargs) -> ClaimResult:
        result = claim(profile, live, *args, **kwargs)
        if not live.per_level:
            return result
        details: dict[str, Any] = {**result.details, "concurrency": live.gate_level}
        configs = claim_configs(result.id)
        note, queued = queued_at(live, live.gate_level, configs)
        if queued:
            details["queued"] = queued
        if live.scope is None:  # a level's own view holds no smaller level: levels.py asks
            unheld_note, unheld = not_held_at(live, live.gate_level, configs)
            if unheld:
                details["not_held"] = unheld
                note += unheld_note
        return dataclasses.replace(result, message=result.message + note, details=details)
    functools.update_wrapper(judged_at, claim)
    return judged_at


def claim_configs(claim_id: str) -> tuple[str, ...]:
    """The servers whose timed figures a claim judges (the accept length and the answers are
    not timed)."""
    if claim_id.startswith(ids.BASELINE_TPS.id):
        return ("baseline",)
    if claim_id.startswith((ids.ACCEPT_LEN.id, ids.PARITY.id)):
        return ()
    return ("baseline", "speculative")


def not_held_at(live: LiveResults, level: int,
                configs: Sequence[str] = ("baseline", "speculative")
                ) -> tuple[str, dict[str, Any]]:
    """A server of `configs` that did not run the requests held in flight at `level` at once
    (results/held.py: a clear share of them decoded clearly faster than its fastest request at
    its smallest level), in words and as details ({config: NotHeld.to_json()}); ("", {})
    otherwise."""
    found: dict[str, Any] = {}
    words: list[str] = []
    for run in (live.baseline, live.speculative):
        if run.config not in configs:
            continue
        seen = held.not_held(run, level)
        if seen is None:
            continue
        found[run.config] = seen.to_json()
        wait = (f"; the level's requests waited {seen.ttft_ms:.0f} ms on average for their first "
                f"token ({seen.alone_ttft_ms:.0f} ms at {seen.alone_level} in flight)"
                if seen.ttft_ms is not None and seen.alone_ttft_ms is not None else "")
        words.append(f"{seen.faster} of the {run.config} server's {seen.requests} requests "
                     f"decoded more than {held.FASTER_BY:g} times as fast as its fastest request "
                     f"at {seen.alone_level} in flight (up to {seen.fastest_tps:.1f} against "
                     f"{seen.alone_fastest_tps:.1f} tok/s){wait}")
    if not words:
        return "", {}
    servers = "server" if len(found) == 1 else "servers"
    return (f". Not held: at {level} in flight {'; '.join(words)}. A larger batch does not "
            f"decode a request faster, so the {servers} did not run the {level} requests held "
            "in flight at once: this level's decode timings are not those of a batch of "
            f"{level}"), found


def queued_at(live: LiveResults, level: int,
              configs: Sequence[str] = ("baseline", "speculative")) -> tuple[str, dict[str, Any]]:
    """What a server of `configs` that runs fewer requests at once than `level` does with the
    rest, in words and as details ({config: {"max_running_requests", "waiting"}}); ("", {})
    when each batches every request in flight. Such a level measures the deployment as
    configured: the waiting requests' time before their first token shows in the total output
    tok/s, and the decode figures are those of the requests the server runs."""
    queued: dict[str, Any] = {}
    words: list[str] = []
    for run in (live.baseline, live.speculative):
        cap = run.max_running
        if run.config not in configs or cap is None or level <= cap:
            continue
        queued[run.config] = {"max_running_requests": cap, "waiting": level - cap}
        default = (", SGLang's default for speculative decoding"
                   if run.config == "speculative" and cap == 48 else "")
        words.append(f"the {run.config} server runs at most {cap} requests at once "
                     f"(max_running_requests{default}), so {level - cap} of the {level} in "
                     "flight wait in its queue before their first token")
    if not words:
        return "", {}
    return (f". At {level} in flight {'; '.join(words)}: the wait shows in the total output "
            "tok/s, and the decode figures are those of the requests it runs"), queued


def _reused_baseline(live: LiveResults) -> str:
    """A note for claims that use the baseline's figures when they were reused, not measured."""
    reuse = live.baseline.reuse
    if not reuse.get("reused"):
        return ""
    return (f" (baseline figures reused from {reuse.get('measured_at')}, "
            f"{float(reuse.get('age_h', 0.0)):.1f} h old: see perf.baseline_tps)")


def _broken(claim_id: str, live: LiveResults, message: str, **kw: Any) -> ClaimResult:
    return claims.broken(claim_id, PHASE, _sim(live) + message, **kw)


def _need(run: ConfigRun, claim_id: str, live: LiveResults, *,
          timed: bool = True) -> Measurement | ClaimResult:
    """The run's measurement, or a broken claim that carries the server's reason and log tail.

    A timed claim also refuses a measurement whose streams arrived in bursts: per-token timing
    of a buffered stream measures the buffer, not the server (28,000 tok/s against a true 250).
    """
    if run.failure is not None:
        return _broken(claim_id, live, f"the {run.config} measurement could not be made: "
                       f"{_first_line(run)}", details={"failure": run.failure.message},
                       cause=failure_cause(run))
    m = run.measurement
    if m is None:
        return _broken(claim_id, live, f"no {run.config} measurement was recorded")
    if timed and m.bursts * 2 >= len(m.samples) > 0:
        return _broken(claim_id, live, f"{m.bursts} of {len(m.samples)} {run.config} responses "
                       "arrived as one burst at the end (all messages within "
                       f"{bench.BURST_GAP_S * 1000:g} ms of each other, after most of the "
                       "request's time had passed): something between specgate and SGLang "
                       "buffers the stream (a proxy, or a load balancer), so decode timing "
                       "cannot be measured; point specgate at SGLang itself or turn the "
                       "buffering off", details={"bursts": m.bursts, "requests": len(m.samples)})
    return m


def failure_cause(run: ConfigRun) -> str:
    """The whole reason a server run failed, log tail included: the cause every claim that
    needed the run shares (said once per run in the terminal and the verdict)."""
    if run.failure is None:
        return ""
    return run.failure.cause or f"{run.config} server, {run.failure.text()}"


_FAILED_AT = {
    "prompts": "its prompts could not be loaded",
    "start": "the {config} server did not start",
    "measure": "the {config} server failed while it was measured",
    "load": "a stream of the {config} server stalled or was cut while several were in flight",
    "stop": "the {config} server could not be stopped",
}


def _first_line(run: ConfigRun) -> str:
    """What failed, in a few words: the reason itself, with the log tail, is the cause the
    claims share (failure_cause), said once."""
    if run.failure is None:
        return ""
    what = _FAILED_AT.get(run.failure.stage, "the {config} run failed during "
                          + run.failure.stage)
    return what.format(config=run.config)


def _judge(summary: stats.Summary, threshold: float, *, strict: bool = False) -> tuple[bool, str]:
    """Passed only when the interval lies wholly on the good side of the threshold.

    A straddling interval is "inconclusive at 95 %" and fails the claim: a gate must not let a
    drafter through on evidence that does not show the claim, and sequential repeats have
    already been spent trying to decide it.
    """
    pct = stats.percent(summary.confidence)
    verdict = summary.compare(threshold)
    if verdict == "no_interval":
        ok = summary.mean > threshold if strict else summary.mean >= threshold
        return ok, "judged on one repeat (no interval)"
    if strict and verdict == "above" and summary.ci_low == threshold:
        verdict = "inconclusive"
    if verdict == "above":
        return True, f"the whole {pct} % interval clears {threshold:g}"
    if verdict == "below":
        return False, f"the whole {pct} % interval is below {threshold:g}"
    return False, f"inconclusive at {pct} %: the interval contains {threshold:g}"


def _judge_covered(covered: drift.Covered, threshold: float, *,
                   strict: bool = False) -> tuple[bool, str, str]:
    """_judge on the interval that covers the launches: (ok, how, fail reason).

    When the interval over prompts and passes alone would clear the threshold and the covered
    one does not, the margin lies within the launch-to-launch spread: not a confident pass,
    and the claim says so (reason within_launch_spread).
    """
    ok, how = _judge(covered.judged, threshold, strict=strict)
    if not ok and covered.within_spread(threshold):
        return False, covered.margin_text(threshold), "within_launch_spread"
    return ok, how, ""


def _covers(covered: drift.Covered) -> str:
    """The sentence each timed claim carries: what its interval covers."""
    return f"; the interval includes the {covered.describe()}"


def _deployment_text(live: LiveResults) -> str:
    """The sentence perf.baseline_tps ends with: the deployment's class from this baseline
    (results/deployment.py), which picked the prior of the launch-to-launch spread."""
    return f". Deployment: {live.deployment.line()}"


def _attachments(live: LiveResults, *runs: ConfigRun) -> tuple[Attachment, ...]:
    out = []
    for run in runs:
        m = run.measurement
        if m is None:
            continue
        out.append(Attachment(f"{m.config} requests.csv", m.samples_csv(), "csv"))
        out.append(Attachment(f"{m.config} statistics", m.stats_table(), "text"))
    for run in runs:
        if run.launch:
            out.append(Attachment(f"{run.config} launch command", run.launch, "text"))
        if run.failure is not None and run.failure.log_tail:
            out.append(Attachment(f"{run.config} server log tail", run.failure.log_tail, "text"))
        log = _server_log(run)
        if log:
            out.append(Attachment(f"{run.config} server log", log, "text"))
    return tuple(out)


MAX_LOG_BYTES = 2_000_000


def _server_log(run: ConfigRun) -> str:
    """The server's whole log (its tail if huge); secrets were masked when the server stopped."""
    if not run.log_path:
        return ""
    path = Path(run.log_path)
    try:
        with files.open_regular(path) as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > MAX_LOG_BYTES:
                fh.seek(size - MAX_LOG_BYTES)
            text = fh.read(MAX_LOG_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return ""
    if size <= MAX_LOG_BYTES:
        return text
    return f"[first {size - MAX_LOG_BYTES} bytes left out]\n" + text


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


# -- environment -------------------------------------------------------------------------------

def gpu_clean_claim(profile: Profile, live: LiveResults) -> ClaimResult:
    """env.gpu_clean: no other process holds any GPU of the server's set before each launch."""
    cid = ids.GPU_CLEAN.id
    checks = [(r.config, r.gpu) for r in (live.baseline, live.speculative)
              if r.gpu is not None and not r.attached]
    if not checks:
        return claims.skipped(cid, PHASE, _sim(live) + "no server was launched by specgate "
                              "(attached to running servers), so there was no launch to check")
    done = [(c, g) for c, g in checks if g.checked]
    if not done:
        return claims.skipped(cid, PHASE, _sim(live) + checks[0][1].reason)
    checked = {c: list(g.gpus) for c, g in done}
    offenders = [(c, o) for c, g in done for o in g.offenders]
    if offenders:
        listed = "; ".join(
            f"before the {c} launch: pid {o.get('pid')} {o.get('process_name', '?')} on GPU "
            f"{o.get('gpu_index', '?')} holding {o.get('used_memory_mib', '?')} MiB"
            for c, o in offenders)
        return claims.failed(cid, PHASE, _sim(live) + f"other processes hold the server's GPUs: "
                             f"{listed}. Stop them (or pick free GPUs in [server] gpus) so the "
                             "benchmark measures this server alone.",
                             observed=len(offenders), expected=0, unit="processes",
                             details={"offenders": [o for _, o in offenders],
                                      "gpus_checked": checked})
    return claims.passed(cid, PHASE, _sim(live) + "no other process on the server's GPUs before "
                         + " or ".join(f"the {c} launch" + (f" (GPUs {g.gpus and list(g.gpus)})"
                                                            if g.gpus else "")
                                       for c, g in done),
                         observed=0, expected=0, unit="processes",
                         details={"gpus_checked": checked})


def server_env_claim(profile: Profile, live: LiveResults) -> ClaimResult:
    """env.server_env: each launched server's serving process and every one of its TP rank
    processes carry the profile's [server] env."""
    cid = ids.SERVER_ENV.id
    if not profile.server.env:
        return claims.skipped(cid, PHASE, "the profile sets no [server] env, so there is "
                              "nothing to check")
    runs = [r for r in (live.baseline, live.speculative)]
    checked = [r for r in runs if r.env is not None and r.env.checked]
    expected = mask_env(profile.server.env)
    bad: dict[str, dict[str, Any]] = {}
    for r in checked:
        assert r.env is not None
        wrong: dict[str, Any] = {}
        if r.env.mismatched:
            wrong["serving process"] = r.env.mismatched
        wrong.update(r.env.rank_mismatched)
        if wrong:
            bad[r.config] = wrong
    ranks = {r.config: _ranks_read(r) for r in checked if r.env is not None}
    unread_ranks = {r.config: r.env.ranks_unread for r in checked
                    if r.env is not None and r.env.ranks_unread}
    details = {"ranks": {r.config: list(r.env.ranks) for r in checked if r.env is not None},
               "ranks_unread": unread_ranks}
    if bad:
        parts = "; ".join(
            f"{c}, {where}: " + ", ".join(f"{k}={v!r} (expected {expected[k]!r})"
                                          for k, v in mm.items())
            for c, by_where in bad.items() for where, mm in by_where.items())
        return claims.failed(cid, PHASE, _sim(live) + f"the server started without the "
                             f"[server] env the profile requires: {parts}. Check the launcher "
                             "(a remote or container launcher may drop the environment, and a "
                             "launcher that starts the TP workers itself may not forward it).",
                             observed=bad, expected=expected, details=details)
    if checked:
        unread = "; ".join(f"{c}: {', '.join(u)} not found"
                           for c, u in unread_ranks.items())
        return claims.passed(cid, PHASE, _sim(live) + "the server process environment carries "
                             + ", ".join(f"{k}={v}" for k, v in expected.items()) + " ("
                             + ", ".join(f"{r.config}{ranks[r.config]}" for r in checked) + ")"
                             + (f"; TP ranks whose environment was not read: {unread}"
                                if unread else ""),
                             observed=checked[0].env.found if checked[0].env else None,
                             expected=expected, details=details)
    failed = [r for r in runs if r.failure is not None and r.failure.stage == "start"]
    reasons = [r.env.reason for r in runs if r.env is not None]
    if failed and not reasons:
        return _broken(cid, live, "no server started, so its environment could not be read: "
                       + _first_line(failed[0]), cause=failure_cause(failed[0]))
    why = reasons[0] if reasons else "the servers were attached, not launched by specgate"
    return claims.skipped(cid, PHASE, _sim(live) + f"cannot check the server environment: {why}")


def _ranks_read(run: ConfigRun) -> str:
    """", serving process and TP ranks 0, 1" for the claim's message."""
    env = run.env
    read = sorted({int(r["rank"]) for r in env.ranks if isinstance(r.get("found"), dict)}) \
        if env is not None else []
    return f": serving process and TP rank{'s' if len(read) > 1 else ''} " \
           f"{', '.join(map(str, read))}" if read else ""


# -- the two servers' GPUs ----------------------------------------------------------------------

def gpu_threat(cid: str, live: LiveResults) -> ClaimResult | None:
    """A comparison of the two servers cannot be judged when they ran on GPUs of another model
    or driver: the ratio would measure the hardware as much as the drafter (broken, reason
    gpu_mismatch). None when the GPU sets agree on both."""
    decisive = gpu.decisive(live.gpu_differences)
    if not decisive:
        return None
    return _broken(cid, live, "the baseline and the speculative server ran on GPUs that differ "
                   f"({'; '.join(decisive)}), so their ratio measures the GPUs as well as the "
                   "drafter; put both servers on GPUs of one model and driver ([server] gpus and "
                   "baseline_gpus), or on one set", reason="gpu_mismatch",
                   details={"gpu_differences": list(live.gpu_differences),
                            "gpus_by_server": live.gpus_by_server})


def gpu_noted(result: ClaimResult, live: LiveResults) -> ClaimResult:
    """The claim, saying how the two GPU sets differ where they do (clocks or power limits
    only: reported, the claim judged as measured)."""
    if not live.gpu_differences:
        return result
    note = ("; the two servers' GPUs differ in " + "; ".join(live.gpu_differences)
            + " (limits, not the clocks the GPUs ran at: check they do not bias the comparison)")
    return dataclasses.replace(result, message=result.message + note,
                               details={**result.details,
                                        "gpu_differences": list(live.gpu_differences)})


# -- baseline ------------------------------------------------------------------------------------

@_levelled
def baseline_tps_claim(profile: Profile, live: LiveResults, *,
                       thresholded: bool = True) -> ClaimResult:
    """perf.baseline_tps: decode tok/s per request without speculation ≥ baseline_tps_min, at
    the gate's concurrency (single stream by default); thresholded=False reports the figures
    only (another level: the threshold is the gate's)."""
    cid = ids.BASELINE_TPS.id
    got = _need(live.baseline, cid, live)
    if isinstance(got, ClaimResult):
        return got
    attachments = (*_attachments(live, live.baseline),
                   live_plots.tps_repeats(live.baseline.measurement, None))
    secretly = _baseline_is_speculative(live.baseline)
    if secretly:
        return _broken(cid, live, f"the baseline server is speculative ({secretly}); a "
                       "baseline must run without --speculative-algorithm, otherwise tok/s "
                       "is not a baseline. Check [server] baseline_args or --baseline-url.",
                       attachments=attachments)
    tps = got.stat("tps")
    if tps is None:
        return _broken(cid, live, "the baseline pass produced no decode tokens to time "
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
                               "deployment": found.to_json()}
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
        return claims.skipped(cid, PHASE, _sim(live) + f"{figures}; reported, not judged: "
                              "[thresholds] baseline_tps_min applies at the gate's concurrency"
                              + _deployment_text(live),
                              observed=round(tps.mean, 2), unit="tok/s", details=details,
                              attachments=attachments, reason="reported")
    if threshold is None:
        return claims.skipped(cid, PHASE, _sim(live) + f"{figures}; no [thresholds] "
                              "baseline_tps_min is set, so there is nothing to judge"
                              + _covers(covered) + _deployment_text(live),
                              observed=round(tps.mean, 2), unit="tok/s", details=details,
                              attachments=attachments)
    ok, how, fail_reason = _judge_covered(covered, threshold)
    word = "meets" if ok else "does not meet"
    return claims.judged(ok, cid, PHASE, _sim(live) + f"{figures}: {word} the minimum "
                         f"{threshold:g} tok/s — {how}{_covers(covered)}"
                         + _deployment_text(live),
                         observed=round(tps.mean, 2), expected=f">= {threshold:g}", unit="tok/s",
                         details=details, attachments=attachments, fail_reason=fail_reason)


# -- speculative -----------------------------------------------------------------------------

def spec_measurement(cid: str, live: LiveResults, *,
                     timed: bool = True) -> Measurement | ClaimResult:
    """The speculative measurement, or the broken claim every live claim that reads it gives:
    the server's failure with its log tail, bursts (when timed), or missing spec fields."""
    got = _need(live.speculative, cid, live, timed=timed)
    if isinstance(got, ClaimResult):
        return got
    if got.spec_fields_missing:
        return _broken(cid, live, f"the speculative server reported no spec_verify_ct on "
                       f"{got.spec_fields_missing} of {len(got.samples)} responses: SGLang "
                       "omits it only when no verify pass ran (a request that ended at its first "
                       "token), so speculation is not active (check "
                       "--speculative-algorithm in /server_info), or this build names the "
                       "field differently", attachments=_attachments(live, live.speculative))
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
        ok, how = _judge(be.ratio, 1.0, strict=True)
        return ok, how, ""
    return _judge_covered(be.covered, 1.0, strict=True)


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


@_levelled
def accept_len_claim(profile: Profile, live: LiveResults) -> ClaimResult:
    """spec.accept_len: Σ completion_tokens / Σ spec_verify_ct ≥ accept_len_min (or break-even)."""
    cid = ids.ACCEPT_LEN.id
    got = spec_measurement(cid, live, timed=profile.thresholds.accept_len_min == "breakeven")
    if isinstance(got, ClaimResult):
        return got
    accept = got.stat("accept_len")
    if accept is None:
        return _broken(cid, live, f"no verify pass ran in {len(got.samples)} speculative answers "
                       "(every one ended at its first token), so there is no accept length; "
                       "raise [bench] max_new_tokens or use prompts that get longer answers",
                       attachments=_attachments(live, live.speculative))
    tau = got.stat("tau_decode")
    attachments = (*_attachments(live, live.speculative, live.baseline),
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
        return claims.failed(cid, PHASE, _sim(live) + f"{figures}: {NOT_WIRED_HINT}",
                             observed=round(accept.mean, 3), expected=_expected(profile),
                             unit="tokens/verify", details=details, attachments=attachments)
    configured = profile.thresholds.accept_len_min
    if configured is None:
        return claims.skipped(cid, PHASE, _sim(live) + f"{figures}; no [thresholds] "
                              "accept_len_min is set", observed=round(accept.mean, 3),
                              unit="tokens/verify", details=details, attachments=attachments)
    if configured == "breakeven":
        threat = gpu_threat(cid, live)
        if threat is not None:
            return threat
        be = _breakeven(live, got)
        if be is None:
            return _broken(cid, live, "accept_len_min = \"breakeven\" needs the baseline "
                           "tok/s, which was not measured: "
                           + (_first_line(live.baseline) or "?"),
                           cause=failure_cause(live.baseline), attachments=attachments)
        threshold, label = be.breakeven, f"the measured break-even {be.breakeven:.3f}"
        # Judged as spec.breakeven is: on the paired speed-up's interval against 1, and
        # recorded like it, in decode-only accept length (what break-even is computed from).
        ok, how, fail_reason = _judge_breakeven(be)
        if not fail_reason:
            how = _in_accept_length_units(how, be)
        if be.covered is not None:
            how += _covers(be.covered)
            details["launch_spread"] = be.covered.details()
        observed = be.tau
    else:
        threshold, label = float(configured), f"the minimum {float(configured):g}"
        ok, how = _judge(accept, threshold)
        fail_reason = ""
        observed = accept.mean
    word = "reaches" if ok else "does not reach"
    return claims.judged(ok, cid, PHASE, _sim(live) + f"{figures}: {word} {label} — {how}. "
                         f"Per category: {per_cat}",
                         observed=round(observed, 3), expected=f">= {threshold:.3f}",
                         unit="tokens/verify", details=details, attachments=attachments,
                         fail_reason=fail_reason)


def _in_accept_length_units(how: str, be: BreakEven) -> str:
    """_judge's sentence about the paired speed-up against 1, said of the accept length against
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


@_levelled
def breakeven_claim(profile: Profile, live: LiveResults) -> ClaimResult:
    """spec.breakeven: measured accept length ≥ cycle time × baseline tok/s."""
    return gpu_threat(ids.BREAKEVEN.id, live) or gpu_noted(_breakeven_claim(profile, live), live)


def _breakeven_claim(profile: Profile, live: LiveResults) -> ClaimResult:
    cid = ids.BREAKEVEN.id
    got = spec_measurement(cid, live)
    if isinstance(got, ClaimResult):
        return got
    base = _need(live.baseline, cid, live)
    if isinstance(base, ClaimResult):
        return base
    be = _breakeven(live, got)
    if be is None:
        why = (_unpaired(bench.speedup(got, base), got, base)
               or "the baseline tok/s or the speculative cycle time was not measured")
        return _broken(cid, live, f"the break-even cannot be judged: {why}")
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
                  f"{_reused_baseline(live)}")
    ok, how, fail_reason = _judge_breakeven(be)
    if ok:
        tail = "the drafter makes serving faster"
    elif be.ratio.mean < 1.0:
        tail = "the drafter makes serving slower"
    else:
        tail = "not shown to beat the baseline"
    how = how.replace("clears 1", "clears break-even").replace("below 1", "below break-even")
    covers = _covers(be.covered) if be.covered is not None else ""
    attachments = (*_attachments(live, live.speculative, live.baseline),
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
    return claims.judged(ok, cid, PHASE, _sim(live) + f"{arithmetic}: {tail} "
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


@_levelled
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
    spec = _need(live.speculative, cid, live)
    if isinstance(spec, ClaimResult):
        return spec
    base = _need(live.baseline, cid, live)
    if isinstance(base, ClaimResult):
        return base
    if spec.stat("tps") is None or base.stat("tps") is None:
        return _broken(cid, live, "a pass produced no decode tokens to time")
    ratio = bench.speedup(spec, base)
    unpaired = _unpaired(ratio, spec, base)
    if unpaired:
        return _broken(cid, live, unpaired)
    threshold = profile.thresholds.speedup_min
    covered = drift.cover(ratio, live.launch_coverage, "speedup")
    judged = covered.judged
    ok, how, fail_reason = _judge_covered(covered, threshold, strict=True)
    pct = stats.percent(ratio.confidence)
    interval = (f", {pct} % CI [{judged.ci_low:.3f}, {judged.ci_high:.3f}] with "
                f"launch-to-launch spread ([{ratio.ci_low:.3f}, {ratio.ci_high:.3f}] over "
                f"prompts and passes alone: paired jackknife over {ratio.n} prompts)"
                if ratio.has_interval else "")
    slower = " — the drafter makes serving slower" if ratio.mean < 1.0 else ""
    rows = bench.speedup_by_prompt(spec, base)
    details: dict[str, Any] = {"speedup": judged.to_json(),
                               "speedup_within_launch": ratio.to_json(),
                               "launch_spread": covered.details(),
                               "spec_tps": spec.stats["tps"].to_json(),
                               "baseline_tps": base.stats["tps"].to_json(),
                               "per_prompt": [r.to_json() for r in rows]}
    total = _total_speedup(spec, base, details)
    attachments: tuple[Attachment, ...] = ()
    if attach:
        attachments = (*_attachments(live, live.speculative, live.baseline),
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
               f"required > {threshold:g}: {how}{slower}{_spread(rows, threshold)}{total}"
               f"{_reused_baseline(live)}{_covers(covered)}{curve}")
    return claims.judged(ok, cid, PHASE, _sim(live) + message, observed=round(ratio.mean, 4),
                         expected=f"> {threshold:g}", unit="x", details=details,
                         attachments=attachments if attach else (), fail_reason=fail_reason)


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

