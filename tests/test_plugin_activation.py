"""The plugin acts only when asked, and its options work with a space or '=' from any folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CLAIM = '''
import pytest
from specgate.claims import result as claims

@pytest.mark.claim("demo.pass")
@pytest.mark.phase0
def test_pass(check, profile):
    check(claims.passed("demo.pass", "phase0", f"drafter {profile.drafter.path}"))
'''


def _pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=120)


def test_a_foreign_suite_sees_nothing_of_specgate(tmp_path: Path) -> None:
    (tmp_path / "test_other.py").write_text("def test_ok():\n    assert True\n")
    proc = _pytest(tmp_path, "-q")
    off = _pytest(tmp_path, "-q", "-p", "no:specgate")
    assert proc.returncode == off.returncode == 0, proc.stdout + proc.stderr
    assert "specgate" not in proc.stdout + proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == [
        "test_other.py"]
    # A foreign suite with nothing to run keeps pytest's own exit code 5.
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _pytest(empty, "-q").returncode == 5
    assert not (empty / "reports").exists()


def test_separated_path_values_keep_the_projects_configuration(tmp_path: Path) -> None:
    project = tmp_path / "project"
    elsewhere = tmp_path / "elsewhere" / "drafter"
    elsewhere.mkdir(parents=True)
    (project / "claims").mkdir(parents=True)
    (project / "claims" / "test_claim.py").write_text(CLAIM)
    profile = tmp_path / "elsewhere" / "p.toml"
    profile.write_text('name = "mine"\n')
    # The project's own configuration, which pytest would miss when it takes the drafter's
    # folder for a test path: the marker opts in, the addopts adds the claims folder.
    (project / "pytest.ini").write_text("[pytest]\naddopts = claims\n")
    proc = _pytest(project, "--profile", str(profile), "--drafter", str(elsewhere))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"rootdir: {project}" in proc.stdout
    assert "configfile: pytest.ini" in proc.stdout
    doc = json.loads((project / "reports" / "verdict.json").read_text())
    assert doc["claims"][0]["message"] == f"drafter {elsewhere}"


def test_a_run_that_collects_no_claim_says_why(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text('name = "mine"\n')
    (tmp_path / "test_claim.py").write_text(CLAIM)
    proc = _pytest(tmp_path, "--profile=p.toml", "-m", "phase2", str(tmp_path))
    assert proc.returncode == 1
    assert ("no claim ran: the selection -m 'phase2' matched none of the 1 collected tests"
            in proc.stdout), proc.stdout
    assert "outcome ERROR\n" in proc.stdout
    assert json.loads((tmp_path / "reports" / "verdict.json").read_text())["nothing_ran"]


def test_the_installed_suites_run_without_a_path(tmp_path: Path) -> None:
    (tmp_path / "my.toml").write_text('name = "mine"\n')
    proc = _pytest(tmp_path, "--collect-only", "-q", "--profile", "my.toml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "test_weights.py::test_layout" in proc.stdout
    assert "test_spec.py::test_speedup" in proc.stdout
