"""The rule for another pass: while an interval a claim is judged on straddles its threshold
and more passes can still move it off it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from specgate.core.profile import ThresholdsSection
from specgate.results import bench, drift
from specgate.results.stats import Summary

Config = bench.Config
# The measurement so far → why another pass is worth it, or None to stop.
Rule = Callable[[bench.Measurement], str | None]


@dataclasses.dataclass(frozen=True)
class _Check:
    """One interval the rule for more passes looks at, its threshold, and the claim it covers."""

    summary: Summary | None
    threshold: float | None
    what: str
    claim: drift.Claim | None = None  # None: not timed (no launch spread)


class GateRule:
    """Another pass is worth it while an interval a claim is judged on straddles its threshold,
    and more passes can still move it off: an interval held there by the launch-to-launch
    spread alone (results/drift.py), which passes do not narrow, is left as it is."""

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
                    coverage: drift.Coverage | None = None, *, gate: bool = True) -> GateRule:
    """The gate's rule for another pass; with a coverage, on the intervals the claims judge.
    baseline is the baseline's measurement at the same concurrency; gate=False: a level other
    than the gate's, where baseline_tps_min is not judged."""
    return GateRule(thresholds, config, baseline, coverage, gate=gate)


def stopped_why(m: bench.Measurement, rule: object,
                passes: str = "repeats") -> bench.Measurement:
    """The measurement, saying so when the gate's rule stopped because passes cannot decide."""
    if isinstance(rule, GateRule) and rule.undecided:
        return dataclasses.replace(m, stop_reason=f"{m.repeats} {passes}: {rule.undecided}")
    return m

