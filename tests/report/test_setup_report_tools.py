"""scripts/setup-report-tools: it says which system packages it installs, and why, before it
installs them, and installs none when asked not to."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "setup-report-tools"


@pytest.fixture
def bare_root(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A PATH with no node, npm or chromium, where the user is root and apt-get only notes
    that it ran."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "id").write_text("#!/bin/sh\necho 0\n")
    (bin_dir / "apt-get").write_text('#!/bin/sh\necho "APT-GET $*" >&2\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("CHROMIUM_PATH", "SPECGATE_NO_APT")}
    env["PATH"] = str(bin_dir)
    return bin_dir, env


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/bin/bash", str(SCRIPT), *args], env=env, capture_output=True,
                          text=True, timeout=60, check=False)


def test_it_says_what_it_installs_and_why_before_installing(bare_root) -> None:
    _, env = bare_root
    done = _run(env)
    assert done.returncode == 0, done.stderr
    said = done.stderr
    announce = said.index("installing system packages with apt-get: nodejs npm chromium")
    assert announce < said.index("APT-GET update")
    assert "nodejs npm: Allure Report 3, which builds the HTML report, runs on Node.js" in said
    assert "chromium: the report tests open the built report in headless Chromium" in said
    assert said.index("headless Chromium") < said.index("APT-GET update")


def test_npm_only_leaves_chromium_out(bare_root) -> None:
    _, env = bare_root
    done = _run(env, "--npm-only")
    assert "installing system packages with apt-get: nodejs npm\n" in done.stderr
    assert "chromium" not in done.stderr


def test_no_apt_installs_nothing(bare_root) -> None:
    _, env = bare_root
    done = _run({**env, "SPECGATE_NO_APT": "1"})
    assert done.returncode == 0, done.stderr
    assert "APT-GET" not in done.stderr
    assert "not installed: nodejs npm chromium" in done.stderr
