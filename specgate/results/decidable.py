"""What a probe could decide: the smallest speed-up whose interval, measured with this probe's
own spread (over prompts and passes, and the launch part), would clear the threshold, and, for a
value the interval leaves undecided, how many more passes or launches would decide it.

On the log scale the judged interval's half-width is h = q · √(s_w² + σ_L²): s_w the standard
error over prompts and passes, σ_L² the launch part (results/drift.py), q the t quantile of the
claim's confidence. A speed-up R is decided above a threshold T when ln R − h > ln T, so the
smallest this probe decides is T · e^h (below it: T · e^−h). A value R inside the interval is
decided once the half-width falls under d = |ln(R / T)|:

- more passes shrink s_w² as 1 / passes and leave σ_L²: they decide R when q² σ_L² < d², at
  P = P₀ · s_w² / (d² / q² − σ_L²) passes in all;
- more launches of both servers, each measured as this one was, shrink both parts: k probes
  pooled decide R when q² (s_w² + σ_L²) / k < d², at k = q² (s_w² + σ_L²) / d².

q is held at this probe's degrees of freedom, so the counts are about right, not exact (more
launches and passes also raise the degrees of freedom, which narrows q a little more).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from specgate.results.drift import Covered
from specgate.results.stats import t_quantile


@dataclasses.dataclass(frozen=True)
class Decidable:
    """The speed-ups one probe decides at its confidence, and what would decide the value it
    measured when its interval leaves that undecided."""

    threshold: float
    confidence: float
    above: float  # the smallest speed-up this probe decides above the threshold
    below: float  # the largest it decides below it
    measured: float
    decided: bool  # the measured value's interval lies on one side of the threshold
    passes: int  # passes of this probe (the fewer of the two servers')
    passes_needed: int | None = None  # in all, within one launch; None: passes cannot
    launches_needed: int | None = None  # launches of each server in all; None: none can

    def text(self) -> str:
        """One sentence: what this probe decides, and what would decide the measured value."""
        pct = f"{self.confidence * 100:.4g} %"
        out = (f"this probe decides a speed-up of {self.above:.3f}× or more above "
               f"{self.threshold:g} (or {self.below:.3f}× or less below it) at {pct}, from its "
               "own intervals and launch spread")
        if self.decided:
            return out
        return out + "; " + self.needs_text()

    def needs_text(self) -> str:
        """How many more passes or launches would decide the measured value."""
        what = f"the measured {self.measured:.3f}"
        if self.launches_needed is None:
            return f"{what} equals the threshold: no number of passes or launches decides it"
        more_launches = self.launches_needed - 1
        launches = (f"about {more_launches} more launch{'es' if more_launches != 1 else ''} "
                    f"of each server measured as these were ({self.launches_needed} in all)")
        if self.passes_needed is None:
            return (f"{what} would be decided by {launches}; more passes cannot decide it "
                    "(the launch-to-launch spread alone holds the interval)")
        more_passes = self.passes_needed - self.passes
        return (f"{what} would be decided by about {more_passes} more "
                f"pass{'es' if more_passes != 1 else ''} over the prompts in these launches "
                f"({self.passes_needed} in all), or by {launches}")

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out.update(above=round(self.above, 4), below=round(self.below, 4),
                   measured=round(self.measured, 4), text=self.text())
        return out


def decidable(covered: Covered, threshold: float, passes: int) -> Decidable | None:
    """What the probe of a claim's covered figure decides against `threshold` (None: it has no
    interval on the log scale to say it from)."""
    within, judged = covered.within, covered.judged
    if not within.has_interval or within.mean <= 0 or judged.ci_low <= 0 or threshold <= 0 \
            or within.ci_low <= 0:
        return None
    p = 0.5 + within.confidence / 2.0
    h_low = math.log(within.mean / judged.ci_low)
    h_high = math.log(judged.ci_high / within.mean)
    decided = not judged.ci_low <= threshold <= judged.ci_high
    out = Decidable(threshold=threshold, confidence=within.confidence,
                    above=threshold * math.exp(h_low), below=threshold * math.exp(-h_high),
                    measured=within.mean, decided=decided, passes=max(passes, 1))
    if decided:
        return out
    d = abs(math.log(within.mean / threshold))
    if d == 0.0:
        return out
    s_w = math.log(within.mean / within.ci_low) / t_quantile(p, within.df)
    launch_var = covered.term.var
    q = t_quantile(p, judged.df)
    launches = max(2, math.ceil(q**2 * (s_w**2 + launch_var) / d**2))
    room = d**2 / q**2 - launch_var
    needed = (max(out.passes + 1, math.ceil(out.passes * s_w**2 / room))
              if room > 0 else None)
    return dataclasses.replace(out, passes_needed=needed, launches_needed=launches)
