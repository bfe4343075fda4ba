"""The live Phase 0 session: baseline server, then speculative server, each at every concurrency
level of the plan."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import re
import time
import traceback
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from specgate.core.errors import ServerError, SpecgateError
from specgate.core.profile import Profile, ThresholdsSection
from specgate.core.redact import MASK, is_secret_name, mask_env, redact_urls
from specgate.io.jsonl import json_safe
from specgate.measure import bench, drift, launches, load, reuse
from specgate.measure import plan as live_plan
from specgate.measure.plan import Blocked, LivePlan
from specgate.measure.stats import Summary
from specgate.serving import gpu, server
from specgate.serving.client import SGLangClient
from specgate.serving.launch import Config, ServerPlan
from specgate.serving.server import ServerHandle

Progress = Callable[[str], None]
Rule = Callable[[bench.Measurement], str | None]
RESULTS_FILE = "results.json"
# A failure at these stages is one concurrency level's (a measurement, or its streams under
# load); at any other stage (prompts, start, stop) it stands for every level of the run.
LEVEL_STAGES = ("measure", "load")
# server_info keys worth keeping beside a measurement (the rest is large and not ours).
_SERVER_KEYS = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                "speculative_num_draft_tokens", "speculative_draft_model_path", "tp_size",
                "model_path", "version", "simulated")


@dataclasses.dataclass(frozen=True)
class Failure:
    """Why a stage could not be done: the message and the server's last log lines."""

    stage: str
    message: str
    log_tail: str = ""

    def text(self) -> str:
        out = f"during {self.stage}: {self.message}"
        if self.log_tail and self.log_tail not in self.message:
            out += "\n--- last lines of the server log ---\n" + self.log_tail
        return out


@dataclasses.dataclass(frozen=True)
class GpuCheck:
    """Other processes on the server's GPUs (every GPU of its set) just before a launch."""

    checked: bool
    reason: str
    offenders: tuple[dict[str, Any], ...] = ()
    gpus: tuple[int, ...] = ()  # the GPUs checked: one per TP rank


@dataclasses.dataclass(frozen=True)
class EnvCheck:
    """The profile's [server] env against the serving process's environment and every TP
    rank's (each rank is a process of its own, and NCCL reads its variables there)."""

    checked: bool
    reason: str
    expected: dict[str, str] = dataclasses.field(default_factory=dict)
    found: dict[str, str | None] = dataclasses.field(default_factory=dict)
    # One entry per TP rank process found: {"rank", "label", "pid", "found"} with the values
    # read, or {"rank", "label", "pid", "reason"} when its environment could not be read.
    ranks: tuple[dict[str, Any], ...] = ()
    tp: int = 1  # the TP size the server was started with
    ranks_reason: str = ""  # where the ranks were looked for, or why they could not be

    @property
    def mismatched(self) -> dict[str, str | None]:
        return {k: self.found.get(k) for k, v in self.expected.items() if self.found.get(k) != v}

    @property
    def rank_mismatched(self) -> dict[str, dict[str, str | None]]:
        """By rank ("TP1 (pid 4242)"), the variables that rank carries wrongly."""
        out: dict[str, dict[str, str | None]] = {}
        for rank in self.ranks:
            found = rank.get("found")
            if not isinstance(found, dict):
                continue
            wrong = {k: found.get(k) for k, v in self.expected.items() if found.get(k) != v}
            if wrong:
                out[f"TP{rank.get('rank')} (pid {rank.get('pid')})"] = wrong
        return out

    @property
    def ranks_unread(self) -> list[str]:
        """The TP ranks whose environment was not read: not found, or unreadable."""
        seen = {r.get("rank") for r in self.ranks if isinstance(r.get("found"), dict)}
        return [f"TP{r}" for r in range(self.tp) if r not in seen]


