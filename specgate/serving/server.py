"""Start, watch, attach to and stop SGLang servers, leaving no process behind."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil

from specgate.core.errors import ServerError
from specgate.core.redact import Redactor
from specgate.io import stop_reports
from specgate.serving import gpu, safety_net
from specgate.serving.client import NoAnswer, SGLangClient, Unreachable
from specgate.serving.launch import ATTACH_OPTIONS, Config, LaunchSpec, ServerPlan, free_port
from specgate.serving.launchers import remote
from specgate.serving.launchers.base import FarSideStop, StopOrder, read_head, read_tail
from specgate.serving.preflight import PreflightResult

READY_PATH = "/health_generate"
SPECULATIVE_ALGORITHMS = frozenset({"EAGLE3", "EAGLE"})
POLL_S = 0.5
FIRST_PROGRESS_S = 1.0  # a real start takes a minute (a 1T model: twenty): say so early
PROGRESS_EVERY_S = 5.0
# /health_generate runs a one-token generation: 1.0 s on an idle H200 with SGLang 0.5.17, and
# several seconds on a loaded box, so one probe may take this long before it counts as no answer.
READY_PROBE_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
GPU_RELEASE_TIMEOUT_S = 30.0

# Access-log lines of our own readiness polls: hundreds of them would bury the real tail.
_POLL_LINE = re.compile(r'"GET /health(?:_generate)? HTTP/[0-9.]+" \d{3}')
# The line a Python traceback ends with ("torch.OutOfMemoryError: CUDA out of memory. …",
# "ValueError: Loaded weights leave no GPU memory …"), as a server prints it before it exits.
_ERROR_LINE = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception)(?:\[\d+\])?: \S")
# Log lines longer than this are cut in a tail (SGLang logs its whole ServerArgs on one line).
TAIL_LINE_CHARS = 600

ProgressCallback = Callable[[float, str], None]
Progress = Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class StopReport:
    """How a server ended and what, if anything, outlived it."""

    how: str  # attached | exited | terminated | killed | remote
    exit_code: int | None = None
    pids: tuple[int, ...] = ()
    killed: tuple[int, ...] = ()
    leftovers: tuple[int, ...] = ()
    port_free: bool | None = None
    gpu_leftovers: tuple[int, ...] = ()
    seconds: float = 0.0
    notes: tuple[str, ...] = ()
    far_side: FarSideStop | None = None

    @property
    def clean(self) -> bool:
        far_left = self.far_side is not None and bool(self.far_side.left)
        return (not self.leftovers and self.port_free is not False and not self.gpu_leftovers
                and not far_left)

    def summary(self) -> str:
        """One line for the reports: how it ended, what was left behind, the notes."""
        text = self.how
        if not self.clean:
            far = list(self.far_side.left or ()) if self.far_side else []
            text += (f"; left behind: pids {list(self.leftovers)}, port free {self.port_free}, "
                     f"GPU pids {list(self.gpu_leftovers)}"
                     + (f", on the far side pids {far}" if far else ""))
        if self.notes:
            text += "; " + "; ".join(self.notes)
        return text

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["clean"] = self.clean
        out["summary"] = self.summary()
        return out


@dataclasses.dataclass(frozen=True)
class EnvReading:
    """A live server process's environment, or why it could not be read."""

    env: dict[str, str] | None
    reason: str
    pid: int | None = None


