"""The plugin stays out of a foreign suite's way: its options, its errors, its exit codes."""

from __future__ import annotations

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
