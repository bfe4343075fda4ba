"""The plugin stays out of a foreign suite's way: its options, its errors, its exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

FOREIGN_CONFTEST = '''
def pytest_addoption(parser):
    parser.addoption("--reports", help="the foreign suite's own option")
'''

FOREIGN_TEST = '''
import pytest

@pytest.mark.claim("x.y")
def test_marked_and_failing(request):
    raise ValueError("the foreign suite's own error")

def test_reads_its_option(request):
    assert request.config.getoption("--reports") is not None
'''


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def test_a_foreign_suite_keeps_its_options_errors_and_exit_code(tmp_path: Path) -> None:
    # The option's value is a folder with a pytest.ini and the project has none: a rootdir
    # correction must not take the foreign --reports for specgate's own.
    project = tmp_path / "project"
    suite = project / "suite"
    suite.mkdir(parents=True)
    (suite / "conftest.py").write_text(FOREIGN_CONFTEST)
    (suite / "test_foreign.py").write_text(FOREIGN_TEST)
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "pytest.ini").write_text("[pytest]\n")
    with_plugin = _run(project, "--reports", str(other), "suite")
    without = _run(project, "-p", "no:specgate", "--reports", str(other), "suite")
    out = with_plugin.stdout + with_plugin.stderr
    assert with_plugin.returncode == without.returncode == 1, out
    # The marked test fails with its own error, not one of the plugin's.
    assert "::test_marked_and_failing - ValueError" in out, out
    assert "specgate" not in out.replace("plugins: specgate", "")
    assert "1 failed, 1 passed" in out
    assert not (project / "reports").exists()


# A foreign project's conftest that writes down, at the end of its session, which modules of
# specgate (and of the libraries specgate's core needs) are loaded, and whether specgate's run
# state was registered.
RECORDING_CONFTEST = '''
import json, os, sys

WATCHED = ("specgate", "pydantic", "psutil", "requests", "filelock")

def pytest_sessionfinish(session):
    loaded = sorted(m for m in sys.modules if m.startswith(WATCHED))
    record = {"modules": loaded,
              "active": session.config.pluginmanager.has_plugin("specgate-session")}
    with open(os.environ["RECORD_TO"], "w") as fh:
        json.dump(record, fh)
'''
# What pytest must import to find out the plugin is not wanted: its entry point and options.
ENTRY_POINT = ["specgate", "specgate.plugin", "specgate.plugin.entry", "specgate.plugin.options"]


def _recorded(project: Path, *args: str, env: dict[str, str] | None = None,
              ) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    record = project.parent / f"{project.name}-record.json"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SPECGATE_", "PYTEST_"))}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=project, capture_output=True, text=True, timeout=120, check=False,
                          env={**base, **(env or {}), "RECORD_TO": str(record)})
    return proc, json.loads(record.read_text())


def _foreign(tmp_path: Path, name: str = "foreign") -> Path:
    project = tmp_path / name
    project.mkdir()
    (project / "conftest.py").write_text(RECORDING_CONFTEST)
    (project / "test_foreign.py").write_text("def test_ok():\n    assert True\n")
    return project


def test_a_suite_that_did_not_ask_loads_nothing_of_specgate(tmp_path: Path) -> None:
    project = _foreign(tmp_path)
    proc, with_plugin = _recorded(project, "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _, without = _recorded(project, "-q", "-p", "no:specgate")
    ours = [m for m in with_plugin["modules"] if m.startswith("specgate")]
    assert ours == ENTRY_POINT, ours
    assert with_plugin["active"] is False
    # pydantic, psutil, requests, filelock: none more than the suite loads without specgate.
    libraries = [m for m in with_plugin["modules"] if not m.startswith("specgate")]
    assert libraries == without["modules"] == [], libraries
