"""The launcher interface: how a server is started where it runs, how its GPUs are probed, and
how it is stopped there with nothing left behind.

One implementation per launcher (local.py, ssh.py, pct.py, docker.py); the profile's
`[server] launcher` picks one (launchers/__init__.py `pick`), once, when the launch settings are
read, and everything else asks that object rather than branching on the launcher's kind.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, ClassVar
from urllib.parse import urlsplit

from specgate.core.errors import ServerError
from specgate.core.redact import Redactor
from specgate.serving import gpu
from specgate.serving.preflight import PreflightResult

# Every process of a server started on a far side carries this variable, its value the launch's
# tag: the far side's processes are found by it, never by name (launchers/remote.py).
TAG_VAR = "SPECGATE_REMOTE_TAG"

@dataclasses.dataclass(frozen=True)
class Command:
    """A server's command line as a launcher builds it from the SGLang flags."""

    argv: tuple[str, ...]
    env: Mapping[str, str]  # added to this machine's environment for the started process
    prefix_len: int  # argv[:prefix_len] is the launcher (with any `env K=V` carriage)
    # argv[:remote_at] reaches the far side (`ssh gpu-box`, `pct exec 101 --`); 0: none.
    remote_at: int = 0


@dataclasses.dataclass(frozen=True)
class Started:
    """A started server process and, for a launch on a far side, the tag its tree carries."""

    proc: subprocess.Popen[bytes]
    tag: str | None = None


@dataclasses.dataclass(frozen=True)
class FarSideStop:
    """How a server was stopped on the far side of its launcher (launchers/remote.py)."""

    tag: str  # the SPECGATE_REMOTE_TAG value every process of the server's tree carries
    pid: int | None  # the server's pid there, which is also its process group (None: unknown)
    wrapper: tuple[str, ...]  # what the wrapper said it did when its standard input ended
    second_path: str  # the sweep through the launcher prefix (or [server] stop_command)
    left: tuple[int, ...] | None  # tagged pids still alive after the sweep; None: unknown

    def notes(self) -> list[str]:
        """The stop report's sentences: where the server ran, and what each path did."""
        where = (f"far side: the server ran as pid {self.pid}, leading its own process group, "
                 f"tagged {TAG_VAR}={self.tag}" if self.pid is not None else
                 "far side: the wrapper never reported the server's pid (it did not start, or "
                 f"its output was lost); its processes are tagged {TAG_VAR}={self.tag}")
        wrapper = ("the wrapper: " + "; ".join(self.wrapper) if self.wrapper else
                   "the wrapper reported no stop (nothing of the server was running when it "
                   "ended, or its output was lost with the connection)")
        return [where, wrapper, self.second_path]


@dataclasses.dataclass(frozen=True)
class StopOrder:
    """What a launcher needs to stop what it started on its far side."""

    proc: subprocess.Popen[bytes]
    tag: str
    log_path: Path | None
    stop_timeout_s: float
    redactor: Redactor
    stop_command: tuple[str, ...] | None = None


