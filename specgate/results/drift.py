"""Launch-to-launch spread: how much a server's speed moves between launches, learned from earlier
launches (or a prior from real SGLang), and added to the timed claims' intervals.

Every interval over prompts and passes covers one launch of each server. The same SGLang
configuration started again runs at another speed (on one H200 the baseline of a 4-layer target
measured 667 to 868 tok/s over five starts), and the speed-up compares two launches. A launch
multiplies a server's decode speed by a factor exp(u), u ~ N(0, σ²), so on the log scale

    ln R̂ = ln R + u_spec − ū_base + (noise within the launches),

and the launch part adds σ_spec² + σ_base² / m to the variance of ln R̂, where m is the number of
baseline launches pooled (2 in an A–B–A run). docs/claims.md derives the interval from it.
"""

from __future__ import annotations

import dataclasses
import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from specgate.core.profile import BenchSection
from specgate.io.launch_log import LaunchRecord
from specgate.results.deployment import Deployment, Kind, kind_of
from specgate.results.stats import Summary, percent, t_quantile, variance_ratio

Source = Literal["learned", "updated", "prior", "profile"]
Design = Literal["ab", "aba", "interleaved"]
# The figures a timed claim judges: each server's alone, or the speed-up between them.
Claim = Literal["speedup", "baseline", "speculative"]
# The figure whose spread each server's launches are learned from: the baseline's decode tok/s,
# and the speculative server's verify cycle (its accept length does not move between launches
# under greedy decoding, so the cycle carries all of its launch spread).
FIGURE: dict[str, str] = {"baseline": "tps", "speculative": "cycle_ms"}
SPOKEN: dict[str, str] = {"tps": "baseline tok/s", "cycle_ms": "speculative cycle"}
DESIGN_SPOKEN: dict[str, str] = {"ab": "A–B (baseline, then speculative)",
                                 "aba": "A–B–A (baseline launched again after the speculative "
                                        "server)",
                                 "interleaved": "interleaved (both servers resident, their "
                                                "requests alternating)"}

