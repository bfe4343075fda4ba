"""What every live claim reads of a session: its servers' runs, failures, levels and attachments."""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Concatenate, ParamSpec

from specgate.claims import ids
from specgate.claims import result as claims
from specgate.claims.result import Attachment, ClaimResult
from specgate.core import files
from specgate.core.profile import Profile
from specgate.results import bench, drift, held, stats
from specgate.results.bench import Measurement
from specgate.results.live import ConfigRun, LiveResults
from specgate.serving import gpu

PHASE = "phase0"


P = ParamSpec("P")


def sim(live: LiveResults) -> str:
    """The message's opening: a simulated server, and the concurrency when it is not the
    single stream of a profile without [bench] concurrency."""
    where = f"at {live.gate_level} in flight: " if live.per_level else ""
    return ("[simulated server] " if live.simulated else "") + where


def levelled(claim: Callable[Concatenate[Profile, LiveResults, P], ClaimResult]
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


def reused_baseline(live: LiveResults) -> str:
    """A note for claims that use the baseline's figures when they were reused, not measured."""
    reuse = live.baseline.reuse
    if not reuse.get("reused"):
        return ""
    return (f" (baseline figures reused from {reuse.get('measured_at')}, "
            f"{float(reuse.get('age_h', 0.0)):.1f} h old: see perf.baseline_tps)")


def blocked(claim_id: str, live: LiveResults, message: str, **kw: Any) -> ClaimResult:
    return claims.broken(claim_id, PHASE, sim(live) + message, **kw)


def needs(run: ConfigRun, claim_id: str, live: LiveResults, *,
          timed: bool = True) -> Measurement | ClaimResult:
    """The run's measurement, or a broken claim that carries the server's reason and log tail.

    A timed claim also refuses a measurement whose streams arrived in bursts: per-token timing
    of a buffered stream measures the buffer, not the server (28,000 tok/s against a true 250).
    """
    if run.failure is not None:
        return blocked(claim_id, live, f"the {run.config} measurement could not be made: "
                       f"{first_line(run)}", details={"failure": run.failure.message},
                       cause=failure_cause(run))
    m = run.measurement
    if m is None:
        return blocked(claim_id, live, f"no {run.config} measurement was recorded")
    if timed and m.bursts * 2 >= len(m.samples) > 0:
        return blocked(claim_id, live, f"{m.bursts} of {len(m.samples)} {run.config} responses "
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


# Attach mode starts no server: one that cannot be used was never specgate's to start.
_NOT_ATTACHED = ("the {config} server could not be reached or attached to (attach mode: "
                 "specgate launched nothing)")


def first_line(run: ConfigRun) -> str:
    """What failed, in a few words: the reason itself, with the log tail, is the cause the
    claims share (failure_cause), said once."""
    if run.failure is None:
        return ""
    what = _FAILED_AT.get(run.failure.stage, "the {config} run failed during "
                          + run.failure.stage)
    if run.attached and run.failure.stage == "start":
        what = _NOT_ATTACHED
    return what.format(config=run.config)


def assess(summary: stats.Summary, threshold: float, *, strict: bool = False) -> tuple[bool, str]:
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


def judge_covered(covered: drift.Covered, threshold: float, *,
                  strict: bool = False) -> tuple[bool, str, str]:
    """assess on the interval that covers the launches: (ok, how, fail reason).

    When the interval over prompts and passes alone would clear the threshold and the covered
    one does not, the margin lies within the launch-to-launch spread: not a confident pass,
    and the claim says so (reason within_launch_spread).
    """
    ok, how = assess(covered.judged, threshold, strict=strict)
    if not ok and covered.within_spread(threshold):
        return False, covered.margin_text(threshold), "within_launch_spread"
    return ok, how, ""


def covering(covered: drift.Covered) -> str:
    """The sentence each timed claim carries: what its interval covers."""
    return f"; the interval includes the {covered.describe()}"


def deployment_text(live: LiveResults) -> str:
    """The sentence perf.baseline_tps ends with: the deployment's class from this baseline
    (results/deployment.py), which picked the prior of the launch-to-launch spread."""
    return f". Deployment: {live.deployment.line()}"


def attach_files(live: LiveResults, *runs: ConfigRun) -> tuple[Attachment, ...]:
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
        log = server_log(run)
        if log:
            out.append(Attachment(f"{run.config} server log", log, "text"))
    return tuple(out)


MAX_LOG_BYTES = 2_000_000


def server_log(run: ConfigRun) -> str:
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


def gpu_threat(cid: str, live: LiveResults) -> ClaimResult | None:
    """A comparison of the two servers cannot be judged when they ran on GPUs of another model
    or driver: the ratio would measure the hardware as much as the drafter (broken, reason
    gpu_mismatch). None when the GPU sets agree on both."""
    decisive = gpu.decisive(live.gpu_differences)
    if not decisive:
        return None
    return blocked(cid, live, "the baseline and the speculative server ran on GPUs that differ "
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

