"""A reports folder shared by runs: each run in its own folder, one run at a time, published whole.

    REPORTS/runs/<UTC time>-<id>/  one run: run.json, verdict.json, junit.xml, allure-results/,
                                   live/
    REPORTS/verdict.json           the latest run's verdict (interim while it runs)
    REPORTS/junit.xml, allure-results/, live/   the latest finished run's, swapped in at its end
    REPORTS/runs/latest.json       which run the published files are
    REPORTS/history/, baselines/   shared by every run
    REPORTS/not-started.json       the last pytest run stopped before it started (its command
                                   line refused, a conftest that failed to import): the verdict
                                   and junit.xml of the run before it are taken down, and
                                   `specgate report` refuses to pass that run's off as the last

A run holds REPORTS/.specgate-run.lock from start to end; another run waits for it (saying so)
or is refused. Publishing copies a run's files beside the published ones (hard links where the
file system allows) and renames them into place under REPORTS/.specgate-publish.lock, verdict.json
last, so a reader that holds that lock (`specgate report`) never sees two runs' files together.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import json
import os
import secrets
import shutil
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

RUNS_DIR = "runs"
RUN_FILE = "run.json"
LATEST_FILE = "latest.json"  # in RUNS_DIR: the run whose files are the published ones
RUN_LOCK = ".specgate-run.lock"
HOLDER_FILE = ".specgate-run.json"  # who holds RUN_LOCK, for the message of a run that waits
PUBLISH_LOCK = ".specgate-publish.lock"
# What a run publishes to the top of the reports folder; verdict.json goes last.
# A checkpoint matrix's run keeps each checkpoint's verdict and live session in
# checkpoints/<name>/ (verdict.json beside it is the matrix's).
CHECKPOINTS_DIR = "checkpoints"
PUBLISHED = ("allure-results", "live", CHECKPOINTS_DIR, "junit.xml", "verdict.json")
NOT_STARTED_FILE = "not-started.json"
# What a run that did not start takes down: what a CI job reads as the outcome of its run.
TAKEN_DOWN = ("verdict.json", "junit.xml")
KEEP_RUNS = 20  # run folders kept; older ones are removed when a run publishes
SAY_EVERY_S = 30.0  # while waiting for another run, how often to say so again
POLL_S = 0.2


@dataclasses.dataclass(frozen=True)
class RunFolder:
    """One run's own folder under REPORTS/runs/."""

    reports: Path
    id: str

    @property
    def path(self) -> Path:
        return self.reports / RUNS_DIR / self.id

    @property
    def relative(self) -> str:
        return f"{RUNS_DIR}/{self.id}"


def new_run(reports: Path, *, now: _dt.datetime | None = None) -> RunFolder:
    """A fresh, empty run folder, named by the UTC time it started and a random id."""
    started = now or _dt.datetime.now(_dt.UTC)
    while True:
        run = RunFolder(reports, f"{started:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}")
        try:
            run.path.mkdir(parents=True)
            break
        except FileExistsError:
            continue
    (run.path / RUN_FILE).write_text(json.dumps({
        "id": run.id, "started_at": started.isoformat(timespec="seconds"),
        "pid": os.getpid(), "host": socket.gethostname()}) + "\n", encoding="utf-8")
    return run


def reports_root(path: Path) -> Path:
    """The reports folder that path belongs to: itself, or the one above a run folder (or
    above a matrix checkpoint's folder in a run)."""
    path = Path(path)
    if path.parent.name == CHECKPOINTS_DIR:  # a checkpoint's folder inside a matrix's run
        path = path.parent.parent
    if path.parent.name == RUNS_DIR and (path / RUN_FILE).is_file():
        return path.parent.parent
    return path


