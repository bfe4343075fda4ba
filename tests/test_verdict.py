"""The verdict file: outcome rules, atomic writes, JSON shape."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from specgate.claims import result as claims
from specgate.claims.result import ClaimResult, Status
from specgate.report import verdict


def _c(status: Status) -> ClaimResult:
    return ClaimResult("x.y", "phase0", status, "m")


@given(st.lists(st.sampled_from(list(Status)), max_size=8), st.booleans())
def test_outcome_rules(statuses: list[Status], interrupted: bool) -> None:
    out = verdict.outcome_of([_c(s) for s in statuses], interrupted=interrupted)
    if interrupted:
        assert out == "interrupted"
    elif Status.FAILED in statuses:
        assert out == "failed"
    elif Status.BROKEN in statuses or Status.PASSED not in statuses:
        assert out == "error"
    else:
        assert out == "passed"


def test_written_document_matches_the_contract(tmp_path: Path) -> None:
    result = claims.failed("vocab.d2t_match", "phase0", "d2t: 252 of 32000",
                           observed=np.int64(252), expected=">= 31680", unit="positions")
    doc = verdict.build([result], profile="p", drafter="/d", outcome="failed")
    path = tmp_path / "deep" / "verdict.json"
    verdict.write(path, doc)
    data = json.loads(path.read_text())
    assert data["schema"] == 1
    assert data["outcome"] == "failed"
    assert data["claims"][0] == {
        "id": "vocab.d2t_match", "phase": "phase0", "status": "failed", "observed": 252,
        "expected": ">= 31680", "unit": "positions", "message": "d2t: 252 of 32000"}
    assert [p.name for p in path.parent.iterdir()] == ["verdict.json"]


def test_claim_round_trip() -> None:
    c = claims.passed("spec.accept_len", "phase0", "ok", observed=2.5, expected=">= 2.46",
                      details={"ci": (2.4, 2.6)})
    back = ClaimResult.from_json(json.loads(json.dumps(c.to_json())))
    assert back.id == c.id
    assert back.status is Status.PASSED
    assert back.details == {"ci": [2.4, 2.6]}


def test_non_finite_figures_become_null_and_the_file_is_strict_json(tmp_path: Path) -> None:
    result = claims.failed("finetune.initial_loss", "phase1", "the loss is NaN",
                           observed=float("nan"), expected=np.float64("inf"),
                           details={"ci": (float("-inf"), 1.0)})
    doc = verdict.build([result], profile="p", drafter=None, outcome="failed")
    path = tmp_path / "verdict.json"
    verdict.write(path, doc)

    def refuse(name: str) -> None:
        raise ValueError(f"non-standard JSON constant {name}")

    data = json.loads(path.read_text(), parse_constant=refuse)
    assert data["claims"][0]["observed"] is None
    assert data["claims"][0]["expected"] is None
    assert data["claims"][0]["details"] == {"ci": [None, 1.0]}
