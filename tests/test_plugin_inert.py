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
    # A pytest.ini above the suite: the layout where a rootdir rewrite used to refuse the run.
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(FOREIGN_CONFTEST)
    (suite / "test_foreign.py").write_text(FOREIGN_TEST)
    other = tmp_path / "elsewhere"
    other.mkdir()
    with_plugin = _run(tmp_path, "--reports", str(other), "suite")
    without = _run(tmp_path, "-p", "no:specgate", "--reports", str(other), "suite")
    out = with_plugin.stdout + with_plugin.stderr
    assert with_plugin.returncode == without.returncode == 1, out
    assert "ValueError: the foreign suite's own error" in out
    assert "specgate" not in out.replace("plugins: specgate", "")
    assert "1 failed, 1 passed" in out
    assert not (tmp_path / "reports").exists()
