"""One server configuration's session: launch (or attach), the GPU and environment checks, a
measurement at every concurrency level of the plan, and the stop; errors become data."""

from __future__ import annotations

import dataclasses
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from specgate.core.errors import ServerError, SpecgateError
from specgate.core.redact import MASK, is_secret_name, mask_env
from specgate.measure import answer_probe, launches, load, passes
from specgate.measure.gate import Reclass, Rule, keep_going_rule, stopped_why
from specgate.measure.plan import Blocked, LivePlan
from specgate.results import bench, drift
from specgate.results.answers import AnswerEvidence
from specgate.results.live import ConfigRun, EnvCheck, Failure, GpuCheck
from specgate.serving import gpu, server
from specgate.serving.client import SGLangClient
from specgate.serving.launch import Config, ServerPlan
from specgate.serving.launchers.base import loopback_only
from specgate.serving.server import ServerHandle

Progress = Callable[[str], None]

# server_info keys worth keeping beside a measurement (the rest is large and not ours).
_SERVER_KEYS = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                "speculative_num_draft_tokens", "speculative_draft_model_path", "tp_size",
                "model_path", "version", "simulated", "max_running_requests",
                # what spec.parity compares (results/parity.py)
                "dtype", "quantization", "kv_cache_dtype", "load_format", "tokenizer_path",
                "revision")



def check_gpus(plan: ServerPlan, *, resident: Sequence[int] = ()) -> GpuCheck:
    """Other processes on the GPUs the server will use (skipped without nvidia-smi); `resident`
    are the pids of this run's other server, resident beside it by design. An attached server's
    GPUs are named only (check_attached_gpus)."""
    if plan.spec is None:
        return check_attached_gpus(plan)
    snap = plan.spec.launcher.gpu_snapshot() if plan.spec is not None else gpu.snapshot()
    if snap is None:
        where = plan.spec.launcher.gpu_host() if plan.spec is not None else "this machine"
        return GpuCheck(False, f"nvidia-smi is not available on {where}, so GPU processes "
                               "cannot be listed")
    if isinstance(plan.gpus, str):
        # Selected by id: every GPU listed could be the server's, so their names tell only
        # when they agree.
        return GpuCheck(False, f"[server] env CUDA_VISIBLE_DEVICES = {plan.gpus!r} names GPUs "
                               "by id, not by index; set [server] gpus to the indices that "
                               "nvidia-smi lists so they can be checked",
                        names=tuple(sorted({g.name for g in snap.gpus})))
    busy = [p for p in gpu.busy_on(snap, plan.gpus) if p.pid not in set(resident)]
    listed = {g.index for g in snap.gpus}
    missing = [i for i in plan.gpus if listed and i not in listed]
    if missing:
        return GpuCheck(False, f"GPUs {missing} of the server's set {list(plan.gpus)} are not "
                               f"on this machine (nvidia-smi lists {sorted(listed)}); fix "
                               "[server] gpus / baseline_gpus", gpus=tuple(plan.gpus))
    names = tuple(sorted({g.name for g in snap.gpus if g.index in set(plan.gpus)}))
    return GpuCheck(True, f"GPUs {list(plan.gpus)} checked",
                    tuple(dataclasses.asdict(p) for p in busy), gpus=tuple(plan.gpus),
                    names=names)


def check_attached_gpus(plan: ServerPlan) -> GpuCheck:
    """The names of an attached server's GPUs, listed as a launched server's are: through the
    profile's launcher prefix, or on this machine for a server on a loopback address. Its own
    processes hold them, so they are not checked for others; every GPU listed could be its, so
    their names tell only when they agree (results/deployment.py classify)."""
    launcher = plan.launcher
    unlisted = (launcher.attached_gpus_unlisted(plan.url) if launcher is not None
                else loopback_only(plan.url))
    if unlisted is not None:
        return GpuCheck(False, unlisted)
    snap = launcher.gpu_snapshot() if launcher is not None else gpu.snapshot()
    where = launcher.gpu_host() if launcher is not None else "this machine"
    if snap is None:
        return GpuCheck(False, f"nvidia-smi is not available on {where}, so the attached "
                               "server's GPUs cannot be listed")
    return GpuCheck(False, f"the attached server's GPUs as nvidia-smi lists them on {where}; "
                           "not checked for other processes (its own hold them)",
                    names=tuple(sorted({g.name for g in snap.gpus})))


def attached_facts(planned: ServerPlan, handle: ServerHandle) -> dict[str, Any]:
    """An attached server's GPU names and its launch as the launch log knows it; a check that
    breaks says so instead of stopping."""
    try:
        check = check_attached_gpus(planned)
    except Exception as exc:  # a broken check must not stop the session
        check = GpuCheck(False, f"GPU listing failed: {exc}")
    return {"gpu": check,
            "attached_launch": launches.attached_launch(dict(handle.server_info or {}),
                                                        check.names)}


