"""The live session's results as data: each server configuration's run (launch, checks,
measurement per concurrency level, stop) and both together, as written to live/results.json, and
the readers of what a session left behind. The runners (measure/live.py,
measure/server_session.py, measure/resident.py, `specgate tune`) fill them; claims, curves, the
calibration and the verdict read them."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from specgate.core import files
from specgate.core.redact import redact_urls
from specgate.io import stop_reports
from specgate.io.jsonl import json_safe
from specgate.results import bench, drift
from specgate.results.answers import AnswerEvidence
from specgate.results.deployment import Deployment, unknown

RESULTS_FILE = "results.json"
# A failure at these stages is one concurrency level's (a measurement, or its streams under
# load); at any other stage (prompts, start, stop) it stands for every level of the run.
LEVEL_STAGES = ("measure", "load")
CONFIGS = ("baseline", "speculative")

@dataclasses.dataclass(frozen=True)
class Failure:
    """Why a stage could not be done: the message and the server's last log lines."""

    stage: str
    message: str
    log_tail: str = ""
    cause: str = ""  # an unreadable input, worded as its offline readers word it (plan.Blocked)

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
    # The model names nvidia-smi gives for the server's GPUs, from the same snapshot (each
    # distinct name once; empty when there was none).
    names: tuple[str, ...] = ()


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
    # An attached server's launch as the launch log knows it (measure/launches.py
    # attached_launch): {"fingerprint", "identity"}, or {"why"} it has no identity; {} launched.
    attached_launch: dict[str, str] = dataclasses.field(default_factory=dict)
    # What the server said about its own answers outside the timed passes (spec.parity's
    # evidence); None when it was not asked (sampling at temperature > 0, a failed run).
    answers: AnswerEvidence | None = None

    @property
    def max_running(self) -> int | None:
        """The most requests the server runs at once, as its /server_info reports
        (`max_running_requests`; SGLang sets 48 for speculative decoding unless
        --max-running-requests is given); None when it does not say. Requests in flight above
        it wait in the server's queue."""
        value = self.server_info.get("max_running_requests")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return None
        return value

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
        out["answers"] = self.answers.to_json() if self.answers is not None else None
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ConfigRun:
        fields = dict(data)
        if data.get("gpu"):
            gpu = dict(data["gpu"])
            gpu["offenders"] = tuple(gpu.get("offenders", ()))
            gpu["gpus"] = tuple(gpu.get("gpus", ()))
            gpu["names"] = tuple(gpu.get("names", ()))
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
        fields["answers"] = (AnswerEvidence.from_json(data["answers"]) if data.get("answers")
                             else None)
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
    # The launch part of the timed claims' intervals (results/drift.py); None: not known, and
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
    def deployment(self) -> Deployment:
        """The deployment's class this run's baseline gave (results/deployment.py)."""
        found = self.coverage.deployment if self.coverage is not None else None
        return found if found is not None else unknown("not classified: these results record "
                                                       "no class")

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



def server_facts(reports_dir: Path, *, since: float = 0.0) -> dict[str, Any]:
    """SGLang version, chat template, GPUs and server URLs of the live session written to
    reports_dir after `since` (a Unix time), for the verdict and the report's environment; {}
    when there was none."""
    stopped = _stop_reports(reports_dir / "live", since)
    data = files.json_object_since(reports_dir / "live" / RESULTS_FILE, since,
                                   limit=files.LOG_BYTES)
    if data is None:
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
    found = (data.get("coverage") or {}).get("deployment")
    if isinstance(found, dict):
        facts["deployment"] = found
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
    for config in CONFIGS:
        report = stop_reports.read(live_dir / f"{config}-server.log", since=since)
        if report is not None:
            stopped[config] = {key: report.get(key) for key in
                               ("how", "clean", "summary", "exit_code", "seconds", "far_side")}
    return {"servers_stopped": stopped} if stopped else {}
