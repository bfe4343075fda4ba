"""Phase 0 baseline claim: single-stream decode tok/s without speculation."""

import pytest

from specgate.claims import perf as perf_claims

pytestmark = [pytest.mark.probe, pytest.mark.phase0, pytest.mark.live]


@pytest.mark.claim("perf.baseline_tps")
def test_baseline_tps(profile, live_results, check):
    check(perf_claims.baseline_tps_claim(profile, live_results))