def _masked(found: dict[str, str | None], expected: Mapping[str, str]) -> dict[str, str | None]:
    """results.json is a report file: credential values are compared, then masked."""
    out = dict(found)
    for k, want in expected.items():
        if is_secret_name(k) and out.get(k) is not None:
            out[k] = MASK if out[k] == want else f"{MASK} (a different value)"
    return out


def check_env(expected: Mapping[str, str], handle: ServerHandle, tp: int = 1) -> EnvCheck:
    """The serving process's environment, and each TP rank's, against [server] env (skipped
    when the serving process's is unreadable)."""
    expected = dict(expected)
    reading = server.process_env_detail(handle)
    if reading.env is None:
        return EnvCheck(False, reading.reason, expected, tp=tp)
    found = _masked({k: reading.env.get(k) for k in expected}, expected)
    ranks, where = server.rank_envs(handle)
    per_rank: list[dict[str, Any]] = []
    for rank in ranks:
        entry: dict[str, Any] = {"rank": rank.rank, "label": rank.label, "pid": rank.pid}
        if rank.env is None:
            entry["reason"] = rank.reason
        else:
            entry["found"] = _masked({k: rank.env.get(k) for k in expected}, expected)
        per_rank.append(entry)
    return EnvCheck(True, f"environment {reading.reason}", mask_env(expected), found,
                    ranks=tuple(per_rank), tp=tp, ranks_reason=where)



def server_spec(info: dict[str, Any]) -> dict[str, Any]:
    return {k: info[k] for k in _SERVER_KEYS if k in info}


def run_config(plan: LivePlan, config: Config, *, baseline: ConfigRun | None = None,
               progress: Progress | None = None,
               keep_going: Rule | None = None,
               coverage: drift.Coverage | None = None,
               classed: Classed | None = None) -> ConfigRun:
    """Launch (or attach), check, measure at every concurrency level and stop one
    configuration; errors become data.

    baseline is the baseline's run, for the speculative server's rule for more repeats at each
    level; coverage puts that rule on the intervals the claims judge (with the launch spread).
    keep_going replaces the rule at the gate's level (`specgate tune` races configurations);
    the other levels then take no extra repeats, and no answer is asked about (spec.parity's
    evidence, gather_answers). classed: the coverage of the deployment's class, read from the
    baseline's run so far, which the baseline's rule judges on at every look.
    """
    say = progress or (lambda _msg: None)
    planned = plan.server(config)
    if isinstance(planned, Blocked):
        return ConfigRun(config=config, gate_level=plan.gate_level,
                         failure=Failure(planned.stage, planned.message, cause=planned.cause))
    attached = planned.spec is None
    fields: dict[str, Any] = {"config": config, "attached": attached,
                              "gate_level": plan.gate_level}
    if not attached:
        try:
            fields["gpu"] = check_gpus(planned)
        except Exception as exc:  # a broken check must not stop the session
            fields["gpu"] = GpuCheck(False, f"GPU check failed: {exc}")
        fields["log_path"] = str(planned.log_path)
    handle: ServerHandle | None = None
    stage = "prompts"
    try:
        if plan.prompts is None:
            raise SpecgateError(plan.no_prompts)
        stage = "start"
        with server.serve(planned, say) as handle:
            fields.update(launch=handle.command, url=handle.url,
                          simulated=bool(handle.simulated),
                          server_info=server_spec(dict(handle.server_info or {})))
            fields["env"] = checked_env(planned, handle)
            if attached:
                fields.update(attached_facts(planned, handle))
            stage = "measure"
            with SGLangClient(handle.url, handle.api_key,
                              timeout_s=plan.sampling.request_timeout_s) as client:
                measure_levels(plan, config, client, handle, fields, baseline=baseline,
                               keep_going=keep_going, coverage=coverage, say=say,
                               classed=classed)
                if keep_going is None:
                    fields["answers"] = gather_answers(plan, config, client, fields, baseline,
                                                       say)
            stage = "stop"
            fields["stop"] = stop_now(handle)
    except SpecgateError as exc:
        if "failure" not in fields:
            fields["failure"] = Failure(stage, str(exc), log_tail_of(exc) or log_tail(handle))
    except Exception as exc:  # recorded, so every claim can say what broke
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        fields.setdefault("failure", Failure(stage, f"internal error: {detail}",
                                             log_tail(handle)))
    fields.setdefault("stop", "attached: left running" if attached else "")
    return ConfigRun(**fields)


def checked_env(planned: ServerPlan, handle: ServerHandle) -> EnvCheck:
    """check_env for a planned server; a check that breaks says so instead of stopping."""
    try:
        return check_env(planned.env, handle, planned.tp)
    except Exception as exc:  # a broken check must not stop the session
        return EnvCheck(False, f"environment check failed: {exc}", dict(planned.env),
                        tp=planned.tp)



