"""JSON Lines: one JSON object per line, read strictly (a bad line is an error naming the file and
line) or leniently (a bad line is skipped with a warning naming them)."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from specgate.core import files
from specgate.core.errors import DataError

T = TypeVar("T")


def objects(text: str, label: str, expected: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line of text; a line that is not a JSON object
    raises DataError naming label (the file) and the line, and saying what each line should be
    (expected, e.g. 'an object like {"prompt": "..."}')."""
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = files.loads_json(line)
        except (json.JSONDecodeError, files.JsonTooDeep) as exc:
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            raise DataError(f"{label}:{number}: not valid JSON ({why}); each line must be "
                            f"{expected}") from None
        except ValueError as exc:  # an integer beyond Python's digit limit
            raise DataError(f"{label}:{number}: not readable JSON ({exc}); each line must be "
                            f"{expected}") from None
        if not isinstance(record, dict):
            raise DataError(f"{label}:{number}: holds JSON {type(record).__name__}, expected "
                            f"{expected}")
        yield number, record


class SkippedLine(UserWarning):
    """A line of a JSON Lines store that could not be read and was skipped."""


def lenient_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) of every line of a file appended to by many runs; a torn line
    (not UTF-8, not JSON: a run killed mid-write) is skipped with a SkippedLine warning naming
    the file and line, never an exception."""
    try:
        handle = files.open_regular(path)
    except OSError as exc:
        raise DataError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    # Read a line at a time, each bounded: the store grows with every run.
    with handle as fh:
        for number, raw in enumerate(iter(lambda: fh.readline(files.LINE_BYTES + 1), b""),
                                     start=1):
            if not raw.strip():
                continue
            if len(raw) > files.LINE_BYTES:
                warnings.warn(SkippedLine(f"{path}:{number}: longer than {files.LINE_BYTES} "
                                          "bytes; line skipped"), stacklevel=2)
                for _rest in iter(lambda: fh.readline(files.LINE_BYTES), b""):
                    if _rest.endswith(b"\n"):
                        break
                continue
            try:
                yield number, files.loads_json(raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                warnings.warn(SkippedLine(f"{path}:{number}: not UTF-8 ({exc.reason} at byte "
                                          f"{exc.start}); line skipped"), stacklevel=2)
            except ValueError as exc:
                warnings.warn(SkippedLine(f"{path}:{number}: not valid JSON "
                                          f"({str(exc)[:80]}); line skipped"), stacklevel=2)


def lenient_records(path: Path, from_json: Callable[[Any], T]) -> list[T]:
    """Every readable line of a store many runs append to, as from_json makes it, oldest first;
    none when the file does not exist. A torn line is skipped with a warning (lenient_lines), a
    line of another shape (from_json raises) quietly."""
    if not path.exists():
        return []
    records: list[T] = []
    for _, doc in lenient_lines(path):
        try:
            records.append(from_json(doc))
        except (ValueError, KeyError, TypeError, AttributeError, IndexError):
            continue
    return records


def json_safe(value: Any) -> Any:
    """JSON-safe: NaN and infinities become null (json.dumps would write invalid NaN)."""
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