@dataclasses.dataclass(frozen=True)
class ConfigRun:
    """One server configuration's session: launch (or attach), checks, measurement, stop."""

    config: str
    attached: bool = False
    launch: str = ""
    url: str = ""
    simulated: bool = False
    server_info: dict[str, Any] = dataclasses.field(default_factory=dict)
    gpu: GpuCheck | None = None
    env: EnvCheck | None = None
    measurement: bench.Measurement | None = None
    failure: Failure | None = None
    stop: str = ""
    log_path: str = ""
    # Baseline reuse (measure/reuse.py): {"reused": True, "measured_at", "why_safe", …} for a
    # stored baseline, {"reused": False, "why": …} for a fresh one while reuse is on; {} when off.
    reuse: dict[str, Any] = dataclasses.field(default_factory=dict)
    # `measurement` and a measuring `failure` are at gate_level (requests in flight); the other
    # levels of [bench] concurrency are here, each measured or failed.
    gate_level: int = 1
    levels: dict[int, bench.Measurement] = dataclasses.field(default_factory=dict)
    level_failures: dict[int, Failure] = dataclasses.field(default_factory=dict)

    def at(self, level: int) -> ConfigRun:
        """This run as one concurrency level saw it: that level's measurement or failure in
        `measurement` and `failure` (a failure to start stands for every level)."""
        if level == self.gate_level:
            return self
        measured = self.levels.get(level)
        failure = self.level_failures.get(level)
        if measured is None and failure is None:
            failure = (self.failure if self.failure is not None
                       and self.failure.stage not in LEVEL_STAGES
                       else Failure("measure", f"no measurement at {level} in flight was "
                                               "recorded"))
        return dataclasses.replace(self, measurement=measured, failure=failure, gate_level=level,
                                   levels={}, level_failures={})

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["gpu"] = dataclasses.asdict(self.gpu) if self.gpu else None
        out["env"] = dataclasses.asdict(self.env) if self.env else None
        out["measurement"] = self.measurement.to_json() if self.measurement else None
        out["failure"] = dataclasses.asdict(self.failure) if self.failure else None
        out["levels"] = {str(k): m.to_json() for k, m in sorted(self.levels.items())}
        out["level_failures"] = {str(k): dataclasses.asdict(f)
                                 for k, f in sorted(self.level_failures.items())}
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ConfigRun:
        fields = dict(data)
        if data.get("gpu"):
            gpu = dict(data["gpu"])
            gpu["offenders"] = tuple(gpu.get("offenders", ()))
            gpu["gpus"] = tuple(gpu.get("gpus", ()))
            fields["gpu"] = GpuCheck(**gpu)
        if data.get("env"):
            env = dict(data["env"])
            env["ranks"] = tuple(env.get("ranks", ()))
            fields["env"] = EnvCheck(**env)
        else:
            fields["env"] = None
        fields["measurement"] = (bench.Measurement.from_json(data["measurement"])
                                 if data.get("measurement") else None)
        fields["failure"] = Failure(**data["failure"]) if data.get("failure") else None
        fields["levels"] = {int(k): bench.Measurement.from_json(m)
                            for k, m in (data.get("levels") or {}).items()}
        fields["level_failures"] = {int(k): Failure(**f)
                                    for k, f in (data.get("level_failures") or {}).items()}
        return cls(**fields)