# The coverage of the deployment's class, read from the baseline's run (measure/live.py).
Classed = Callable[[ConfigRun], drift.Coverage]


def reclassing(fields: dict[str, Any], classed: Classed | None,
               config: Config) -> Reclass | None:
    """The baseline's rule's reclass: its run so far, with the measurement the rule looks at,
    classed; None for the speculative server or without `classed`."""
    if classed is None or config != "baseline":
        return None

    def reclass(m: bench.Measurement) -> drift.Coverage:
        return classed(ConfigRun(**{**fields, "measurement": m}))

    return reclass


def measure_levels(plan: LivePlan, config: Config, client: SGLangClient,
                   handle: ServerHandle, fields: dict[str, Any], *,
                   baseline: ConfigRun | None, keep_going: Rule | None,
                   coverage: drift.Coverage | None, say: Progress,
                   classed: Classed | None = None) -> None:
    """Measure each level (the gate's first) into fields: measurement and failure for the
    gate's, levels and level_failures for the others. After a level fails with the server gone,
    the levels left are not measured, and say why."""
    assert plan.prompts is not None
    several = len(plan.levels) > 1
    others: dict[int, bench.Measurement] = {}
    failures: dict[int, Failure] = {}
    gone = ""
    for level in plan.measured_levels:
        gate = level == plan.gate_level
        where = f"at {level} in flight: " if several else ""
        if gone:
            failure = Failure("measure", f"{where}not measured: {gone}")
        else:
            base = baseline.at(level).measurement if baseline is not None else None
            rule = (keep_going if gate else (lambda _m: None)) if keep_going is not None \
                else keep_going_rule(plan.thresholds, config, base, coverage, gate=gate,
                                     reclass=reclassing(fields, classed, config))
            try:
                measured = stopped_why(passes.measure(
                    client, plan.sampling, plan.prompts, config=config, keep_going=rule,
                    progress=say, simulated=bool(handle.simulated),
                    server_spec=fields["server_info"], concurrency=level), rule)
            except SpecgateError as exc:
                # Settle first: a server writes its access-log line for the failed request
                # after answering it, and a dying one needs a moment to exit.
                alive = _alive(handle, settle_s=1.0)
                tail = log_tail_of(exc) or log_tail(handle)
                note = "" if alive is not False else (
                    " (the attached server stopped answering /health)" if handle.attached
                    else " (the server process has exited)")
                stage = "load" if isinstance(exc, load.LoadFailed) else "measure"
                failure = Failure(stage, f"{where}{exc}{note}", tail)
                if alive is False:
                    gone = f"the server stopped while {level} requests were in flight"
            else:
                if gate:
                    fields["measurement"] = measured
                else:
                    others[level] = measured
                continue
        if gate:
            fields["failure"] = failure
        else:
            failures[level] = failure
    fields["levels"], fields["level_failures"] = others, failures


def gather_answers(plan: LivePlan, config: Config, client: SGLangClient,
                   fields: Mapping[str, Any], baseline: ConfigRun | None,
                   say: Progress) -> AnswerEvidence | None:
    """spec.parity's evidence from this server, once its levels are measured (untimed): the
    baseline's answers are passed to the speculative server's, which then scores only where it
    parts from them. A check that breaks says so instead of stopping the session."""
    measured: dict[int, bench.Measurement] = {}
    if fields.get("measurement") is not None:
        measured[plan.gate_level] = fields["measurement"]
    measured.update(fields.get("levels") or {})
    if not measured or plan.prompts is None:
        return None
    theirs: dict[int, bench.Measurement] | None = None
    if baseline is not None:
        theirs = {level: m for level in measured
                  if (m := baseline.at(level).measurement) is not None}
    try:
        return answer_probe.collect(client, plan.prompts, plan.sampling, config, measured,
                                    baseline=theirs, say=say)
    except Exception as exc:  # a broken check must not stop the session
        return AnswerEvidence(error=f"gathering the evidence failed: {type(exc).__name__}: "
                                    f"{exc}")


def log_tail_of(exc: SpecgateError) -> str:
    return exc.log_tail if isinstance(exc, ServerError) else ""


def stop_now(handle: ServerHandle) -> str:
    """Stop now (serve() would too) so the report of what was left behind is kept."""
    return handle.stop().summary()


def log_tail(handle: ServerHandle | None) -> str:
    if handle is None:
        return ""
    try:
        return handle.log_tail()
    except Exception:
        return ""


def _alive(handle: ServerHandle, settle_s: float = 0.0) -> bool | None:
    """Whether the server still runs; settle_s lets a process that just hung up finish dying."""
    deadline = time.monotonic() + settle_s
    try:
        while True:
            alive = bool(handle.alive())
            if not alive or time.monotonic() >= deadline:
                return alive
            time.sleep(0.1)
    except Exception:
        return None

