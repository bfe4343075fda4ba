"""Phase 1 offline evaluation: teacher-forced accuracy, loss and predicted accept length."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from specgate import evaluate
from specgate.claims import ClaimResult
from specgate.profile import Profile

pytestmark = [pytest.mark.phase1]


@pytest.mark.claim("eval.teacher_forced")
def test_teacher_forced(profile: Profile, check: Callable[[ClaimResult], None]) -> None:
    check(evaluate.teacher_forced_claim(profile))
