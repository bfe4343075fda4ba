"""Phase 1 offline evaluation: teacher-forced accuracy, loss and predicted accept length."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from specgate.claims import eval as eval_claims
from specgate.claims.result import ClaimResult
from specgate.core.profile import Profile

pytestmark = [pytest.mark.phase1]


@pytest.mark.claim("eval.teacher_forced")
def test_teacher_forced(profile: Profile, check: Callable[[ClaimResult], None]) -> None:
    check(eval_claims.teacher_forced_claim(profile))
