"""Tests for specgate.results.drift: the launch-to-launch spread, learned and added to intervals."""

import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specgate.io.launch_log import LaunchRecord
from specgate.results import drift
from specgate.results.stats import Summary, t_quantile


def _summary(mean, half, *, df=20.0, confidence=0.95):
    return Summary(21, mean, math.nan, math.nan, mean - half, mean + half, confidence, df)


def _launch(fp, value, *, config="baseline", deployment="dep", se=0.001):
    figure = drift.FIGURE[config]
    return LaunchRecord(fp, deployment, config, "t", figures={figure: (math.log(value), se)})


# -- the prior --------------------------------------------------------------------------------


def test_the_prior_is_the_pooled_spread_of_the_real_sglang_launches():
    tps, cycle = drift.prior("tps"), drift.prior("cycle_ms")
    # By hand: the within-group sums of squares of ln tok/s over the four deployments.
    squares, df = 0.0, 0
    for values in drift.PRIOR_LAUNCHES["tps"].values():
        logs = [math.log(v) for v in values]
        squares += sum((x - statistics.fmean(logs)) ** 2 for x in logs)
        df += len(logs) - 1
    assert tps.sd == pytest.approx(math.sqrt(squares / df))
    assert tps.df == df
    assert tps.prior_launches == sum(len(v) for v in drift.PRIOR_LAUNCHES["tps"].values())
    assert tps.source == cycle.source == "prior"
    assert 0.05 < tps.sd < 0.3
    assert 0.05 < cycle.sd < 0.3
    assert "none of this deployment's yet" in tps.describe()


def test_pooling_ignores_single_launches_and_the_spread_between_configurations():
    sd, df, launches, groups = drift.pooled_sd([[100.0, 100.0], [200.0, 200.0], [50.0]])
    assert (sd, df, launches, groups) == (0.0, 2, 4, 2)


# -- learning ---------------------------------------------------------------------------------


def test_no_launches_of_this_deployment_keep_the_prior():
    found = drift.learn([_launch("other", 100.0), _launch("other", 150.0)], config="baseline",
                        fingerprint="fp", deployment="fp", min_launches=5)
    assert found == drift.prior("tps")


def test_too_few_launches_update_the_prior_and_enough_replace_it():
    values = [100.0, 130.0, 80.0, 120.0, 90.0]
    records = [_launch("fp", v) for v in values]
    own = statistics.stdev([math.log(v) for v in values])
    start = drift.prior("tps")

    updated = drift.learn(records[:3], config="baseline", fingerprint="fp", deployment="fp",
                          min_launches=5)
    assert updated.source == "updated"
    own3 = statistics.stdev([math.log(v) for v in values[:3]])
    assert updated.sd == pytest.approx(math.sqrt((start.df * start.sd**2 + 2 * own3**2)
                                                 / (start.df + 2)))
    assert updated.df == start.df + 2
    assert "updated with 3 launches" in updated.describe()

    learned = drift.learn(records, config="baseline", fingerprint="fp", deployment="fp",
                          min_launches=5)
    assert learned.source == "learned"
    assert learned.sd == pytest.approx(own)
    assert learned.df == 4
    assert "learned from 5 launches of this deployment" in learned.describe()


def test_speculative_launches_pool_every_configuration_of_the_deployment_within_itself():
    # Two drafters on one deployment, each launched three times: one runs twice as fast as the
    # other, which is not spread between launches.
    records = [_launch(fp, v * speed, config="speculative")
               for fp, speed in (("drafter-a", 1.0), ("drafter-b", 2.0))
               for v in (10.0, 11.0, 9.0)]
    records.append(_launch("drafter-c", 99.0, config="speculative", deployment="elsewhere"))
    learned = drift.learn(records, config="speculative", fingerprint="drafter-a",
                          deployment="dep", min_launches=5)
    logs = [math.log(v) for v in (10.0, 11.0, 9.0)]
    assert learned.source == "learned"
    assert learned.sd == pytest.approx(statistics.stdev(logs))
    assert (learned.launches, learned.configurations, learned.df) == (6, 2, 4)


def test_a_learned_spread_is_never_below_the_launches_own_noise():
    records = [_launch("fp", 100.0, se=0.02) for _ in range(6)]
    learned = drift.learn(records, config="baseline", fingerprint="fp", deployment="fp",
                          min_launches=5)
    assert learned.sd == pytest.approx(0.02)


def test_an_unknown_fingerprint_keeps_the_prior():
    records = [_launch("fp", v) for v in (100.0, 200.0, 300.0)]
    assert drift.learn(records, config="baseline", fingerprint=None, deployment=None,
                       min_launches=2) == drift.prior("tps")


# -- the launch term --------------------------------------------------------------------------


def test_the_speedup_adds_both_launches_and_a_pooled_baseline_halves_its_share():
    base, spec = drift.fixed("tps", 0.1), drift.fixed("cycle_ms", 0.2)
    ab = drift.Coverage("ab", base, spec)
    aba = drift.Coverage("aba", base, spec, baseline_launches=2)
    assert ab.term("speedup").var == pytest.approx(0.2**2 + 0.1**2)
    assert aba.term("speedup").var == pytest.approx(0.2**2 + 0.1**2 / 2)
    assert aba.term("baseline").var == pytest.approx(0.1**2 / 2)
    assert ab.term("speculative").var == pytest.approx(0.2**2)
    assert math.isinf(ab.term("speedup").df)  # values set in the profile are known


