"""Phase 0 environment claims: clean GPUs before each launch, the server's environment."""

import pytest

from specgate.claims import perf as perf_claims

pytestmark = [pytest.mark.probe, pytest.mark.phase0, pytest.mark.live]


@pytest.mark.claim("env.gpu_clean")
def test_gpu_clean(profile, live_results, check):
    check(perf_claims.gpu_clean_claim(profile, live_results))


@pytest.mark.claim("env.server_env")
def test_server_env(profile, live_results, check):
    check(perf_claims.server_env_claim(profile, live_results))
