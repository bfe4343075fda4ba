"""Reading a verdict file that a user names (`specgate summary`, `specgate compare`, a chosen
reference run): a dict, or one sentence saying what is wrong with the file."""

from __future__ import annotations

import glob
import json
from pathlib import Path
from typing import Any

from specgate.core import files
from specgate.core.errors import DataError
from specgate.io import runs

VERDICT = "verdict.json"


def load_verdict(path: Path) -> dict[str, Any]:
    """A verdict.json as a dict, or a DataError saying in one sentence what is wrong with it."""
    try:
        doc = files.read_json(path, limit=files.LOG_BYTES)
    except FileNotFoundError:
        note = runs.not_started(path.parent) if path.name == VERDICT else None
        if note is not None:
            earlier = note.get("earlier_run")
            raise DataError(
                f"{path}: no verdict: the last pytest run there stopped before any claim ran "
                f"({path.parent / runs.NOT_STARTED_FILE} records it; pytest's output said why)"
                + (f"; the run before it is {path.parent / runs.RUNS_DIR / str(earlier)}"
                   if earlier else "")) from None
        raise DataError(f"{path}: no such verdict file (a claims run writes "
                        "REPORTS/verdict.json, and each run REPORTS/runs/<id>/verdict.json)"
                        ) from None
    except IsADirectoryError:
        raise DataError(f"{path}: a folder, not a verdict file (name its verdict.json)") from None
    except (UnicodeDecodeError, json.JSONDecodeError, ValueError) as exc:
        raise DataError(f"{path}: not a verdict file: it is not JSON ({exc})") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    if not isinstance(doc, dict) or "outcome" not in doc or not isinstance(doc.get("claims"),
                                                                            list):
        raise DataError(f"{path}: not a verdict file: it has no \"outcome\" and \"claims\"")
    return doc


def find_verdict(given: str, reports: Path) -> Path:
    """The verdict file a user names: the file, a folder holding one, or a run id (or the start
    of one, among the runs that finished) under REPORTS/runs/. A name that is none of these is
    returned as it is, for load_verdict to say so."""
    path = Path(given).expanduser()
    if path.is_dir() and (path / VERDICT).is_file():
        return path / VERDICT
    if path.exists() or "/" in given or given.endswith(".json") or not given:
        return path
    runs_dir = runs.reports_root(reports) / runs.RUNS_DIR
    if (runs_dir / given / VERDICT).is_file():
        return runs_dir / given / VERDICT
    found = sorted(p for p in runs_dir.glob(f"{glob.escape(given)}*/{VERDICT}")
                   if _complete(p))
    if len(found) > 1:
        shown = ", ".join(p.parent.name for p in found[:5]) + (", …" if len(found) > 5 else "")
        raise DataError(f"{given}: {len(found)} runs in {runs_dir} start with it ({shown}); "
                        "give more of the run id")
    if not found:
        raise DataError(f"{given}: no such verdict file, run folder, or run id in {runs_dir}")
    return found[0]


def _complete(path: Path) -> bool:
    """The verdict of a run that finished (complete), not of one that never started."""
    try:
        return load_verdict(path).get("complete") is True
    except DataError:
        return False