class ServerHandle:
    """A launched or attached server; stop() tears down only what this harness started."""

    def __init__(self, *, url: str, api_key: str | None, config: Config,
                 spec: LaunchSpec | None = None, log_path: Path | None = None,
                 proc: subprocess.Popen[bytes] | None = None,
                 server_info: dict[str, Any] | None = None,
                 stop_timeout_s: float = STOP_TIMEOUT_S,
                 remote_tag: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.config = config
        self.spec = spec
        self.log_path = log_path
        self.server_info: dict[str, Any] = server_info or {}
        self.stop_timeout_s = stop_timeout_s
        # A remote launch: the tag its wrapper gives the server's tree on the far side.
        self.remote_tag = remote_tag
        self._proc = proc
        self._family: dict[int, psutil.Process] = {}
        self._report: StopReport | None = None
        # Re-entrant: a signal handler's stop_all() may run inside a stop in the same thread.
        self._lock = threading.RLock()
        self._stopping = False
        self._redactor = spec.redactor() if spec else Redactor([api_key])
        self.remember_children()

    def __repr__(self) -> str:
        return f"ServerHandle({self.config}, {self.url}, pid={self.pid})"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def simulated(self) -> bool:
        return self.server_info.get("simulated") is True

    @property
    def attached(self) -> bool:
        return self._proc is None

    @property
    def command(self) -> str:
        """How the server was reached: its launch command (secrets masked), or its URL."""
        return self.spec.display if self.spec is not None else f"attached to {self.url}"

    def log_tail(self, n: int = 40) -> str:
        """The last n lines of the server log, secrets redacted, our readiness polls left out."""
        return _tail(self.log_path, n, self._redactor.redact) if self.log_path else ""

    def log_error(self) -> str | None:
        """The last exception line of the server log, secrets redacted (server_error)."""
        return server_error(self.log_path, self._redactor.redact) if self.log_path else None

    def alive(self) -> bool:
        if self._proc is None:
            return _answers(self.url)
        return self._proc.poll() is None

    @property
    def pids(self) -> tuple[int, ...]:
        """The launched server's process tree as last seen (empty when attached)."""
        self.remember_children()
        return tuple(sorted(self._family))

    def remember_children(self) -> None:
        """Record the process tree now: children re-parent to init once their parent dies."""
        if self._proc is None:
            return
        try:
            root = psutil.Process(self._proc.pid)
            for p in [root, *root.children(recursive=True)]:
                self._family.setdefault(p.pid, p)
        except psutil.Error:
            pass

    def far_side(self) -> remote.FarSide | None:
        """Where the wrapper says the server runs on the far side (a remote launch)."""
        if self.remote_tag is None or self.log_path is None:
            return None
        found = remote.started(read_head(self.log_path))
        return found if found is not None and found.tag == self.remote_tag else None

    def stop(self) -> StopReport:
        """Stop the tree (SIGTERM, then SIGKILL after stop_timeout_s); idempotent."""
        with self._lock:
            if self._stopping:
                # Re-entered from a signal handler (SIGTERM during a stop): the stop under way
                # finishes it, or a later stop_all() if the signal interrupts it.
                return StopReport(how="stopping", notes=("a stop of this server is under way",))
            if self._report is None:
                self._stopping = True
                try:
                    self._report = self._stop()
                finally:
                    self._stopping = False
                safety_net.discard(self)
                if self.log_path is not None:
                    _write_stop_report(self.log_path, self.config, self._report)
            return self._report

    def _stop(self) -> StopReport:
        started = time.monotonic()
        if self._proc is None:
            return StopReport(how="attached", notes=("attached server: left running",))
        notes: list[str] = []
        spec = self.spec
        far: FarSideStop | None = None
        if spec is not None and self.remote_tag is not None:
            far = spec.launcher.stop_far_side(StopOrder(
                self._proc, self.remote_tag, self.log_path, self.stop_timeout_s,
                self._redactor, spec.stop_command))
            notes += far.notes() if far is not None else []
        self.remember_children()
        family = [p for p in self._family.values() if _running(p)]
        exited_before = self._proc.poll() is not None
        killed = _terminate_tree(self._proc, family, self.stop_timeout_s)
        exit_code = self._proc.poll()
        leftovers = tuple(p.pid for p in family if _running(p))
        port_free = _wait_port_free(self.url, spec.launcher.port_release_s if spec else 5.0)
        left_note = spec.launcher.port_left_note(self.url, spec.stop_command) \
            if spec is not None and port_free is False else None
        if left_note:
            notes.append(left_note)
        pids = tuple(sorted(self._family))
        if self.log_path is not None:
            _scrub_log(self.log_path, self._redactor)
        gpu_left = _wait_gpu_released(set(pids), notes,
                                      spec.launcher.gpu_snapshot if spec else gpu.snapshot)
        how = "remote" if far is not None else (
            "exited" if exited_before else "killed" if killed else "terminated")
        return StopReport(how=how, exit_code=exit_code, pids=pids, killed=tuple(killed),
                          leftovers=leftovers, port_free=port_free, gpu_leftovers=gpu_left,
                          seconds=round(time.monotonic() - started, 3), notes=tuple(notes),
                          far_side=far)


def launch(spec: LaunchSpec, log_path: Path, *, startup_timeout_s: float,
           on_progress: ProgressCallback | None = None, poll_s: float = POLL_S,
           first_progress_s: float = FIRST_PROGRESS_S,
           progress_every_s: float = PROGRESS_EVERY_S,
           stop_timeout_s: float = STOP_TIMEOUT_S) -> ServerHandle:
    """Start the server and return once it answers READY_PATH; never leaves it half-started."""
    handle = start(spec, log_path, stop_timeout_s=stop_timeout_s)
    until_ready(handle, startup_timeout_s=startup_timeout_s, on_progress=on_progress,
                poll_s=poll_s, first_progress_s=first_progress_s,
                progress_every_s=progress_every_s)
    return handle


def start(spec: LaunchSpec, log_path: Path, *,
          stop_timeout_s: float = STOP_TIMEOUT_S) -> ServerHandle:
    """Start the server's process through its launcher (from the main thread, so it dies with
    this one); not yet ready: until_ready waits for it."""
    if spec.launcher.port_taken(spec.host, spec.port, spec.url):
        raise ServerError(
            f"port {spec.port} on {spec.host} is already in use, so the {spec.config} server "
            f"cannot start there; stop what holds it (`ss -ltnp 'sport = :{spec.port}'`), "
            "choose another [server] port, or attach with --server-url/--baseline-url"
        )
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        log.write(f"# specgate: {spec.display}\n".encode())
        log.flush()
        started = spec.launcher.start(spec.argv, spec.env, log, stop_timeout_s=stop_timeout_s)
    handle = ServerHandle(url=spec.url, api_key=spec.api_key, config=spec.config, spec=spec,
                          log_path=log_path, proc=started.proc, stop_timeout_s=stop_timeout_s,
                          remote_tag=started.tag)
    safety_net.add(handle)
    return handle


def until_ready(handle: ServerHandle, *, startup_timeout_s: float,
                on_progress: ProgressCallback | None = None, poll_s: float = POLL_S,
                first_progress_s: float = FIRST_PROGRESS_S,
                progress_every_s: float = PROGRESS_EVERY_S,
                cancelled: threading.Event | None = None) -> None:
    """Wait for a started server to answer READY_PATH and check its /server_info; on any
    failure (or once `cancelled` is set) it is stopped and ServerError raised."""
    spec, proc = handle.spec, handle._proc
    assert spec is not None, "a launched server"
    assert proc is not None, "a launched server"
    try:
        _wait_ready(handle, proc, startup_timeout_s, on_progress, poll_s,
                    first_progress_s, progress_every_s, cancelled)
        handle.server_info = fetch_server_info(handle.url, handle.api_key)
        check_config(handle.server_info, spec.config, handle.url)
    except ServerError as exc:
        handle.stop()
        if exc.log_tail:
            raise
        # A refused key or a wrong /server_info: the log says what the server was started with.
        raise ServerError(str(exc), handle.log_tail()) from None
    except BaseException:
        handle.stop()
        raise


class PairStartError(ServerError):
    """One of several servers started together did not get ready (`config` says which)."""

    def __init__(self, config: Config, message: str, log_tail: str = "") -> None:
        super().__init__(message, log_tail)
        self.config = config


def attach(url: str, api_key: str | None, config: Config, *,
           timeout_s: float = 10.0) -> ServerHandle:
    """A handle on a server someone else runs, after checking it is the expected config."""
    option = ATTACH_OPTIONS[config]
    try:
        info = fetch_server_info(url, api_key, timeout_s=timeout_s)
    except Unreachable as exc:
        raise ServerError(f"the {config} server at {url} ({option}) cannot be reached: "
                          f"{exc.why}; start it there, or point {option.split(' / ')[0]} at "
                          f"the running {config} server") from None
    except NoAnswer as exc:
        raise ServerError(f"the {config} server at {url} ({option}) took the connection but "
                          f"sent no answer to /server_info ({exc.why}); check that it is an "
                          "SGLang server that has finished starting, or point "
                          f"{option.split(' / ')[0]} at the running {config} server") from None
    check_config(info, config, url)
    return ServerHandle(url=url, api_key=api_key, config=config, server_info=info)


@contextlib.contextmanager
def serve(plan: ServerPlan, progress: Progress) -> Iterator[ServerHandle]:
    """The planned server: attached, or preflighted, launched, and stopped afterwards."""
    if plan.spec is None:
        progress(f"{plan.config}: attaching to {plan.url}")
        yield attach(plan.url, plan.api_key, plan.config)
        return
    spec = plan.spec
    if plan.any_port and spec.launcher.port_taken(spec.host, spec.port, spec.url):
        spec = spec.on_port(free_port(spec.host))  # taken since it was planned
    if not spec.simulated:
        _preflight(spec, progress)
    progress(f"{plan.config}: launching {spec.display}")
    assert plan.log_path is not None, "a launched server has a log"
    with running(spec, plan.log_path, startup_timeout_s=plan.startup_timeout_s,
                 stop_timeout_s=plan.stop_timeout_s,
                 on_progress=_start_progress(plan.config, progress)) as handle:
        yield handle


@contextlib.contextmanager
def serve_together(plans: Sequence[ServerPlan],
                   progress: Progress) -> Iterator[dict[Config, ServerHandle]]:
    """Several launched servers started at once, so their loads overlap: each is preflighted,
    then all are started from this thread and waited for side by side; all are stopped
    afterwards. When one fails to get ready the others are stopped at once and PairStartError
    names the one that failed."""
    specs: dict[Config, LaunchSpec] = {}
    for plan in plans:
        spec = plan.spec
        if spec is None or plan.log_path is None:
            raise ValueError(f"the {plan.config} server is attached, not launched")
        taken = [(s.host, s.port) for s in specs.values()]
        if plan.any_port and (spec.launcher.port_taken(spec.host, spec.port, spec.url)
                              or (spec.host, spec.port) in taken):
            spec = spec.on_port(free_port(spec.host))
        if not spec.simulated:
            try:
                _preflight(spec, progress)
            except ServerError as exc:
                raise PairStartError(plan.config, str(exc)) from None
        specs[plan.config] = spec
    handles: dict[Config, ServerHandle] = {}
    cancelled = threading.Event()
    try:
        for plan in plans:
            spec = specs[plan.config]
            progress(f"{plan.config}: launching {spec.display} (beside the "
                     + " and ".join(p.config for p in plans if p is not plan) + " server)")
            assert plan.log_path is not None
            try:
                handles[plan.config] = start(spec, plan.log_path,
                                             stop_timeout_s=plan.stop_timeout_s)
            except ServerError as exc:
                raise PairStartError(plan.config, str(exc), exc.log_tail) from None
        failures: dict[Config, ServerError] = {}

        def wait(plan: ServerPlan) -> None:
            try:
                until_ready(handles[plan.config], startup_timeout_s=plan.startup_timeout_s,
                            on_progress=_start_progress(plan.config, progress),
                            cancelled=cancelled)
            except ServerError as exc:
                if not cancelled.is_set():
                    failures[plan.config] = exc
                cancelled.set()
            except BaseException as exc:
                failures[plan.config] = ServerError(f"internal error: {exc!r}")
                cancelled.set()

        waiters = [threading.Thread(target=wait, args=(plan,), name=f"ready-{plan.config}",
                                    daemon=True) for plan in plans]
        for thread in waiters:
            thread.start()
        for thread in waiters:
            while thread.is_alive():  # joined in slices, so Ctrl-C and signals get through
                thread.join(0.2)
        if failures:
            config, failed = next(iter(failures.items()))
            raise PairStartError(config, str(failed), failed.log_tail)
        yield handles
    finally:
        cancelled.set()
        for handle in reversed(list(handles.values())):
            handle.stop()


def preflight_spec(spec: LaunchSpec, *, timeout_s: float = 120.0) -> PreflightResult:
    """SGLang's own argument parser on a built command, where its launcher can run it."""
    return spec.launcher.preflight(spec.server_args, spec.argv[:spec.prefix_len],
                                   spec.redactor(), timeout_s=timeout_s)


def _preflight(spec: LaunchSpec, progress: Progress) -> None:
    """A flag this SGLang rejects fails here in seconds, not after a 20-minute model load."""
    checked = preflight_spec(spec)
    if checked.status == "rejected":
        raise ServerError(f"SGLang {checked.version or ''} rejects the launch command "
                          f"{spec.display}: {checked.message}")
    if checked.status == "unavailable" and "No module named 'sglang'" in checked.message:
        # The launch would only die with the same import error: say it, don't launch.
        raise ServerError(f"not launched: {checked.message}; install SGLang for this "
                          f"interpreter or set [server] launcher / --sglang-launcher")
    progress(f"{spec.config}: preflight {checked.status}: {checked.message}")


def _start_progress(config: Config, progress: Progress) -> ProgressCallback:
    """The launcher's progress callback (seconds since start, last log line) as one line."""
    def report(elapsed_s: float, last_line: str) -> None:
        tail = f": {last_line.strip()[:160]}" if last_line.strip() else ""
        progress(f"{config}: starting, {elapsed_s:.0f} s so far{tail}")

    return report


@contextlib.contextmanager
def running(spec: LaunchSpec, log_path: Path, *, startup_timeout_s: float,
            on_progress: ProgressCallback | None = None, poll_s: float = POLL_S,
            first_progress_s: float = FIRST_PROGRESS_S,
            progress_every_s: float = PROGRESS_EVERY_S,
            stop_timeout_s: float = STOP_TIMEOUT_S) -> Iterator[ServerHandle]:
    """launch() as a context manager that always stops the server."""
    handle = launch(spec, log_path, startup_timeout_s=startup_timeout_s,
                    on_progress=on_progress, poll_s=poll_s, first_progress_s=first_progress_s,
                    progress_every_s=progress_every_s, stop_timeout_s=stop_timeout_s)
    try:
        yield handle
    finally:
        handle.stop()


def fetch_server_info(url: str, api_key: str | None, *,
                      timeout_s: float = 10.0) -> dict[str, Any]:
    """The server's /server_info (see SGLangClient.server_info)."""
    with SGLangClient(url, api_key, timeout_s=timeout_s) as client:
        return client.server_info()


def check_config(info: dict[str, Any], config: Config, url: str) -> None:
    """Raise ServerError unless /server_info matches the configuration under test."""
    algo = info.get("speculative_algorithm")
    algo_name = str(algo).upper() if algo not in (None, "", "NONE", "None") else None
    if config == "speculative" and algo_name not in SPECULATIVE_ALGORITHMS:
        raise ServerError(
            f"{url}: /server_info says speculative_algorithm = {algo!r}, expected EAGLE3 (or "
            "EAGLE) for the speculative server; start it with --speculative-algorithm EAGLE3 "
            "or point --server-url at the speculative server")
    if config == "baseline" and algo_name is not None:
        raise ServerError(
            f"{url}: /server_info says speculative_algorithm = {algo!r}, expected none for the "
            "baseline server; start it without --speculative-* flags or point --baseline-url "
            "at the baseline server")


def process_env(handle: ServerHandle) -> dict[str, str] | None:
    """The live server process's environment, or None (process_env_detail says why)."""
    return process_env_detail(handle).env


def process_env_detail(handle: ServerHandle) -> EnvReading:
    """The environment of the process that serves: the one of the launched tree on its port.

    The launcher's own process got the profile env from us, so reading it proves nothing: a
    wrapper (`sh -c 'env -u X ...'`, sudo, conda run) may fork a server without it.
    """
    spec = handle.spec
    unreadable = spec.launcher.env_unreadable() if spec is not None else None
    if unreadable is not None:
        return EnvReading(None, unreadable)
    if handle.pid is None:
        pid = _listener_pid(handle.url)
        if pid is None:
            return EnvReading(None, "attached server: no local process listens on its port, so "
                                    "its environment cannot be read from here")
        why = f"pid {pid} listens on the attached server's port"
    else:
        pid, why = _serving_pid(handle)
    try:
        return EnvReading(dict(psutil.Process(pid).environ()), f"read from /proc: {why}", pid)
    except psutil.AccessDenied:
        return EnvReading(None, f"pid {pid}: permission denied reading its environment "
                                f"(run as the server's user); {why}", pid)
    except psutil.Error as exc:
        return EnvReading(None, f"pid {pid}: {exc.__class__.__name__}: {exc}; {why}", pid)


# SGLang names each TP worker process with setproctitle: sglang::scheduler_TP1, or with data or
# pipeline parallelism sglang::scheduler_DP0_TP1, sglang::scheduler_PP0_TP1.
_RANK_TITLE = re.compile(r"sglang::(scheduler\S*?_TP(\d+)\S*)")


@dataclasses.dataclass(frozen=True)
class RankEnv:
    """One TP rank process of a server and its environment (None: unreadable, reason says)."""

    rank: int
    label: str  # its process title without the prefix, e.g. scheduler_TP1
    pid: int
    env: dict[str, str] | None
    reason: str = ""


def rank_envs(handle: ServerHandle) -> tuple[list[RankEnv], str]:
    """The environment of every TP rank process of a server on this machine, by rank, with a
    sentence saying where they were looked for ([] and why when none can be read)."""
    spec = handle.spec
    unreadable = spec.launcher.ranks_unreadable() if spec is not None else None
    if unreadable is not None:
        return [], unreadable
    root = handle.pid if handle.pid is not None else _listener_pid(handle.url)
    if root is None:
        return [], "attached server: no local process listens on its port"
    ranks: list[RankEnv] = []
    for proc in _tree(root, handle._family.values()):
        try:
            title = " ".join(proc.cmdline())
        except psutil.Error:
            continue
        found = _RANK_TITLE.search(title)
        if found is None:
            continue
        rank, label = int(found.group(2)), found.group(1)
        try:
            ranks.append(RankEnv(rank, label, proc.pid, dict(proc.environ())))
        except psutil.AccessDenied:
            ranks.append(RankEnv(rank, label, proc.pid, None,
                                 "permission denied reading its environment"))
        except psutil.Error as exc:
            ranks.append(RankEnv(rank, label, proc.pid, None,
                                 f"{exc.__class__.__name__}: {exc}"))
    ranks.sort(key=lambda r: (r.rank, r.label))
    return ranks, f"the TP rank processes (sglang::scheduler_TP<r>) under pid {root}"


def _serving_pid(handle: ServerHandle) -> tuple[int, str]:
    """The launched tree's process listening on the handle's port, else its deepest descendant,
    else the launcher's own process; with a sentence saying which and why."""
    assert handle.pid is not None
    root = handle.pid
    port = urlsplit(handle.url).port
    family = _tree(root, handle._family.values())
    for proc in family:
        if port is not None and _listens(proc, port):
            name = _name(proc)
            if proc.pid == root:
                return root, f"pid {root} ({name}), the launched process, listens on port {port}"
            return proc.pid, (f"pid {proc.pid} ({name}) listens on port {port}; it descends "
                              f"from the launched process {root}, which may run a wrapper")
    depth = {p.pid: _depth(p, root) for p in family}
    deepest = max(family, key=lambda p: depth[p.pid], default=None)
    if deepest is not None and deepest.pid != root:
        return deepest.pid, (f"no process of the launched tree listens on port {port}, so its "
                             f"deepest descendant pid {deepest.pid} ({_name(deepest)}) of the "
                             f"launched process {root} stands in for the server")
    return root, (f"no process of the launched tree listens on port {port} and the launched "
                  f"process {root} has no children, so its own environment is read")


def _tree(root: int, remembered: Iterable[psutil.Process]) -> list[psutil.Process]:
    """The root and its live descendants, plus remembered members re-parented away since."""
    out: list[psutil.Process] = []
    try:
        top = psutil.Process(root)
        out = [top, *top.children(recursive=True)]
    except psutil.Error:
        pass
    seen = {p.pid for p in out}
    out += [p for p in remembered if p.pid not in seen and _running(p)]
    return out


def _listens(proc: psutil.Process, port: int) -> bool:
    try:
        return any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
                   for c in proc.net_connections(kind="inet"))
    except psutil.Error:
        return False