# The priors: launches of one configuration each on real SGLang 0.5.17, one H200, decode tok/s
# of the baseline and verify cycle (ms) of the speculative server, as committed under
# benchmarks/results/ (the folder named beside each group; tests/results/test_prior_records.py reads
# every launch from there again). A group is one configuration launched several times; a prior
# is the pooled standard deviation of ln(figure) within groups. There is
# one prior per class of deployment (results/deployment.py): the class says how much of the
# GPU's memory bandwidth the single-stream decode uses, and a decode bound by the GPU's memory
# moves far less between launches than one bound by the host.
#
# Targets whose decode is not bound by the GPU's memory: host-bound ones (each used 4 % of the
# H200's memory bandwidth or less) and one between the classes (28 %), which moved as much as the
# host-bound ones (12.3 % over 5 launches): both classes take this prior.
PRIOR_LAUNCHES: dict[str, dict[str, tuple[float, ...]]] = {
    "tps": {
        # 2026-11-30-h200-tiny-llama-4l: probes of drafters 129k (twice), 507k-b, the tune of
        # 507k-a and the no-deep-gemm probe, each with its own baseline launch
        "tiny-llama-4l, CUDA graphs": (666.88, 677.74, 868.31, 822.14, 840.92),
        # 2026-11-30-h200-tiny-llama-4l-eager: the suite's launch, attach, port-taken and
        # wrong-flag runs and the 43k probe
        "tiny-llama-4l, eager": (277.05, 252.82, 243.25, 205.10, 197.90),
        # 2026-12-01-h200-tiny-llama-64l: the five probes' baselines
        "tiny-llama-64l, CUDA graphs": (506.51, 510.32, 472.21, 505.07, 514.02),
        # 2026-12-01-h200-smollm2-135m-instruct/launch-variance: baseline-1, -2 and -3, started
        # with the same flags and measured by the same 14 prompts
        "SmolLM2-135M-Instruct, 14 prompts": (623.15, 542.38, 668.67),
        # the same deployment's probes (42 prompts): probe-trained-1's baseline launch, and
        # probe-trained-2's (baseline-1's launch)
        "SmolLM2-135M-Instruct, 42 prompts": (598.00, 565.70),
        # 2026-12-03-h200-launch-spread/random-weights, beside the GPU-bound target's
        # random-weight launches below: 4 launches, the same 16 greedy requests of 128 tokens each
        "SmolLM2-135M-Instruct, 16 requests": (716.58, 592.21, 699.28, 802.84),
        # 2026-12-03-h200-launch-spread/launch-records: 5 launches each, 16 greedy requests of
        # 128 tokens, median tok/s per launch
        "SmolLM2-135M-Instruct, launch records": (742.985, 590.621, 758.408, 737.958, 533.553),
        # between the classes: Llama-3.2-1B shapes, dummy weights (1.95 GB a step, 28 % of the
        # memory bandwidth)
        "Llama-3.2-1B shapes, dummy weights": (836.688, 692.887, 679.466, 868.598, 674.675),
    },
    "cycle_ms": {
        # the same drafter files served twice at one chain
        "tiny-llama-4l, 129k drafter, s5-k1-d6": (3.4358, 4.335),
        "tiny-llama-4l, 507k-a drafter, s6-k1-d7": (3.2847, 4.014),
        "tiny-llama-64l, 1291k drafter, s10-k1-d11": (3.789, 4.4368),
        # 2026-12-01-h200-smollm2-135m-instruct: probe-trained-1 and -2, the trained drafter
        # at s3-k1-d4
        "SmolLM2-135M-Instruct, trained drafter, s3-k1-d4": (4.1208, 4.2827),
    },
}
# GPU-bound targets: Llama-3-8B layer shapes, single-stream decode reading about 14 GB of weights
# a step (62 % of an H200's memory bandwidth, 71 % of an H100's), each launch measured by the
# same 16 greedy requests of 128 tokens; by the GPU model they ran on (as nvidia-smi names it),
# a group being one machine's launches of one build.
GPU_BOUND_BY_GPU: dict[str, dict[str, dict[str, tuple[float, ...]]]] = {
    "H200": {
        "tps": {
            # 2026-12-03-h200-llama-shapes-dummy/launch-records: dummy bf16 weights (13.97 GB a
            # step), 5 launches, median tok/s per launch
            "Llama-3-8B shapes, dummy weights": (212.051, 211.909, 210.42, 212.512, 212.037),
            # 2026-12-03-h200-launch-spread/random-weights: random real bf16 weights of
            # Llama-3-8B's shapes (14 GB), 4 launches, median tok/s per launch
            "Llama-3-8B shapes, random weights": (207.01, 209.64, 206.8, 210.43),
        },
        "cycle_ms": {
            # 2026-12-03-h200-launch-spread/verify-cycle: benchmarks/real_sglang/gpu_bound.py's
            # target (random bf16 weights of Llama-3-8B's shapes, 14.36 GB a step) with its
            # EAGLE-3 drafter at s3-k1-d4, 3 launches; the median over 16 requests of the
            # server's e2e_latency per verify pass
            "Llama-3-8B shapes, gpu_bound.py drafter, s3-k1-d4": (7.1658, 7.2782, 7.495),
        },
    },
    "H100": {
        "tps": {
            # 2026-12-07-h100-llama8b-shapes-launches/alternating-6-and-5: gpu_bound.py's target
            # served alone, 6 launches in turn with the drafter's server
            "Llama-3-8B shapes, gpu_bound.py target, alternating": (
                168.974, 168.865, 168.953, 168.585, 168.799, 168.561),
        },
        "cycle_ms": {
            # the same run's 5 launches of the target with its drafter at s3-k1-d4
            "Llama-3-8B shapes, gpu_bound.py drafter, s3-k1-d4, alternating": (
                8.4641, 8.4176, 8.4236, 8.4027, 8.555),
            # 2026-12-07-h100-llama8b-shapes-launches/eagle3-3-launches: another H100 machine,
            # 3 launches of the same server
            "Llama-3-8B shapes, gpu_bound.py drafter, s3-k1-d4, 3 launches": (
                8.6583, 9.105, 9.2237),
        },
    },
}
# Every GPU kind's groups in one table, each named with its GPU: the pooled GPU-bound prior.
GPU_BOUND_LAUNCHES: dict[str, dict[str, tuple[float, ...]]] = {
    figure: {f"{gpu}: {group}": values
             for gpu, figures in GPU_BOUND_BY_GPU.items()
             for group, values in figures.get(figure, {}).items()}
    for figure in ("tps", "cycle_ms")}