def test_satterthwaite_degrees_of_freedom_of_the_launch_term():
    base = drift.Spread("tps", 0.1, 13.0, "prior")
    spec = drift.Spread("cycle_ms", 0.2, 3.0, "prior")
    term = drift.Coverage("ab", base, spec).term("speedup")
    assert term.df == pytest.approx((0.01 + 0.04) ** 2 / (0.01**2 / 13 + 0.04**2 / 3))


def test_the_baseline_drift_of_an_aba_run_bounds_both_spreads_from_below():
    base, spec = drift.fixed("tps", 0.02), drift.fixed("cycle_ms", 0.03)
    moved = drift.Bracket(first_tps=100.0, second_tps=130.0)
    aba = drift.Coverage("aba", base, spec, baseline_launches=2, bracket=moved)
    shown = abs(math.log(1.3)) / math.sqrt(2)
    assert moved.sd == pytest.approx(shown)
    assert aba.term("speedup").var == pytest.approx(shown**2 + shown**2 / 2)
    assert "moved +30.0 % between its two launches" in aba.describe("speedup")
    still = drift.Bracket(first_tps=100.0, second_tps=100.5)
    calm = drift.Coverage("aba", base, spec, baseline_launches=2, bracket=still)
    assert calm.term("speedup").var == pytest.approx(0.03**2 + 0.02**2 / 2)


# -- widening ---------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(mean=st.floats(0.2, 5.0), rel=st.floats(0.001, 0.5), df=st.floats(2.0, 200.0),
       launch=st.floats(0.0, 0.5), launch_df=st.one_of(st.just(math.inf), st.floats(1.0, 50.0)))
def test_the_covered_interval_holds_the_one_over_prompts_and_grows_with_the_spread(
        mean, rel, df, launch, launch_df):
    within = _summary(mean, rel * mean, df=df)
    covered = drift.widen(within, drift.Term(launch**2, launch_df))
    assert covered.mean == within.mean
    assert covered.ci_low <= within.ci_low + 1e-12
    assert covered.ci_high >= within.ci_high - 1e-12
    wider = drift.widen(within, drift.Term((launch + 0.05) ** 2, launch_df))
    assert wider.ci_low <= covered.ci_low + 1e-12
    assert wider.ci_high >= covered.ci_high - 1e-12


def test_no_launch_spread_leaves_the_interval_as_it_was():
    within = _summary(1.2, 0.1)
    assert drift.widen(within, drift.Term(0.0, math.inf)) == within


def test_a_known_spread_adds_in_quadrature_on_the_log_scale():
    within = _summary(1.5, 0.15, df=math.inf, confidence=0.95)
    z = t_quantile(0.975, math.inf)
    s_low = math.log(1.5 / 1.35) / z
    covered = drift.widen(within, drift.Term(0.1**2, math.inf))
    assert covered.ci_low == pytest.approx(1.5 * math.exp(-z * math.sqrt(s_low**2 + 0.01)))


def test_an_interval_without_bounds_stays_without():
    one = Summary(1, 1.3, math.nan, math.nan, math.nan, math.nan, 0.95)
    assert drift.widen(one, drift.Term(0.04, math.inf)) == one


def test_more_passes_cannot_decide_what_the_launch_spread_alone_straddles():
    term = drift.Term(0.1**2, math.inf)
    assert drift.undecidable(_summary(1.1, 0.3), term, 1.0)  # ln 1.1 < 1.96 × 0.1
    assert not drift.undecidable(_summary(1.5, 0.6), term, 1.0)


# -- what a claim says ------------------------------------------------------------------------


def test_a_margin_inside_the_spread_is_named_as_such():
    coverage = drift.Coverage("ab", drift.fixed("tps", 0.1), drift.fixed("cycle_ms", 0.1))
    covered = drift.cover(_summary(1.12, 0.05), coverage, "speedup")
    assert covered.within.ci_low > 1.0
    assert covered.judged.ci_low < 1.0
    assert covered.within_spread(1.0)
    text = covered.margin_text(1.0)
    assert "clears 1, but its margin (+12.0 %) lies within the launch-to-launch spread" in text
    assert "14.1 %" in text  # √(0.1² + 0.1²)
    assert covered.details()["within_launch_ci"] == [1.07, 1.17]
    assert covered.details()["included"] is True
    clear = drift.cover(_summary(2.0, 0.05), coverage, "speedup")
    assert not clear.within_spread(1.0)


def test_coverage_round_trips_through_json():
    coverage = drift.Coverage("aba", drift.prior("tps"),
                              drift.Spread("cycle_ms", 0.05, 6.0, "learned", 8, 3),
                              baseline_launches=2, bracket=drift.Bracket(100.0, 104.0),
                              note="a note")
    assert drift.Coverage.from_json(coverage.to_json()) == coverage
