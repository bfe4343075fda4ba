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
# The baseline's measurement so far → the coverage of the class it puts the deployment in (None:
# the class is not known yet, the coverage given stands).
Reclass = Callable[[bench.Measurement], drift.Coverage | None]


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
    spread alone (results/drift.py), which passes do not narrow, is left as it is.

    The launch part is the one the claims will judge with: the class of the deployment picks its
    prior, and a baseline's class is read from the baseline itself, so `reclass` gives the
    coverage of the class the baseline measured so far puts it in, at every look."""

    def __init__(self, thresholds: ThresholdsSection, config: Config,
                 baseline: bench.Measurement | None, coverage: drift.Coverage | None, *,
                 gate: bool = True, reclass: Reclass | None = None) -> None:
        self.thresholds, self.config = thresholds, config
        self.baseline, self.coverage = baseline, coverage
        self.gate = gate  # at the gate's concurrency: baseline_tps_min is judged there only
        self.reclass = reclass
        self.undecided: str | None = None  # why the last look stopped without deciding
        self.looked: drift.Coverage | None = coverage  # the coverage of the last look

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
        coverage = self.coverage
        if self.reclass is not None and self.config == "baseline":
            coverage = self.reclass(m) or coverage
        self.looked = coverage
        reasons = []
        for check in self._checks(m):
            summary, threshold = check.summary, check.threshold
            if summary is None or threshold is None:
                continue
            term = coverage.term(check.claim) if coverage and check.claim else None
            judged = drift.widen(summary, term) if term else summary
            reason = bench.straddles(judged, threshold, check.what)
            if reason is None:
                continue
            if coverage is not None and term is not None and check.claim is not None \
                    and drift.undecidable(summary, term, threshold):
                self.undecided = (f"more passes cannot decide it: {reason}, and the "
                                  f"launch-to-launch spread alone ({term.sd * 100:.1f} %, a "
                                  "standard deviation of the log: "
                                  f"{_priors(coverage, check.claim)}) keeps it there")
                continue
            reasons.append(reason)
        return "; ".join(reasons) if reasons else None


def _priors(coverage: drift.Coverage, claim: drift.Claim) -> str:
    """Where each spread of a claim's launch part comes from, in the words its claim uses."""
    spreads = {"baseline": [coverage.baseline], "speculative": [coverage.speculative],
               "speedup": [coverage.speculative, coverage.baseline]}[claim]
    return "; ".join(s.describe() for s in spreads)


def keep_going_rule(thresholds: ThresholdsSection, config: Config,
                    baseline: bench.Measurement | None,
                    coverage: drift.Coverage | None = None, *, gate: bool = True,
                    reclass: Reclass | None = None) -> GateRule:
    """The gate's rule for another pass; with a coverage, on the intervals the claims judge.
    baseline is the baseline's measurement at the same concurrency; gate=False: a level other
    than the gate's, where baseline_tps_min is not judged; reclass: the baseline's coverage by
    the class its measurement so far gives (GateRule)."""
    return GateRule(thresholds, config, baseline, coverage, gate=gate, reclass=reclass)


def stopped_why(m: bench.Measurement, rule: object,
                passes: str = "repeats") -> bench.Measurement:
    """The measurement, saying so when the gate's rule stopped because passes cannot decide."""
    if isinstance(rule, GateRule) and rule.undecided:
        return dataclasses.replace(m, stop_reason=f"{m.repeats} {passes}: {rule.undecided}")
    return m

