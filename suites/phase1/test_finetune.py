"""Phase 1 fine-tune claims: the init loads, its vocab map lines up, the training logs progress."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from specgate.claims import finetune
from specgate.claims.result import ClaimResult
from specgate.core.profile import Profile

pytestmark = [pytest.mark.phase1]


@pytest.mark.claim("finetune.init_parity")
def test_init_parity(profile: Profile, check: Callable[[ClaimResult], None]) -> None:
    check(finetune.init_parity_claim(profile))


@pytest.mark.claim("finetune.vocab_alignment")
def test_vocab_alignment(profile: Profile, check: Callable[[ClaimResult], None]) -> None:
    check(finetune.vocab_alignment_claim(profile))


@pytest.mark.claim("finetune.initial_loss")
def test_initial_loss(profile: Profile, check: Callable[[ClaimResult], None]) -> None:
    check(finetune.initial_loss_claim(profile))


@pytest.mark.claim("finetune.progress")
def test_progress(profile: Profile, check: Callable[[ClaimResult], None]) -> None:
    check(finetune.progress_claim(profile))
