"""Phase 0 vocab claims: the d2t/t2d invariants, and agreement with a reference drafter's map."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from specgate.claims import vocab
from specgate.claims.result import ClaimResult
from specgate.core.profile import Profile

pytestmark = [pytest.mark.probe, pytest.mark.phase0, pytest.mark.gate]


@pytest.mark.claim("vocab.invariants")
def test_invariants(profile: Profile, check: Callable[[ClaimResult], None]) -> None:
    check(vocab.invariants_claim(profile))


@pytest.mark.claim("vocab.d2t_match")
def test_d2t_match(profile: Profile, check: Callable[[ClaimResult], None]) -> None:
    check(vocab.d2t_match_claim(profile))


@pytest.mark.claim("vocab.t2d_match")
def test_t2d_match(profile: Profile, check: Callable[[ClaimResult], None]) -> None:
    check(vocab.t2d_match_claim(profile))
