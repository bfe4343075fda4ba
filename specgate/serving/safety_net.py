"""The safety net: every server this process launched is stopped however the process ends
(normal exit, SIGTERM, SIGHUP), so none keeps the GPUs after the run."""

from __future__ import annotations

import atexit
import signal
from types import FrameType
from typing import Protocol


class Stoppable(Protocol):
    """A launched server: its stop() ends it and says how (serving/server.py ServerHandle)."""

    def stop(self) -> object: ...


_registry: set[Stoppable] = set()


def add(handle: Stoppable) -> None:
    _registry.add(handle)


def discard(handle: Stoppable) -> None:
    _registry.discard(handle)


def live_handles() -> list[Stoppable]:
    """The servers this process launched and has not stopped yet."""
    return list(_registry)


def stop_all() -> list[object]:
    """Stop every server this process launched and has not stopped yet; their stop reports."""
    return [h.stop() for h in list(_registry)]


def install_signal_handlers(signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGHUP)) -> None:
    """On these signals stop every server, then raise KeyboardInterrupt (main thread only)."""
    def handler(signum: int, frame: FrameType | None) -> None:
        stop_all()
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    for signum in signals:
        signal.signal(signum, handler)


atexit.register(stop_all)
