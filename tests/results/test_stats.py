"""Tests for specgate.results.stats: t quantiles, coverage, break-even, accept length."""

import math
import random
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specgate.results import stats

# Two-sided 95 % (p = 0.975) and 99 % (p = 0.995) critical values from standard t tables.
T_TABLE = [
    (0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 3, 3.182), (0.975, 4, 2.776),
    (0.975, 5, 2.571), (0.975, 9, 2.262), (0.975, 10, 2.228), (0.975, 20, 2.086),
    (0.975, 30, 2.042), (0.975, 120, 1.980), (0.995, 1, 63.657), (0.995, 5, 4.032),
    (0.995, 30, 2.750), (0.95, 1, 6.314), (0.95, 7, 1.895), (0.90, 3, 1.638),
]


@pytest.mark.parametrize(("p", "df", "expected"), T_TABLE)
def test_t_quantile_matches_tables(p, df, expected):
    assert stats.t_quantile(p, df) == pytest.approx(expected, abs=1e-3)


def test_t_quantile_tends_to_normal_and_is_symmetric():
    assert stats.t_quantile(0.975, 1e9) == pytest.approx(1.959964, abs=1e-5)
    assert stats.t_quantile(0.975, 1e5) == pytest.approx(1.95999, abs=1e-3)
    assert stats.t_quantile(0.025, 7) == pytest.approx(-stats.t_quantile(0.975, 7))
    assert stats.t_quantile(0.5, 4) == pytest.approx(0.0, abs=1e-9)


@given(st.floats(0.51, 0.999), st.floats(1.0, 200.0))
def test_t_cdf_inverts_t_quantile(p, df):
    assert stats.t_cdf(stats.t_quantile(p, df), df) == pytest.approx(p, abs=1e-8)


@given(st.floats(0.6, 0.99), st.integers(1, 50))
def test_t_quantile_decreases_with_df(p, df):
    assert stats.t_quantile(p, df) >= stats.t_quantile(p, df + 1) - 1e-9


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="probability"):
        stats.t_quantile(1.0, 3)
    with pytest.raises(ValueError, match="degrees"):
        stats.t_quantile(0.9, 0)
    with pytest.raises(ValueError, match="no values"):
        stats.summarize([])


def test_summary_figures():
    s = stats.summarize([10.0, 12.0, 14.0])
    assert s.mean == 12.0
    assert s.std == pytest.approx(2.0)
    assert s.cv == pytest.approx(2.0 / 12.0)
    half = 4.303 * 2.0 / math.sqrt(3)
    assert (s.ci_low, s.ci_high) == pytest.approx((12 - half, 12 + half), abs=1e-2)
    assert s.compare(5.0) == "above"
    assert s.compare(20.0) == "below"
    assert s.compare(12.0) == "inconclusive"
    assert stats.Summary.from_json(s.to_json()) == s


def test_one_value_has_no_interval():
    s = stats.summarize([3.0])
    assert not s.has_interval
    assert s.compare(1.0) == "no_interval"
    assert "no confidence interval" in s.describe()
    back = stats.Summary.from_json(s.to_json())
    assert back.mean == 3.0
    assert not back.has_interval


# A coverage check is a binomial experiment: over `trials` seeded intervals the count that covers
# the true value has standard deviation sqrt(p(1 - p) / trials) around the nominal rate p. The
# band is Z of those: a correct interval leaves it with probability 5e-4 whatever the seed,
# while a z interval at n = 3 (coverage 0.88), a standard error over n instead of √n, or an
# interval shifted off its estimate (one tail empty, the other doubled) lands far outside.
Z = 3.5


def _band(p: float, trials: int) -> float:
    return Z * math.sqrt(p * (1.0 - p) / trials)


def _assert_nominal(below: int, above: int, trials: int, confidence: float) -> None:
    """Coverage at its nominal rate, and each tail at half the miss rate."""
    covered = (trials - below - above) / trials
    assert abs(covered - confidence) <= _band(confidence, trials), (covered, below, above)
    tail = (1.0 - confidence) / 2.0
    for misses in (below, above):
        assert abs(misses / trials - tail) <= _band(tail, trials), (below, above, trials)


def _tally(summaries, truth):
    below = sum(s.ci_high < truth for s in summaries)
    above = sum(s.ci_low > truth for s in summaries)
    return below, above


@pytest.mark.parametrize("n", [3, 5, 10])
def test_interval_covers_the_true_mean_at_its_nominal_rate(n):
    rng = random.Random(1234 + n)
    trials = 4000
    summaries = [stats.summarize([rng.gauss(82.0, 4.0) for _ in range(n)], 0.95)
                 for _ in range(trials)]
    _assert_nominal(*_tally(summaries, 82.0), trials, 0.95)


