"""The plugin end to end: claims become verdict entries with the right status, under xdist too."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import fault_support as fh
import pytest
import suite_support as ss

SUITE = ss.suite(
    ss.passing(marks=("gate",)),
    ss.FAILING,
    ss.broken("/x/model.safetensors: header length 9e9 > file", phase="phase1"),
    ss.SKIPPED,
    """
@pytest.fixture
def exploding():
    raise RuntimeError("fixture blew up")
""",
    ss.claim("fixture_error", fixtures=("exploding",)),
    ss.claim("crash", """
        if os.environ.get("CRASH_TEST"):
            os._exit(1)
        check(claims.passed("demo.crash", "phase0", "ok"))"""),
    ss.claim("slow", """
        if os.environ.get("SLOW_TEST"):
            open(os.environ["SLOW_TEST"], "w").close()
            time.sleep(60)
        check(claims.passed("demo.slow", "phase0", "ok"))"""),
    imports="import os, time")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return ss.project(tmp_path, SUITE, name="plugtest")


def _run(project: Path, *args: str, env: dict[str, str] | None = None,
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "--profile", "p.toml", *args],
                          cwd=project, capture_output=True, text=True, timeout=120, env=env)


def _verdict(project: Path) -> dict:
    return json.loads((project / "reports" / "verdict.json").read_text())


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist2"])
def test_statuses_reach_the_verdict(project: Path, xdist: list[str]) -> None:
    proc = _run(project, *xdist)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = _verdict(project)
    by_id = {c["id"]: c for c in doc["claims"]}
    assert {k: v["status"] for k, v in by_id.items()} == {
        "demo.pass": "passed", "demo.fail": "failed", "demo.broken": "broken",
        "demo.skip": "skipped", "demo.fixture_error": "broken", "demo.slow": "passed",
        "demo.crash": "passed"}
    assert doc["outcome"] == "failed"
    assert doc["complete"] is True
    assert by_id["demo.fail"]["observed"] == 252
    # It names what it judged, and says what it could not read.
    assert doc["identity"]["drafter"]["path"] == str(project / "d")
    assert "config.json: not found" in doc["identity"]["drafter"]["unreadable"]
    assert by_id["demo.broken"]["phase"] == "phase1"
    assert "fixture blew up" in by_id["demo.fixture_error"]["message"]
    # Broken claims read as sentences, not tracebacks.
    assert "header length 9e9 > file" in proc.stdout
    assert "Traceback" not in proc.stdout
    results = list((project / "reports" / "allure-results").glob("*-result.json"))
    assert len(results) == 7
    statuses = sorted(json.loads(r.read_text())["status"] for r in results)
    assert statuses == ["broken", "broken", "failed", "passed", "passed", "passed", "skipped"]
    labels = [json.loads(r.read_text())["labels"] for r in results]
    epics = {lab["value"] for ls in labels for lab in ls if lab["name"] == "epic"}
    assert epics == {"Phase 0 — quick probe", "Phase 1 — fine-tune"}
    assert (project / "reports" / "junit.xml").exists()


def test_gate_with_nothing_selected_fails(project: Path) -> None:
    proc = _run(project, "-m", "gate and phase2")
    assert proc.returncode == 1
    assert _verdict(project)["outcome"] == "error"


def test_passing_selection_exits_zero(project: Path) -> None:
    proc = _run(project, "-m", "gate")
    assert proc.returncode == 0, proc.stdout
    assert _verdict(project)["outcome"] == "passed"


def test_gate_judges_only_a_named_profile(project: Path) -> None:
    """`-m gate` where the profile setting got lost (no option, $SPECGATE_PROFILE unset or
    empty) stops before collecting instead of judging the simulated demo; a profile named by
    option or variable runs, and so does a selection that asks for no gating claim."""
    (project / "pytest.ini").write_text(
        "[pytest]\ntestpaths = suites\nspecgate = true\naddopts = -p no:cacheprovider\n")
    env = {k: v for k, v in os.environ.items() if k != "SPECGATE_PROFILE"}

    def pytest_(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pytest", *args], cwd=project,
                              capture_output=True, text=True, timeout=120, env={**env, **extra})

    for extra in ({}, {"SPECGATE_PROFILE": ""}):
        for selection in ("gate", "gate and not live", "probe or gate"):
            proc = pytest_("-m", selection, **extra)
            said = proc.stdout + proc.stderr
            assert proc.returncode == 4, said
            assert "-m gate judges a drafter for CI and no profile was named" in said
            assert "collected" not in said
    assert pytest_("-m", "gate", "--specgate-profile", "p.toml").returncode == 0
    assert pytest_("-m", "gate", SPECGATE_PROFILE="p.toml").returncode == 0
    proc = pytest_("-m", "not gate and phase1")
    assert "no profile was named" not in proc.stdout + proc.stderr


def test_profile_typo_is_one_clear_error(project: Path) -> None:
    (project / "p.toml").write_text('name = "x"\n[servr]\nport = 1\n')
    proc = _run(project)
    assert proc.returncode == 4
    assert "unknown key 'servr'" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    doc = _verdict(project)
    assert doc["outcome"] == "error"
    assert doc["claims"][0]["id"] == "profile"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_interrupt_leaves_an_interrupted_verdict(project: Path, tmp_path: Path,
                                                 sig: signal.Signals) -> None:
    marker = tmp_path / "started"
    env = {**__import__("os").environ, "SLOW_TEST": str(marker)}
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "--profile", "p.toml"],
                            cwd=project, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            preexec_fn=fh.as_foreground_job)
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists()
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 2, out
    doc = _verdict(project)
    assert doc["outcome"] == "interrupted"
    # docs/verdict.md: the claim the signal stopped never reported, so the run is not complete.
    assert doc["complete"] is False
    assert "demo.slow" in doc["not_reported"]
    assert {c["id"] for c in doc["claims"]} >= {"demo.pass", "demo.fail"}


def test_crashed_worker_still_leaves_a_claim_and_a_result(project: Path) -> None:
    env = {**__import__("os").environ, "CRASH_TEST": "1"}
    proc = _run(project, "-n", "2", env=env)
    assert proc.returncode == 1, proc.stdout
    doc = _verdict(project)
    crash = next(c for c in doc["claims"] if c["id"] == "demo.crash")
    assert crash["status"] == "broken"
    assert "crashed" in crash["message"]
    results = [json.loads(r.read_text())
               for r in (project / "reports" / "allure-results").glob("*-result.json")]
    lost = [r for r in results if r["name"] == "demo.crash"]
    assert len(lost) == 1
    assert lost[0]["status"] == "broken"
    assert doc["complete"] is True
