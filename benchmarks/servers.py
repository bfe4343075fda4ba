"""The servers a benchmark starts by itself (outside specgate's run: the real-SGLang suite's
attach-mode servers, the crossover's pair, each launch of a launch record), built on
specgate.serving: free ports from its `free_port`, readiness on its READY_PATH with its probe
timeout, and each server in its own process group with its output in a log, stopped as a group."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from specgate.serving.launch import free_port
from specgate.serving.server import READY_PATH, READY_PROBE_TIMEOUT_S

__all__ = ["Started", "free_port", "free_ports", "simulator", "start", "until_healthy"]

POLL_S = 1.0


def free_ports(n: int) -> list[int]:
    """n distinct free loopback ports, all held until each is known (servers started at once
    would otherwise race for the ports free_port hands out one at a time)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


class Started:
    """One server this benchmark started: its own process group, its output in `log` (headed by
    the command line), on 127.0.0.1:`port`."""

    def __init__(self, config: str, proc: subprocess.Popen[bytes], port: int, log: Path,
                 argv: Sequence[str]) -> None:
        self.config, self.proc, self.port, self.log = config, proc, port, log
        self.argv = list(argv)
        self.started = time.monotonic()
        self.ready_s: float | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def answers(self, timeout_s: float = 10.0) -> bool:
        """Running, and answering READY_PATH with 200."""
        import requests

        if self.proc.poll() is not None:
            return False
        try:
            return requests.get(self.url + READY_PATH, timeout=timeout_s).status_code == 200
        except requests.RequestException:
            return False

    def stop(self, term_s: float = 30.0, kill_s: float = 10.0) -> int | None:
        """SIGTERM to the group, then SIGKILL after `term_s`; the exit code, or None when the
        server outlived both."""
        for sig, wait_s in ((signal.SIGTERM, term_s), (signal.SIGKILL, kill_s)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                return self.proc.wait(wait_s)
        return self.proc.returncode


def start(config: str, argv: Sequence[str], port: int, log: Path, *,
          env: Mapping[str, str] | None = None, tag: str = "") -> Started:
    """`argv` (a server listening on `port`) in a new session, stdout and stderr to `log`; with
    `tag`, the log starts with "# TAG: COMMAND"."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as fh:
        if tag:
            fh.write(f"# {tag}: {shlex.join(argv)}\n".encode())
            fh.flush()
        proc = subprocess.Popen(list(argv), stdout=fh, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})},
                                start_new_session=True)
    return Started(config, proc, port, log, argv)


def until_healthy(servers: Sequence[Started], deadline: float,
                  on_ready: Callable[[Started], None] | None = None,
                  poll_s: float = POLL_S) -> str | None:
    """None once every server answers READY_PATH with 200 (each one's ready_s set, on_ready
    called), else why not: one exited, or `deadline` (Unix time) passed first. Asked again
    every poll_s seconds."""
    pending = list(servers)
    while pending:
        for srv in list(pending):
            if srv.proc.poll() is not None:
                return f"the {srv.config} server exited with code {srv.proc.returncode}"
            if srv.answers(timeout_s=min(READY_PROBE_TIMEOUT_S, 30.0)):
                srv.ready_s = round(time.monotonic() - srv.started, 1)
                pending.remove(srv)
                if on_ready is not None:
                    on_ready(srv)
        if pending and time.time() >= deadline:
            return (f"not answering {READY_PATH} before the deadline: "
                    f"{[s.config for s in pending]}")
        if pending:
            time.sleep(poll_s)
    return None


@contextlib.contextmanager
def simulator(argv: Sequence[str], log: Path, *, env: Mapping[str, str] | None = None,
              ready_s: float = 60.0) -> Iterator[str]:
    """specgate's SGLang simulator with these arguments on a free loopback port, its output in
    `log`: its URL once it answers, and stopped afterwards. RuntimeError with the log when it
    exits or does not answer within ready_s."""
    port = free_port()
    srv = start("simulator", [sys.executable, "-m", "specgate.testing.simulator", *argv,
                              "--port", str(port)], port, log, env=env)
    try:
        why = until_healthy([srv], time.time() + ready_s, poll_s=0.05)
        if why is not None:
            raise RuntimeError(f"simulator: {why}:\n{log.read_text(errors='replace')}")
        yield srv.url
    finally:
        srv.stop(term_s=10.0)