@dataclasses.dataclass(frozen=True)
class LiveResults:
    """Both configurations of one live session, as written to reports/live/results.json."""

    profile: str
    simulated: bool
    baseline: ConfigRun
    speculative: ConfigRun
    started_at: str = ""
    finished_at: str = ""
    prompts: str = ""
    # The launched servers' GPUs (model, driver, selection) from the plan's one snapshot, or
    # why they are unknown; None when nothing was launched here.
    gpus: dict[str, Any] | None = None
    # The launch part of the timed claims' intervals (measure/drift.py); None: not known, and
    # the claims take the prior.
    coverage: drift.Coverage | None = None
    # A–B–A: the baseline's second launch, after the speculative server; `baseline` then pools
    # both launches' requests.
    baseline_after: ConfigRun | None = None
    # Set on a view of one concurrency level (at()): the level it shows. Never written.
    scope: int | None = None

    @property
    def per_level(self) -> bool:
        """Whether the figures are one level's of several, or of a level other than the single
        stream: claims then say at how many in flight."""
        return self.scope is not None or self.levels != (1,)
    # Each launched server's GPUs by configuration (which GPUs served which figure), and how
    # the two sets differ in what decides their speed (a threat to the comparison).
    gpus_by_server: dict[str, Any] | None = None
    gpu_differences: tuple[str, ...] = ()

    def run(self, config: str) -> ConfigRun:
        return self.baseline if config == "baseline" else self.speculative

    @property
    def launch_coverage(self) -> drift.Coverage:
        """The coverage the timed claims are judged with: this run's, else the prior."""
        return self.coverage if self.coverage is not None else drift.prior_coverage()

    @property
    def gate_level(self) -> int:
        return self.speculative.gate_level

    @property
    def levels(self) -> tuple[int, ...]:
        """Every concurrency level either server measured or tried, ascending."""
        found = {self.gate_level}
        for run in (self.baseline, self.speculative):
            found |= set(run.levels) | set(run.level_failures)
        return tuple(sorted(found))

    def at(self, level: int) -> LiveResults:
        """Both runs as one concurrency level saw them (ConfigRun.at)."""
        return dataclasses.replace(self, baseline=self.baseline.at(level),
                                   speculative=self.speculative.at(level), scope=level)

    def to_json(self) -> dict[str, Any]:
        return {"schema": 1, "profile": self.profile, "simulated": self.simulated,
                "started_at": self.started_at, "finished_at": self.finished_at,
                "prompts": self.prompts, "gpus": self.gpus,
                "baseline": self.baseline.to_json(), "speculative": self.speculative.to_json(),
                "coverage": self.coverage.to_json() if self.coverage else None,
                "baseline_after": self.baseline_after.to_json() if self.baseline_after
                else None, "gpus_by_server": self.gpus_by_server,
                "gpu_differences": list(self.gpu_differences)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LiveResults:
        return cls(profile=str(data["profile"]), simulated=bool(data["simulated"]),
                   baseline=ConfigRun.from_json(data["baseline"]),
                   speculative=ConfigRun.from_json(data["speculative"]),
                   started_at=str(data.get("started_at", "")),
                   finished_at=str(data.get("finished_at", "")),
                   prompts=str(data.get("prompts", "")), gpus=data.get("gpus"),
                   coverage=drift.Coverage.from_json(data["coverage"])
                   if data.get("coverage") else None,
                   baseline_after=ConfigRun.from_json(data["baseline_after"])
                   if data.get("baseline_after") else None,
                   gpus_by_server=data.get("gpus_by_server"),
                   gpu_differences=tuple(data.get("gpu_differences") or ()))

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        text = json.dumps(json_safe(self.to_json()), indent=1)
        tmp.write_text(redact_urls(text) + "\n", encoding="utf-8")  # no password of a URL
        os.replace(tmp, path)

    @classmethod
    def read(cls, path: Path) -> LiveResults:
        return cls.from_json(json.loads(path.read_text(encoding="utf-8")))


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def check_gpus(plan: ServerPlan, *, resident: Sequence[int] = ()) -> GpuCheck:
    """Other processes on the GPUs the server will use (skipped without nvidia-smi); `resident`
    are the pids of this run's other server, resident beside it by design."""
    snap = gpu.snapshot()
    if snap is None:
        return GpuCheck(False, "nvidia-smi is not available on this machine, so GPU processes "
                               "cannot be listed")
    if isinstance(plan.gpus, str):
        return GpuCheck(False, f"[server] env CUDA_VISIBLE_DEVICES = {plan.gpus!r} names GPUs "
                               "by id, not by index; set [server] gpus to the indices that "
                               "nvidia-smi lists so they can be checked")
    busy = [p for p in gpu.busy_on(snap, plan.gpus) if p.pid not in set(resident)]
    listed = {g.index for g in snap.gpus}
    missing = [i for i in plan.gpus if listed and i not in listed]
    if missing:
        return GpuCheck(False, f"GPUs {missing} of the server's set {list(plan.gpus)} are not "
                               f"on this machine (nvidia-smi lists {sorted(listed)}); fix "
                               "[server] gpus / baseline_gpus", gpus=tuple(plan.gpus))
    return GpuCheck(True, f"GPUs {list(plan.gpus)} checked",
                    tuple(dataclasses.asdict(p) for p in busy), gpus=tuple(plan.gpus))


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


@dataclasses.dataclass(frozen=True)
class _Check:
    """One interval the rule for more passes looks at, its threshold, and the claim it covers."""

    summary: Summary | None
    threshold: float | None
    what: str
    claim: drift.Claim | None = None  # None: not timed (no launch spread)


class _GateRule:
    """Another pass is worth it while an interval a claim is judged on straddles its threshold,
    and more passes can still move it off: an interval held there by the launch-to-launch
    spread alone (measure/drift.py), which passes do not narrow, is left as it is."""

    def __init__(self, thresholds: ThresholdsSection, config: Config,
                 baseline: bench.Measurement | None, coverage: drift.Coverage | None, *,
                 gate: bool = True) -> None:
        self.thresholds, self.config = thresholds, config
        self.baseline, self.coverage = baseline, coverage
        self.gate = gate  # at the gate's concurrency: baseline_tps_min is judged there only
        self.undecided: str | None = None  # why the last look stopped without deciding

    def _checks(self, m: bench.Measurement) -> list[_Check]:
        th = self.thresholds
        if self.config == "baseline":
            return [_Check(m.stat("tps"), th.baseline_tps_min if self.gate else None,
                           "baseline tok/s", "baseline")]
        checks: list[_Check] = []
        if isinstance(th.accept_len_min, (int, float)):
            checks.append(_Check(m.stat("accept_len"), float(th.accept_len_min),
                                 "accept length"))
        base_tps = self.baseline.stat("tps") if self.baseline else None
        if self.baseline is not None and m.stat("tps") and base_tps:
            # spec.breakeven and spec.speedup are one hypothesis on one interval.
            ratio = bench.speedup(m, self.baseline)
            checks.append(_Check(ratio, th.speedup_min, "speedup", "speedup"))
            if th.speedup_min != 1.0:
                checks.append(_Check(ratio, 1.0, "speedup (break-even)", "speedup"))
        return checks

    def __call__(self, m: bench.Measurement) -> str | None:
        self.undecided = None
        reasons = []
        for check in self._checks(m):
            summary, threshold = check.summary, check.threshold
            if summary is None or threshold is None:
                continue
            term = (self.coverage.term(check.claim) if self.coverage and check.claim
                    else None)
            judged = drift.widen(summary, term) if term else summary
            reason = bench.straddles(judged, threshold, check.what)
            if reason is None:
                continue
            if term is not None and drift.undecidable(summary, term, threshold):
                self.undecided = (f"more passes cannot decide it: {reason}, and the "
                                  f"launch-to-launch spread alone ({term.sd * 100:.1f} %, a "
                                  "standard deviation of the log) keeps it there")
                continue
            reasons.append(reason)
        return "; ".join(reasons) if reasons else None


def keep_going_rule(thresholds: ThresholdsSection, config: Config,
                    baseline: bench.Measurement | None,
                    coverage: drift.Coverage | None = None, *, gate: bool = True) -> _GateRule:
    """The gate's rule for another pass; with a coverage, on the intervals the claims judge.
    baseline is the baseline's measurement at the same concurrency; gate=False: a level other
    than the gate's, where baseline_tps_min is not judged."""
    return _GateRule(thresholds, config, baseline, coverage, gate=gate)


def _server_spec(info: dict[str, Any]) -> dict[str, Any]:
    return {k: info[k] for k in _SERVER_KEYS if k in info}


def run_config(plan: LivePlan, config: Config, *, baseline: ConfigRun | None = None,
               progress: Progress | None = None,
               keep_going: Callable[[bench.Measurement], str | None] | None = None,
               coverage: drift.Coverage | None = None) -> ConfigRun:
    """Launch (or attach), check, measure at every concurrency level and stop one
    configuration; errors become data.

    baseline is the baseline's run, for the speculative server's rule for more repeats at each
    level; coverage puts that rule on the intervals the claims judge (with the launch spread).
    keep_going replaces the rule at the gate's level (`specgate tune` races configurations);
    the other levels then take no extra repeats.
    """
    say = progress or (lambda _msg: None)
    planned = plan.server(config)
    if isinstance(planned, Blocked):
        return ConfigRun(config=config, failure=Failure(planned.stage, planned.message))
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
                          server_info=_server_spec(dict(handle.server_info or {})))
            fields["env"] = checked_env(planned, handle)
            stage = "measure"
            with SGLangClient(handle.url, handle.api_key,
                              timeout_s=plan.sampling.request_timeout_s) as client:
                _measure_levels(plan, config, client, handle, fields, baseline=baseline,
                                keep_going=keep_going, coverage=coverage, say=say)
            stage = "stop"
            fields["stop"] = _stop(handle)
    except SpecgateError as exc:
        if "failure" not in fields:
            fields["failure"] = Failure(stage, str(exc), _log_tail_of(exc) or _tail(handle))
    except Exception as exc:  # recorded, so every claim can say what broke
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        fields.setdefault("failure", Failure(stage, f"internal error: {detail}",
                                             _tail(handle)))
    fields.setdefault("stop", "attached: left running" if attached else "")
    return ConfigRun(**fields)


