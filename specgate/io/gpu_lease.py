"""GPU sets lent to live sessions one at a time: a file lock per set under the reports folder."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from filelock import FileLock, Timeout

LEASE_DIR = ".gpu-sets"
POLL_S = 1.0


@contextlib.contextmanager
def lease(reports: Path, sets: Sequence[tuple[int, ...]], *,
          say: Callable[[str], None] | None = None,
          poll_s: float = POLL_S) -> Iterator[tuple[int, ...]]:
    """The first free GPU set, held until the block ends; waits while every set is in use
    (by another checkpoint's session of this matrix, or another run on the same folder)."""
    folder = reports / LEASE_DIR
    folder.mkdir(parents=True, exist_ok=True)
    said = False
    while True:
        for chosen in sets:
            lock = FileLock(str(folder / f"{'-'.join(map(str, chosen))}.lock"))
            try:
                lock.acquire(timeout=0)
            except Timeout:
                continue
            try:
                yield chosen
            finally:
                lock.release()
            return
        if say is not None and not said:
            say(f"every GPU set ({'; '.join(','.join(map(str, s)) for s in sets)}) is in use; "
                "waiting for one to be free")
            said = True
        time.sleep(poll_s)
