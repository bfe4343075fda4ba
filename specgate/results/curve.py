"""The speed-up against concurrency: one paired speed-up per level, and where it stops paying.

A level pays when its whole paired interval lies above 1 (as spec.speedup judges: the interval
over prompts and passes widened by the launch-to-launch spread, results/drift.py), costs when
the whole interval lies below, and is inconclusive otherwise. Going up from the smallest level,
the crossover lies between the last level that pays and the next one, which does not; the
point estimates are interpolated there, linearly in log2 of the concurrency, for where the
speed-up reaches 1.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from typing import Any

from specgate.results import bench, drift
from specgate.results.live import LiveResults
from specgate.results.stats import Summary


@dataclasses.dataclass(frozen=True)
class LevelPoint:
    """One concurrency level: both speed-ups, with intervals, or why there are none."""

    level: int
    # Per-request decode tok/s, speculative ÷ baseline, paired by prompt: the interval the
    # claims judge (with the launch spread); within: over prompts and passes alone.
    decode: Summary | None
    total: Summary | None  # output tok/s (prefill and waiting included), paired the same way
    baseline_tps: float | None = None  # per-request decode tok/s
    spec_tps: float | None = None
    why: str = ""  # why the level has no speed-up
    within: Summary | None = None

    def verdict(self, threshold: float = 1.0) -> str:
        """pays, costs, inconclusive, or unmeasured (no speed-up with an interval)."""
        s = self.decode
        if s is None or not s.has_interval:
            return "unmeasured"
        if s.ci_low > threshold:
            return "pays"
        if s.ci_high < threshold:
            return "costs"
        return "inconclusive"

    def to_json(self) -> dict[str, Any]:
        return {"concurrency": self.level, "verdict": self.verdict(),
                "speedup": self.decode.to_json() if self.decode else None,
                "speedup_within_launch": self.within.to_json() if self.within else None,
                "total_speedup": self.total.to_json() if self.total else None,
                "baseline_tps": self.baseline_tps, "spec_tps": self.spec_tps,
                "why": self.why or None}


@dataclasses.dataclass(frozen=True)
class Crossover:
    """Where the drafter stops paying, going up in concurrency."""

    pays_up_to: int | None  # the highest level of the run of paying levels from the smallest
    stops_at: int | None  # the level right after it, which does not pay
    estimate: float | None  # where the point estimates reach 1 (log2-linear interpolation)
    pays_again: tuple[int, ...] = ()  # levels above stops_at that pay after all
    text: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"pays_up_to": self.pays_up_to, "stops_at": self.stops_at,
                "estimate": None if self.estimate is None else round(self.estimate, 3),
                "pays_again": list(self.pays_again), "text": self.text}


@dataclasses.dataclass(frozen=True)
class Curve:
    points: tuple[LevelPoint, ...]
    gate_level: int
    crossover: Crossover

    def to_json(self) -> dict[str, Any]:
        return {"gate_concurrency": self.gate_level,
                "levels": [p.to_json() for p in self.points],
                "crossover": self.crossover.to_json()}


def level_point(live: LiveResults, level: int) -> LevelPoint:
    view = live.at(level)
    spec, base = view.speculative, view.baseline
    failed = spec.failure or base.failure
    if failed is not None or spec.measurement is None or base.measurement is None:
        why = failed.message if failed is not None else "not measured"
        return LevelPoint(level, None, None, why=why)
    s, b = spec.measurement, base.measurement
    coverage = live.launch_coverage
    within = bench.speedup(s, b)
    if not math.isfinite(within.mean):
        return LevelPoint(level, None, None, why="no paired speed-up")
    decode = drift.cover(within, coverage, "speedup").judged
    total = bench.speedup(s, b, "total_tps")
    total_judged = drift.cover(total, coverage, "speedup").judged \
        if math.isfinite(total.mean) else None
    tps = [m.stat("tps") for m in (b, s)]
    return LevelPoint(level, decode, total_judged,
                      tps[0].mean if tps[0] else None, tps[1].mean if tps[1] else None,
                      within=within)


def curve(live: LiveResults) -> Curve:
    """Every level of the live session, ascending, and the crossover."""
    points = tuple(level_point(live, n) for n in live.levels)
    return Curve(points, live.gate_level, crossover(points))


def crossover(points: Sequence[LevelPoint], threshold: float = 1.0) -> Crossover:
    """Where, going up from the smallest level, the drafter stops paying (see the module)."""
    judged = [p for p in sorted(points, key=lambda p: p.level) if p.verdict() != "unmeasured"]
    if not judged:
        return Crossover(None, None, None, text="no level has a speed-up with an interval")
    paying = 0
    while paying < len(judged) and judged[paying].verdict(threshold) == "pays":
        paying += 1
    estimate = _estimate(judged, threshold)
    where = (f"; the point estimates reach {threshold:g} near {estimate:.1f} in flight"
             if estimate is not None else "")
    if paying == len(judged):
        return Crossover(judged[-1].level, None, None,
                         text=f"the drafter pays at every measured level, up to "
                              f"{judged[-1].level} in flight")
    stop = judged[paying]
    again = tuple(p.level for p in judged[paying + 1:] if p.verdict(threshold) == "pays")
    how = ("is slower than the baseline" if stop.verdict(threshold) == "costs"
           else "is not shown faster than the baseline")
    note = (f" (it pays again at {', '.join(map(str, again))} in flight: the curve is not "
            "monotone, so these levels need more prompts or repeats)" if again else "")
    if paying == 0:
        return Crossover(None, stop.level, estimate, again,
                         f"the drafter does not pay even at {stop.level} in flight: it {how}"
                         f"{where}{note}")
    last = judged[paying - 1]
    return Crossover(last.level, stop.level, estimate, again,
                     f"the drafter pays up to {last.level} in flight and stops paying by "
                     f"{stop.level}, where it {how}{where}{note}")


def _estimate(judged: Sequence[LevelPoint], threshold: float) -> float | None:
    """The first downward crossing of the point estimates, log2-linear between two levels."""
    for low, high in itertools.pairwise(judged):
        if low.decode is None or high.decode is None:
            continue
        y0, y1 = low.decode.mean, high.decode.mean
        if y0 >= threshold > y1:
            x0, x1 = math.log2(low.level), math.log2(high.level)
            return float(2 ** (x0 + (y0 - threshold) * (x1 - x0) / (y0 - y1)))
    return None
