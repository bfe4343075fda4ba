"""Tests for specgate.serving.server: real subprocesses on loopback."""

from __future__ import annotations

import os
import re
import shlex
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from ckpt_support import tiny_drafter

from specgate.core.errors import ServerError
from specgate.core.profile import parse_profile
from specgate.measure import server_session
from specgate.serving import safety_net, server
from specgate.serving.launch import LaunchSpec, build_command
from specgate.serving.launchers.local import LocalLauncher
from specgate.serving.launchers.ssh import SshLauncher

KEY = "sk-test-5f2e9c1d7a"

# A server that ignores SIGTERM and whose child leaves the session, so only a recursive
# psutil kill (children captured before signalling) can take the whole tree down.
STANDIN = r'''
import http.server, json, os, signal, subprocess, sys
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c",
    "import os, signal, time; os.setsid(); signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "time.sleep(600)"])
port = int(sys.argv[sys.argv.index("--port") + 1])
print("stand-in up, api_key=" + repr(sys.argv[sys.argv.index("--api-key") + 1]), flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"speculative_algorithm": None}).encode()
        self.send_response(200); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
'''


def _sim_profile(tmp_path: Path, *, fault: str | None = None, **server_extra: Any) -> Any:
    (tmp_path / "target").mkdir(exist_ok=True)
    draft = tmp_path / "drafter"
    if not (draft / "config.json").exists():  # SGLang starts only on a whole drafter
        tiny_drafter(draft, config_overrides={"max_position_embeddings": 8192})
    # A quick start and health check: how a launch is stopped is under test, not how long
    # SGLang takes to get ready.
    env = {"NCCL_PROTO": "Simple", "SPECGATE_SIM_START_DELAY_S": "0.1",
           "SPECGATE_SIM_HEALTH_GENERATE_S": "0.05",
           **({"SPECGATE_SIM_FAULT": fault} if fault else {})}
    return parse_profile({
        "name": "t", "target": {"path": str(tmp_path / "target")},
        "drafter": {"path": str(tmp_path / "drafter")},
        "server": {"launcher": ["python", "-m", "specgate.testing.simulator"], "port": 0, "tp": 2,
                   "env": env, "api_key_env": "SPECGATE_TEST_KEY", **server_extra},
        "speculative": {"num_steps": 2, "eagle_topk": 1, "num_draft_tokens": 3},
    })


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECGATE_TEST_KEY", KEY)


def _alive(pids: tuple[int, ...] | list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), 0.5):
            return True
    except OSError:
        return False


def test_launch_simulator_and_stop_the_whole_tree(tmp_path: Path) -> None:
    spec = build_command(_sim_profile(tmp_path), "speculative")
    handle = server.launch(spec, tmp_path / "log.txt", startup_timeout_s=30)
    try:
        assert handle.simulated
        assert handle.alive()
        assert handle.server_info["speculative_algorithm"] == "EAGLE3"
        assert server.process_env(handle)["NCCL_PROTO"] == "Simple"  # type: ignore[index]
        handle.remember_children()
        tree = [handle.pid, *(c.pid for c in psutil.Process(handle.pid).children(True))]
        assert len(tree) >= 4  # server, two scheduler ranks, detokenizer
        assert handle in safety_net.live_handles()
        assert KEY not in handle.log_tail(200)
    finally:
        report = handle.stop()
    assert _alive(tree) == []
    assert _alive(report.pids) == []
    assert report.clean
    assert report.port_free
    assert report.how == "terminated"
    assert handle not in safety_net.live_handles()
    assert not handle.alive()
    assert handle.stop() is report  # idempotent


def test_env_is_read_from_the_process_on_the_port_not_the_wrapper(tmp_path: Path) -> None:
    # The wrapper gets NCCL_PROTO from the harness but forks a server without it; `; exit $?`
    # keeps any sh from exec-ing the server in place of itself.
    script = (f"env -u NCCL_PROTO {shlex.quote(sys.executable)} -m specgate.testing.simulator "
              '"$@"; exit $?')
    profile = _sim_profile(tmp_path, launcher=["sh", "-c", script, "sh"])
    spec = build_command(profile, "speculative")
    with server.running(spec, tmp_path / "log.txt", startup_timeout_s=30) as handle:
        reading = server.process_env_detail(handle)
        assert psutil.Process(handle.pid).environ()["NCCL_PROTO"] == "Simple"
        assert reading.env is not None
        assert "NCCL_PROTO" not in reading.env
        assert reading.pid != handle.pid
        assert reading.pid in {c.pid for c in psutil.Process(handle.pid).children()}
        assert f"listens on port {spec.port}" in reading.reason
        assert f"pid {reading.pid}" in reading.reason
        check = server_session.check_env(profile.server.server_env(), handle)
        assert check.checked
        assert check.mismatched == {"NCCL_PROTO": None}