HOST_BOUND_SOURCE = "real SGLang on an H200"
# The GPU kinds' spreads of a figure are taken apart when the F-test of the widest against the
# narrowest kind's pooled spread (two-sided) rejects equal spreads at this level; otherwise
# they are pooled (docs/claims.md).
SPLIT_P = 0.05
# The prior each class of deployment takes, by figure: GPU-bound deployments their own; between,
# host-bound and unknown ones the pool above (a deployment of unknown class takes the wide prior,
# the safe side).
Prior = Literal["GPU-bound", "host-bound"]
PRIORS: dict[Prior, dict[str, dict[str, tuple[float, ...]]]] = {
    "GPU-bound": GPU_BOUND_LAUNCHES, "host-bound": PRIOR_LAUNCHES}


def gpu_kind(gpu: str) -> str | None:
    """The GPU model of the GPU-bound records an nvidia-smi name is ("NVIDIA H100 80GB HBM3":
    H100), None when no records are of it."""
    for known in GPU_BOUND_BY_GPU:
        if re.search(rf"\b{known}\b", gpu.upper()):
            return known
    return None


@dataclasses.dataclass(frozen=True)
class KindTest:
    """The F-test of one figure's GPU-bound spread between GPU kinds: the widest kind's pooled
    variance over the narrowest's."""

    figure: str
    wide: str
    narrow: str
    sd_wide: float
    sd_narrow: float
    df_wide: int
    df_narrow: int
    f: float
    p: float

    @property
    def split(self) -> bool:
        return self.p < SPLIT_P

    def describe(self) -> str:
        said = "differ" if self.split else "do not differ"
        return (f"{SPOKEN.get(self.figure, self.figure)}: {self.wide} {self.sd_wide * 100:.2f} % "
                f"({self.df_wide} df) against {self.narrow} {self.sd_narrow * 100:.2f} % "
                f"({self.df_narrow} df), F = {self.f:.2f}, p = {self.p:.3f}: they {said} at "
                f"{SPLIT_P:g}")


def kind_test(figure: str) -> KindTest | None:
    """The F-test of the GPU kinds' spreads of a figure; None with fewer than two kinds
    measured over launches."""
    spreads = []
    for gpu, figures in GPU_BOUND_BY_GPU.items():
        sd, df, _, _ = pooled_sd(figures.get(figure, {}).values())
        if df:
            spreads.append((sd, df, gpu))
    if len(spreads) < 2:
        return None
    wide, narrow = max(spreads), min(spreads)
    f, p = variance_ratio(wide[0] ** 2, wide[1], narrow[0] ** 2, narrow[1])
    return KindTest(figure, wide[2], narrow[2], wide[0], narrow[0], wide[1], narrow[1], f, p)


def gpu_bound_groups(figure: str, gpu: str = "") -> tuple[dict[str, tuple[float, ...]], str,
                                                          bool]:
    """The GPU-bound launch groups a deployment on this GPU (its nvidia-smi name) takes its prior
    from, the GPU kind they are of ("" for every kind's, pooled), and whether they stand in for
    a kind not measured: where the kinds differ, such a GPU takes the widest kind's, the safe
    side."""
    test = kind_test(figure)
    if test is None or not test.split:
        return GPU_BOUND_LAUNCHES.get(figure, {}), "", False
    on = gpu_kind(gpu)
    if on is not None and GPU_BOUND_BY_GPU[on].get(figure):
        return GPU_BOUND_BY_GPU[on][figure], on, False
    return GPU_BOUND_BY_GPU[test.wide][figure], test.wide, True


def prior_source(prior: Prior, gpu: str = "") -> str:
    """Where a prior's launches ran, as a spread's description names it."""
    if prior == "host-bound":
        return HOST_BOUND_SOURCE
    kinds = [gpu] if gpu else list(GPU_BOUND_BY_GPU)
    return f"real SGLang on {' and '.join(kinds)} GPUs"