def checked_env(planned: ServerPlan, handle: ServerHandle) -> EnvCheck:
    """check_env for a planned server; a check that breaks says so instead of stopping."""
    try:
        return check_env(planned.env, handle, planned.tp)
    except Exception as exc:  # a broken check must not stop the session
        return EnvCheck(False, f"environment check failed: {exc}", dict(planned.env),
                        tp=planned.tp)


def _stopped_why(m: bench.Measurement, rule: object,
                 passes: str = "repeats") -> bench.Measurement:
    """The measurement, saying so when the gate's rule stopped because passes cannot decide."""
    if isinstance(rule, _GateRule) and rule.undecided:
        return dataclasses.replace(m, stop_reason=f"{m.repeats} {passes}: {rule.undecided}")
    return m


def _measure_levels(plan: LivePlan, config: Config, client: SGLangClient,
                    handle: ServerHandle, fields: dict[str, Any], *,
                    baseline: ConfigRun | None, keep_going: Callable[[bench.Measurement],
                                                                     str | None] | None,
                    coverage: drift.Coverage | None, say: Progress) -> None:
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
                else keep_going_rule(plan.thresholds, config, base, coverage, gate=gate)
            try:
                measured = _stopped_why(bench.measure(
                    client, plan.sampling, plan.prompts, config=config, keep_going=rule,
                    progress=say, simulated=bool(handle.simulated),
                    server_spec=fields["server_info"], concurrency=level), rule)
            except SpecgateError as exc:
                # Settle first: a server writes its access-log line for the failed request
                # after answering it, and a dying one needs a moment to exit.
                alive = _alive(handle, settle_s=1.0)
                tail = _log_tail_of(exc) or _tail(handle)
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


