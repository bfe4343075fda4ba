"""Phase 0 speculative claims: accept length, break-even and speedup over the baseline."""

import pytest

from specgate.claims import perf as perf_claims

pytestmark = [pytest.mark.probe, pytest.mark.phase0, pytest.mark.live, pytest.mark.gate]


@pytest.mark.claim("spec.accept_len")
def test_accept_len(profile, live_results, check):
    check(perf_claims.accept_len_claim(profile, live_results))


@pytest.mark.claim("spec.breakeven")
def test_breakeven(profile, live_results, check):
    check(perf_claims.breakeven_claim(profile, live_results))


@pytest.mark.claim("spec.speedup")
def test_speedup(profile, live_results, check):
    check(perf_claims.speedup_claim(profile, live_results))