def prior_of(figure: str, kind: Kind) -> Prior:
    """The prior a class of deployment takes for a figure: the GPU-bound one only where there
    are GPU-bound launches of that figure."""
    if kind == "GPU-bound" and GPU_BOUND_LAUNCHES.get(figure):
        return "GPU-bound"
    return "host-bound"


@dataclasses.dataclass(frozen=True)
class Settings:
    """[bench]'s launch design and spread, resolved."""

    design: Design = "ab"
    spread: float | None = None  # set in the profile; None: learned (the prior until then)
    min_launches: int = 5

    @classmethod
    def of(cls, section: BenchSection) -> Settings:
        spread = section.launch_spread
        return cls(design=section.design,
                   spread=None if isinstance(spread, str) else float(spread),
                   min_launches=section.launch_spread_min_launches)


@dataclasses.dataclass(frozen=True)
class Spread:
    """How much one figure of one server moves between launches: the standard deviation of its
    natural log, with the degrees of freedom of that estimate and where it comes from."""

    figure: str  # tps | cycle_ms
    sd: float  # of ln(figure) between launches: ≈ the coefficient of variation
    df: float  # inf for a value set in the profile
    source: Source
    launches: int = 0  # this deployment's launches it was learned from
    configurations: int = 0  # the configurations (groups) those launches were of
    prior_launches: int = 0  # launches behind the prior, where the prior takes part
    prior: Prior = "host-bound"  # whose launches the prior is pooled from
    gpu: str = ""  # the GPU kind of a GPU-bound prior's launches; "": every kind's, pooled
    stand_in: bool = False  # the kind's launches stand in for a GPU of a kind not measured
    # The class of deployment the prior was chosen for (a GPU-bound deployment's verify cycle
    # takes the host-bound prior: no GPU-bound launches of it yet).
    kind: Kind = "unknown"

    def describe(self) -> str:
        value = f"{SPOKEN.get(self.figure, self.figure)} {self.sd * 100:.1f} %"
        of = (f"{self.launches} launches of {self.configurations} configurations"
              if self.configurations > 1 else f"{self.launches} launches")
        prior_of = f"the prior of {self.prior} targets ({self.prior_launches} launches of " \
                   f"{prior_source(self.prior, self.gpu)}, docs/claims.md"
        if self.stand_in:
            prior_of += "; the widest of the GPU kinds measured, none of this GPU's kind"
        if self.kind == "GPU-bound" and self.prior != "GPU-bound":
            prior_of += f"; no {SPOKEN.get(self.figure, self.figure)} of a GPU-bound target " \
                        "measured over launches yet"
        if self.source == "learned":
            return f"{value}, learned from {of} of this deployment"
        if self.source == "updated":
            return f"{value}, {prior_of}) updated with {of} of this deployment"
        if self.source == "profile":
            return f"{value}, set in the profile ([bench] launch_spread)"
        return f"{value}, {prior_of}; none of this deployment's yet)"

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["df"] = None if math.isinf(self.df) else self.df
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Spread:
        df = data.get("df")
        return cls(figure=str(data["figure"]), sd=float(data["sd"]),
                   df=math.inf if df is None else float(df),
                   source=_source(str(data["source"])), launches=int(data.get("launches", 0)),
                   configurations=int(data.get("configurations", 0)),
                   prior_launches=int(data.get("prior_launches", 0)),
                   prior=_prior(str(data.get("prior", "host-bound"))),
                   gpu=str(data.get("gpu", "")), stand_in=bool(data.get("stand_in", False)),
                   kind=kind_of(str(data.get("kind", "unknown"))))


def _design(value: str) -> Design:
    if value == "aba":
        return "aba"
    return "interleaved" if value == "interleaved" else "ab"


def _prior(value: str) -> Prior:
    if value == "GPU-bound":
        return "GPU-bound"
    if value == "host-bound":
        return "host-bound"
    raise ValueError(f"unknown prior {value!r}")