@pytest.mark.parametrize("confidence", [0.90, 0.99])
def test_interval_covers_at_other_levels(confidence):
    rng = random.Random(int(confidence * 100))
    trials = 4000
    summaries = [stats.summarize([rng.gauss(1.3, 0.2) for _ in range(4)], confidence)
                 for _ in range(trials)]
    _assert_nominal(*_tally(summaries, 1.3), trials, confidence)


def _mean(values):
    return math.fsum(values) / len(values)


def test_jackknife_of_the_mean_covers_at_its_nominal_rate():
    # For the mean the pseudo-values are the values themselves: the jackknife t interval is
    # exact on normal data, so its coverage is held to the binomial band with no allowance.
    rng = random.Random(5)
    trials = 4000
    summaries = [stats.jackknife([rng.gauss(10.0, 3.0) for _ in range(6)], _mean)
                 for _ in range(trials)]
    _assert_nominal(*_tally(summaries, 10.0), trials, 0.95)


def _ratio_of_totals(units):
    return sum(u[0] for u in units) / sum(u[1] for u in units)


def test_jackknife_keeps_the_ratio_of_totals_and_covers_the_true_ratio():
    # Prompts of different lengths (tokens) decoded at a rate that varies by prompt: the
    # population rate is Σ tokens / Σ seconds. The jackknife is asymptotic; over 40 prompts its
    # own shortfall (0.945 over 10,000 trials) is about one binomial SD of these 3000.
    rng = random.Random(11)
    true_rate, trials, n = 250.0, 3000, 40
    sigma = 0.15
    # Σ tokens / Σ (tokens / (rate·L)) → rate / E[1/L] = rate·exp(−σ²/2) for lognormal L.
    truth = true_rate * math.exp(-(sigma**2) / 2)
    summaries = []
    for _ in range(trials):
        units = []
        for _ in range(n):
            tokens = rng.randint(20, 200)
            units.append((tokens, tokens / (true_rate * rng.lognormvariate(0.0, sigma))))
        summary = stats.jackknife(units, _ratio_of_totals)
        assert summary.mean == _ratio_of_totals(units)
        assert (summary.n, summary.df) == (n, n - 1)
        summaries.append(summary)
    _assert_nominal(*_tally(summaries, truth), trials, 0.95)


samples = st.lists(st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False), min_size=2,
                   max_size=30)
levels = st.sampled_from([0.8, 0.9, 0.95, 0.99, 1 - 0.05 / 4])


@given(samples, levels)
def test_the_t_interval_is_ordered_symmetric_and_contains_the_mean(values, confidence):
    s = stats.summarize(values, confidence)
    assert s.ci_low <= s.mean <= s.ci_high
    assert s.mean - s.ci_low == pytest.approx(s.ci_high - s.mean, abs=1e-9 * (1 + s.std))
    half = stats.t_quantile(0.5 + confidence / 2, len(values) - 1) * s.std / math.sqrt(len(values))
    assert s.half_width == pytest.approx(half, rel=1e-9, abs=1e-9)


@given(samples, levels)
def test_the_jackknife_of_the_mean_is_the_t_interval(values, confidence):
    # Pseudo-values n·θ − (n−1)·θ₋ᵢ of the mean are the values: one formula, two routes.
    jack = stats.jackknife(values, _mean, confidence)
    plain = stats.summarize(values, confidence)
    scale = 1e-9 * (1 + max(abs(v) for v in values))
    assert jack.mean == pytest.approx(plain.mean, abs=scale)
    assert (jack.n, jack.df, jack.confidence) == (plain.n, plain.df, plain.confidence)
    assert jack.ci_low == pytest.approx(plain.ci_low, abs=1e3 * scale)
    assert jack.ci_high == pytest.approx(plain.ci_high, abs=1e3 * scale)


units = st.lists(st.tuples(st.integers(1, 500), st.floats(0.01, 10.0)), min_size=2, max_size=25)


@given(units, levels)
def test_the_jackknife_interval_is_ordered_around_the_statistic_of_all_units(chosen, confidence):
    s = stats.jackknife(chosen, _ratio_of_totals, confidence)
    assert s.mean == _ratio_of_totals(chosen)  # the ratio of totals, not a mean of pseudo-values
    assert s.has_interval
    assert s.ci_low <= s.mean <= s.ci_high
    assert s.mean - s.ci_low == pytest.approx(s.ci_high - s.mean, rel=1e-9, abs=1e-12)
    assert (s.n, s.df, s.confidence) == (len(chosen), len(chosen) - 1, confidence)


