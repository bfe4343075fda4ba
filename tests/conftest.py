"""Shared fixtures for the harness's own tests."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sshd
from hypothesis import HealthCheck, settings

pytest_plugins = ["pytester"]

# The properties these tests state are about values, not speed: no per-example deadline and no
# health check on how fast examples are made, either of which a busy machine fails.
settings.register_profile("specgate", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("specgate")


# A module whose tests share a costly fixture (a live session, running servers, a built report)
# names one xdist_group: `-n` then keeps its tests on one worker, which sets the fixture up
# once, and spreads every other test as `--dist load` does.
LOADGROUP_INPUT = "specgate_tests_loadgroup"  # workerinput: the controller schedules by group


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if getattr(config.option, "dist", "no") == "load":
        config.option.dist = "loadgroup"
    if getattr(config, "workerinput", {}).get(LOADGROUP_INPUT):
        # A worker parses the command line again, without the controller's choice.
        config.option.loadgroup = True


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    node.workerinput[LOADGROUP_INPUT] = node.config.getoption("dist", "no") == "loadgroup"


@pytest.fixture(scope="session")
def sshd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[sshd.SSHServer]:
    """A real OpenSSH server on a loopback port with throwaway keys (tests/sshd.py); the tests
    that need it skip with the reason where it cannot run."""
    why = sshd.unavailable()
    if why:
        pytest.skip(why)
    server = sshd.start(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


@dataclasses.dataclass(frozen=True)
class GateRun:
    """One finished `pytest -m gate` run: its exit status, output and reports folder."""

    returncode: int
    stdout: str
    stderr: str
    reports: Path


# The tests that read one demo gate run share it: they name this xdist group.
DEMO_SPEEDUP_GATE = "demo_speedup_gate"


@pytest.fixture(scope="session")
def demo_speedup_gate(tmp_path_factory: pytest.TempPathFactory) -> GateRun:
    """`pytest -m gate --specgate-profile demo -k speedup` in a fresh folder with its own cache,
    run once: its verdict, closing block and report are read, never changed, by the tests."""
    folder = tmp_path_factory.mktemp("demo-gate")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SPECGATE_"))}
    env["SPECGATE_CACHE"] = str(folder / "cache")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "gate",
                           "--specgate-profile", "demo", "-k", "speedup"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    return GateRun(proc.returncode, proc.stdout, proc.stderr, folder / "reports")