def test_exit_at_start_is_reported_at_once_with_the_log_tail(tmp_path: Path) -> None:
    spec = build_command(_sim_profile(tmp_path, fault="exit_at_start"), "baseline")
    started = time.monotonic()
    with pytest.raises(ServerError, match="exited with code 1 before it was ready") as info:
        server.launch(spec, tmp_path / "log.txt", startup_timeout_s=60)
    assert time.monotonic() - started < 10
    assert "OutOfMemoryError" in info.value.log_tail
    # The error the server printed leads the message, before the log tail.
    assert "s after start): torch.OutOfMemoryError: CUDA out of memory." in str(info.value)
    assert KEY not in info.value.full_message()
    assert not _port_open(spec.port)


def test_never_ready_fails_at_the_deadline_and_is_killed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(safety_net, "_registry", set())  # this test's servers alone
    spec = build_command(_sim_profile(tmp_path, fault="never_ready"), "baseline")
    started = time.monotonic()
    with pytest.raises(ServerError, match="within 2 s") as info:
        server.launch(spec, tmp_path / "log.txt", startup_timeout_s=2, poll_s=0.2)
    assert 2 <= time.monotonic() - started < 15
    assert "Capture cuda graph" in info.value.log_tail
    assert safety_net.live_handles() == []
    assert not _port_open(spec.port)