def _source(value: str) -> Source:
    for known in ("learned", "updated", "prior", "profile"):
        if value == known:
            return known
    raise ValueError(f"unknown spread source {value!r}")


def pooled_sd(groups: Iterable[Sequence[float]]) -> tuple[float, int, int, int]:
    """(sd, df, launches, groups) of the logs of values within groups (one-way pooled variance);
    groups of one value add nothing."""
    squares, df, launches, used = 0.0, 0, 0, 0
    for values in groups:
        if len(values) < 2 or any(v <= 0 for v in values):
            continue
        logs = [math.log(v) for v in values]
        mean = math.fsum(logs) / len(logs)
        squares += math.fsum((x - mean) ** 2 for x in logs)
        df += len(logs) - 1
        launches += len(logs)
        used += 1
    return (math.sqrt(squares / df) if df else math.nan), df, launches, used


def prior(figure: str, kind: Kind = "unknown", gpu: str = "") -> Spread:
    """The prior spread of a figure for a class of deployment (prior_of) on a GPU (its
    nvidia-smi name), pooled from its launches."""
    which = prior_of(figure, kind)
    groups, on, stand_in = (gpu_bound_groups(figure, gpu) if which == "GPU-bound"
                            else (PRIOR_LAUNCHES[figure], "", False))
    sd, df, launches, _ = pooled_sd(groups.values())
    return Spread(figure, sd, float(df), "prior", prior_launches=launches, prior=which,
                  gpu=on, stand_in=stand_in, kind=kind)


def learn(records: Sequence[LaunchRecord], *, config: str, fingerprint: str | None,
          deployment: str | None, min_launches: int, kind: Kind = "unknown",
          gpu: str = "") -> Spread:
    """The spread of a configuration's figure from the logged launches.

    The baseline's launches are those of its fingerprint. The speculative server's are those of
    every speculative configuration on the same deployment (other drafters, other chains),
    grouped by configuration: within-group spread only, so a faster drafter is not spread.
    With fewer than `min_launches − 1` degrees of freedom the prior is updated with what there
    is (its variance and this deployment's, weighted by degrees of freedom); from there on the
    deployment's own launches decide alone. A learned spread is never below the launches' own
    noise within a launch (their mean standard error): below that it is luck.
    """
    figure = FIGURE[config]
    start = prior(figure, kind, gpu)
    if fingerprint is None:
        return start
    groups: dict[str, list[float]] = {}
    within: list[float] = []
    for r in records:
        if r.config != config or figure not in r.figures:
            continue
        same = r.fingerprint == fingerprint if config == "baseline" or not deployment \
            else r.deployment == deployment
        if not same:
            continue
        log_value, se = r.figures[figure]
        groups.setdefault(r.fingerprint, []).append(math.exp(log_value))
        within.append(se)
    sd, df, launches, used = pooled_sd(groups.values())
    if df == 0:
        return start
    floor = statistics.fmean(within) if within else 0.0
    if df >= max(min_launches - 1, 1):
        return Spread(figure, max(sd, floor), float(df), "learned", launches, used,
                      prior=start.prior, gpu=start.gpu, stand_in=start.stand_in, kind=kind)
    mixed = math.sqrt((start.df * start.sd**2 + df * sd**2) / (start.df + df))
    return Spread(figure, max(mixed, floor), start.df + df, "updated", launches, used,
                  start.prior_launches, start.prior, start.gpu, start.stand_in, kind)


def fixed(figure: str, sd: float) -> Spread:
    """A spread the profile sets ([bench] launch_spread): taken as known."""
    return Spread(figure, sd, math.inf, "profile")


@dataclasses.dataclass(frozen=True)
class Term:
    """The launch part of a claim's variance on the log scale, with its degrees of freedom."""

    var: float
    df: float

    @property
    def sd(self) -> float:
        return math.sqrt(self.var)

    @classmethod
    def of(cls, parts: Sequence[tuple[float, Spread]]) -> Term:
        """Σ weight × σ², with Welch–Satterthwaite degrees of freedom over the estimates."""
        var = math.fsum(w * s.sd**2 for w, s in parts)
        spread = math.fsum((w * s.sd**2) ** 2 / s.df for w, s in parts if math.isfinite(s.df))
        return cls(var, var**2 / spread if spread > 0 else math.inf)


