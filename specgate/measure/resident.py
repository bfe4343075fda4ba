"""Both servers resident at once: started one after the other or together (their loads
overlapping), then measured in turn (design interleaved) or one at a time."""

from __future__ import annotations

import contextlib
import dataclasses
import traceback
from collections.abc import Iterator
from typing import Any

from specgate.core.errors import SpecgateError
from specgate.measure import interleave
from specgate.measure.gate import keep_going_rule, stopped_why
from specgate.measure.plan import Blocked, LivePlan
from specgate.measure.server_session import (
    Classed,
    Progress,
    attached_facts,
    check_gpus,
    checked_env,
    gather_answers,
    log_tail,
    log_tail_of,
    measure_levels,
    reclassing,
    server_spec,
    stop_now,
)
from specgate.results import bench, drift
from specgate.results.live import ConfigRun, Failure, GpuCheck
from specgate.serving import server
from specgate.serving.client import SGLangClient
from specgate.serving.launch import Config, ServerPlan, server_url
from specgate.serving.server import PairStartError, ServerHandle

# Said when the second of two resident servers fails to start on the same GPUs: most often it
# did not fit.
_RESIDENT_HINT = ("both servers are resident at once and must fit in GPU memory together: give "
                  "each a share with --mem-fraction-static in [server] args (e.g. 0.4), put "
                  "the baseline on GPUs of its own ([server] baseline_gpus), or use design = "
                  "\"ab\" or \"aba\" without parallel_launch")


def beside(first: ServerPlan, second: ServerPlan) -> ServerPlan:
    """The second server's plan, on another port when both would listen on the same one."""
    spec = second.spec
    if spec is None or first.spec is None or second.any_port \
            or (spec.host, spec.port) != (first.spec.host, first.spec.port):
        return second
    moved = spec.on_port(spec.port + 1)
    return dataclasses.replace(second, spec=moved, url=server_url(moved.host, moved.port))


def _not_beside(blocked: Blocked, config: Config, gate_level: int) -> ConfigRun:
    """A run of a resident pair that cannot start because one server is blocked (an unreadable
    input stays the one cause of both)."""
    if config == blocked.config:
        return ConfigRun(config=config, gate_level=gate_level, failure=Failure(
            blocked.stage, blocked.message, cause=blocked.cause))
    return ConfigRun(config=config, gate_level=gate_level, failure=Failure(
        blocked.stage, f"not launched: the {blocked.config} server cannot be run beside it: "
                       f"{blocked.message}", cause=blocked.cause))


def _shares_gpus(plans: dict[Config, ServerPlan]) -> bool:
    base, spec = plans["baseline"].gpus, plans["speculative"].gpus
    if isinstance(base, str) or isinstance(spec, str):
        return base == spec
    return bool(set(base) & set(spec))


def run_pair(plan: LivePlan, say: Progress, coverage: drift.Coverage, *,
             together: bool, interleaved: bool,
             classed: Classed | None = None) -> tuple[ConfigRun, ConfigRun]:
    """Both servers resident at once; errors become data, as in server_session.run_config, and both
    servers are stopped whatever happens.

    together: started at once (serving/server.py serve_together), so their loads overlap;
    otherwise the speculative server starts once the baseline is ready. interleaved: each
    prompt goes to one and then the other (measure/interleave.py); otherwise the baseline is
    measured alone, then the speculative server, each while the other idles. classed: the
    coverage of the deployment's class from the baseline's run so far (server_session.run_config).
    """
    for blocked in (plan.baseline, plan.speculative):
        if isinstance(blocked, Blocked):
            return (_not_beside(blocked, "baseline", plan.gate_level),
                    _not_beside(blocked, "speculative", plan.gate_level))
    base_plan, spec_plan = plan.baseline, plan.speculative
    if not isinstance(base_plan, ServerPlan) or not isinstance(spec_plan, ServerPlan):
        raise TypeError("both servers are planned here")  # Blocked ones returned above
    plans: dict[Config, ServerPlan] = {"baseline": base_plan,
                                       "speculative": beside(base_plan, spec_plan)}
    together = together and all(p.spec is not None for p in plans.values())
    fields: dict[Config, dict[str, Any]] = {
        c: {"config": c, "attached": p.spec is None} for c, p in plans.items()}
    handles: dict[Config, ServerHandle] = {}
    current: Config = "baseline"
    stage = "prompts"
    try:
        if plan.prompts is None:
            raise SpecgateError(plan.no_prompts)
        with contextlib.ExitStack() as stack:
            stage = "start"
            if together:
                for c, p in plans.items():  # both sets checked before either loads
                    _check_gpus(fields[c], p, [])
                try:
                    handles.update(stack.enter_context(
                        server.serve_together(list(plans.values()), say)))
                except PairStartError as exc:
                    current = exc.config
                    raise
            else:
                for current, p in plans.items():
                    if p.spec is not None:
                        _check_gpus(fields[current], p,
                                    [pid for h in handles.values() for pid in h.pids])
                    handles[current] = stack.enter_context(server.serve(p, say))
            for c, handle in handles.items():
                fields[c].update(launch=handle.command, url=handle.url,
                                 simulated=bool(handle.simulated),
                                 server_info=server_spec(dict(handle.server_info or {})))
                fields[c]["env"] = checked_env(plans[c], handle)
                if plans[c].spec is None:
                    fields[c].update(attached_facts(plans[c], handle))
            stage = "measure"
            if interleaved:
                _measure_interleaved(plan, handles, fields, coverage, say, classed)
            else:
                _measure_one_at_a_time(plan, handles, fields, coverage, say, classed)
            _gather_answers(plan, handles, fields, say)
            stage = "stop"
            last_first: tuple[Config, Config] = ("speculative", "baseline")
            for c in last_first:
                fields[c]["stop"] = stop_now(handles[c])
    except SpecgateError as exc:
        failed = Failure(stage, str(exc), log_tail_of(exc) or log_tail(handles.get(current)))
        if stage == "start" and plans[current].spec is not None and _shares_gpus(plans) \
                and (together or current == "speculative"):
            failed = dataclasses.replace(failed, message=f"{failed.message} ({_RESIDENT_HINT})")
        for c in plans:
            fields[c].setdefault("failure", failed if c == current or stage != "start" else
                                 Failure(stage, f"not measured: the {current} server could "
                                                f"not be run beside it: {exc}"))
    except Exception as exc:  # recorded, so every claim can say what broke
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        for c in plans:
            fields[c].setdefault("failure", Failure(stage, f"internal error: {detail}",
                                                    log_tail(handles.get(c))))
    for c, h in handles.items():  # stopped on the way out: keep what was left behind
        fields[c].setdefault("stop", stop_now(h))
    for c, p in plans.items():
        fields[c].setdefault("stop", "attached: left running" if p.spec is None else "")
    return ConfigRun(**fields["baseline"]), ConfigRun(**fields["speculative"])


