"""A chosen reference: regress.* compare with the run a user names (--specgate-reference-run: a run
id or its start, a verdict file, a run folder) instead of the profile's last passing run, a name
that is none of these stops the run in one sentence, and `specgate compare A B` shows two runs'
figures and claims side by side."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specgate.claims import regress
from specgate.cli import main
from specgate.core.errors import ProfileError
from specgate.io.history import Figure, RunRecord, history_file, record_run
from specgate.report.history import reference_record


def _record(run: str, accept_len: float, *, outcome: str = "passed",
            time: str = "2026-12-01T10:00:00+00:00") -> RunRecord:
    return RunRecord("demo", "/d", outcome, time,
                     {"accept_len": Figure(accept_len, accept_len - 0.05, accept_len + 0.05),
                      "accept_pos1": Figure(accept_len / 3, accept_len / 3 - 0.01,
                                            accept_len / 3 + 0.01)}, run)


def test_a_named_reference_replaces_the_last_passing_run() -> None:
    named, last = _record("run-named", 3.0), _record("run-last", 2.0)
    history = [named, last]
    now = {"accept_len": Figure(2.0, 1.95, 2.05)}
    default = regress.judge_regression("regress.accept_len", now, history, "demo")
    assert default.status.value == "passed", default.message
    assert "last passing run of 'demo'" in default.message
    assert default.details["reference_run"] == "run-last"
    chosen = regress.judge_regression("regress.accept_len", now, history, "demo",
                                      reference=named)
    assert chosen.status.value == "failed", chosen.message
    assert "run run-named named as the reference" in chosen.message
    assert chosen.details["reference_run"] == "run-named"
    assert chosen.details["reference_named"] is True
    # The drop is measured from the named run's figure.
    assert chosen.details["drop"] == pytest.approx(1.0)


def test_a_named_reference_of_a_failed_run_is_used_as_named() -> None:
    failed = _record("run-failed", 1.0, outcome="failed")
    now = {"accept_len": Figure(2.0, 1.95, 2.05)}
    result = regress.judge_regression("regress.accept_len", now, [failed], "demo",
                                      reference=failed)
    assert result.status.value == "passed"
    assert "'demo', failed," in result.message
    # Without it, a failed run is never a reference.
    alone = regress.judge_regression("regress.accept_len", now, [failed], "demo")
    assert alone.reason == "no_reference"


def test_a_named_reference_for_each_draft_position() -> None:
    named, last = _record("run-named", 3.0), _record("run-last", 2.0)
    now = {"accept_pos1": Figure(2.0 / 3, 2.0 / 3 - 0.01, 2.0 / 3 + 0.01)}
    default = regress.judge_position_regression(now, [named, last], "demo", confidence=0.95)
    chosen = regress.judge_position_regression(now, [named, last], "demo", confidence=0.95,
                                               reference=named)
    assert default.status.value == "passed", default.message
    assert chosen.status.value == "failed", chosen.message
    assert "run run-named named as the reference" in chosen.message


def test_a_named_reference_without_the_figure_skips_and_says_so() -> None:
    bare = RunRecord("demo", None, "passed", "t", {}, "run-offline")
    now = {"accept_len": Figure(2.0, 1.95, 2.05), "spec_tps": Figure(100.0, 99.0, 101.0)}
    for cid in ("regress.accept_len", "regress.tps"):
        result = regress.judge_regression(cid, now, [_record("run-last", 2.0)], "demo",
                                          reference=bare)
        assert result.status.value == "skipped"
        assert result.message.startswith("run run-offline named as the reference (")
        assert "measured no" in result.message


# -- resolving what the user named ----------------------------------------------------------------

def _verdict(run_id: str, accept_len: float, *, complete: bool = True) -> dict[str, Any]:
    summary = {"mean": accept_len, "ci_low": accept_len - 0.1, "ci_high": accept_len + 0.1,
               "confidence": 0.95}
    return {"schema": 1, "profile": "demo", "drafter": "/d", "outcome": "passed",
            "written_at": "2026-12-02T10:00:00+00:00", "run": {"id": run_id},
            "complete": complete,
            "figures": {"accept_len": {"label": "accept length", "claim": "spec.accept_len",
                                       "value": accept_len, "unit": "tokens/verify",
                                       "ci_low": accept_len - 0.1, "ci_high": accept_len + 0.1,
                                       "confidence": 0.95}},
            "claims": [{"id": "spec.accept_len", "phase": "phase0", "status": "passed",
                        "observed": accept_len, "expected": ">= 2", "unit": "tokens/verify",
                        "reason": "met", "message": "m", "details": {"accept_len": summary}}]}


def _run_folder(reports: Path, run_id: str, doc: dict[str, Any]) -> Path:
    folder = reports / "runs" / run_id
    folder.mkdir(parents=True)
    (folder / "verdict.json").write_text(json.dumps(doc))
    return folder


def test_a_reference_by_run_id_verdict_file_or_run_folder(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    for run_id, value in (("20261201T100000Z-aaaaaa", 2.1), ("20261202T100000Z-bbbbbb", 2.2)):
        record_run(history_file(reports), profile="demo", drafter="/d", outcome="passed",
                   figures={"accept_len": Figure(value, value - 0.1, value + 0.1)}, run=run_id)
    folder = _run_folder(reports, "20261203T100000Z-cccccc", _verdict("20261203T100000Z-cccccc",
                                                                        2.3))
    assert reference_record("20261201T100000Z-aaaaaa", reports).figures["accept_len"].value == 2.1
    assert reference_record("20261202T", reports).run == "20261202T100000Z-bbbbbb"
    # Only in runs/ (no history line): read from its verdict.
    by_folder_id = reference_record("20261203", reports)
    assert by_folder_id.run == "20261203T100000Z-cccccc"
    assert by_folder_id.figures["accept_len"].value == 2.3
    assert by_folder_id.figures["accept_len"].low == pytest.approx(2.2)
    assert reference_record(str(folder), reports).run == "20261203T100000Z-cccccc"
    elsewhere = tmp_path / "kept" / "verdict.json"
    elsewhere.parent.mkdir()
    elsewhere.write_text(json.dumps(_verdict("from-another-machine", 2.9)))
    from_file = reference_record(str(elsewhere), reports)
    assert from_file.run == "from-another-machine"
    assert from_file.figures["accept_len"].value == 2.9


@pytest.mark.parametrize(("given", "said"), [
    ("nope", "no run with that id in"),
    ("2026120", "3 runs start with it"),
    ("missing/verdict.json", "no such verdict file"),
    ("not-json.json", "not a verdict file: it is not JSON"),
    ("no-status.json", "no-status.json: not a verdict file: its claims cannot be read (a claim "
                       "has no 'status' key)"),
    ("bad-status.json", "bad-status.json: not a verdict file: its claims cannot be read"),
])
def test_a_bad_reference_is_one_sentence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         given: str, said: str) -> None:
    reports = tmp_path / "reports"
    for n in range(3):
        _run_folder(reports, f"2026120{n + 1}T100000Z-00000{n}", _verdict(f"r{n}", 2.0))
    # A run that never started (complete: false) is no candidate for the start of an id.
    _run_folder(reports, "20261209T100000Z-000009", _verdict("r9", 2.0, complete=False))
    (tmp_path / "not-json.json").write_text("{")
    (tmp_path / "no-status.json").write_text(
        json.dumps({"outcome": "passed", "claims": [{"id": "spec.accept_len"}]}))
    (tmp_path / "bad-status.json").write_text(
        json.dumps({"outcome": "passed", "claims": [{"id": "spec.accept_len", "status": "?"}]}))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ProfileError) as err:
        reference_record(given, reports)
    text = str(err.value)
    assert text.startswith(f"--specgate-reference-run {given}: ")
    assert said in text, text
    assert "\n" not in text


# -- through pytest ------------------------------------------------------------------------------

def _gate(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SPECGATE_"))}
    env["SPECGATE_CACHE"] = str(cwd / "cache")
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "gate",
                           "--specgate-profile", "demo", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.slow
def test_the_gate_compares_with_the_named_run(tmp_path: Path) -> None:
    """Two passing runs in the history: the named older one, whose accept length the demo's
    drafter cannot reach, and the last one, which it matches."""
    history = history_file(tmp_path / "reports")
    record_run(history, profile="demo", drafter="/d", outcome="passed",
               figures={"accept_len": Figure(9.0, 8.9, 9.1, "tokens/verify")}, run="run-high")
    record_run(history, profile="demo", drafter="/d", outcome="passed",
               figures={"accept_len": Figure(2.52, 2.47, 2.57, "tokens/verify")}, run="run-last")
    proc = _gate(tmp_path, "-k", "regress", "--specgate-reference-run", "run-high")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "reports" / "verdict.json").read_text())
    claims = {c["id"]: c for c in doc["claims"]}
    accept = claims["regress.accept_len"]
    assert accept["status"] == "failed", accept
    assert "run run-high named as the reference" in accept["message"]
    assert accept["details"]["reference_run"] == "run-high"
    # The named run measured no speculative tok/s: skipped, said as such.
    assert claims["regress.tps"]["status"] == "skipped"
    assert "run-high" in claims["regress.tps"]["message"]


def test_the_gate_stops_at_a_bad_reference_before_anything_launches(tmp_path: Path) -> None:
    proc = _gate(tmp_path, "--specgate-reference-run", "no-such-run")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if "no-such-run" in line]
    assert len(said) == 1, proc.stdout + proc.stderr
    assert said[0].startswith("ERROR: specgate: --specgate-reference-run no-such-run: no run "
                              "with that id")
    assert "[specgate live]" not in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


# -- specgate compare ----------------------------------------------------------------------------

def test_compare_prints_both_runs_figures_and_claims(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reports = tmp_path / "reports"
    a = _verdict("20261201T100000Z-aaaaaa", 2.1)
    b = _verdict("20261202T100000Z-bbbbbb", 2.6)
    b["claims"][0]["status"] = "failed"
    _run_folder(reports, "20261201T100000Z-aaaaaa", a)
    b_file = tmp_path / "b.json"
    b_file.write_text(json.dumps(b))
    assert main(["compare", "--reports", str(reports), "20261201", str(b_file)]) == 0
    out = capsys.readouterr().out
    assert "run 20261201T100000Z-aaaaaa" in out
    assert "run 20261202T100000Z-bbbbbb" in out
    (row,) = [line for line in out.splitlines() if line.startswith("accept length")]
    assert row.split()[2:] == ["2.100", "[2.000,", "2.200]", "2.600", "[2.500,", "2.700]",
                               "+0.500", "(+23.8", "%),", "intervals", "apart"]
    (claim,) = [line for line in out.splitlines() if line.startswith("spec.accept_len")]
    assert claim.split() == ["spec.accept_len", "passed", "2.1", "tokens/verify", "failed",
                             "2.6", "tokens/verify", "status", "changed"]


@pytest.mark.parametrize(("given", "said"), [
    ("nope", "nope: no such verdict file, run folder, or run id in"),
    ("missing.json", "missing.json: no such verdict file"),
])
def test_compare_of_a_bad_name_is_one_sentence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str], given: str,
                                               said: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.json").write_text(json.dumps(_verdict("a", 2.0)))
    assert main(["compare", "a.json", given]) == 1
    out = capsys.readouterr()
    assert out.out == ""
    (line,) = out.err.splitlines()
    assert line.startswith(f"specgate compare: {said}"), line


def test_the_summary_sends_to_the_history_only_where_the_history_lacked_a_run() -> None:
    from specgate.cli import summary

    bare = RunRecord("demo", None, "passed", "t", {}, "run-offline")
    now = {"accept_len": Figure(2.0, 1.95, 2.05)}
    named = regress.judge_regression("regress.accept_len", now, [], "demo", reference=bare)
    first = regress.judge_regression("regress.accept_len", now, [], "demo")
    assert named.reason == first.reason == "no_reference"
    hint = "keep `reports/history/` between runs"
    for result, shown in ((named, False), (first, True)):
        doc = {"outcome": "passed", "profile": "demo", "claims": [result.to_json()]}
        assert (hint in summary.render(doc)) is shown, result.message
