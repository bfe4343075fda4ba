"""Phase 0 claims at every [bench] concurrency level other than the gate's (reported, never
gating): baseline throughput, accept length, break-even and speed-up, as `<id>@c<level>`."""

import pytest

from specgate.claims import levels

pytestmark = [pytest.mark.probe, pytest.mark.phase0, pytest.mark.live, pytest.mark.concurrency]


# The plugin parametrizes concurrency_level from [bench] concurrency, leaving out the gate's.
@pytest.mark.claim("perf.baseline_tps@c{concurrency_level}")
def test_baseline_tps_at_level(concurrency_level, profile, live_results, check):
    check(levels.level_claim("perf.baseline_tps", profile, live_results, concurrency_level))


@pytest.mark.claim("spec.accept_len@c{concurrency_level}")
def test_accept_len_at_level(concurrency_level, profile, live_results, check):
    check(levels.level_claim("spec.accept_len", profile, live_results, concurrency_level))


@pytest.mark.claim("spec.breakeven@c{concurrency_level}")
def test_breakeven_at_level(concurrency_level, profile, live_results, check):
    check(levels.level_claim("spec.breakeven", profile, live_results, concurrency_level))


@pytest.mark.claim("spec.speedup@c{concurrency_level}")
def test_speedup_at_level(concurrency_level, profile, live_results, check):
    check(levels.level_claim("spec.speedup", profile, live_results, concurrency_level))


@pytest.mark.claim("spec.parity@c{concurrency_level}")
def test_parity_at_level(concurrency_level, profile, live_results, check):
    check(levels.level_claim("spec.parity", profile, live_results, concurrency_level))
