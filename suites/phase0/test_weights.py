"""Phase 0 weight claims: layout against config.json, shape parity with a reference, health."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from specgate.claims import weights
from specgate.claims.result import ClaimResult
from specgate.core.profile import Profile

pytestmark = [pytest.mark.probe, pytest.mark.phase0, pytest.mark.gate]


@pytest.mark.claim("weights.layout")
def test_layout(profile: Profile, check: Callable[[ClaimResult], None]) -> None:
    check(weights.layout_claim(profile))


@pytest.mark.claim("weights.shape_parity")
def test_shape_parity(profile: Profile, check: Callable[[ClaimResult], None]) -> None:
    check(weights.shape_parity_claim(profile))


@pytest.mark.claim("weights.health")
def test_health(profile: Profile, check: Callable[[ClaimResult], None]) -> None:
    check(weights.health_claim(profile))
