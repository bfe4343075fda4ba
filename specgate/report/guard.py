"""What keeps a claims run's reporting from crashing pytest: one-sentence reasons for unexpected
exceptions, text any writer can encode, an Allure writer that cannot raise, and a reports folder
that is checked and held by one run at a time."""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

LOCK_NAME = ".specgate-run.lock"
REASON_CHARS = 300


def safe_text(text: str) -> str:
    """text that encodes as UTF-8: a path or name that was not UTF-8 on disk (Python keeps its
    bytes as lone surrogates) shows those bytes as \\xNN escapes instead of crashing a writer."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def unexpected_reason(claim_id: str, exc: BaseException, input_path: str | None) -> str:
    """One sentence for an exception no claim expected: what, where in specgate, on which input."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    what = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    if len(what) > REASON_CHARS:
        what = what[:REASON_CHARS] + "…"
    where = ""
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if f"{os.sep}specgate{os.sep}" in f.filename]
    if own:
        frame = own[-1]
        rel = frame.filename[frame.filename.rfind(f"{os.sep}specgate{os.sep}") + 1:]
        where = f" at {rel}:{frame.lineno}"
    on = f" on {input_path}" if input_path else ""
    return safe_text(f"{claim_id} could not be evaluated{on}: {what} (raised{where or ' here'}); "
                     "the input is one specgate does not handle: please report it")


def guard_allure_writer(warn: Callable[[str], None]) -> None:
    """Make allure-pytest's file writer unable to raise: text that UTF-8 cannot hold is escaped,
    and a write that fails is a warning (the verdict, written separately, still stands)."""
    try:
        from allure_commons import plugin_manager
        from allure_commons.logger import AllureFileLogger
    except ImportError:
        return
    for plugin in plugin_manager.get_plugins():
        if isinstance(plugin, AllureFileLogger) and not getattr(plugin, "_specgate_guarded",
                                                                False):
            plugin._report_item = _guarded_item(plugin, plugin._report_item, warn)  # type: ignore[method-assign]
            plugin._specgate_guarded = True  # type: ignore[attr-defined]


def _guarded_item(plugin: Any, write: Callable[[Any], None],
                  warn: Callable[[str], None]) -> Callable[[Any], None]:
    import json
    import uuid

    from attr import asdict

    def report_item(item: Any) -> None:
        try:
            write(item)
            return
        except UnicodeEncodeError:
            pass
        except Exception as exc:
            warn(f"writing an Allure result to {plugin._report_dir} failed: {exc}")
            return
        # ensure_ascii escapes lone surrogates as \udcNN: valid JSON Allure reads.
        try:
            name = item.file_pattern.format(prefix=uuid.uuid4())
            data = asdict(item, filter=lambda _, v: v or v is False)
            tmp = Path(plugin._report_dir) / f"{name}.tmp"
            tmp.write_text(json.dumps(data, ensure_ascii=True), encoding="ascii")
            os.replace(tmp, Path(plugin._report_dir) / name)
        except Exception as exc:
            warn(f"writing an Allure result to {plugin._report_dir} failed: {exc}")

    return report_item


def check_reports_dir(path: Path) -> str | None:
    """Why reports cannot be written to path (one sentence), or None."""
    if path.exists() and not path.is_dir():
        return (f"{path}: is a file; --reports (default reports/) must be a folder specgate "
                "can write to: remove the file or choose another folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".specgate-write-test.{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        return (f"{path}: cannot write the reports folder ({exc.strerror or exc}); fix its "
                "permissions or choose another with --reports=DIR")
    return None


def hold_reports_dir(path: Path) -> FileLock | str:
    """The lock that makes path this run's until it ends, or why another run holds it."""
    lock = FileLock(str(path / LOCK_NAME), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        return (f"{path}: another specgate run is writing its reports there (it holds "
                f"{path / LOCK_NAME}); wait for it to finish or give this run its own folder "
                "with --reports=DIR")
    except OSError as exc:
        return f"{path}: cannot lock the reports folder ({exc.strerror or exc})"
    return lock
