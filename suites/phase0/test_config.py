"""Phase 0 config claims: the [drafter.expect] fields, and the drafter against its target."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from specgate.claims import config as config_claims
from specgate.claims.result import ClaimResult
from specgate.core.profile import Profile

pytestmark = [pytest.mark.probe, pytest.mark.phase0, pytest.mark.gate]


# The plugin parametrizes config_field from [drafter.expect] and formats the claim id with it.
@pytest.mark.claim("config.{config_field}")
def test_config_field(config_field: str, profile: Profile,
                      check: Callable[[ClaimResult], None]) -> None:
    check(config_claims.config_field_claim(profile, config_field))


@pytest.mark.claim("config.target_compat")
def test_target_compat(profile: Profile, check: Callable[[ClaimResult], None]) -> None:
    check(config_claims.target_compat_claim(profile))
