"""The gate against a known truth when the server drifts between launches: seeded launches of the
simulator's model (specgate.testing.drift_trials), measured in-process and judged as a probe
judges them."""

import math

import pytest

from specgate.claims.result import Status
from specgate.testing import drift_trials
from specgate.testing.simulator import model

# The per-launch spread real SGLang showed (the prior's order: 11 % of baseline tok/s, 12 % of
# the verify cycle), and twice that.
REAL = 0.12
TWICE = 0.25


def _false_passes(trials):
    return sum(t.passed for t in trials)


def test_the_constructed_deployment_has_the_true_speedup_asked_for():
    for wanted in (1.0, 1.5):
        _, spec = drift_trials.deployment(wanted)
        assert model.truth(spec).speedup == pytest.approx(wanted)
    # Measured without drift or noise, the harness sees that speed-up.
    trials = drift_trials.Trials(1.0, spread=0.0, noise=0.0,
                                 profile_=drift_trials.profile(spread=0.01))
    result = trials.run("no-drift").result
    assert result.observed == pytest.approx(1.0, abs=0.005)


def test_launch_speeds_are_the_simulators_draws():
    trial = drift_trials.Trials(1.0, spread=REAL).run("seed-7")
    assert trial.speeds == (model.launch_speed(REAL, "seed-7/0/baseline"),
                            model.launch_speed(REAL, "seed-7/1/speculative"))
    assert trial.speeds[0] != trial.speeds[1]


def test_without_the_launch_spread_a_true_speedup_of_one_passes_half_the_time():
    # What the gate did before it knew of launches: the drift alone decides.
    trials = drift_trials.Trials(1.0, spread=REAL, profile_=drift_trials.profile(spread=1e-6))
    runs = [trials.run(f"blind-{i}") for i in range(60)]
    assert _false_passes(runs) > 15


@pytest.mark.slow
@pytest.mark.parametrize("design", ["ab", "aba"])
def test_a_true_speedup_of_one_never_passes_with_confidence_on_a_new_deployment(design):
    """Every probe the first of its deployment (the prior): 300 seeded launch sets."""
    profile = drift_trials.profile(design)
    runs = [drift_trials.Trials(1.0, spread=REAL, profile_=profile).run(f"first-{i}")
            for i in range(300)]
    assert _false_passes(runs) / len(runs) <= drift_trials.nominal_false_pass(profile)
    assert all(r.coverage.speculative.source == "prior" for r in runs)
    margins = [r for r in runs if r.result.reason == "within_launch_spread"]
    assert margins, "some launch sets clear 1 over prompts alone and are held by the spread"
    assert all(r.result.status is Status.FAILED for r in margins)
    assert "lies within the launch-to-launch spread" in margins[0].result.message


@pytest.mark.slow
@pytest.mark.parametrize(("design", "spread"), [("ab", REAL), ("ab", TWICE), ("aba", TWICE)])
def test_a_true_speedup_of_one_stays_under_nominal_as_the_spread_is_learned(design, spread):
    """400 successive probes of one deployment: the prior, then the deployment's own launches,
    whatever their spread (twice the prior's too)."""
    profile = drift_trials.profile(design)
    trials = drift_trials.Trials(1.0, spread=spread, profile_=profile)
    runs = [trials.run(f"learn-{design}-{spread}-{i}") for i in range(400)]
    assert _false_passes(runs) / len(runs) <= drift_trials.nominal_false_pass(profile)
    last = runs[-1].coverage
    assert last.baseline.source == last.speculative.source == "learned"
    assert last.baseline.sd == pytest.approx(spread, rel=0.15)


def test_a_true_speedup_of_1_5_passes_once_a_steady_deployment_is_learned():
    trials = drift_trials.Trials(1.5, spread=0.05)
    runs = [trials.run(f"fast-{i}") for i in range(120)]
    learned = [r for r in runs if r.coverage.speculative.source == "learned"]
    assert len(learned) >= 100
    assert drift_trials.pass_rate(learned) >= 0.95
    assert all(r.result.observed > 1.2 for r in runs)


def test_the_prior_alone_does_not_confirm_1_5_at_the_real_spread():
    # Honest, not a limitation to hide: one launch pair cannot tell 1.5 from 1.0 when each
    # launch may move 12 %; the claim says why.
    runs = [drift_trials.Trials(1.5, spread=REAL).run(f"one-{i}") for i in range(40)]
    held = [r for r in runs if r.result.reason == "within_launch_spread"]
    assert held
    assert all(math.isfinite(r.result.details["launch_spread"]["sd"]) for r in held)


def _first_probes(kind, true_speedup, spread, noise, n, spec_spread=None, gpu=""):
    from specgate.results.deployment import Deployment

    return [drift_trials.Trials(true_speedup, spread=spread, noise=noise,
                                deployment_=Deployment(kind, gpu=gpu), spec_spread=spec_spread)
            .run(f"first-{kind}-{true_speedup}-{i}") for i in range(n)]


@pytest.mark.slow
def test_a_first_probe_of_a_gpu_bound_deployment_decides_what_the_host_bound_prior_cannot():
    """A new GPU-bound deployment on an H200 (launches moving the baseline 0.64 % and the verify
    cycle 2.3 %, per-request noise 1.2 %, as the 8B-shaped target showed on real SGLang): a true
    speed-up of 1.3 passes nearly every first probe with the GPU-bound prior, where judging the
    same launches with the host-bound prior (an unclassified deployment) passes few; a true 1.00
    passes no more often than the interval's nominal one-sided error."""
    drifts = {"spread": 0.0064, "spec_spread": 0.023, "gpu": "NVIDIA H200"}
    gpu = _first_probes("GPU-bound", 1.3, noise=0.012, n=100, **drifts)
    assert drift_trials.pass_rate(gpu) >= 0.95
    assert all(r.coverage.speculative.prior == "GPU-bound" for r in gpu)
    unclassified = _first_probes("unknown", 1.3, noise=0.012, n=100, **drifts)
    assert drift_trials.pass_rate(unclassified) <= 0.5
    assert all(r.coverage.speculative.prior == "host-bound" for r in unclassified)
    null = _first_probes("GPU-bound", 1.0, noise=0.012, n=200, **drifts)
    assert _false_passes(null) / len(null) <= drift_trials.nominal_false_pass(
        drift_trials.profile())
