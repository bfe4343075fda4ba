"""Launches on another machine: through a real OpenSSH server, and through stand-ins for
`pct exec` and `docker exec`, the simulator started and stopped exactly as a user's profile
would, with nothing of its process tree left on the far side afterwards.

The far side is this machine, reached through sshd (tests/sshd.py) or a stand-in
(tests/standins/). What is left there is found by marker, never by name: every server carries
the test's marker variable from `[server] env` (it travels as `env K=V` on the remote command
line) and the wrapper's SPECGATE_REMOTE_TAG; the wrapper itself carries the tag in its argv.

The stand-ins keep the rules specgate relies on, as their sources state them:

- `pct exec VMID -- COMMAND [ARG...]` (Proxmox VE's pve-container, src/PVE/CLI/pct.pm, method
  `exec`): the words after `--` are its `extra-args`, handed to
  `exec('lxc-attach', '-n', VMID, '--keep-env', '--', @extra_args)`, Perl's list form of exec,
  so no shell re-parses them; pct becomes lxc-attach, whose exit code is the command's
  (LXC src/lxc/attach.c, `lxc_attach_run_command`: execvp, 126 on EACCES/ENOEXEC, 127 on
  ENOENT), and without a terminal lxc-attach hands the command its own standard streams
  (lxc-attach(1), DESCRIPTION).
- `docker exec [OPTIONS] CONTAINER COMMAND [ARG...]` (docker-container-exec(1), and
  docs.docker.com/reference/cli/docker/container/exec): "The command must be an executable. A
  chained or a quoted command doesn't work", so the argv passes as it is; `-i, --interactive:
  Keep STDIN open even if not attached`, so without -i the command reads nothing; Exit Status:
  126 if the contained command cannot be invoked, 127 if it cannot be found, otherwise the
  contained command's exit code. The command runs in the container's PID namespace, whose
  PID 1 becomes the parent of the processes orphaned in it (pid_namespaces(7)); without
  `docker run --init` that is the application, which never reaps them
  (tests/standins/container_pid1.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fault_support as fh
import psutil
import pytest
import sshd
from ckpt_support import tiny_drafter

from specgate.core.errors import ServerError
from specgate.core.profile import Profile, parse_profile
from specgate.io import stop_reports
from specgate.results import live as results
from specgate.serving import server
from specgate.serving.launch import build_command
from specgate.serving.launchers import remote
from specgate.serving.launchers.base import FarSideStop, port_in_use

STANDINS = Path(__file__).resolve().parents[1] / "standins"
PY = sys.executable  # the far side runs this interpreter, which has specgate installed
SIMULATOR = [PY, "-m", "specgate.testing.simulator"]
LIVE_CLAIMS = ("perf.baseline_tps", "spec.accept_len", "spec.breakeven", "spec.speedup")
LOG_HEADER = "last lines of the server log"
BOUND_S = 90.0  # a probe through ssh on 2 busy cores: two launches, two stops, the claims
GRACE_S = 5.0  # after a stop, for what the kernel has not yet reaped
# Between TERM and KILL on the far side, where a test expects the tree to end after TERM: the
# product's default, so a busy machine's slow exit is never read as a server that ignored TERM
# (the tests of the KILL path give a server that does ignore it 2 s).
TERM_GRACE_S = 30

# A server that ignores SIGTERM, with a child process that leaves its process group (setsid)
# and ignores SIGTERM too: only KILL reaches them, and the child only through its tag.
IGNORES_TERM = '''
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
subprocess.Popen([sys.executable, "-c", "import os, signal, time; os.setsid(); "
                  "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
code = subprocess.call([sys.executable, "-m", "specgate.testing.simulator", *sys.argv[1:]])
if code:
    sys.exit(code)
time.sleep(600)
'''

# A server with a worker that, told to stop, ends only once the server itself has gone (as
# SGLang's workers watch their parent): the worker outlives its parent, so the far side's PID 1
# adopts it, and in a container without an init it stays there as a zombie.
OUTLIVES_SERVER = '''
import os, subprocess, sys
worker = """
import os, signal, sys, time
parent = int(sys.argv[1])
signal.signal(signal.SIGTERM, lambda *_: None)
while os.getppid() == parent:
    time.sleep(0.05)