def holder(reports: Path) -> dict[str, Any]:
    """What the run that holds the reports folder said about itself ({} when unknown)."""
    try:
        found = json.loads((reports / HOLDER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def describe_holder(reports: Path) -> str:
    found = holder(reports)
    if not found:
        return "another specgate run"
    parts = [f"run {found.get('id', '?')}", f"pid {found.get('pid', '?')}"]
    if found.get("host") and found["host"] != socket.gethostname():
        parts[-1] += f" on {found['host']}"
    if found.get("started_at"):
        parts.append(f"started {found['started_at']}")
    return "specgate " + ", ".join(parts)


def hold(reports: Path, run: RunFolder, *, wait_s: float,
         say: Callable[[str], None]) -> FileLock | str:
    """The lock that makes the reports folder this run's until it ends, taken within wait_s
    seconds (0: at once), saying on the way whom it waits for; or why it was not taken."""
    lock = FileLock(str(reports / RUN_LOCK), timeout=0)
    deadline = time.monotonic() + max(0.0, wait_s)
    said = 0.0
    while True:
        try:
            lock.acquire(timeout=0)
            break
        except Timeout:
            pass
        except OSError as exc:
            return f"{reports}: cannot lock the reports folder ({exc.strerror or exc})"
        now = time.monotonic()
        if now >= deadline:
            waited = f" for {wait_s:g} s" if wait_s > 0 else ""
            return (f"{reports}: {describe_holder(reports)} is writing its reports there (it "
                    f"holds {reports / RUN_LOCK}){waited}; give this run its own folder with "
                    "--specgate-reports=DIR, or let it wait longer with "
                    "--specgate-reports-wait=SECONDS")
        if not said or now - said >= SAY_EVERY_S:
            left = deadline - now
            say(f"{reports} is in use by {describe_holder(reports)}; waiting up to "
                f"{left:.0f} s more for it to finish (--specgate-reports=DIR runs beside it)")
            said = now
        time.sleep(min(POLL_S, max(0.0, deadline - now)))
    with contextlib.suppress(OSError):
        info = json.loads((run.path / RUN_FILE).read_text(encoding="utf-8"))
        _replace_text(reports / HOLDER_FILE, json.dumps(info) + "\n")
    with contextlib.suppress(OSError):
        (reports / NOT_STARTED_FILE).unlink(missing_ok=True)  # this run's verdict comes next
    return lock


def release(reports: Path, lock: FileLock, run: RunFolder) -> None:
    if holder(reports).get("id") == run.id:
        with contextlib.suppress(OSError):
            (reports / HOLDER_FILE).unlink()
    lock.release()


@contextlib.contextmanager
def publishing(reports: Path, timeout_s: float = 600.0) -> Iterator[None]:
    """Held while a run swaps its files in, or a reader copies the published ones out."""
    reports.mkdir(parents=True, exist_ok=True)
    with FileLock(str(reports / PUBLISH_LOCK), timeout=timeout_s):
        yield


def publish(run: RunFolder, names: Sequence[str] = PUBLISHED) -> list[str]:
    """Make the run's files the published ones: each name the run has replaces the top-level one,
    each it lacks removes it, verdict.json last. Returns what could not be done (warnings)."""
    problems: list[str] = []
    reports = run.reports
    staging = reports / f".publish-{run.id}"
    with publishing(reports):
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        try:
            for name in names:
                source, target = run.path / name, reports / name
                try:
                    if source.is_dir():
                        shutil.copytree(source, staging / name, copy_function=_link_or_copy)
                    elif source.is_file():
                        _link_or_copy(str(source), str(staging / name))
                    _swap(staging / name, target, staging / f"{name}.old")
                except OSError as exc:
                    problems.append(f"publishing {name} of run {run.id} to {reports} failed "
                                    f"({exc}); the run's own copy is {source}")
            with contextlib.suppress(OSError):
                _replace_text(reports / RUNS_DIR / LATEST_FILE, json.dumps(
                    {"id": run.id, "folder": run.relative}) + "\n")
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return problems


def mark_not_started(reports: Path, args: Sequence[str]) -> bool:
    """A pytest run of the claims that stopped before it started: the published verdict and
    junit.xml (an earlier run's, kept in its run folder) are taken down, and not-started.json
    says which run they were and what was run instead. Nothing is touched where another run
    holds the folder (the published files are then that run's own) or where no run published
    yet. Returns whether the folder was marked."""
    if not (reports / RUNS_DIR / LATEST_FILE).is_file():
        return False
    lock = FileLock(str(reports / RUN_LOCK), timeout=0)
    try:
        lock.acquire(timeout=0)
    except (Timeout, OSError):
        return False
    try:
        with publishing(reports, timeout_s=30.0):
            note = {"at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                    "pid": os.getpid(), "host": socket.gethostname(), "args": list(args),
                    "earlier_run": published_run(reports)}
            _replace_text(reports / NOT_STARTED_FILE, json.dumps(note) + "\n")
            for name in TAKEN_DOWN:
                (reports / name).unlink(missing_ok=True)
    except Timeout:
        return False
    finally:
        lock.release()
    return True


def not_started(reports: Path) -> dict[str, Any] | None:
    """What not-started.json says (None when the last run did start)."""
    try:
        found = json.loads((reports / NOT_STARTED_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def publish_file(run: RunFolder, name: str) -> None:
    """One file of the run (an interim verdict) replacing the published one atomically."""
    tmp = run.reports / f".{name}.{run.id}.tmp"
    _link_or_copy(str(run.path / name), str(tmp))
    os.replace(tmp, run.reports / name)


def prune(reports: Path, keep: int = KEEP_RUNS, *, spare: str | None = None) -> list[str]:
    """Remove all but the newest `keep` run folders (never `spare`); returns the ids removed."""
    runs_dir = reports / RUNS_DIR
    try:
        ids = sorted(p.name for p in runs_dir.iterdir()
                     if p.is_dir() and (p / RUN_FILE).is_file())
    except OSError:
        return []
    removed = []
    for run_id in ids[:max(0, len(ids) - keep)]:
        if run_id != spare:
            shutil.rmtree(runs_dir / run_id, ignore_errors=True)
            removed.append(run_id)
    return removed


def published_run(reports: Path) -> str | None:
    """The id of the run whose files are published (None before any run published)."""
    try:
        found = json.loads((reports / RUNS_DIR / LATEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return str(found["id"]) if isinstance(found, dict) and found.get("id") else None


def snapshot(reports: Path, name: str, into: Path) -> tuple[Path | None, str | None]:
    """A copy of the published `name` (None when there is none) and the id of the run it is
    from, taken together under the publish lock, so building from them is not disturbed by a
    run publishing meanwhile."""
    source = reports / name
    with publishing(reports):
        run_id = published_run(reports)
        if source.is_dir():
            shutil.copytree(source, into / name, copy_function=_link_or_copy)
        elif source.is_file():
            _link_or_copy(str(source), str(into / name))
        else:
            return None, run_id
    return into / name, run_id


def _swap(new: Path, target: Path, aside: Path) -> None:
    """new (or nothing, when new does not exist) in target's place: a file by one atomic
    rename, a folder by moving the old one aside first."""
    if target.is_dir() and not target.is_symlink():
        target.rename(aside)
    elif not new.exists():
        target.unlink(missing_ok=True)
    if new.exists():
        os.replace(new, target)
    if aside.exists():
        shutil.rmtree(aside, ignore_errors=True)


def _link_or_copy(src: str, dst: str) -> str:
    """A hard link (the run's files are written once, never changed in place), else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


def _replace_text(path: Path, text: str) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