@given(units, st.floats(0.1, 10.0))
def test_the_jackknife_interval_scales_with_its_statistic(chosen, factor):
    base = stats.jackknife(chosen, _ratio_of_totals)
    scaled = stats.jackknife([(t, s / factor) for t, s in chosen], _ratio_of_totals)
    assert scaled.mean == pytest.approx(base.mean * factor, rel=1e-9)
    assert scaled.ci_low == pytest.approx(base.ci_low * factor, rel=1e-6, abs=1e-9)
    assert scaled.ci_high == pytest.approx(base.ci_high * factor, rel=1e-6, abs=1e-9)


def test_jackknife_of_identical_units_has_a_zero_width_interval():
    summary = stats.jackknife([(30.0, 1.0)] * 4, _ratio_of_totals)
    assert (summary.mean, summary.ci_low, summary.ci_high) == (30.0, 30.0, 30.0)


def test_jackknife_without_an_interval():
    assert not stats.jackknife([(1.0, 2.0)], _ratio_of_totals).has_interval
    # A leave-one-out value that divides by zero: no interval, and no crash.
    assert not stats.jackknife([(1.0, 2.0), (1.0, 0.0)], _ratio_of_totals).has_interval


def test_required_accept_len_matches_the_seeds():
    # 150 tok/s at a 30 ms verify cycle needs 4.5 tokens per cycle.
    assert stats.required_accept_len(150.0, 0.030) == pytest.approx(4.5)


@given(st.floats(0.0, 0.99), st.floats(0.001, 0.01), st.integers(1, 8))
def test_expected_accept_len_is_monotone(rate, step, steps):
    tau = stats.expected_accept_len(rate, steps)
    assert 1.0 <= tau <= steps + 1
    assert stats.expected_accept_len(min(rate + step, 1.0), steps) > tau
    assert stats.expected_accept_len(rate, steps + 1) >= tau


@given(st.floats(0.0, 1.0), st.integers(1, 8))
def test_required_rate_inverts_expected_accept_len(rate, steps):
    tau = stats.expected_accept_len(rate, steps)
    back = stats.required_rate(tau, steps)
    assert back is not None
    assert stats.expected_accept_len(back, steps) == pytest.approx(tau, abs=1e-9)


def test_required_rate_edges():
    assert stats.required_rate(1.0, 2) == 0.0
    assert stats.required_rate(3.5, 2) is None  # more than steps + 1 tokens per cycle
    assert stats.expected_accept_len(1.0, 2) == 3.0
    with pytest.raises(ValueError, match="rate"):
        stats.expected_accept_len(1.5, 2)


def test_summary_std_is_sample_std():
    values = [1.0, 2.0, 4.0, 8.0]
    assert stats.summarize(values).std == pytest.approx(statistics.stdev(values))


def test_sequential_repeats_keep_the_false_pass_rate_at_its_level():
    """Optional stopping: with the true mean exactly at the threshold, a gate that looks after
    3, 4, 5 and 6 repeats must not pass more often than 1 − confidence allows (one-sided 2.5 %
    per the 95 % interval; without the split over looks it was about 6 %)."""
    import random

    from specgate.results.bench import Sampling, judged_confidence
    from specgate.results.stats import summarize

    bench = Sampling(repeats=3, max_repeats=6)
    confidence = judged_confidence(bench)
    assert confidence == pytest.approx(1 - 0.05 / 4)
    rng = random.Random(7)
    trials, passes = 4000, 0
    for _ in range(trials):
        values = [rng.gauss(100.0, 5.0) for _ in range(3)]
        while True:
            verdict = summarize(values, confidence).compare(100.0)
            if verdict != "inconclusive" or len(values) >= bench.max_repeats:
                break
            values.append(rng.gauss(100.0, 5.0))
        passes += verdict == "above"
    assert passes / trials <= 0.025


def test_spearman_ranks_ties_and_degenerate_inputs():
    from specgate.results.stats import spearman

    assert spearman([1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]) == pytest.approx(1.0)
    assert spearman([1.0, 2.0, 3.0, 4.0], [9.0, 1.0, 0.5, 0.1]) == pytest.approx(-1.0)
    # monotone but not linear: ranks only
    assert spearman([1.0, 2.0, 3.0], [1.0, 100.0, 101.0]) == pytest.approx(1.0)
    # ties share their mean rank: x ranks (1.5, 1.5, 3), y ranks (1, 2, 3) -> 0.866
    assert spearman([5.0, 5.0, 7.0], [1.0, 2.0, 3.0]) == pytest.approx(math.sqrt(3) / 2)
    assert math.isnan(spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))  # one side constant
    assert math.isnan(spearman([1.0], [2.0]))
    with pytest.raises(ValueError, match="3 values against 2"):
        spearman([1.0, 2.0, 3.0], [1.0, 2.0])
