"""A launched server's stop report: what was stopped and how, in a JSON file beside its log."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specgate.core import files


def path_of(log_path: Path) -> Path:
    """Where a launched server's stop report is written, beside its log."""
    return log_path.with_suffix(".stop.json")


def write(log_path: Path, config: str, report: Mapping[str, Any]) -> None:
    """The stop report beside the log, replaced whole (another process may read it); a folder
    that cannot be written leaves none."""
    path = path_of(log_path)
    with contextlib.suppress(OSError):
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"config": config, **report}), encoding="utf-8")
        os.replace(tmp, path)


def read(log_path: Path, *, since: float = 0.0) -> dict[str, Any] | None:
    """The stop report of the server logging to log_path, when one was written after `since`
    (a Unix time) and can be read."""
    return files.json_object_since(path_of(log_path), since, limit=files.CONFIG_BYTES)