"""
subprocess.Popen([sys.executable, "-c", worker, str(os.getpid())])
os.execv(sys.executable, [sys.executable, "-m", "specgate.testing.simulator", *sys.argv[1:]])
'''


# ---- the far side ----------------------------------------------------------------------------

def far_side(marker: str, tags: list[str] | tuple[str, ...] = ()) -> list[psutil.Process]:
    """Live processes of a launch on the far side: the marker or a tag in the environment (the
    server's tree), or a tag in the command line (the wrapper)."""
    env_needles = {f"{fh.MARKER_VAR}={marker}".encode(),
                   *(f"{remote.TAG_VAR}={t}".encode() for t in tags)}
    found = []
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == os.getpid():
            continue
        try:
            env = set(Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0"))
            argv = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
        except (OSError, psutil.Error):
            continue
        if env & env_needles or any(t.encode() in argv for t in tags):
            found.append(proc)
    return found


def left_on_far_side(marker: str, tags: list[str] | tuple[str, ...] = (),
                     grace_s: float = GRACE_S) -> list[str]:
    fh.wait_for(lambda: not far_side(marker, tags), grace_s, poll_s=0.1)
    out = []
    for proc in far_side(marker, tags):
        if _cmdline(proc):
            out.append(f"{proc.pid}: {_cmdline(proc)[:200]}")
    return out


def tagged(tag: str) -> list[psutil.Process]:
    """The server's tree on the far side: the processes whose environment carries the tag."""
    needle = f"{remote.TAG_VAR}={tag}".encode()
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if needle in Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0"):
                found.append(proc)
        except OSError:
            continue
    return found


def _cmdline(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:  # it ended since it was listed
        return ""


def pids_in(text: str) -> set[int]:
    return {int(p) for p in re.findall(r"\b\d+\b", text)}


def tags_in(folder: Path) -> list[str]:
    """The wrapper tags of the launches whose server logs are in folder (a run's folder under a
    reports folder included)."""
    found = []
    for log in sorted(folder.rglob("*server.log")):
        text = log.read_text(encoding="utf-8", errors="replace")
        found += re.findall(rf"{remote.TAG_VAR}=([0-9a-f]{{32}})", text)
    return sorted(set(found))


def _register(markers: list[tuple[str, list[str]]]) -> tuple[str, list[str]]:
    """A new marker for a launch, reaped after the test whatever happens; its tags are added
    to the list once known."""
    marker, tags = uuid.uuid4().hex, []
    markers.append((marker, tags))
    return marker, tags


@pytest.fixture
def markers() -> Iterator[list[tuple[str, list[str]]]]:
    """(marker, tags) of the launches a test made; whatever they left is killed afterwards."""
    made: list[tuple[str, list[str]]] = []
    yield made
    for marker, tags in made:
        fh.reap(far_side(marker, tags))


# ---- the transports --------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Transport:
    name: str
    prefix: tuple[str, ...]  # what reaches the far side, as a profile's launcher starts
    env: dict[str, str]  # for the probe's process: PATH with the stand-ins
    sshd: sshd.SSHServer | None = None


@pytest.fixture(params=["ssh", "pct", "docker"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Transport:
    if request.param == "ssh":
        server_: sshd.SSHServer = request.getfixturevalue("sshd_server")
        return Transport("ssh", tuple(server_.prefix()), {}, server_)
    path = f"{STANDINS}{os.pathsep}{os.environ.get('PATH', '')}"
    monkeypatch.setenv("PATH", path)
    prefix = ("pct", "exec", "101", "--") if request.param == "pct" else (
        "docker", "exec", "gpu-box")
    return Transport(request.param, prefix, {"PATH": path})


def _profile(folder: Path, launcher: list[str], marker: str, **server_extra: Any) -> Profile:
    (folder / "target").mkdir(exist_ok=True)
    if not (folder / "drafter" / "config.json").exists():  # SGLang starts only on a whole one
        tiny_drafter(folder / "drafter", config_overrides={"max_position_embeddings": 8192})
    return parse_profile({
        "name": "remote", "target": {"path": str(folder / "target")},
        "drafter": {"path": str(folder / "drafter")},
        "server": {"launcher": launcher, "port": 0, "tp": 2, "stop_timeout_s": TERM_GRACE_S,
                   # a quick start: the far side's launch and stop are under test
                   "env": {fh.MARKER_VAR: marker, "SPECGATE_SIM_START_DELAY_S": "0.1",
                           "SPECGATE_SIM_HEALTH_GENERATE_S": "0.05"}, **server_extra},
        "speculative": {"num_steps": 2, "eagle_topk": 1, "num_draft_tokens": 3},
    })


def _launch(profile: Profile, log: Path, **kwargs: Any) -> server.ServerHandle:
    spec = build_command(profile, "speculative")
    return server.launch(spec, log, startup_timeout_s=60,
                         stop_timeout_s=profile.server.stop_timeout_s, **kwargs)


# ---- the launch command ----------------------------------------------------------------------

def test_wrapper_goes_where_the_far_side_command_starts(tmp_path: Path) -> None:
    ssh = build_command(_profile(tmp_path, ["ssh", "gpu-box", *SIMULATOR], "m"), "baseline")
    argv = ssh.launcher.wrap(ssh.argv, "ab" * 16, 3.2)
    assert argv[:2] == ["ssh", "gpu-box"]
    # ssh joins what follows the destination; the remote login shell splits it back.
    words = shlex.split(" ".join(argv[2:]))
    assert words[:6] == ["sh", "-c", remote.WRAPPER, remote.WRAPPER_NAME, "ab" * 16, "4"]
    assert words[6:] == shlex.split(" ".join(ssh.argv[2:]))
    pct = build_command(_profile(tmp_path, ["pct", "exec", "101", "--", *SIMULATOR], "m"),
                        "baseline")
    argv = pct.launcher.wrap(pct.argv, "cd" * 16, 3)
    # pct exec hands its argv on as it is: the script is one word, unquoted.
    assert argv[:10] == ["pct", "exec", "101", "--", "sh", "-c", remote.WRAPPER,
                         remote.WRAPPER_NAME, "cd" * 16, "3"]
    assert argv[10:] == list(pct.argv[4:])
    assert pct.launcher.sweep_argv("cd" * 16, 3)[:5] == ["pct", "exec", "101", "--", "sh"]


# ---- launch and stop, through each transport -------------------------------------------------

def test_launch_and_stop_leave_nothing_on_the_far_side(
        transport: Transport, tmp_path: Path, markers: list[tuple[str, list[str]]]) -> None:
    marker, tags = _register(markers)
    profile = _profile(tmp_path, [*transport.prefix, *SIMULATOR], marker)
    handle = _launch(profile, tmp_path / "server.log")
    started = handle.far_side()
    assert started is not None, handle.log_tail()
    tags.append(started.tag)
    try:
        assert handle.server_info["speculative_algorithm"] == "EAGLE3"
        tree = tagged(started.tag)
        # The server, its two scheduler ranks and detokenizer, in the group the wrapper made.
        assert started.pid in {p.pid for p in tree}
        assert len(tree) >= 4, [_cmdline(p) for p in tree]
        assert {os.getpgid(p.pid) for p in tree} == {started.pgid}
        assert {p.pid for p in far_side(marker)} == {p.pid for p in tree}
    finally:
        report = handle.stop()
    assert left_on_far_side(marker, [started.tag]) == []
    assert report.how == "remote"
    assert report.clean, report.summary()
    far = report.far_side
    assert far is not None
    assert far.pid == started.pid
    assert far.wrapper, "the wrapper reported no stop"
    assert far.wrapper[0].startswith(f"standard input closed: TERM to process group {far.pid}")
    assert far.wrapper[-1] == f"process group {far.pid} ended after TERM"
    assert far.left == ()
    assert f"no process tagged {far.tag} is left" in far.second_path
    assert shlex.join(transport.prefix[:2]) in far.second_path
    written = json.loads(stop_reports.path_of(tmp_path / "server.log").read_text())
    assert written["far_side"]["pid"] == far.pid
    assert "ended after TERM" in written["summary"]
    if transport.sshd is not None:
        assert fh.wait_for(lambda: not transport.sshd.sessions(), 10), "an ssh session is open"


def test_a_server_that_ignores_sigterm_is_killed(
        transport: Transport, tmp_path: Path, markers: list[tuple[str, list[str]]]) -> None:
    script = tmp_path / "ignores_term.py"
    script.write_text(IGNORES_TERM, encoding="utf-8")
    marker, tags = _register(markers)
    profile = _profile(tmp_path, [*transport.prefix, PY, str(script)], marker,
                       stop_timeout_s=2)
    handle = _launch(profile, tmp_path / "server.log")
    started = handle.far_side()
    assert started is not None
    tags.append(started.tag)
    escaped = [p.pid for p in tagged(started.tag) if os.getpgid(p.pid) != started.pgid]
    assert len(escaped) == 1, "the child process left the server's process group"
    report = handle.stop()
    assert left_on_far_side(marker, [started.tag]) == []
    far = report.far_side
    assert far is not None
    assert far.wrapper[0].startswith(f"standard input closed: TERM to process group {far.pid}")
    assert {started.pid, escaped[0]} <= pids_in(far.wrapper[0])
    assert far.wrapper[-1].startswith(
        f"still running 2 s after TERM: KILL to process group {started.pid}")
    assert {started.pid, escaped[0]} <= pids_in(far.wrapper[-1])
    # The wrapper's KILL got them all: the second path found nothing to do.
    assert f"no process tagged {far.tag} is left" in far.second_path
    assert far.left == ()
    assert report.clean, report.summary()


def test_zombies_a_container_never_reaps_do_not_hold_the_stop(
        tmp_path: Path, markers: list[tuple[str, list[str]]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The docker stand-in's PID 1 adopts the worker that outlives the server and never reaps
    it: its zombie stays in the server's process group until the container's PID 1 ends, but
    nothing of the server runs, so the wrapper says the group ended after TERM rather than
    waiting out the grace period and sending KILL."""
    monkeypatch.setenv("PATH", f"{STANDINS}{os.pathsep}{os.environ.get('PATH', '')}")
    script = tmp_path / "outlives_server.py"
    script.write_text(OUTLIVES_SERVER, encoding="utf-8")
    marker, tags = _register(markers)
    profile = _profile(tmp_path, ["docker", "exec", "gpu-box", PY, str(script)], marker)
    handle = _launch(profile, tmp_path / "server.log")
    started = handle.far_side()
    assert started is not None, handle.log_tail()
    tags.append(started.tag)
    worker = [p for p in tagged(started.tag) if "lambda *_: None" in _cmdline(p)]
    assert len(worker) == 1, [_cmdline(p) for p in tagged(started.tag)]
    assert os.getpgid(worker[0].pid) == started.pgid
    report = handle.stop()
    assert left_on_far_side(marker, [started.tag]) == []
    far = report.far_side
    assert far is not None
    assert far.wrapper[-1] == f"process group {far.pid} ended after TERM", far.wrapper
    assert report.clean, report.summary()


@pytest.mark.parametrize("drop", ["sshd session killed", "ssh client killed"])
def test_a_dropped_connection_stops_the_far_side_by_itself(
        drop: str, sshd_server: sshd.SSHServer, tmp_path: Path,
        markers: list[tuple[str, list[str]]]) -> None:
    marker, tags = _register(markers)
    profile = _profile(tmp_path, [*sshd_server.prefix(), *SIMULATOR], marker)
    handle = _launch(profile, tmp_path / "server.log")
    started = handle.far_side()
    assert started is not None
    tags.append(started.tag)
    assert len(far_side(marker, [started.tag])) >= 4
    if drop == "sshd session killed":
        assert sshd_server.drop_connections()
    else:
        assert handle.pid is not None
        os.kill(handle.pid, signal.SIGKILL)
    # No stop yet: the wrapper saw its standard input end and stopped the tree on its own.
    assert left_on_far_side(marker, [started.tag], grace_s=20) == []
    assert fh.wait_for(lambda: not handle.alive(), 10)
    report = handle.stop()
    assert report.far_side is not None
    assert report.far_side.left == ()
    assert f"no process tagged {started.tag} is left" in report.far_side.second_path


def test_the_sweep_stops_what_the_wrapper_could_not(
        sshd_server: sshd.SSHServer, tmp_path: Path,
        markers: list[tuple[str, list[str]]]) -> None:
    """The wrapper itself SIGKILLed on the far side (no handler runs): the second path, a sweep
    through the launcher prefix, stops the server's tree by its tag."""
    marker, tags = _register(markers)
    # A short grace: the stop waits that long (and 5 s more) for a launcher that cannot end
    # while the wrapper is gone, then sweeps; TERM or KILL, the sweep stops the tree.
    profile = _profile(tmp_path, [*sshd_server.prefix(), *SIMULATOR], marker, stop_timeout_s=3)
    handle = _launch(profile, tmp_path / "server.log")
    started = handle.far_side()
    assert started is not None
    tags.append(started.tag)
    # The wrapper and its watcher; not the local ssh client, whose argv holds the wrapper too.
    wrappers = [p for p in far_side(marker, [started.tag])
                if _cmdline(p).startswith("sh -c") and remote.WRAPPER_NAME in _cmdline(p)]
    assert wrappers
    for proc in wrappers:
        with contextlib.suppress(psutil.Error):  # its watcher may have ended with it
            proc.kill()
    tree = {p.pid for p in tagged(started.tag)}
    assert len(tree) >= 4, "the server outlives its wrapper"
    report = handle.stop()
    assert left_on_far_side(marker, [started.tag]) == []
    far = report.far_side
    assert far is not None
    assert "TERM to tagged pids" in far.second_path, far.second_path
    assert tree <= pids_in(far.second_path)
    assert far.left == ()


# ---- logs and readiness from afar ------------------------------------------------------------

FAILURES = {
    # what the profile does: (server options, exit code, what the log tail must show)
    "model path missing there": ({"target": "/nonexistent/models/Kimi-K2.5"}, 1,
                                 "/nonexistent/models/Kimi-K2.5 (--model-path) is not a local "
                                 "folder"),
    "flag SGLang rejects": ({"args": ["--no-such-flag"]}, 2,
                            "unrecognized arguments: --no-such-flag"),
    "port taken there": ({}, 1, "Address already in use"),
}


@pytest.mark.parametrize("failure", list(FAILURES))
def test_a_failed_start_brings_back_the_log_tail(
        failure: str, transport: Transport, tmp_path: Path,
        markers: list[tuple[str, list[str]]]) -> None:
    options, code, said = FAILURES[failure]
    marker, tags = _register(markers)
    target = options.get("target")
    profile = _profile(tmp_path, [*transport.prefix, *SIMULATOR], marker,
                       args=options.get("args", []))
    if target:
        profile = profile.model_copy(update={"target": profile.target.model_copy(
            update={"path": target})})
    spec = build_command(profile, "speculative")
    with _holding(spec.port if failure == "port taken there" else None), \
            pytest.raises(ServerError) as caught:
        server.launch(spec, tmp_path / "server.log", startup_timeout_s=60,
                      stop_timeout_s=TERM_GRACE_S)
    tags += tags_in(tmp_path)
    assert f"exited with code {code} before it was ready" in str(caught.value)
    assert said in caught.value.log_tail, caught.value.log_tail
    assert left_on_far_side(marker, tags) == []


@contextlib.contextmanager
def _holding(port: int | None) -> Iterator[None]:
    """The port bound but not listening: a connect from here finds nothing and the server's own
    bind fails, as for a port another process holds on the GPU host."""
    if port is None:
        yield
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        yield


def test_readiness_polls_the_address_the_profile_names(
        sshd_server: sshd.SSHServer, tmp_path: Path,
        markers: list[tuple[str, list[str]]]) -> None:
    # 127.0.0.2 is loopback too, but nothing of the server listens on 127.0.0.1.
    marker, tags = _register(markers)
    profile = _profile(tmp_path, [*sshd_server.prefix(), *SIMULATOR], marker, host="127.0.0.2")
    with server.running(build_command(profile, "baseline"), tmp_path / "server.log",
                        startup_timeout_s=60, stop_timeout_s=TERM_GRACE_S) as handle:
        started = handle.far_side()
        assert started is not None
        tags.append(started.tag)
        port = int(handle.url.rsplit(":", 1)[1])
        assert handle.url == f"http://127.0.0.2:{port}"
        assert "--host 127.0.0.2" in handle.command
        assert port_in_use("127.0.0.2", port)
        assert not port_in_use("127.0.0.1", port, check_bind=False)
    assert left_on_far_side(marker, [started.tag]) == []


def test_the_users_own_ssh_folder_is_untouched(
        tmp_path: Path, markers: list[tuple[str, list[str]]]) -> None:
    """Keys, sshd, a launch and its stop: ~/.ssh (where ssh would look) is neither read for a
    key or a known host nor written."""
    why = sshd.unavailable()
    if why:
        pytest.skip(why)
    before = sshd.home_ssh_state()
    own = sshd.start(tmp_path / "ssh")
    try:
        marker, tags = _register(markers)
        profile = _profile(tmp_path, [*own.prefix(), *SIMULATOR], marker)
        handle = _launch(profile, tmp_path / "server.log")
        started = handle.far_side()
        tags += [started.tag] if started else []
        assert handle.stop().clean
    finally:
        own.stop()
    assert sshd.home_ssh_state() == before
    config = own.client_config.read_text()
    for line in ("IdentitiesOnly yes", "IdentityAgent none", "BatchMode yes",
                 f"UserKnownHostsFile {own.folder / 'known_hosts'}"):
        assert line in config


# ---- whole probe runs through ssh ------------------------------------------------------------

@pytest.fixture(scope="module")
def assets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp().parent / "specgate-fault-assets"


def _probe_profile(folder: Path, assets: Path, prefix: tuple[str, ...] | list[str],
                   **options: Any) -> tuple[Path, str]:
    launcher = options.pop("launcher", [*prefix, *SIMULATOR])
    options.setdefault("prompts_per_category", 2)  # the speed-up's interval needs two
    options.setdefault("stop_timeout_s", TERM_GRACE_S)
    return fh.write_profile(folder, assets, launcher=launcher, **options)


def _stops(run: fh.ProbeRun) -> dict[str, Any]:
    return dict(run.verdict.get("servers_stopped") or {})


def _assert_measured(run: fh.ProbeRun) -> None:
    """Both servers answered through the transport: every live claim was judged on a figure.
    (On 2 busy cores an interval over 2 prompts may be inconclusive, so the speed claims may
    fail; that is not what these tests are about.)"""
    claims = run.claims()
    for cid in LIVE_CLAIMS:
        assert claims[cid]["status"] in ("passed", "failed"), (cid, claims[cid]["message"])
        assert claims[cid]["observed"] is not None, (cid, claims[cid]["message"])
    assert run.verdict["counts"]["broken"] == 0, run.output[-3000:]


def _assert_stopped_remotely(run: fh.ProbeRun, configs: tuple[str, ...],
                             how: str = "ended after TERM") -> None:
    stops = _stops(run)
    for config in configs:
        stop = stops[config]
        assert stop["how"] == "remote", stop
        assert stop["clean"], stop["summary"]
        far = stop["far_side"]
        assert far["pid"], stop
        assert far["left"] == [], stop
        assert how in stop["summary"], stop["summary"]


def _probe_leaving_nothing(profile: Path, marker: str, reports: Path,
                           markers: list[tuple[str, list[str]]], label: str,
                           env: dict[str, str] | None = None) -> tuple[fh.ProbeRun, list[str]]:
    """A whole probe run through the far side, recorded under `label`: it ends within the bound
    and leaves nothing there. (run, the launches' tags)."""
    markers.append((marker, []))
    run = fh.run_probe(profile, reports, env=env, timeout_s=BOUND_S)
    tags = tags_in(reports)
    markers.append((marker, tags))
    left = left_on_far_side(marker, tags)
    fh.record(label, run, held=not left, orphans_found=len(left))
    assert not run.timed_out, run.output[-3000:]
    assert left == []
    return run, tags


@pytest.mark.slow
@pytest.mark.parametrize("outcome", ["measured", "failed"])
def test_probe_through_ssh_ends_clean(outcome: str, sshd_server: sshd.SSHServer,
                                      tmp_path: Path, assets: Path,
                                      markers: list[tuple[str, list[str]]]) -> None:
    thresholds = {"baseline_tps_min": 1e9} if outcome == "failed" else None
    profile, marker = _probe_profile(tmp_path, assets, sshd_server.prefix(),
                                     thresholds=thresholds)
    run, tags = _probe_leaving_nothing(profile, marker, tmp_path / "reports", markers,
                                       f"remote ssh: {outcome}")
    assert len(tags) == 2, tags
    _assert_measured(run)
    if outcome == "failed":
        assert (run.verdict["outcome"], run.returncode) == ("failed", 1), run.output[-3000:]
        assert run.claims()["perf.baseline_tps"]["status"] == "failed"
    _assert_stopped_remotely(run, ("baseline", "speculative"))
    assert fh.wait_for(lambda: not sshd_server.sessions(), 10)


@pytest.mark.slow
@pytest.mark.parametrize("standin", ["pct", "docker"])
def test_probe_through_a_container_standin_ends_clean(
        standin: str, tmp_path: Path, assets: Path,
        markers: list[tuple[str, list[str]]]) -> None:
    prefix = ["pct", "exec", "101", "--"] if standin == "pct" else ["docker", "exec", "gpu"]
    profile, marker = _probe_profile(tmp_path, assets, prefix)
    env = fh.child_env(PATH=f"{STANDINS}{os.pathsep}{os.environ.get('PATH', '')}")
    run, _ = _probe_leaving_nothing(profile, marker, tmp_path / "reports", markers,
                                    f"remote {standin} stand-in: measured", env=env)
    _assert_measured(run)
    _assert_stopped_remotely(run, ("baseline", "speculative"))


@pytest.mark.slow
def test_probe_through_ssh_with_a_server_that_ignores_sigterm(
        sshd_server: sshd.SSHServer, tmp_path: Path, assets: Path,
        markers: list[tuple[str, list[str]]]) -> None:
    script = tmp_path / "ignores_term.py"
    script.write_text(IGNORES_TERM, encoding="utf-8")
    profile, marker = _probe_profile(tmp_path, assets, sshd_server.prefix(),
                                     launcher=[*sshd_server.prefix(), PY, str(script)],
                                     stop_timeout_s=2)
    run, _ = _probe_leaving_nothing(profile, marker, tmp_path / "reports", markers,
                                    "remote ssh: server ignores SIGTERM")
    _assert_measured(run)
    _assert_stopped_remotely(run, ("baseline", "speculative"),
                             how="still running 2 s after TERM: KILL to process group")


# (name, profile options, reason in every broken live claim, what the log tail shows)
REMOTE_FAULTS = {
    "model path missing there": (
        {"target": Path("/nonexistent/gpu-box/models/target")},
        "exited with code 1 before it was ready",
        "/nonexistent/gpu-box/models/target (--model-path) is not a local folder"),
    "flag SGLang rejects": ({"server_args": ["--no-such-flag"]},
                            "exited with code 2 before it was ready",
                            "unrecognized arguments: --no-such-flag"),
    "server exits at start": ({"fault": "exit_at_start"},
                              "exited with code 1 before it was ready", "OutOfMemoryError"),
    "never ready": ({"fault": "never_ready", "startup_timeout_s": 3},
                    "did not answer /health_generate with 200 within 3 s",
                    "Capture cuda graph end"),
    "dies mid-benchmark": ({"fault": "die_after:1"}, "the server process has exited",
                           "illegal memory access"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(REMOTE_FAULTS))
def test_probe_through_ssh_reports_a_remote_failure(
        case: str, sshd_server: sshd.SSHServer, tmp_path: Path, assets: Path,
        markers: list[tuple[str, list[str]]]) -> None:
    options, reason, said = REMOTE_FAULTS[case]
    profile, marker = _probe_profile(tmp_path, assets, sshd_server.prefix(), **options)
    run, _ = _probe_leaving_nothing(profile, marker, tmp_path / "reports", markers,
                                    f"remote ssh: {case}")
    assert run.verdict["outcome"] == "error", run.output[-3000:]
    for cid in LIVE_CLAIMS:
        claim = run.claims()[cid]
        assert claim["status"] == "broken", claim
        # The failed server is said once, with its log, in the cause the claims share.
        causes = run.causes_of(cid)
        assert len(causes) == 1, (cid, run.verdict.get("causes"))
        assert reason in causes[0], causes[0]
        assert LOG_HEADER in causes[0]
        assert said in causes[0], causes[0]
    assert all(stop["far_side"]["left"] == [] for stop in _stops(run).values()), _stops(run)
    assert fh.wait_for(lambda: not sshd_server.sessions(), 10)


@pytest.mark.slow
@pytest.mark.parametrize("event", ["SIGINT", "SIGTERM", "SIGKILL", "connection dropped"])
def test_probe_through_ssh_interrupted_mid_benchmark(
        event: str, sshd_server: sshd.SSHServer, tmp_path: Path, assets: Path,
        markers: list[tuple[str, list[str]]]) -> None:
    # The server hangs on the first request, so the event lands inside the measurement.
    dropped = event == "connection dropped"
    profile, marker = _probe_profile(tmp_path, assets, sshd_server.prefix(),
                                     fault="hang_after:0",
                                     request_timeout_s=6 if dropped else 120)
    markers.append((marker, []))
    reports = tmp_path / "reports"
    proc = fh.start_probe(profile, reports)
    hung = fh.wait_for(fh.run_file_contains(reports, "live/baseline-server.log",
                                            "simulated fault hang_after"), 60)
    tags = tags_in(reports)
    markers.append((marker, tags))
    signalled = time.monotonic()
    if event == "SIGINT":
        fh.kill_group(proc.pid, signal.SIGINT)  # Ctrl-C reaches the terminal's whole job
    elif dropped:
        assert sshd_server.drop_connections()
    else:
        proc.send_signal(getattr(signal, event))
    try:
        out, _ = proc.communicate(timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        fh.kill_group(proc.pid)
        out, _ = proc.communicate()
        pytest.fail(f"{event}: no end within {BOUND_S:g} s\n{out[-3000:]}")
    tags = tags_in(reports)
    markers.append((marker, tags))
    left = left_on_far_side(marker, tags)
    fh.record(f"remote ssh: {event} mid-benchmark", fh.ProbeRun(
        proc.returncode, out, round(time.monotonic() - signalled, 2), reports),
        held=not left, orphans_found=len(left), note="seconds from the event to exit")
    assert hung, out[-3000:]
    assert left == [], out[-3000:]
    assert fh.wait_for(lambda: not sshd_server.sessions(), 10)
    doc = json.loads((reports / "verdict.json").read_text(encoding="utf-8"))
    if event == "SIGKILL":
        # Nothing runs in pytest after SIGKILL, but the write end of the ssh client's standard
        # input dies with it: ssh passes the end of input on and the wrapper stops the far side
        # (the kernel also sends the ssh client SIGTERM: PR_SET_PDEATHSIG).
        assert (doc["outcome"], proc.returncode) == ("interrupted", -9)
        return
    stop = doc["servers_stopped"]["baseline"]
    assert (stop["how"], stop["clean"]) == ("remote", True), stop
    if dropped:
        assert (doc["outcome"], proc.returncode) == ("error", 1), out[-3000:]
        causes = [str(c["message"]) for c in doc.get("causes", [])
                  if "perf.baseline_tps" in c["claims"]]
        assert any("the server process has exited" in c for c in causes), doc.get("causes")
        assert f"no process tagged {stop['far_side']['tag']} is left" in stop["summary"]
    else:
        assert (doc["outcome"], proc.returncode) == ("interrupted", 2), out[-3000:]
        assert "standard input closed: TERM to process group" in stop["summary"], stop


def test_a_stop_that_left_something_is_a_warning(tmp_path: Path) -> None:
    live_dir = tmp_path / "live"
    live_dir.mkdir()
    far = FarSideStop(tag="ab" * 16, pid=4242, wrapper=("standard input closed: TERM to "
                                                       "process group 4242",),
                      second_path="sweep: left: 4243", left=(4243,))
    report = server.StopReport(how="remote", port_free=True, far_side=far)
    server_log = live_dir / "speculative-server.log"
    server._write_stop_report(server_log, "speculative", report)
    clean = server.StopReport(how="remote", port_free=True,
                              far_side=dataclasses.replace(far, left=()))
    server._write_stop_report(live_dir / "baseline-server.log", "baseline", clean)
    facts = results.server_facts(tmp_path)
    assert facts["servers_stopped"]["speculative"]["clean"] is False
    assert facts["servers_stopped"]["speculative"]["far_side"]["left"] == [4243]
    assert facts["servers_stopped"]["baseline"]["clean"] is True
    warnings = results.stop_warnings(tmp_path)
    assert warnings == [f"the speculative server was not stopped cleanly: {report.summary()}"]
    assert "on the far side pids [4243]" in warnings[0]


def test_where_sshd_cannot_run_the_reason_is_given(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sshd, "SSHD", tmp_path / "sshd")
    assert "apt-get install openssh-server" in str(sshd.unavailable())
    monkeypatch.setattr(sshd, "SSHD", Path(sys.executable))  # any file that exists
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "must run as root" in str(sshd.unavailable())