@dataclasses.dataclass(frozen=True)
class Bracket:
    """The baseline's two launches of an A–B–A run, around the speculative one."""

    first_tps: float
    second_tps: float

    @property
    def moved(self) -> float:
        """The second launch's tok/s over the first's, minus one."""
        return self.second_tps / self.first_tps - 1.0

    @property
    def sd(self) -> float:
        """The spread of one launch this pair shows: |ln(second / first)| / √2."""
        return abs(math.log(self.second_tps / self.first_tps)) / math.sqrt(2.0)


@dataclasses.dataclass(frozen=True)
class Coverage:
    """What the launch part of each timed claim's interval is: the design and both spreads."""

    design: Design
    baseline: Spread
    speculative: Spread
    baseline_launches: int = 1  # launches the baseline's figures pool
    bracket: Bracket | None = None
    note: str = ""  # e.g. why an A–B–A run has one baseline launch
    # The deployment's class from this run's baseline (results/deployment.py), which picked the
    # priors; None: not classified (a coverage known before the baseline was measured).
    deployment: Deployment | None = None

    def bounded(self, spread: Spread) -> Spread:
        """A spread no smaller than the one this run's own two baseline launches show: the
        launches of this very run bound the drift from below, whatever the log says."""
        if self.bracket is None or self.bracket.sd <= spread.sd:
            return spread
        return dataclasses.replace(spread, sd=self.bracket.sd)

    def term(self, claim: Claim) -> Term:
        base = (1.0 / max(self.baseline_launches, 1), self.bounded(self.baseline))
        spec = (1.0, self.bounded(self.speculative))
        if claim == "baseline":
            return Term.of([base])
        if claim == "speculative":
            return Term.of([spec])
        return Term.of([spec, base])

    def describe(self, claim: Claim) -> str:
        parts = {"baseline": [self.baseline], "speculative": [self.speculative],
                 "speedup": [self.speculative, self.baseline]}[claim]
        pooled = (f" (the baseline pools {self.baseline_launches} launches)"
                  if self.baseline_launches > 1 and claim != "speculative" else "")
        text = (f"launch-to-launch spread, {self.term(claim).sd * 100:.1f} % (standard "
                f"deviation of the log; {'; '.join(p.describe() for p in parts)}){pooled}; "
                f"design {DESIGN_SPOKEN[self.design]}")
        if self.bracket is not None:
            text += (f"; the baseline moved {self.bracket.moved * 100:+.1f} % between its two "
                     "launches in this run")
            if self.bracket.sd > min(self.baseline.sd, self.speculative.sd):
                text += (f", a spread of {self.bracket.sd * 100:.1f} %, taken as the least "
                         "for both servers")
        if self.note:
            text += f"; {self.note}"
        if self.deployment is not None and any(p.source in ("prior", "updated")
                                               for p in parts):
            text += f"; this deployment: {self.deployment.short()}"
        return text

    def to_json(self) -> dict[str, Any]:
        return {"design": self.design, "baseline": self.baseline.to_json(),
                "speculative": self.speculative.to_json(),
                "baseline_launches": self.baseline_launches,
                "bracket": None if self.bracket is None else dataclasses.asdict(self.bracket),
                "note": self.note,
                "deployment": None if self.deployment is None else self.deployment.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Coverage:
        bracket = data.get("bracket")
        return cls(design=_design(str(data.get("design", "ab"))),
                   baseline=Spread.from_json(data["baseline"]),
                   speculative=Spread.from_json(data["speculative"]),
                   baseline_launches=int(data.get("baseline_launches", 1)),
                   bracket=Bracket(**bracket) if bracket else None,
                   note=str(data.get("note", "")),
                   deployment=Deployment.from_json(data["deployment"])
                   if data.get("deployment") else None)


def prior_coverage(design: Design = "ab", deployment: Deployment | None = None) -> Coverage:
    """The coverage of a run that knows nothing of its deployment's launches: the priors of its
    class (the host-bound ones when it is not classified)."""
    kind: Kind = deployment.kind if deployment is not None else "unknown"
    gpu = deployment.gpu if deployment is not None else ""
    return Coverage(design, prior("tps", kind, gpu), prior("cycle_ms", kind, gpu),
                    deployment=deployment)


def widen(summary: Summary, term: Term) -> Summary:
    """The interval with the launch part added in quadrature on the log scale.

    Each side of the interval over prompts and passes is read as a log-scale standard error,
    s = |ln(bound / estimate)| / t(df); the launch variance is added to its square and the side
    is rebuilt with t at the Welch–Satterthwaite degrees of freedom of the sum. With no launch
    spread the interval comes back as it was, and it never comes back narrower: a known launch
    variance raises the degrees of freedom of the sum, which alone could shrink the t quantile
    below the one a few prompts needed. An interval that reaches zero or below (a ratio nobody
    can read on a log scale) keeps that side.
    """
    if not summary.has_interval or summary.mean <= 0 or term.var <= 0:
        return summary
    p = 0.5 + summary.confidence / 2.0
    q_within = t_quantile(p, summary.df)

    def side(bound: float, sign: float) -> tuple[float, float]:
        if bound <= 0:
            return bound, summary.df
        s = abs(math.log(bound / summary.mean)) / q_within
        total = s**2 + term.var
        parts = s**4 / summary.df + (term.var**2 / term.df if math.isfinite(term.df) else 0.0)
        df = total**2 / parts if parts > 0 else math.inf
        return summary.mean * math.exp(sign * t_quantile(p, df) * math.sqrt(total)), df

    low, df_low = side(summary.ci_low, -1.0)
    high, df_high = side(summary.ci_high, 1.0)
    return dataclasses.replace(summary, ci_low=min(low, summary.ci_low),
                               ci_high=max(high, summary.ci_high), df=min(df_low, df_high))


def undecidable(summary: Summary, term: Term, threshold: float) -> bool:
    """Whether the launch part alone keeps the interval around the threshold: more passes
    (which narrow only the part over prompts and passes) cannot decide it."""
    if not summary.has_interval or summary.mean <= 0 or term.var <= 0 or threshold <= 0:
        return False
    q = t_quantile(0.5 + summary.confidence / 2.0, term.df)
    return abs(math.log(summary.mean / threshold)) <= q * term.sd


@dataclasses.dataclass(frozen=True)
class Covered:
    """One timed claim's figure: its interval over prompts and passes, and the one it is judged
    on, which also covers the launches."""

    within: Summary
    judged: Summary
    term: Term
    coverage: Coverage
    claim: Claim

    def within_spread(self, threshold: float) -> bool:
        """The interval over prompts and passes clears the threshold, the judged one does not:
        the margin lies within the launch-to-launch spread that interval leaves out."""
        return (self.within.compare(threshold) == "above" and self.within.ci_low > threshold
                and self.judged.compare(threshold) != "above")

    def describe(self) -> str:
        return self.coverage.describe(self.claim)

    def margin_text(self, threshold: float, digits: int = 3) -> str:
        """What a claim says when its margin lies within the spread."""
        pct = percent(self.within.confidence)
        margin = (self.within.mean / threshold - 1.0) * 100
        return (f"the {pct} % interval over prompts and passes [{self.within.ci_low:.{digits}f}, "
                f"{self.within.ci_high:.{digits}f}] clears {threshold:g}, but its margin "
                f"({margin:+.1f} %) lies within the launch-to-launch spread it leaves out "
                f"({self.term.sd * 100:.1f} %, a standard deviation of the log): launching "
                "either server again could move it across, so this is not a confident pass")

    def details(self) -> dict[str, Any]:
        return {"included": True, "sd": round(self.term.sd, 6),
                "df": None if math.isinf(self.term.df) else round(self.term.df, 3),
                "within_launch_ci": [_r(self.within.ci_low), _r(self.within.ci_high)],
                **self.coverage.to_json()}


def cover(summary: Summary, coverage: Coverage,
          claim: Claim) -> Covered:
    term = coverage.term(claim)
    return Covered(summary, widen(summary, term), term, coverage, claim)


def _r(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 4)