def _gather_answers(plan: LivePlan, handles: dict[Config, ServerHandle],
                    fields: dict[Config, dict[str, Any]], say: Progress) -> None:
    """spec.parity's evidence from both servers, the baseline's first (untimed)."""
    baseline: ConfigRun | None = None
    for config in ("baseline", "speculative"):
        handle = handles[config]
        with SGLangClient(handle.url, handle.api_key,
                          timeout_s=plan.sampling.request_timeout_s) as client:
            fields[config]["answers"] = gather_answers(plan, config, client, fields[config],
                                                       baseline, say)
        if config == "baseline":
            baseline = ConfigRun(**fields["baseline"])


def _check_gpus(fields: dict[str, Any], planned: ServerPlan, resident: list[int]) -> None:
    if planned.spec is None:
        return
    try:
        fields["gpu"] = check_gpus(planned, resident=resident)
    except Exception as exc:  # a broken check must not stop the session
        fields["gpu"] = GpuCheck(False, f"GPU check failed: {exc}")
    fields["log_path"] = str(planned.log_path)


def _measure_interleaved(plan: LivePlan, handles: dict[Config, ServerHandle],
                         fields: dict[Config, dict[str, Any]], coverage: drift.Coverage,
                         say: Progress, classed: Classed | None = None) -> None:
    assert plan.prompts is not None
    base_rule = keep_going_rule(plan.thresholds, "baseline", None, coverage,
                                reclass=reclassing(fields["baseline"], classed, "baseline"))
    spec_rule = keep_going_rule(plan.thresholds, "speculative", None, coverage)

    def pair_rule(base: bench.Measurement, spec: bench.Measurement) -> str | None:
        spec_rule.baseline = base
        base_reason = base_rule(base)
        spec_rule.coverage = base_rule.looked  # the class the baseline so far gives
        found = [r for r in (base_reason, spec_rule(spec)) if r]
        return "; ".join(found) if found else None

    timeout = plan.sampling.request_timeout_s
    with _clients(handles, timeout) as (b_client, s_client):
        try:
            pair = interleave.measure(
                b_client, s_client, plan.sampling, plan.prompts, keep_going=pair_rule,
                progress=say, simulated=bool(handles["speculative"].simulated),
                server_specs=(fields["baseline"]["server_info"],
                              fields["speculative"]["server_info"]))
            undecided = base_rule if base_rule.undecided else spec_rule
            fields["baseline"]["measurement"], fields["speculative"]["measurement"] = (
                stopped_why(m, undecided, "interleaved repeats") for m in pair)
        except SpecgateError as exc:
            for c, h in handles.items():
                fields[c]["failure"] = Failure("measure", str(exc), log_tail_of(exc) or log_tail(h))


def _measure_one_at_a_time(plan: LivePlan, handles: dict[Config, ServerHandle],
                           fields: dict[Config, dict[str, Any]], coverage: drift.Coverage,
                           say: Progress, classed: Classed | None = None) -> None:
    """The baseline alone, then the speculative server alone (the other resident, idle), each
    at every level the plan measures."""
    baseline: ConfigRun | None = None
    for config in ("baseline", "speculative"):
        other = "speculative" if config == "baseline" else "baseline"
        say(f"{config}: measured alone; the {other} server is resident and idle")
        handle = handles[config]
        with SGLangClient(handle.url, handle.api_key,
                          timeout_s=plan.sampling.request_timeout_s) as client:
            measure_levels(plan, config, client, handle, fields[config], baseline=baseline,
                           keep_going=None, say=say, classed=classed,
                           coverage=coverage if baseline is None or classed is None
                           else classed(baseline))
        if config == "baseline":
            baseline = ConfigRun(**fields["baseline"])


@contextlib.contextmanager
def _clients(handles: dict[Config, ServerHandle],
             timeout_s: float) -> Iterator[tuple[SGLangClient, SGLangClient]]:
    with SGLangClient(handles["baseline"].url, handles["baseline"].api_key,
                      timeout_s=timeout_s) as b_client, \
            SGLangClient(handles["speculative"].url, handles["speculative"].api_key,
                         timeout_s=timeout_s) as s_client:
        yield b_client, s_client
