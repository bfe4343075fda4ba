"""The fault matrix: real probe sessions against a faulty simulator, through the real plugin.

Every case asserts a bounded run time, a complete verdict and Allure results with the right
outcome, the reason and the server's last log lines on each affected claim, and that no process
the harness started is still alive afterwards.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fault_support as fh
import pytest

LIVE_CLAIMS = ("perf.baseline_tps", "spec.accept_len", "spec.breakeven", "spec.speedup")
OFFLINE_CLAIMS = ("weights.layout", "vocab.invariants", "config.target_compat")
LOG_HEADER = "last lines of the server log"
# A fault must end the run well inside this; the slowest case (startup timeout) takes ~12 s.
BOUND_S = 45.0

KILLER_PLUGIN = '''
"""A crashing worker: the xdist worker that launched a server dies at once, as on a segfault."""
import os
import threading
import time


def pytest_configure(config):
    flag = os.environ.get("FAULT_KILL_FLAG")
    if not flag or not hasattr(config, "workerinput"):
        return

    def watch():
        from specgate.serving import safety_net
        while True:
            time.sleep(0.05)
            if safety_net.live_handles():
                try:
                    fd = os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                except FileExistsError:
                    return
                os.close(fd)
                os._exit(17)

    threading.Thread(target=watch, daemon=True).start()
'''

# A launcher that starts the server with another key than the profile's, as a site wrapper
# script with its own hard-coded key would.
WRONG_KEY_LAUNCHER = '''
import runpy
import sys

args = sys.argv[1:]
if "--api-key" in args:
    args[args.index("--api-key") + 1] += "-rotated"
sys.argv = ["specgate.testing.simulator", *args]
runpy.run_module("specgate.testing.simulator", run_name="__main__")
'''


@pytest.fixture(scope="session")
def assets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Shared by the xdist workers' sessions; runinfo.prepare generates it once under a file lock.
    return tmp_path_factory.getbasetemp().parent / "specgate-fault-assets"


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    fault: str
    reason: str  # in the message of every broken claim
    log: str | None  # in the server log tail of the broken claims
    broken: tuple[str, ...] = LIVE_CLAIMS
    passed: tuple[str, ...] = OFFLINE_CLAIMS
    options: dict[str, Any] = dataclasses.field(default_factory=dict)


CASES = [
    Case("exit_at_start", "exit_at_start", "exited with code 1 before it was ready",
         "OutOfMemoryError", broken=(*LIVE_CLAIMS, "env.server_env")),
    Case("never_ready", "never_ready", "did not answer /health_generate with 200 within 2 s",
         "Capture cuda graph end", broken=(*LIVE_CLAIMS, "env.server_env"),
         options={"startup_timeout_s": 2}),
    Case("die_after", "die_after:1", "the server process has exited", "illegal memory access",
         options={"prompts_per_category": 2}),
    Case("http500", "http500", "HTTP 500", '"POST /generate HTTP/1.1" 500'),
    Case("http503", "http503", "HTTP 503", '"POST /generate HTTP/1.1" 503'),
    Case("malformed_json", "malformed_json", "is not JSON", LOG_HEADER),
    Case("truncated_json", "truncated_json", "is not JSON", LOG_HEADER),
    Case("drop_stream", "drop_stream", "the stream was cut", LOG_HEADER),
    # On a loaded CI machine the request may time out before the server logs the hang.
    Case("hang_after", "hang_after:0", "no answer within 3 s", LOG_HEADER,
         options={"request_timeout_s": 3}),
    Case("no_spec_fields", "no_spec_fields", "no spec_verify_ct", None,
         broken=("spec.accept_len", "spec.breakeven"),
         passed=(*OFFLINE_CLAIMS, "perf.baseline_tps")),
]


@pytest.fixture
def scan() -> Iterator[list[str]]:
    """Markers of the cases run by a test; whatever they leave alive is killed afterwards."""
    markers: list[str] = []
    yield markers
    for marker in markers:
        fh.reap(fh.marked_processes(marker))


def _check_clean(case: str, run: fh.ProbeRun, marker: str, *, note: str = "") -> None:
    left = fh.orphans(marker)
    fh.record(case, run, held=not left and not run.timed_out, orphans_found=len(left), note=note)
    assert not run.timed_out, f"{case}: no verdict within the bound\n{run.output[-3000:]}"
    assert run.seconds < BOUND_S
    assert not left, f"{case}: processes left alive: {[p.cmdline() for p in left]}"


def _assert_claims(run: fh.ProbeRun, broken: tuple[str, ...], passed: tuple[str, ...],
                   reason: str, log: str | None) -> None:
    claims = run.claims()
    allure = run.allure_statuses()
    for cid in broken:
        assert claims[cid]["status"] == "broken", (cid, claims[cid]["message"])
        assert allure[cid] == "broken", cid
        message = str(claims[cid]["message"])
        # A server that failed is said once, in the cause every claim it broke shares (with the
        # log); the claim says in a line what could not be done. A reason of the claim's own
        # (a field the answers lack) is in its message.
        causes = run.causes_of(cid)
        assert len(causes) <= 1, (cid, run.verdict.get("causes"))
        said = causes[0] if causes else message
        assert reason in said, (cid, said)
        assert LOG_HEADER not in message, (cid, message)
        if log is not None:
            assert causes, (cid, message)
            assert LOG_HEADER in said, (cid, said)
            assert log in said, (cid, said)
        # The harness's own words are a sentence; the server's log may hold its traceback.
        assert "Traceback" not in message
        assert "Traceback" not in said.split(LOG_HEADER)[0]
    for cid in passed:
        assert claims[cid]["status"] == "passed", (cid, claims[cid]["message"])
        assert allure[cid] == "passed", cid


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_server_fault(case: Case, tmp_path: Path, assets: Path, scan: list[str]) -> None:
    profile, marker = fh.write_profile(tmp_path, assets, fault=case.fault, **case.options)
    scan.append(marker)
    run = fh.run_probe(profile, tmp_path / "reports", timeout_s=BOUND_S + 15)
    _check_clean(case.name, run, marker)
    doc = run.verdict
    assert (doc["outcome"], doc["complete"], run.returncode) == ("error", True, 1), run.output
    _assert_claims(run, case.broken, case.passed, case.reason, case.log)
    assert (tmp_path / "reports" / "junit.xml").exists()


@pytest.mark.slow
def test_api_key_mismatch(tmp_path: Path, assets: Path, scan: list[str]) -> None:
    wrapper = tmp_path / "wrap_launcher.py"
    wrapper.write_text(WRONG_KEY_LAUNCHER, encoding="utf-8")
    profile, marker = fh.write_profile(tmp_path, assets, launcher=["python", str(wrapper)],
                                       api_key_env="FAULT_API_KEY")
    scan.append(marker)
    env = fh.child_env(FAULT_API_KEY="sk-fault-" + marker)
    run = fh.run_probe(profile, tmp_path / "reports", env=env, timeout_s=BOUND_S + 15)
    _check_clean("api_key_mismatch (401)", run, marker)
    assert run.verdict["outcome"] == "error"
    _assert_claims(run, (*LIVE_CLAIMS, "env.server_env"), OFFLINE_CLAIMS,
                   "answered 401: the server refused the API key", LOG_HEADER)


@pytest.mark.slow
def test_port_taken(tmp_path: Path, assets: Path, scan: list[str]) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        profile, marker = fh.write_profile(tmp_path, assets, port=port)
        scan.append(marker)
        run = fh.run_probe(profile, tmp_path / "reports", timeout_s=BOUND_S + 15)
    _check_clean("port_taken", run, marker)
    assert run.verdict["outcome"] == "error"
    _assert_claims(run, (*LIVE_CLAIMS, "env.server_env"), OFFLINE_CLAIMS,
                   f"port {port} on 127.0.0.1 is already in use", None)


@pytest.mark.slow
def test_exitfirst_stops_and_keeps_the_verdict(tmp_path: Path, assets: Path,
                                               scan: list[str]) -> None:
    profile, marker = fh.write_profile(tmp_path, assets, fault="exit_at_start")
    scan.append(marker)
    run = fh.run_probe(profile, tmp_path / "reports", "-x", timeout_s=BOUND_S + 15)
    _check_clean("pytest -x", run, marker)
    doc = run.verdict
    # -x left the other selected claims out: listed as not reported, and not complete.
    assert (doc["outcome"], doc["complete"], run.returncode) == ("error", False, 1)
    statuses = [c["status"] for c in doc["claims"]]
    assert statuses.count("broken") == 1, statuses  # stopped at the first broken claim
    assert doc["not_reported"], doc
    assert "stopping after 1 failures" in run.output


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "xdist"), [
    (signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGTERM, True),
    (signal.SIGKILL, False),
], ids=["sigint", "sigterm", "sigterm-xdist", "sigkill"])
def test_signal_mid_benchmark(sig: signal.Signals, xdist: bool, tmp_path: Path, assets: Path,
                              scan: list[str]) -> None:
    # The server hangs on the first request, so the signal lands inside the measurement.
    profile, marker = fh.write_profile(tmp_path, assets, fault="hang_after:0",
                                       request_timeout_s=120)
    scan.append(marker)
    reports = tmp_path / "reports"
    args = ["-n", "2"] if xdist else []
    proc = fh.start_probe(profile, reports, *args)
    hung = fh.wait_for(fh.run_file_contains(reports, "live/baseline-server.log",
                                            "simulated fault hang_after"), 40)
    started = time.monotonic()
    if sig == signal.SIGINT:
        fh.kill_group(proc.pid, signal.SIGINT)  # Ctrl-C reaches the terminal's whole job
    else:
        proc.send_signal(sig)  # CI cancels a job by signalling its main process
    try:
        out, _ = proc.communicate(timeout=30)
        timed_out = False
    except subprocess.TimeoutExpired:
        fh.kill_group(proc.pid)
        out, _ = proc.communicate()
        timed_out = True
    seconds = round(time.monotonic() - started, 2)
    run = fh.ProbeRun(proc.returncode, out, seconds, reports, timed_out)
    name = f"{signal.Signals(sig).name} mid-benchmark" + (" (-n 2)" if xdist else "")
    _check_clean(name, run, marker, note="seconds from the signal to exit")
    assert hung, out
    doc = run.verdict
    if sig == signal.SIGKILL:
        # Nothing runs after SIGKILL: the verdict written before the first claim stands, and
        # the server dies with its parent (PR_SET_PDEATHSIG), checked above.
        assert (doc["outcome"], doc["complete"], run.returncode) == ("interrupted", False, -9)
        return
    # Stopped inside a live claim: not every selected claim reported (docs/verdict.md).
    assert (doc["outcome"], doc["complete"], run.returncode) == ("interrupted", False, 2), out
    assert "spec.speedup" in doc["not_reported"], doc["not_reported"]
    assert not {c["id"] for c in doc["claims"]} & set(doc["not_reported"])
    assert any((reports / "allure-results").glob("*-result.json"))


@pytest.mark.slow
def test_xdist_worker_dies_with_its_server(tmp_path: Path, assets: Path,
                                           scan: list[str]) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "fault_killer.py").write_text(KILLER_PLUGIN, encoding="utf-8")
    profile, marker = fh.write_profile(tmp_path, assets)
    scan.append(marker)
    env = fh.child_env(PYTHONPATH=os.pathsep.join([str(plugins), os.environ.get(
        "PYTHONPATH", "")]), FAULT_KILL_FLAG=str(tmp_path / "killed"))
    run = fh.run_probe(profile, tmp_path / "reports", "-n", "2", "-p", "fault_killer", env=env,
                       timeout_s=BOUND_S + 15)
    _check_clean("xdist worker os._exit during a live claim", run, marker)
    assert (tmp_path / "killed").exists()
    assert "crashed while running" in run.output
    doc = run.verdict
    assert (doc["outcome"], doc["complete"], run.returncode) == ("error", True, 1), run.output
    crashed = [c for c in doc["claims"] if "crashed while running" in str(c["message"])]
    assert len(crashed) == 1, doc["claims"]
    assert crashed[0]["status"] == "broken"
    assert run.allure_statuses()[crashed[0]["id"]] == "broken"
    # Which live claim the killed worker was running depends on xdist's scheduling; that one is
    # the crashed claim above. The replacement worker measures again, so the other measuring
    # claims come back with a figure and pass on the simulator, except that a measurement in
    # flight on the killed worker's server may be lost with it (seen in 1 of 2 runs for
    # perf.baseline_tps): then broken. Never failed, skipped or missing: nothing judged the
    # drafter on half a measurement.
    measured = {"perf.baseline_tps", "spec.accept_len", "spec.speedup"} - {crashed[0]["id"]}
    for cid in sorted(measured):
        claim = run.claims()[cid]
        ok = claim["status"] == "passed" and isinstance(claim["observed"], (int, float))
        assert ok or claim["status"] == "broken", (cid, claim["message"], crashed[0]["id"])


@pytest.mark.slow
def test_a_drafter_folder_without_config_stops_the_speculative_server(
        tmp_path: Path, assets: Path, scan: list[str]) -> None:
    """As SGLang does: the speculative server will not start on a folder without config.json,
    and the claims that need it are broken by that one cause, with the server's log. (An empty
    folder is not launched at all: tests/e2e/test_first_run.py.)"""
    profile, marker = fh.write_profile(tmp_path, assets)
    scan.append(marker)
    empty = tmp_path / "new-drafter"
    empty.mkdir()
    (empty / "README.md").write_text("export pending\n")
    run = fh.run_probe(profile, tmp_path / "reports", f"--drafter={empty}",
                       timeout_s=BOUND_S + 15)
    _check_clean("empty drafter folder", run, marker)
    assert run.verdict["outcome"] == "error", run.output[-3000:]
    _assert_claims(run, ("spec.accept_len", "spec.breakeven", "spec.speedup"),
                   ("perf.baseline_tps",), "the speculative server exited with code 1",
                   f"OSError: {empty} does not appear to have a file named config.json")
    assert run.claims()["weights.layout"]["status"] == "broken"
