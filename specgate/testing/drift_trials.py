"""Launch pairs on the simulator's model, in-process: the gate's measurement, sequential passes,
launch log and spec.speedup judged on seeded launches whose speed factors are known, so the
harness can be held to a known true speed-up however the launches fall."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from specgate.claims import spec as spec_claims
from specgate.claims.result import ClaimResult, Status
from specgate.core.profile import Profile, parse_profile
from specgate.io.launch_log import LaunchRecord
from specgate.measure import gate, launches, passes
from specgate.results import bench, drift
from specgate.results import live as results
from specgate.results.deployment import Deployment
from specgate.results.prompts import PromptSet, load_builtin, select, template_named
from specgate.testing.simulator import model
from specgate.testing.simulator.offline import OfflineClient

DECODE_MS = 2.0
DRAFT_STEP_MS = 0.3
# One draft step accepted every other cycle: τ = 1.5 tokens per verify, exactly over two cycles.
ACCEPTANCE = (0.5,)
KEYS = launches.Keys(baseline="trial-baseline", speculative="trial-speculative")


def deployment(true_speedup: float) -> tuple[model.SimParams, model.SimParams]:
    """A baseline and a speculative simulator configuration whose true speed-up is the one
    given: decode 2 ms a token, and a verify cycle of τ × 2 ms ÷ true_speedup (the timing knobs
    verify_ms and draft_step_ms), so speculative tok/s = τ / cycle = true_speedup × 500."""
    tau = model.tau_of(ACCEPTANCE)
    cycle = tau * DECODE_MS / true_speedup
    timing = model.Timing(decode_ms=DECODE_MS, verify_base_ms=cycle - DRAFT_STEP_MS,
                          verify_ms_per_draft_token=0.0, draft_step_ms=DRAFT_STEP_MS,
                          prefill_base_ms=1.0, prefill_ms_per_token=0.01, first_merge=1)
    drafter = model.Drafter(acceptance=ACCEPTANCE)
    base = model.SimParams(timing=timing, drafter=drafter, speculative=False)
    spec = model.SimParams(timing=timing, drafter=drafter, speculative=True, num_steps=1,
                           eagle_topk=1, num_draft_tokens=2)
    return base, spec


def prompts(per_category: int = 2) -> PromptSet:
    return PromptSet.rendered(select(load_builtin(), None, per_category),
                              template_named("plain", "trial"))


def profile(design: drift.Design = "ab", *, repeats: int = 2, max_repeats: int = 3,
            max_new_tokens: int = 48, min_launches: int = 5,
            spread: float | None = None) -> Profile:
    bench_section: dict[str, object] = {
        "repeats": repeats, "max_repeats": max_repeats, "max_new_tokens": max_new_tokens,
        "warmup": 0, "design": design, "launch_spread_min_launches": min_launches}
    if spread is not None:
        bench_section["launch_spread"] = spread
    return parse_profile({"name": "launch-drift", "bench": bench_section,
                          "thresholds": {"speedup_min": 1.0}})


@dataclasses.dataclass(frozen=True)
class Trial:
    """One seeded run: the launches' true speed factors and how spec.speedup ended."""

    seed: str
    speeds: tuple[float, ...]  # baseline, speculative[, baseline again]
    result: ClaimResult
    coverage: drift.Coverage

    @property
    def passed(self) -> bool:
        return self.result.status is Status.PASSED


class Trials:
    """Seeded launch pairs (or A–B–A triples) of one deployment, sharing one launch log as
    successive probes of a deployment do."""

    def __init__(self, true_speedup: float, *, spread: float, profile_: Profile | None = None,
                 noise: float = 0.03, prompt_set: PromptSet | None = None,
                 deployment_: Deployment | None = None,
                 spec_spread: float | None = None) -> None:
        self.base, self.spec = deployment(true_speedup)
        # σ of ln speed between launches: the baseline's, and the speculative server's (the
        # baseline's unless given)
        self.spread = spread
        self.spec_spread = spread if spec_spread is None else spec_spread
        self.profile = profile_ or profile()
        self.noise = noise
        self.prompts = prompt_set or prompts()
        self.sampling = bench.Sampling.of(self.profile.bench)
        self.settings = drift.Settings.of(self.profile.bench)
        self.records: list[LaunchRecord] = []
        # The class the deployment's first probe found (None: not classified, the host-bound
        # priors), as live.classify gives it once the baseline is measured.
        self.deployment = deployment_

    def _measure(self, params: model.SimParams, speed: float, seed: str, config: bench.Config,
                 rule: gate.Rule | None) -> bench.Measurement:
        client = OfflineClient(model.at_speed(params, speed), noise=self.noise, seed=seed)
        return passes.measure(client, self.sampling, self.prompts, config=config,
                              keep_going=rule, simulated=True)

    def run(self, seed: str) -> Trial:
        """One probe: each launch's speed drawn as the simulator draws it (launch k of the
        seed), measured and judged as a live session would be."""
        design = self.settings.design
        aba = design == "aba"
        roles = ("baseline", "speculative", "baseline") if aba else ("baseline", "speculative")
        speeds = tuple(model.launch_speed(self.spec_spread if role == "speculative"
                                          else self.spread, f"{seed}/{k}/{role}")
                       for k, role in enumerate(roles))
        before = launches.coverage(self.settings, self.records, KEYS,
                                   baseline_launches=2 if aba else 1,
                                   deployment=self.deployment)
        th = self.profile.thresholds
        base = self._measure(self.base, speeds[0], f"{seed}/b", "baseline",
                             gate.keep_going_rule(th, "baseline", None, before))
        spec = self._measure(self.spec, speeds[1], f"{seed}/s", "speculative",
                             gate.keep_going_rule(th, "speculative", base, before))
        measured: list[tuple[bench.Config, bench.Measurement]] = [("baseline", base),
                                                                  ("speculative", spec)]
        bracket = None
        if aba:
            again = self._measure(self.base, speeds[2], f"{seed}/a", "baseline",
                                  lambda m: "more" if m.repeats < base.repeats else None)
            measured.append(("baseline", again))
            bracket = drift.Bracket(base.stats["tps"].mean, again.stats["tps"].mean)
            base = launches.bracketed(base, again, self.sampling, self.prompts.template)
        for config, m in measured:
            found = launches.entry(KEYS, config, m, design=design, run=seed)
            if found is not None:
                self.records.append(found)
        coverage = launches.coverage(self.settings, self.records, KEYS,
                                     baseline_launches=2 if aba else 1, bracket=bracket,
                                     deployment=self.deployment)
        session = results.LiveResults(
            "launch-drift", True, results.ConfigRun("baseline", measurement=base),
            results.ConfigRun("speculative", measurement=spec,
                              server_info={"speculative_algorithm": "EAGLE3"}),
            coverage=coverage)
        judged = spec_claims.speedup_claim(self.profile, session, attach=False)
        return Trial(seed, speeds, judged, coverage)


def pass_rate(trials: Sequence[Trial]) -> float:
    return sum(t.passed for t in trials) / len(trials) if trials else math.nan


def nominal_false_pass(profile_: Profile) -> float:
    """The most a one-sided look past the threshold may pass a true speed-up of exactly 1:
    half the error of the interval's overall confidence."""
    return (1.0 - profile_.bench.confidence) / 2.0