def test_port_taken_is_refused_before_launch(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        spec = build_command(_sim_profile(tmp_path), "baseline", port=port)
        with pytest.raises(ServerError, match=f"port {port} on 127.0.0.1 is already in use"):
            server.launch(spec, tmp_path / "log.txt", startup_timeout_s=10)
    assert not (tmp_path / "log.txt").exists()


def test_progress_is_reported_while_loading(tmp_path: Path) -> None:
    spec = build_command(_sim_profile(tmp_path, fault="slow_start:1.5"), "baseline")
    seen: list[tuple[float, str]] = []
    with server.running(spec, tmp_path / "log.txt", startup_timeout_s=30,
                        on_progress=lambda t, line: seen.append((t, line)),
                        progress_every_s=0.3, poll_s=0.1) as handle:
        assert handle.alive()
    assert seen
    assert all(t > 0 for t, _ in seen)
    assert any("Load weight" in line or "cuda graph" in line for _, line in seen)
    assert not handle.alive()


def test_sigterm_ignoring_tree_is_sigkilled(tmp_path: Path) -> None:
    script = tmp_path / "standin.py"
    script.write_text(STANDIN)
    from specgate.serving.launch import free_port
    port = free_port()
    spec = LaunchSpec(argv=(sys.executable, str(script), "--port", str(port), "--api-key", KEY),
                      env={}, url=f"http://127.0.0.1:{port}", api_key=KEY, config="baseline",
                      host="127.0.0.1", port=port, prefix_len=2,
                      launcher=LocalLauncher((sys.executable, str(script))), simulated=False)
    handle = server.launch(spec, tmp_path / "log.txt", startup_timeout_s=20, stop_timeout_s=1.0)
    deadline = time.monotonic() + 10
    while len(psutil.Process(handle.pid).children()) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    tree = [handle.pid, *(c.pid for c in psutil.Process(handle.pid).children(True))]
    assert len(tree) == 2
    assert KEY not in handle.log_tail()
    assert "api_key='***'" in handle.log_tail()
    report = handle.stop()
    assert report.how == "killed"
    assert set(report.killed) == set(tree)
    assert _alive(tree) == []
    assert report.port_free


def test_attach_checks_the_configuration_and_never_stops(tmp_path: Path) -> None:
    spec = build_command(_sim_profile(tmp_path), "speculative")
    with server.running(spec, tmp_path / "log.txt", startup_timeout_s=30) as launched:
        with pytest.raises(ServerError, match="expected none for the baseline server"):
            server.attach(spec.url, KEY, "baseline")
        attached = server.attach(spec.url, KEY, "speculative")
        assert attached.pid is None
        assert attached.simulated
        assert attached.stop().how == "attached"
        assert launched.alive()
        assert attached.alive()
        env = server.process_env_detail(attached)
        assert env.pid in (launched.pid, None)
    with pytest.raises(ServerError, match="cannot be reached: connection refused"):
        server.attach(spec.url, KEY, "speculative", timeout_s=1)


def test_stop_all_is_the_safety_net(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A registry of this test's own: servers other tests left would change what stop_all stops.
    monkeypatch.setattr(safety_net, "_registry", set())
    spec = build_command(_sim_profile(tmp_path), "baseline")
    handle = server.launch(spec, tmp_path / "log.txt", startup_timeout_s=30)
    reports = safety_net.stop_all()
    assert [r.pids for r in reports] == [handle.stop().pids]
    assert _alive(handle.stop().pids) == []
    assert safety_net.live_handles() == []


def test_remote_launcher_carries_env_and_runs_stop_command(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # A stand-in ssh: like the real one it joins its words and hands them to a shell.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    ssh = bindir / "ssh"
    ssh.write_text('#!/bin/sh\nshift\necho "remote: $*"\nexec sh -c "$*"\n')
    ssh.chmod(ssh.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    marker = tmp_path / "stopped"
    p = _sim_profile(tmp_path, launcher=["ssh", "gpu-box", sys.executable, "-m",
                                         "specgate.testing.simulator"],
                     stop_command=[sys.executable, "-c", f"open({str(marker)!r}, 'w')"])
    spec = build_command(p, "speculative")
    assert isinstance(spec.launcher, SshLauncher)
    assert spec.argv[2:4] == ("env", "NCCL_PROTO=Simple")
    handle = server.launch(spec, tmp_path / "log.txt", startup_timeout_s=30)
    assert handle.simulated
    assert server.process_env(handle) is None
    assert "remote launcher" in server.process_env_detail(handle).reason
    assert "env NCCL_PROTO=Simple" in handle.log_tail(200)
    assert KEY not in handle.log_tail(200)
    report = handle.stop()
    assert marker.exists()
    assert report.how == "remote"
    # [server] stop_command replaces specgate's own sweep through the launcher.
    assert report.far_side is not None
    assert report.far_side.second_path.startswith("[server] stop_command exited with code 0")
    assert report.port_free
    assert _alive(report.pids) == []


def test_no_server_outlives_the_tests() -> None:
    # Every test above stops what it starts; this guards against a regression that leaks.
    mine = psutil.Process().children(recursive=True)
    assert [p for p in mine if "specgate.testing.simulator" in " ".join(_cmdline(p))] == []


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def test_stop_of_process_that_already_exited(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    proc.wait()
    handle = server.ServerHandle(url="http://127.0.0.1:9", api_key=None, config="baseline",
                                 proc=proc)
    report = handle.stop()
    assert report.how == "exited"
    assert report.exit_code == 0
    assert report.leftovers == ()


def test_log_on_disk_is_scrubbed_after_stop(tmp_path: Path) -> None:
    spec = build_command(_sim_profile(tmp_path), "baseline")
    with server.running(spec, tmp_path / "log.txt", startup_timeout_s=30):
        pass
    text = (tmp_path / "log.txt").read_text()
    assert "server_args=" in text
    assert KEY not in text
    assert "api_key='***'" in text


def _silent_listener() -> socket.socket:
    """A loopback port that takes connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    return sock


@pytest.mark.parametrize(("where", "what"), [
    ("refused", r"cannot be reached: connection refused \(nothing listens on 127\.0\.0\.1 port "
                r"\d+\); start it there, or point --baseline-url at the running baseline "
                r"server$"),
    ("silent", r"took the connection but sent no answer to /server_info \(no answer within 1 s\); "
               r"check that it is an SGLang server that has finished starting, or point "
               r"--baseline-url at the running baseline server$"),
    ("no such host", r"cannot be reached: the host name 'no-such-host\.invalid' does not "
                     r"resolve \(DNS\); start it there, or point --baseline-url at the running "
                     r"baseline server$"),
])
def test_an_attached_server_that_cannot_be_used_is_one_sentence_naming_the_url(
        where: str, what: str) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    silent = _silent_listener()
    url = {"refused": f"http://127.0.0.1:{closed.getsockname()[1]}",
           "silent": f"http://127.0.0.1:{silent.getsockname()[1]}",
           "no such host": "http://no-such-host.invalid:30000"}[where]
    try:
        with pytest.raises(ServerError) as caught:
            server.attach(url, None, "baseline", timeout_s=1)
    finally:
        closed.close()
        silent.close()
    said = str(caught.value)
    assert said.startswith(f"the baseline server at {url} (--baseline-url / [server] "
                           "baseline_url) ")
    assert re.search(what, said), said
    for urllib3_words in ("HTTPConnectionPool", "Max retries", "Caused by", "Error("):
        assert urllib3_words not in said


def test_a_stop_reentered_from_a_signal_handler_does_not_hang(tmp_path: Path) -> None:
    # SIGTERM's handler runs stop_all() in the thread that may be inside a stop already.
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            start_new_session=True)
    handle = server.ServerHandle(url="http://127.0.0.1:9", api_key=None, config="baseline",
                                 proc=proc, stop_timeout_s=2)
    inner: list[server.StopReport] = []
    outer_stop = handle._stop

    def interrupted_stop() -> server.StopReport:
        inner.append(handle.stop())  # what the signal handler's stop_all() does
        return outer_stop()

    handle._stop = interrupted_stop  # type: ignore[method-assign]
    done: list[server.StopReport] = []
    worker = threading.Thread(target=lambda: done.append(handle.stop()), daemon=True)
    worker.start()
    worker.join(timeout=30)
    if worker.is_alive():
        proc.kill()
        pytest.fail("stop() hung when re-entered")
    assert inner[0].how == "stopping"
    assert done[0].how == "terminated"
    assert proc.poll() is not None
    assert handle.stop() is done[0]