def _depth(proc: psutil.Process, root: int) -> int:
    """Generations between proc and root (-1: not below root any more)."""
    depth = 0
    try:
        current: psutil.Process | None = proc
        while current is not None and current.pid != root:
            current = current.parent()
            depth += 1
    except psutil.Error:
        return -1
    return depth if current is not None else -1


def _name(proc: psutil.Process) -> str:
    try:
        return proc.name()
    except psutil.Error:
        return "?"


# ---- internals ----

def _wait_ready(handle: ServerHandle, proc: subprocess.Popen[bytes], timeout_s: float,
                on_progress: ProgressCallback | None, poll_s: float,
                first_progress_s: float, progress_every_s: float,
                cancelled: threading.Event | None = None) -> None:
    import requests

    started = time.monotonic()
    deadline = started + timeout_s
    next_progress = started + first_progress_s
    url = handle.url + READY_PATH
    while True:
        if cancelled is not None and cancelled.is_set():
            raise ServerError(f"the {handle.config} server's start was abandoned "
                              f"({time.monotonic() - started:.1f} s after start): the server "
                              "started beside it failed", handle.log_tail())
        code = proc.poll()
        if code is not None:
            said = handle.log_error()
            raise ServerError(
                f"the {handle.config} server exited with code {code} before it was ready "
                f"({time.monotonic() - started:.1f} s after start)"
                + (f": {said}" if said else "")
                + f"; the log is {handle.log_path}",
                handle.log_tail())
        handle.remember_children()
        try:
            wait = max(0.1, min(READY_PROBE_TIMEOUT_S, deadline - time.monotonic()))
            resp = requests.get(url, headers=_auth(handle.api_key), timeout=(2.0, wait))
            if resp.status_code == 200:
                return
        except requests.RequestException:
            pass
        now = time.monotonic()
        if now >= deadline:
            raise ServerError(
                f"the {handle.config} server did not answer {READY_PATH} with 200 within "
                f"{timeout_s:g} s ([server] startup_timeout_s); it was stopped; the log is "
                f"{handle.log_path}", handle.log_tail())
        if on_progress is not None and now >= next_progress:
            next_progress = now + progress_every_s
            lines = handle.log_tail(1).splitlines()
            on_progress(now - started, lines[-1] if lines else "")
        pause = min(poll_s, max(0.0, deadline - now))
        if cancelled is not None:
            cancelled.wait(pause)
        else:
            time.sleep(pause)


