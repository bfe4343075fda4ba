"""Phase 0 regression claims: no drop since the last passing run of the same profile."""

import pytest

from specgate.claims import regress

pytestmark = [pytest.mark.probe, pytest.mark.phase0, pytest.mark.live, pytest.mark.gate]


@pytest.mark.claim("regress.accept_len")
def test_regress_accept_len(profile, live_results, reports_dir, check):
    check(regress.regression_claim("regress.accept_len", profile, live_results, reports_dir))


@pytest.mark.claim("regress.tps")
def test_regress_tps(profile, live_results, reports_dir, check):
    check(regress.regression_claim("regress.tps", profile, live_results, reports_dir))