def _log_tail_of(exc: SpecgateError) -> str:
    return exc.log_tail if isinstance(exc, ServerError) else ""


def _stop(handle: ServerHandle) -> str:
    """Stop now (serve() would too) so the report of what was left behind is kept."""
    return handle.stop().summary()


def _tail(handle: ServerHandle | None) -> str:
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


def run_live(profile: Profile, reports_dir: Path, *,
             progress: Progress | None = None,
             levels: Collection[int] | None = None) -> LiveResults:
    """The whole live session, one server at a time; written to reports_dir/live/results.json.

    The profile is resolved once into a LivePlan; attached servers are checked before anything
    is launched, so a wrong --server-url costs seconds, not a baseline launch. levels: the
    [bench] concurrency levels to measure besides the gate's (None: all of them).
    """
    live_dir = reports_dir / "live"
    live_dir.mkdir(parents=True, exist_ok=True)
    log_file = live_dir / "progress.log"

    def say(message: str) -> None:
        message = redact_urls(message)
        line = f"{_now()} {message}"
        with open(log_file, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
        if progress is not None:
            progress(message)

    started = _now()
    planned = live_plan.resolve(profile, reports_dir, levels=levels)
    keys = launches.keys(planned)
    settings = planned.launches
    # The coverage known before this run's launches: what the rule for more passes judges on.
    before = launches.coverage(settings, launches.history(reports_dir, keys), keys,
                               baseline_launches=2 if settings.design == "aba" else 1)
    unusable = _unusable_attached(planned, say)
    after: ConfigRun | None = None
    if unusable:
        baseline, speculative = (_not_run(planned, c, unusable) for c in live_plan.CONFIGS)
    elif settings.design == "interleaved" or _launched_together(planned):
        from specgate.measure import resident

        baseline, speculative = resident.run_pair(
            planned, say, before, together=planned.parallel_launch,
            interleaved=settings.design == "interleaved")
        if settings.design != "interleaved":
            baseline = _stored(planned, reports_dir, baseline, say,
                               planned.stored if isinstance(planned.stored, str) else "")
        if settings.design == "aba":
            after = _baseline_again(planned, baseline, speculative, say, before)
    else:
        baseline, speculative = _baseline_and_speculative(planned, reports_dir, say, before)
        if settings.design == "aba":
            after = _baseline_again(planned, baseline, speculative, say, before)
    baseline, coverage = _covered(planned, reports_dir, keys, baseline, speculative, after, say)
    results = LiveResults(
        profile=planned.name,
        simulated=planned.simulated or baseline.simulated or speculative.simulated,
        baseline=baseline, speculative=speculative, started_at=started,
        finished_at=_now(), prompts=planned.prompts.label if planned.prompts else "",
        gpus=dataclasses.asdict(planned.gpus) if planned.gpus else None,
        coverage=coverage, baseline_after=after,
        gpus_by_server={c: dataclasses.asdict(f) for c, f in planned.gpu_facts.items()}
        or None, gpu_differences=planned.gpu_differences)
    results.write(live_dir / RESULTS_FILE)
    return results


def _baseline_again(plan: LivePlan, first: ConfigRun, speculative: ConfigRun, say: Progress,
                    coverage: drift.Coverage) -> ConfigRun | None:
    """A–B–A: the baseline launched again after the speculative server, measured with as many
    passes as its first launch; None when there is nothing to bracket (either run failed)."""
    if first.measurement is None or speculative.measurement is None:
        say("baseline: not launched again (design aba): "
            + ("the speculative run failed" if speculative.measurement is None
               else "the first baseline run failed"))
        return None
    passes = first.measurement.repeats
    say(f"baseline: launching again after the speculative server (design aba), {passes} passes")
    return run_config(plan, "baseline", progress=say,
                      keep_going=lambda m: (f"{m.repeats} of the first launch's {passes} passes"
                                            if m.repeats < passes else None))


def _covered(plan: LivePlan, reports_dir: Path, keys: launches.Keys, baseline: ConfigRun,
             speculative: ConfigRun, after: ConfigRun | None,
             say: Progress) -> tuple[ConfigRun, drift.Coverage]:
    """Log this run's launches, pool an A–B–A baseline's two launches, and learn the
    coverage the timed claims are judged with (this run's launches included)."""
    settings = plan.launches
    run = uuid.uuid4().hex[:16]
    runs: list[tuple[Config, ConfigRun | None]] = [
        ("baseline", baseline), ("speculative", speculative), ("baseline", after)]
    fresh = [(c, r.measurement) for c, r in runs
             if r is not None and r.measurement is not None and r.failure is None
             and not r.attached and not r.reuse.get("reused")]
    for config, measured in fresh:
        try:
            launches.record(reports_dir, keys, config, measured, design=settings.design,
                            run=run)
        except OSError as exc:
            say(f"{config}: launch not logged ({exc})")
    note, bracket, pooled = "", None, 1
    first, again = baseline.measurement, after.measurement if after else None
    if settings.design == "aba" and after is not None and first and again \
            and after.failure is None and plan.prompts is not None:
        bracket = drift.Bracket(first.stats["tps"].mean, again.stats["tps"].mean) \
            if "tps" in first.stats and "tps" in again.stats else None
        template = plan.prompts.template
        baseline = dataclasses.replace(
            baseline, measurement=launches.bracketed(first, again, plan.sampling, template),
            levels={n: launches.bracketed(m, after.levels[n], plan.sampling, template)
                    if n in after.levels else m for n, m in baseline.levels.items()})
        pooled = 2
    elif settings.design == "aba":
        why = (after.failure.text() if after is not None and after.failure is not None
               else "it was not launched")
        note = f"the baseline's second launch gave no measurement ({why}): one launch pooled"
    coverage = launches.coverage(settings, launches.history(reports_dir, keys), keys,
                                 baseline_launches=pooled, bracket=bracket, note=note)
    return baseline, coverage


def _unusable_attached(plan: LivePlan, say: Progress) -> dict[str, str]:
    """Each attached server that cannot be measured (unreachable, no /server_info, the wrong
    configuration), found before anything is launched."""
    found: dict[str, str] = {}
    for planned in (plan.baseline, plan.speculative):
        config = planned.config
        if isinstance(planned, Blocked) or planned.spec is not None:
            continue
        say(f"{config}: checking the attached server at {planned.url}")
        try:
            server.attach(planned.url, planned.api_key, config)
        except SpecgateError as exc:
            found[config] = str(exc)
            say(f"{config}: {exc}")
    return found


def _not_run(plan: LivePlan, config: Config, unusable: dict[str, str]) -> ConfigRun:
    """The run of a configuration left out because an attached server cannot be measured."""
    planned = plan.server(config)
    attached = isinstance(planned, ServerPlan) and planned.spec is None
    if config in unusable:
        message = unusable[config]
    else:
        other = next(iter(unusable))
        message = (f"not {'measured' if attached else 'launched'}: the {other} server cannot "
                   f"be used, and one configuration alone gives no verdict: {unusable[other]}")
    return ConfigRun(config=config, attached=attached,
                     url=planned.url if isinstance(planned, ServerPlan) and attached else "",
                     failure=Failure("start", message),
                     stop="attached: left running" if attached else "")


def _baseline_and_speculative(plan: LivePlan, reports_dir: Path, say: Progress,
                              coverage: drift.Coverage | None = None
                              ) -> tuple[ConfigRun, ConfigRun]:
    """Both runs: the baseline first, or a stored one (measure/reuse.py) when the plan allows it
    and the speculative server's /server_info agrees; a fresh launched baseline is stored."""
    max_age, found = plan.baseline_max_age_h, plan.stored
    stored: ConfigRun | None = None
    if isinstance(found, reuse.Stored):
        try:
            stored = ConfigRun.from_json(found.run)
            if stored.measurement is not None:
                stored = dataclasses.replace(
                    stored, measurement=bench.restated(stored.measurement, plan.sampling))
            stored = dataclasses.replace(stored, levels={
                n: bench.restated(m, plan.sampling) for n, m in stored.levels.items()})
        except (TypeError, KeyError, ValueError) as exc:
            found = (f"the stored baseline {found.path} cannot be read "
                     f"({type(exc).__name__}: {exc})")
    if isinstance(found, reuse.Stored) and stored is not None:
        say(f"baseline: reusing the one measured {found.age_h:.1f} h ago "
            f"(fingerprint {found.fingerprint}); no baseline launch")
        speculative = run_config(plan, "speculative", baseline=stored, progress=say,
                                 coverage=coverage)
        agreed, problems = reuse.recheck(stored.server_info, speculative.server_info)
        if speculative.failure is None and not problems:
            return dataclasses.replace(stored, reuse=found.note(max_age or 0.0, agreed)), \
                speculative
        failed = speculative.failure
        why_fresh = (f"the speculative server could not be rechecked (it failed during "
                     f"{failed.stage}: {failed.message})" if failed is not None
                     else "; ".join(problems))
        say(f"baseline: measuring it again: {why_fresh}")
        baseline = run_config(plan, "baseline", progress=say, coverage=coverage)
    else:
        why_fresh = found if isinstance(found, str) else ""
        baseline = run_config(plan, "baseline", progress=say, coverage=coverage)
        speculative = run_config(plan, "speculative", baseline=baseline, progress=say,
                                 coverage=coverage)
    return _stored(plan, reports_dir, baseline, say, why_fresh), speculative


def _launched_together(plan: LivePlan) -> bool:
    """[server] parallel_launch with both servers launched here (a stored baseline that may
    stand in for the launch takes the usual path: then there is one launch only)."""
    launched = all(isinstance(p, ServerPlan) and p.spec is not None
                   for p in (plan.baseline, plan.speculative))
    return plan.parallel_launch and launched and not isinstance(plan.stored, reuse.Stored)


def _stored(plan: LivePlan, reports_dir: Path, baseline: ConfigRun, say: Progress,
            why_fresh: str) -> ConfigRun:
    """A freshly measured baseline, stored for later runs when reuse is on, and saying why it
    was measured rather than reused."""
    max_age, fp = plan.baseline_max_age_h, plan.fingerprint
    if (max_age is not None and fp is not None and baseline.measurement is not None
            and baseline.failure is None):
        try:
            path = reuse.save(reports_dir, fp, baseline.to_json())
            say(f"baseline: stored as {path.name} for later runs")
        except OSError as exc:
            say(f"baseline: not stored ({exc})")
    if max_age is not None:
        baseline = dataclasses.replace(baseline, reuse={"reused": False, "why": why_fresh})
    return baseline


RUN_FILE = re.compile(r"^[0-9a-f]{32}\.(json|lock)$")
STALE_AFTER_S = 7 * 24 * 3600


def run_live_once(profile: Profile, reports_dir: Path, uid: str, *,
                  not_before: float = 0.0, progress: Progress | None = None,
                  levels: Collection[int] | None = None) -> LiveResults:
    """run_live exactly once per run id, however many processes (xdist workers) ask.

    The first caller takes a file lock and launches, measures and stops both servers inside
    it, so no server outlives the locked section; the others wait on the lock and read what it
    wrote to reports_dir/live/<uid>.json. A file written before not_before (a Unix time: when
    the asking process started) is another run's, left by a fixed --testrunuid, and is measured
    again rather than reused.
    """
    from filelock import FileLock

    live_dir = reports_dir / "live"
    live_dir.mkdir(parents=True, exist_ok=True)
    done = live_dir / f"{uid}.json"
    with FileLock(str(live_dir / f"{uid}.lock")):
        if done.exists() and done.stat().st_mtime >= not_before:
            return LiveResults.read(done)
        _remove_stale(live_dir)
        results = run_live(profile, reports_dir, progress=progress, levels=levels)
        results.write(done)
        return results


def _remove_stale(live_dir: Path) -> None:
    """Per-run files of runs long gone (a run in progress keeps its files fresh)."""
    cutoff = time.time() - STALE_AFTER_S
    for path in live_dir.iterdir():
        try:
            if RUN_FILE.match(path.name) and path.stat().st_mtime < cutoff:
                path.unlink()
        except OSError:
            pass


def server_facts(reports_dir: Path, *, since: float = 0.0) -> dict[str, Any]:
    """SGLang version, chat template, GPUs and server URLs of the live session written to
    reports_dir after `since` (a Unix time), for the verdict and the report's environment; {}
    when there was none."""
    stopped = _stop_reports(reports_dir / "live", since)
    path = reports_dir / "live" / RESULTS_FILE
    try:
        if path.stat().st_mtime < since:
            return stopped
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return stopped
    facts: dict[str, Any] = dict(stopped)
    for config in ("speculative", "baseline"):
        run = data.get(config) or {}
        info = run.get("server_info") or {}
        if info.get("version") and "sglang_version" not in facts:
            facts["sglang_version"] = str(info["version"])
        measured = run.get("measurement") or {}
        if measured.get("template") and "chat_template" not in facts:
            facts["chat_template"] = {"name": measured["template"],
                                      "source": measured.get("template_source"),
                                      "digest": measured.get("template_digest") or None}
        if run.get("url"):
            facts.setdefault("server_url", run["url"])
            facts[f"{config}_url"] = run["url"]
    if data.get("gpus"):
        facts["gpus"] = data["gpus"]
    if data.get("gpus_by_server"):
        facts["gpus_by_server"] = data["gpus_by_server"]
    if data.get("gpu_differences"):
        facts["gpu_mismatch"] = list(data["gpu_differences"])
    reuse = (data.get("baseline") or {}).get("reuse")
    if reuse:
        facts["baseline_reuse"] = reuse
    return facts


def gpu_warnings(reports_dir: Path, *, since: float = 0.0) -> list[str]:
    """One warning when the two servers ran on GPU sets that differ in what decides their
    speed: the comparison measures the GPUs as well as the drafter."""
    path = reports_dir / "live" / RESULTS_FILE
    try:
        if path.stat().st_mtime < since:
            return []
        differ = json.loads(path.read_text(encoding="utf-8")).get("gpu_differences") or []
    except (OSError, ValueError):
        return []
    return [GPU_MISMATCH_WARNING + "; ".join(str(d) for d in differ)] if differ else []


GPU_MISMATCH_WARNING = ("the baseline and the speculative server ran on GPUs that differ, so "
                        "the speed-up compares the GPUs as well as the drafter: ")


def stop_warnings(reports_dir: Path, *, since: float = 0.0) -> list[str]:
    """One warning for each launched server of this run that was not stopped cleanly."""
    stopped = _stop_reports(reports_dir / "live", since).get("servers_stopped", {})
    return [f"the {config} server was not stopped cleanly: {stop.get('summary')}"
            for config, stop in stopped.items() if stop.get("clean") is False]


def _stop_reports(live_dir: Path, since: float) -> dict[str, Any]:
    """{"servers_stopped": {config: what was stopped and how}} from the stop reports the
    launched servers left beside their logs after `since`, also when the run was interrupted."""
    stopped: dict[str, Any] = {}
    for config in ("baseline", "speculative"):
        path = server.stop_report_path(live_dir / f"{config}-server.log")
        try:
            if path.stat().st_mtime < since:
                continue
            report = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(report, dict):
            stopped[config] = {key: report.get(key) for key in
                               ("how", "clean", "summary", "exit_code", "seconds", "far_side")}
    return {"servers_stopped": stopped} if stopped else {}
