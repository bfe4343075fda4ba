"""Phase 2 data claims: the hidden-state dataset a scale-up will train on is sound and matches."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from specgate.claims import data as dataset
from specgate.claims.result import ClaimResult
from specgate.core.profile import Profile

pytestmark = [pytest.mark.phase2]


@pytest.mark.claim("data.counts")
def test_counts(profile: Profile, check: Callable[[ClaimResult], None]) -> None:
    check(dataset.counts_claim(profile))


@pytest.mark.claim("data.shapes")
def test_shapes(profile: Profile, check: Callable[[ClaimResult], None]) -> None:
    check(dataset.shapes_claim(profile))


@pytest.mark.claim("data.dtypes")
def test_dtypes(profile: Profile, check: Callable[[ClaimResult], None]) -> None:
    check(dataset.dtypes_claim(profile))


@pytest.mark.claim("data.finite")
def test_finite(profile: Profile, check: Callable[[ClaimResult], None]) -> None:
    check(dataset.finite_claim(profile))


@pytest.mark.claim("data.capture_layers")
def test_capture_layers(profile: Profile, check: Callable[[ClaimResult], None]) -> None:
    check(dataset.capture_layers_claim(profile))


@pytest.mark.claim("data.vocab_map")
def test_vocab_map(profile: Profile, check: Callable[[ClaimResult], None]) -> None:
    check(dataset.vocab_map_claim(profile))
