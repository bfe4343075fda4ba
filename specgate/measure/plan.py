"""The live plan: a profile resolved once into what a live session launches, sends and judges."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from pathlib import Path

from specgate.core.errors import CheckpointError, SpecgateError
from specgate.core.profile import Profile, ThresholdsSection
from specgate.core.simulated import SGLANG_VERSION
from specgate.measure import reuse
from specgate.results import drift, prompts
from specgate.results.bench import Sampling
from specgate.results.prompts import PromptSet
from specgate.serving import gpu, launch
from specgate.serving.gpu import GpuFacts
from specgate.serving.launch import Config, ServerPlan

CONFIGS: tuple[Config, Config] = ("baseline", "speculative")


@dataclasses.dataclass(frozen=True)
class Blocked:
    """Why one server of the plan cannot be run: the stage it stops at, and the message."""

    config: Config
    stage: str
    message: str
    # An unreadable input (an empty drafter folder) in the words every reader of it uses, so the
    # claims it keeps from running share one cause with the offline claims that read it.
    cause: str = ""


@dataclasses.dataclass(frozen=True)
class LivePlan:
    """Everything a live session needs, resolved from the profile in one pass.

    Its parts go down separately: the prompt set and sampling to results/bench.py, each
    ServerPlan to serving/server.py, the plan itself to measure/reuse.py for the fingerprint.
    """

    name: str
    simulated: bool
    target: Path | None  # the target folder as this machine sees it
    prompts: PromptSet | None  # None when they cannot be loaded (no_prompts says why)
    baseline: ServerPlan | Blocked
    speculative: ServerPlan | Blocked
    # Each launched server's GPUs (model, driver, clocks), from one snapshot taken at planning.
    gpu_facts: Mapping[str, GpuFacts]
    sglang: str  # the SGLang version known before a launch
    sampling: Sampling
    thresholds: ThresholdsSection
    baseline_max_age_h: float | None  # [bench] baseline_max_age_h: reuse is on when set
    no_prompts: str = ""
    fingerprint: reuse.Fingerprint | None = None  # of the launched baseline, when reuse is on
    # A stored baseline that may stand in for the launch (still to be rechecked against the
    # speculative server), or why the baseline is launched; "" when reuse is off.
    stored: reuse.Stored | str = ""
    # [bench] design and launch_spread: how the servers are launched, and the launch-to-launch
    # spread the timed claims' intervals add (results/drift.py).
    launches: drift.Settings = dataclasses.field(default_factory=drift.Settings)
    # [bench] concurrency, ascending, and the level the gate decides at (one of them).
    levels: tuple[int, ...] = (1,)
    gate_level: int = 1

    @property
    def measured_levels(self) -> tuple[int, ...]:
        """The order each server measures its levels in: the gate's first, so a level that
        hurts the server cannot cost the gate its figures, then the others ascending."""
        return (self.gate_level, *(n for n in self.levels if n != self.gate_level))
    # [server] parallel_launch: both servers started at once, their loads overlapping.
    parallel_launch: bool = False
    # How the two servers' GPU sets differ in what decides their speed (serving/gpu.py
    # differences): a threat to the comparison, said in the verdict and the timed claims.
    gpu_differences: tuple[str, ...] = ()

    @property
    def gpus(self) -> GpuFacts | None:
        """The GPUs of the first launched server (the baseline's when it is launched)."""
        return next(iter(self.gpu_facts.values()), None)

    def gpus_of(self, config: Config) -> GpuFacts | None:
        return self.gpu_facts.get(config)

    def server(self, config: Config) -> ServerPlan | Blocked:
        return self.baseline if config == "baseline" else self.speculative

    def with_server(self, planned: ServerPlan | Blocked) -> LivePlan:
        """The plan with one server's part replaced (`specgate tune` launches other chains)."""
        if planned.config == "baseline":
            return dataclasses.replace(self, baseline=planned)
        return dataclasses.replace(self, speculative=planned)


def resolve(profile: Profile, reports_dir: Path, *,
            levels: Collection[int] | None = None) -> LivePlan:
    """The profile's live plan; server logs go to reports_dir/live/, stored baselines are looked
    up in reports_dir/baselines/. levels narrows [bench] concurrency to the levels a run's
    claims ask for (the gate's is always measured); None: every level."""
    try:
        settings: launch.LaunchSettings | str = launch.LaunchSettings.of(profile)
    except SpecgateError as exc:
        settings = str(exc)
    baseline, speculative = (server_plan(settings, config, reports_dir / "live")
                             for config in CONFIGS)
    if isinstance(settings, str):  # neither server can start: read what the plan still needs
        target, simulated = profile.target_path, profile.is_simulated
    else:
        target, simulated = settings.local_target, settings.simulated
    prompt_set: PromptSet | None = None
    no_prompts = ""
    try:
        source = None if profile.bench.prompts == prompts.BUILTIN else profile.resolve(
            profile.bench.prompts)
        prompt_set = prompts.load_for(profile.bench, source=source, target=target)
    except SpecgateError as exc:
        no_prompts = str(exc)
    launched = [s for s in (baseline, speculative) if isinstance(s, ServerPlan) and s.spec]
    facts = _gpu_facts(launched)
    differ: list[str] = []
    if len(launched) == 2 and launched[0].gpus != launched[1].gpus:
        differ = gpu.differences(facts["baseline"], facts["speculative"])
    plan = LivePlan(
        name=profile.name, simulated=simulated, target=target, prompts=prompt_set,
        no_prompts=no_prompts, baseline=baseline, speculative=speculative,
        gpu_facts=facts, sglang=_sglang_version(simulated, baseline),
        sampling=Sampling.of(profile.bench), thresholds=profile.thresholds,
        baseline_max_age_h=profile.bench.baseline_max_age_h,
        launches=drift.Settings.of(profile.bench),
        levels=tuple(sorted({*(n for n in profile.bench.concurrency
                                if levels is None or n in levels),
                              profile.gate_concurrency})),
        gate_level=profile.gate_concurrency,
        parallel_launch=profile.server.parallel_launch, gpu_differences=tuple(differ))
    if plan.baseline_max_age_h is None or not isinstance(baseline, ServerPlan) \
            or prompt_set is None:
        return plan
    if baseline.spec is None:
        return dataclasses.replace(plan, stored="the baseline server is attached; only a "
                                                "baseline specgate launches is stored and reused")
    try:
        fp = reuse.fingerprint(plan)
    except Exception as exc:  # no fingerprint: measure as always, and store nothing
        return dataclasses.replace(plan, stored=f"no fingerprint ({type(exc).__name__}: {exc})")
    return dataclasses.replace(plan, fingerprint=fp,
                               stored=reuse.find(reports_dir, fp, plan.baseline_max_age_h))


def server_plan(settings: launch.LaunchSettings | str, config: Config,
                log_dir: Path) -> ServerPlan | Blocked:
    """One server's plan, or why it cannot be started (a profile error found while planning):
    settings are the profile's launch settings, or why they could not be read."""
    if isinstance(settings, str):
        return Blocked(config, "start", settings)
    try:
        return launch.plan_server(settings, config, log_dir / f"{config}-server.log")
    except CheckpointError as exc:
        return Blocked(config, "start", str(exc), cause=str(exc))
    except SpecgateError as exc:
        return Blocked(config, "start", str(exc))


def _gpu_facts(launched: list[ServerPlan]) -> dict[str, GpuFacts]:
    """Each launched server's GPU facts, by configuration, from one snapshot."""
    try:
        found = gpu.facts_of([p.gpus for p in launched])
    except Exception as exc:  # a failing nvidia-smi makes the facts say so, not the plan fail
        found = [GpuFacts(p.gpus, unknown=f"{type(exc).__name__}: {exc}") for p in launched]
    return {p.config: f for p, f in zip(launched, found, strict=True)}


def _sglang_version(simulated: bool, baseline: ServerPlan | Blocked) -> str:
    """The SGLang version known before a launch (a local launcher running this interpreter
    knows it)."""
    if simulated:
        return f"simulator of {SGLANG_VERSION}"
    spec = baseline.spec if isinstance(baseline, ServerPlan) else None
    known = spec.launcher.sglang_version(spec.argv[:spec.prefix_len]) if spec else None
    return known or "unknown before the launch (rechecked against /server_info)"
