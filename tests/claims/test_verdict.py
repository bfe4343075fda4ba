"""The verdict file: outcome rules, atomic writes, JSON shape."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from specgate.claims import result as claims
from specgate.claims import verdict
from specgate.claims.result import ClaimResult, Status


def _c(status: Status) -> ClaimResult:
    return ClaimResult("x.y", "phase0", status, "m")


P, F, B, S = Status.PASSED, Status.FAILED, Status.BROKEN, Status.SKIPPED


@pytest.mark.parametrize(("statuses", "interrupted", "internal_error", "outcome"), [
    ([P, P], False, False, "passed"),
    ([P, S], False, False, "passed"),  # a skip with a reason does not spoil a pass
    ([], False, False, "error"),  # nothing evaluated is never a pass
    ([S, S], False, False, "error"),
    ([P, F], False, False, "failed"),
    ([F, B, S], False, False, "failed"),  # a definite failure outranks a broken claim
    ([P, B], False, False, "error"),
    ([P, P], False, True, "error"),  # a harness crash outside any claim
    ([F], False, True, "failed"),
    ([F, P], True, False, "interrupted"),  # an interrupted run never claims an outcome
    ([], True, False, "interrupted"),
])
def test_outcome_rules(statuses: list[Status], interrupted: bool, internal_error: bool,
                       outcome: str) -> None:
    assert verdict.outcome_of([_c(s) for s in statuses], interrupted=interrupted,
                              internal_error=internal_error) == outcome


@given(st.lists(st.sampled_from(list(Status)), max_size=8))
def test_order_of_claims_does_not_change_the_outcome(statuses: list[Status]) -> None:
    results = [_c(s) for s in statuses]
    assert verdict.outcome_of(results) == verdict.outcome_of(results[::-1])


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
        "expected": ">= 31680", "unit": "positions", "reason": "not_met",
        "message": "d2t: 252 of 32000"}
    assert [p.name for p in path.parent.iterdir()] == ["verdict.json"]


def test_claim_round_trip() -> None:
    c = claims.passed("spec.accept_len", "phase0", "ok", observed=2.5, expected=">= 2.46",
                      details={"ci": (2.4, 2.6)})
    back = ClaimResult.from_json(json.loads(json.dumps(c.to_json())))
    assert back.id == c.id
    assert back.status is Status.PASSED
    assert back.details == {"ci": [2.4, 2.6]}
    assert back.reason == c.reason == "met"


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


def test_a_run_explains_its_counts_and_writes_the_verdict_as_its_other_files(
        tmp_path: Path) -> None:
    """A real offline probe on the demo profile under umask 027: verdict.json gets the mode
    junit.xml gets (a CI uploader in the file's group reads both), and the closing block says
    how pytest's collected / deselected / selected counts come to the claims in the verdict."""
    import os
    import re
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SPECGATE_"))}
    env["SPECGATE_CACHE"] = str(tmp_path / "cache")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m",
                           "probe and not live", "--specgate-profile=demo"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300, umask=0o027)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    reports = tmp_path / "reports"
    run_dir = reports / json.loads((reports / "verdict.json").read_text())["run"]["folder"]
    for folder in (reports, run_dir):
        modes = {name: (folder / name).stat().st_mode & 0o777
                 for name in ("verdict.json", "junit.xml")}
        assert modes == {"verdict.json": 0o640, "junit.xml": 0o640}, (folder, modes)
    doc = json.loads((reports / "verdict.json").read_text())
    header = re.search(r"collected (\d+) items / (\d+) deselected / (\d+) selected", proc.stdout)
    assert header, proc.stdout[:2000]
    collected, deselected, selected = (int(g) for g in header.groups())
    assert selected == len(doc["claims"]) == sum(doc["counts"].values())
    line = re.search(r"^  (\d+) claims of (\d+) tests collected: (\d+) deselected by "
                     r"-m 'probe and not live', (\d+) at concurrency levels the profile does "
                     r"not run$", proc.stdout, re.MULTILINE)
    assert line, proc.stdout[-3000:]
    claims_n, collected_n, by_marker, levelless = (int(g) for g in line.groups())
    assert (claims_n, collected_n) == (selected, collected)
    assert by_marker + levelless == deselected
    assert levelless == 5  # the demo has one concurrency level: its five @c<level> claims


def test_a_matrix_verdict_names_each_claims_checkpoint_and_none_for_the_runs_own() -> None:
    from specgate.claims import verdict as verdict_mod
    from specgate.claims.result import broken, passed

    doc = verdict_mod.build_matrix(
        [("a", passed("vocab.invariants", "phase0", "ok")),
         ("b", broken("vocab.invariants", "phase0", "no drafter"))],
        [broken("profile", "phase0", "unreadable")], profile="p", outcome="error")
    assert [(c["id"], c["checkpoint"]) for c in doc["claims"]] == [
        ("vocab.invariants", "a"), ("vocab.invariants", "b"), ("profile", None)]
    assert doc["drafter"] is None
    assert doc["counts"]["broken"] == 2
