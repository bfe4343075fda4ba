"""Statistics of measurements: t intervals, the jackknife over prompts, accept-length algebra."""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

U = TypeVar("U")
Verdict = Literal["above", "below", "inconclusive", "no_interval"]


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def f_cdf(f: float, df1: float, df2: float) -> float:
    """P(F <= f) for Fisher's F with df1 and df2 degrees of freedom."""
    if f <= 0.0:
        return 0.0
    return betainc(df1 / 2.0, df2 / 2.0, df1 * f / (df1 * f + df2))


def variance_ratio(var_a: float, df_a: float, var_b: float, df_b: float) -> tuple[float, float]:
    """The F-test of two variances estimated with these degrees of freedom: (F, p), F the larger
    over the smaller, p two-sided."""
    if var_a >= var_b:
        f, df1, df2 = var_a / var_b, df_a, df_b
    else:
        f, df1, df2 = var_b / var_a, df_b, df_a
    return f, min(1.0, 2.0 * (1.0 - f_cdf(f, df1, df2)))


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with df degrees of freedom."""
    if math.isinf(df):
        return statistics.NormalDist().cdf(t)
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


@functools.lru_cache(maxsize=1024)
def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t: the incomplete beta inverted by bisection (no scipy)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"probability must be in (0, 1), got {p}")
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    if math.isinf(df) or df > 1e7:
        return statistics.NormalDist().inv_cdf(p)
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


@dataclasses.dataclass(frozen=True)
class Summary:
    """Spread and a t-based confidence interval of one metric over repeats."""

    n: int
    mean: float
    std: float  # sample standard deviation (n - 1); nan for one value
    cv: float  # std / |mean|
    ci_low: float  # nan when there is no interval (one value)
    ci_high: float
    confidence: float
    df: float = math.nan

    @property
    def has_interval(self) -> bool:
        return not math.isnan(self.ci_low)

    @property
    def half_width(self) -> float:
        return (self.ci_high - self.ci_low) / 2.0

    def to_json(self) -> dict[str, Any]:
        return {k: _finite_or_none(v) for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Summary:
        def num(key: str) -> float:
            value = data.get(key)
            return math.nan if value is None else float(value)

        return cls(n=int(data["n"]), mean=num("mean"), std=num("std"), cv=num("cv"),
                   ci_low=num("ci_low"), ci_high=num("ci_high"),
                   confidence=float(data["confidence"]), df=num("df"))

    def compare(self, threshold: float) -> Verdict:
        """Where the interval lies against a threshold; a straddling interval is inconclusive."""
        if not self.has_interval:
            return "no_interval"
        if self.ci_low >= threshold:
            return "above"
        if self.ci_high < threshold:
            return "below"
        return "inconclusive"

    def describe(self, unit: str = "", digits: int = 2) -> str:
        u = f" {unit}" if unit else ""
        if not self.has_interval:
            return f"{self.mean:.{digits}f}{u} (1 repeat: no confidence interval)"
        pct = percent(self.confidence)
        return (f"{self.mean:.{digits}f}{u}, {pct} % CI [{self.ci_low:.{digits}f}, "
                f"{self.ci_high:.{digits}f}], CV {self.cv * 100:.1f} %, n = {self.n}")


def _finite_or_none(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def summarize(values: Sequence[float], confidence: float = 0.95) -> Summary:
    """Mean, sample std, CV and the t interval mean ± t(1-α/2, n-1)·s/√n."""
    n = len(values)
    if n == 0:
        raise ValueError("no values to summarize")
    mean = math.fsum(values) / n
    if n == 1:
        return Summary(1, mean, math.nan, math.nan, math.nan, math.nan, confidence)
    std = statistics.stdev(values)
    cv = std / abs(mean) if mean else math.nan
    half = t_quantile(0.5 + confidence / 2.0, n - 1) * std / math.sqrt(n)
    return Summary(n, mean, std, cv, mean - half, mean + half, confidence, float(n - 1))


def jackknife(units: Sequence[U], statistic: Callable[[Sequence[U]], float],
              confidence: float = 0.95) -> Summary:
    """A statistic over units (prompts) with a leave-one-out jackknife t interval.

    The point estimate is the statistic over all units (a ratio of totals stays a ratio of
    totals); the interval is estimate ± t(1-α/2, n-1)·se with se from the jackknife
    pseudo-values n·θ − (n−1)·θ₋ᵢ. std and cv are those of the pseudo-values, so the result
    reads like a Summary over n values. Without an interval (n < 2, or a leave-one-out value
    that is not finite) ci_low/ci_high are nan.
    """
    n = len(units)
    nan = math.nan
    try:
        full = statistic(units)
    except ZeroDivisionError:
        full = nan
    if n < 2 or not math.isfinite(full):
        return Summary(n, full, nan, nan, nan, nan, confidence)
    pseudo = []
    for i in range(n):
        try:
            value = statistic([*units[:i], *units[i + 1:]])
        except ZeroDivisionError:
            return Summary(n, full, nan, nan, nan, nan, confidence)
        if not math.isfinite(value):
            return Summary(n, full, nan, nan, nan, nan, confidence)
        pseudo.append(n * full - (n - 1) * value)
    std = statistics.stdev(pseudo)
    half = t_quantile(0.5 + confidence / 2.0, n - 1) * std / math.sqrt(n)
    cv = std / abs(full) if full else nan
    return Summary(n, full, std, cv, full - half, full + half, confidence, float(n - 1))


def _ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing their mean rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman's rank correlation (Pearson's over tie-averaged ranks); nan with fewer than
    two pairs or when either side is constant."""
    if len(xs) != len(ys):
        raise ValueError(f"spearman needs pairs: {len(xs)} values against {len(ys)}")
    if len(xs) < 2:
        return math.nan
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = math.fsum(rx) / len(rx), math.fsum(ry) / len(ry)
    sxy = math.fsum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    sxx = math.fsum((a - mx) ** 2 for a in rx)
    syy = math.fsum((b - my) ** 2 for b in ry)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else math.nan


def percent(confidence: float) -> str:
    """A confidence level as people write it: 95, 98.75, 99.17 (not 98.75000000000001)."""
    return f"{confidence * 100:.4g}"


def required_accept_len(target_tps: float, cycle_s: float) -> float:
    """Accept length needed for target_tps at a fixed cycle time (tok/s = τ / T_cycle)."""
    return target_tps * cycle_s


def expected_accept_len(rate: float, steps: int) -> float:
    """τ = Σ_{k=0..steps} a^k for a chain of `steps` drafts with equal conditional rate a."""
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"conditional acceptance rate must be in [0, 1], got {rate}")
    return math.fsum(rate**k for k in range(steps + 1))


def required_rate(accept_len: float, steps: int) -> float | None:
    """The equal conditional rate a with Σ_{k=0..steps} a^k = accept_len; None if out of reach."""
    if accept_len <= 1.0:
        return 0.0
    if accept_len > steps + 1:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        if expected_accept_len(mid, steps) < accept_len:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0