def _terminate_tree(proc: subprocess.Popen[bytes], family: list[psutil.Process],
                    timeout_s: float) -> list[int]:
    """SIGTERM the session and the known tree, wait, then SIGKILL what is left."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    for p in family:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(family, timeout=timeout_s)
    killed = []
    # Children first, so a parent cannot respawn one between its kill and theirs.
    for p in sorted(alive, key=lambda q: q.pid == proc.pid):
        with contextlib.suppress(psutil.Error):
            p.kill()
            killed.append(p.pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    psutil.wait_procs(alive, timeout=5.0)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5.0)
    return killed


def _wait_port_free(url: str, timeout_s: float) -> bool:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, port), 0.5):
                pass
        except OSError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)


def _wait_gpu_released(pids: set[int], notes: list[str],
                       probe: Callable[[], gpu.GpuSnapshot | None]) -> tuple[int, ...]:
    """GPU processes of the tree still listed after a bounded wait (none without nvidia-smi)."""
    deadline = time.monotonic() + GPU_RELEASE_TIMEOUT_S
    while True:
        try:
            snap = probe()
        except gpu.NvidiaSmiError as exc:
            notes.append(f"GPU release not checked: {exc}")
            return ()
        if snap is None:
            return ()
        left = tuple(p.pid for p in snap.processes if p.pid in pids)
        if not left or time.monotonic() >= deadline:
            if left:
                notes.append(f"GPU processes {list(left)} still listed by nvidia-smi "
                             f"{GPU_RELEASE_TIMEOUT_S:.0f} s after stop")
            return left
        time.sleep(1.0)


def _running(p: psutil.Process) -> bool:
    try:
        # is_running() also guards against a recycled pid (it compares the start time).
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _listener_pid(url: str) -> int | None:
    port = urlsplit(url).port
    try:
        for conn in psutil.net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
                return conn.pid
    except (psutil.Error, OSError):
        return None
    return None


def _answers(url: str) -> bool:
    import requests

    try:
        return requests.get(url + "/health", timeout=2.0).status_code < 500
    except requests.RequestException:
        return False


def _auth(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _write_stop_report(log_path: Path, config: Config, report: StopReport) -> None:
    """The stop report beside the log: the verdict names what was stopped and how, also when
    the run was interrupted or the server ran in another xdist worker."""
    stop_reports.write(log_path, config, report.to_json())


def _tail(path: Path, n: int, redact: Callable[[str], str] = str) -> str:
    """The last n lines of a log, each redacted and then cut (a secret is masked whole before a
    long line is shortened, never cut in two)."""
    lines = [_cut(redact(ln)) for ln in read_tail(path).splitlines() if not _POLL_LINE.search(ln)]
    return "\n".join(lines[-n:])


def _cut(line: str) -> str:
    if len(line) <= TAIL_LINE_CHARS:
        return line
    return f"{line[:TAIL_LINE_CHARS]} … ({len(line) - TAIL_LINE_CHARS} more characters)"


def server_error(path: Path, redact: Callable[[str], str] = str) -> str | None:
    """The last exception line in the end of a server's log (the error a crashed SGLang printed
    above its crash diagnostics), redacted, then cut to one readable line; None when none."""
    found = [ln.strip() for ln in read_tail(path).splitlines() if _ERROR_LINE.match(ln)]
    return _cut(redact(found[-1])) if found else None


def _scrub_log(path: Path, redactor: Redactor) -> None:
    """Rewrite the finished log with secrets masked: reports folders get archived and shared."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
        clean = redactor.redact(text)
        if clean != text:
            path.write_text(clean, encoding="utf-8")
    except OSError:
        pass