class Launcher(ABC):
    """How servers are started, probed and stopped: `argv` is the profile's `[server] launcher`
    (a leading `python` already bound to this interpreter for a local one)."""

    name: ClassVar[str]
    # argv[0] names this launcher is picked for (launchers/__init__.py).
    programs: ClassVar[frozenset[str]] = frozenset()
    # How long a stopped server's port may take to close, as seen from here.
    port_release_s: ClassVar[float] = 5.0

    def __init__(self, argv: Sequence[str], source: str = "<profile>") -> None:
        self.argv = tuple(argv)
        self.source = source  # the profile file, for messages

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self.argv)!r})"

    @classmethod
    def handles(cls, argv: Sequence[str]) -> bool:
        """Whether this launcher is the one for a `[server] launcher` argv."""
        return bool(argv) and Path(argv[0]).name in cls.programs

    # ---- the command ----

    @abstractmethod
    def server_path(self, written: str | None, resolved: Path | None) -> str | None:
        """A profile path as the server reads it: `written` as the profile has it, `resolved`
        as this machine reads it."""

    @abstractmethod
    def reads_local_files(self) -> bool:
        """Whether the server reads the profile's checkpoint paths on this machine (so they
        are checked here before a run)."""

    @abstractmethod
    def command(self, flags: Sequence[str], env: Mapping[str, str]) -> Command:
        """The command that starts the server with SGLang's `flags` and `[server] env`."""

    def server_args(self, args: Sequence[str]) -> list[str]:
        """SGLang's flags of a built command as its own parser sees them."""
        return list(args)

    # ---- start ----

    def port_taken(self, host: str, port: int, url: str) -> bool:
        """Whether something already listens at the server's address, or (where the server
        binds on this machine) the port cannot be bound."""
        return port_in_use(host, port, url)

    @abstractmethod
    def start(self, argv: Sequence[str], env: Mapping[str, str], log: IO[bytes], *,
              stop_timeout_s: float) -> Started:
        """Start the built command with its output going to `log` (already holding the
        command line); from the main thread the process dies with this one."""

    # ---- probes ----

    @abstractmethod
    def preflight(self, server_args: Sequence[str], prefix: Sequence[str],
                  redactor: Redactor, *, timeout_s: float = 120.0) -> PreflightResult:
        """SGLang's own argument parser on the flags, where it can run before the launch."""

    def gpu_snapshot(self) -> gpu.GpuSnapshot | None:
        """The server's GPUs and their compute processes now (None: no nvidia-smi)."""
        return gpu.snapshot()

    def gpu_host(self) -> str:
        """Where the server's GPUs are, for messages."""
        return "this machine"

    def attached_gpus_unlisted(self, url: str) -> str | None:
        """Why gpu_snapshot does not list the GPUs of a server attached at `url`; None: it does
        (this machine's GPUs are the server's when it listens on a loopback address)."""
        return loopback_only(url)

    def env_unreadable(self) -> str | None:
        """Why the serving process's environment cannot be read from here; None: it can."""
        return None

    def ranks_unreadable(self) -> str | None:
        """Why the TP rank processes' environments cannot be read from here; None: they can."""
        return None

    def sglang_version(self, prefix: Sequence[str]) -> str | None:
        """The SGLang version the command will run, when it is known before the launch."""
        return None

    # ---- stop ----

    def stop_far_side(self, order: StopOrder) -> FarSideStop | None:
        """Stop what the launch started beyond this machine's process tree; None: nothing is
        there (the local tree is stopped by the handle in every case)."""
        return None

    def port_left_note(self, url: str, stop_command: tuple[str, ...] | None) -> str | None:
        """What to say when the server's address still answers after the stop."""
        return None


def loopback_only(url: str) -> str | None:
    """None for a URL on a loopback address (127.0.0.0/8, ::1, localhost); else why this
    machine's GPUs are not that server's."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return None
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(host).is_loopback:
            return None
    return (f"the attached server at {url} is on another machine and the profile names no "
            "launcher prefix to list its GPUs")


def port_in_use(host: str, port: int, url: str | None = None, *, check_bind: bool = True) -> bool:
    """Whether something already listens there (connect), or the port cannot be bound."""
    target = urlsplit(url).hostname if url else host
    with contextlib.suppress(OSError), socket.create_connection((target or host, port), 0.5):
        return True
    if not check_bind:
        return False
    bind_host = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # As uvicorn binds: TIME_WAIT sockets a stopped server left on the port (it closed its
        # keep-alive connections first) do not stop a new server from starting there.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((bind_host, port))
        except OSError:
            return True
    return False


def read_head(path: Path, size: int = 64 * 1024) -> str:
    """The first `size` bytes of a server log as text ("" when it cannot be read)."""
    try:
        with path.open("rb") as f:
            return f.read(size).decode("utf-8", "replace")
    except OSError:
        return ""


def read_tail(path: Path, size: int = 64 * 1024) -> str:
    """The last `size` bytes of a server log as text ("" when it cannot be read)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - size))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def popen(argv: Sequence[str], env: Mapping[str, str], log: IO[bytes], *,
          stdin: int) -> subprocess.Popen[bytes]:
    """The server's process in a session of its own (so its whole tree can be signalled),
    output to the log, and dying with this process when started from the main thread."""
    try:
        return subprocess.Popen(
            list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=stdin,
            env={**os.environ, **env}, start_new_session=True,
            preexec_fn=_die_with_parent_hook())
    except OSError as exc:
        raise ServerError(f"cannot start {argv[0]!r}: {exc}; check [server] launcher or "
                          "--sglang-launcher") from None


_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _die_with_parent_hook() -> Callable[[], None] | None:
    """A preexec_fn that makes the server get SIGTERM when this process dies.

    A killed pytest (an xdist worker that crashed, SIGKILL, the OOM killer) runs no atexit or
    signal handler, and the server lives in its own session, so without this it would keep the
    GPUs. The kernel sends the signal when the launching thread exits, so it is only set up for
    a launch from the main thread, which lives as long as the process.
    """
    if _LIBC is None or threading.current_thread() is not threading.main_thread():
        return None
    libc, parent = _LIBC, os.getpid()

    def hook() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return hook
