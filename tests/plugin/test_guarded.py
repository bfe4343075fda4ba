"""Every claim guarded: an exception no claim expected is a broken claim with one sentence, the
report writers never crash pytest, a verdict that lacks a claim is never complete, and the
reports folder is checked before a run writes there (tests/io/test_runs.py: runs that share it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import suite_support as ss

SUITE = ss.suite(
    """
def divide():
    return 1 / int(os.environ.get("DIVISOR", "0"))
""",
    ss.claim("divides", 'check(claims.passed("demo.divides", "phase0", f"got {divide()}"))'),
    ss.claim("recurses", """
        def deeper(n):
            return deeper(n + 1)
        check(claims.passed("demo.recurses", "phase0", f"got {deeper(0)}"))"""),
    ss.claim("fine", 'check(claims.passed("demo.fine", "phase0", "fine"))'),
    ss.claim("last", 'check(claims.passed("demo.last", "phase0", "fine"))'),
    imports="import os")

# A plugin that crashes pytest's reporting (an INTERNALERROR) after the first claim.
CRASHER = '''
def pytest_runtest_logfinish(nodeid, location):
    if nodeid.endswith("test_divides"):
        raise RuntimeError("reporting plugin blew up")
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    # the drafter folder exists: its contents are what is tested
    return ss.project(tmp_path, SUITE, name="guarded")


def _run(project: Path, *args: str | bytes, env: dict[str, str] | None = None,
         ) -> subprocess.CompletedProcess[str]:
    argv: list[str | bytes] = [sys.executable, "-m", "pytest", "--profile=p.toml", *args]
    return subprocess.run(argv, cwd=project, capture_output=True, text=True, timeout=120,
                          env=env, errors="replace")


def _verdict(project: Path, reports: str = "reports") -> dict:
    return json.loads((project / reports / "verdict.json").read_text())


def test_an_unexpected_exception_is_a_broken_claim_with_one_sentence(project: Path) -> None:
    proc = _run(project)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    doc = _verdict(project)
    by_id = {c["id"]: c for c in doc["claims"]}
    assert by_id["demo.divides"]["status"] == "broken"
    assert by_id["demo.recurses"]["status"] == "broken"
    assert by_id["demo.fine"]["status"] == "passed"
    message = by_id["demo.divides"]["message"]
    assert "ZeroDivisionError: division by zero" in message
    assert str(project / "d") in message  # the input it was checking
    assert "\n" not in message
    assert "RecursionError" in by_id["demo.recurses"]["message"]
    assert "Traceback" not in out
    assert "def divide" not in out
    assert doc["complete"] is True
    results = [json.loads(r.read_text())
               for r in (project / "reports" / "allure-results").glob("*-result.json")]
    status = {r["name"]: r["status"] for r in results}
    assert status["demo.divides"] == "broken"


def test_an_internal_error_leaves_an_incomplete_verdict(project: Path) -> None:
    (project / "crasher.py").write_text(CRASHER)
    env = {**os.environ, "PYTHONPATH": str(project)}
    proc = _run(project, "-p", "crasher", env=env)
    assert proc.returncode == 3, proc.stdout + proc.stderr  # pytest's INTERNALERROR
    doc = _verdict(project)
    assert doc["complete"] is False
    assert doc["outcome"] == "error"
    never = {c["id"] for c in doc["claims"] if "never reported a result" in c["message"]}
    assert never == {"demo.recurses", "demo.fine", "demo.last"}


def test_a_drafter_path_that_is_not_utf8_does_not_crash_the_writers(project: Path) -> None:
    os.mkdir(os.fsencode(str(project)) + b"/dr\xffafter")  # it exists: only its name is odd
    proc = _run(project, b"--drafter=" + os.fsencode(str(project)) + b"/dr\xffafter", "-k",
                "fine or last")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "INTERNALERROR" not in out
    doc = _verdict(project)
    assert doc["complete"] is True
    assert doc["outcome"] == "passed"
    results = [json.loads(r.read_text())
               for r in (project / "reports" / "allure-results").glob("*-result.json")]
    assert len(results) == 2
    drafters = {p["value"] for r in results for p in r["parameters"] if p["name"] == "drafter"}
    assert drafters == {f"'{project}/dr\\xffafter'"}  # allure shows parameters as repr


def _is_one_clear_message(proc: subprocess.CompletedProcess[str], said: str) -> None:
    """The run was refused as a usage error (exit 4) with `said`, and no traceback."""
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out
    assert said in out
    assert "INTERNALERROR" not in out
    assert "Traceback" not in out


def test_reports_that_is_a_file_is_one_clear_message(project: Path) -> None:
    (project / "out").write_text("not a folder")
    _is_one_clear_message(_run(project, "--reports=out"), "is a file")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to a read-only folder anyway")
def test_a_read_only_reports_folder_is_one_clear_message(project: Path) -> None:
    (project / "ro").mkdir()
    (project / "ro").chmod(0o555)
    try:
        proc = _run(project, "--reports=ro")
    finally:
        (project / "ro").chmod(0o755)
    _is_one_clear_message(proc, "cannot write the reports folder")


def test_reports_under_a_file_is_one_clear_message(project: Path) -> None:
    """The read-only case as root sees it: no folder can be made there."""
    (project / "afile").write_text("")
    _is_one_clear_message(_run(project, "--reports=afile/sub"),
                          "cannot write the reports folder (Not a directory)")
