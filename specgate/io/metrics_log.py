"""Training metrics logs (JSONL or CSV with epoch, step, loss, accuracy) read into typed rows."""

from __future__ import annotations

import csv
import dataclasses
import math
from pathlib import Path
from typing import Any

from specgate.core import files
from specgate.core.errors import DataError
from specgate.io import jsonl

FIELDS = ("epoch", "step", "loss", "accuracy")


@dataclasses.dataclass(frozen=True)
class MetricsRow:
    """One logged record; loss or accuracy may be absent on a row (e.g. an eval-only line)."""

    epoch: float
    step: int
    loss: float | None
    accuracy: float | None
    line: int


@dataclasses.dataclass(frozen=True)
class MetricsLog:
    """A metrics log in file order."""

    path: Path
    rows: tuple[MetricsRow, ...]

    def first_loss(self) -> MetricsRow | None:
        """The first row (in file order) that carries a loss."""
        return next((r for r in self.rows if r.loss is not None), None)

    def finished_epochs(self) -> set[int]:
        """Whole epochs this log shows complete.

        An epoch is finished when a later epoch appears in the log. The log's last epoch is
        finished when its logged steps span at least as many as the epoch before it did (each
        epoch of a fixed dataset has the same number of steps; a run still training it has
        logged fewer); a log of one epoch cannot show that, so its epoch counts as unfinished.
        """
        spans: dict[int, tuple[int, int]] = {}
        for row in self.rows:
            e = math.floor(row.epoch)
            lo, hi = spans.get(e, (row.step, row.step))
            spans[e] = (min(lo, row.step), max(hi, row.step))
        epochs = sorted(spans)
        if len(epochs) < 2:
            return set()
        last, before = epochs[-1], epochs[-2]
        done = set(epochs[:-1])
        if _width(spans[last]) >= _width(spans[before]):
            done.add(last)
        return done

    def accuracy_by_epoch(self) -> dict[int, float]:
        """The last logged accuracy of each whole epoch (fractional epochs floor to theirs)."""
        out: dict[int, float] = {}
        for row in self.rows:
            if row.accuracy is not None:
                out[math.floor(row.epoch)] = row.accuracy
        return out


def _width(span: tuple[int, int]) -> int:
    return span[1] - span[0]


def read_metrics(path: Path | str) -> MetricsLog:
    """Read a JSONL or CSV metrics log, raising DataError naming the file and line."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: metrics log not found; check [finetune] log / reference_log")
    try:
        text = files.read_text(path, limit=files.LOG_BYTES)
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot be read: {exc}") from None
    first = text.lstrip()[:1]
    if path.suffix.lower() == ".csv" or (path.suffix.lower() not in (".jsonl", ".json")
                                         and first not in ("{", "")):
        records = _csv_records(path, text)
    else:
        records = _jsonl_records(path, text)
    rows = tuple(_row(path, line, rec) for line, rec in records)
    if not rows:
        raise DataError(f"{path}: holds no records; expected one object per line (JSONL) or a "
                        f"CSV header and rows with the fields {', '.join(FIELDS)}")
    return MetricsLog(path, rows)


def _jsonl_records(path: Path, text: str) -> list[tuple[int, dict[str, Any]]]:
    return list(jsonl.objects(text, str(path), f"an object with {', '.join(FIELDS)}"))


def _csv_records(path: Path, text: str) -> list[tuple[int, dict[str, Any]]]:
    reader = csv.DictReader(text.splitlines())
    header = [h.strip() for h in reader.fieldnames or []]
    missing = [f for f in ("epoch", "step") if f not in header]
    if missing:
        raise DataError(f"{path}:1: the CSV header {header} lacks {', '.join(missing)}; expected "
                        f"a header naming {', '.join(FIELDS)}")
    out = []
    for record in reader:
        clean = {(k or "").strip(): (v.strip() if isinstance(v, str) else v)
                 for k, v in record.items()}
        out.append((reader.line_num, {k: v for k, v in clean.items() if v not in ("", None)}))
    return out


def _row(path: Path, line: int, record: dict[str, Any]) -> MetricsRow:
    where = f"{path}:{line}"
    for field in ("epoch", "step"):
        if field not in record:
            raise DataError(f"{where}: record lacks {field!r} (found keys "
                            f"{', '.join(sorted(record)) or 'none'}); each record needs "
                            f"{', '.join(FIELDS)}")
    epoch = _number(where, "epoch", record["epoch"])
    step = _number(where, "step", record["step"])
    if epoch < 0 or step < 0 or step != int(step):
        raise DataError(f"{where}: epoch {epoch} / step {step}: expected a non-negative epoch "
                        "and a non-negative whole step")
    loss = _number(where, "loss", record["loss"]) if "loss" in record else None
    accuracy = _number(where, "accuracy", record["accuracy"]) if "accuracy" in record else None
    if loss is None and accuracy is None:
        raise DataError(f"{where}: record has neither 'loss' nor 'accuracy'")
    if accuracy is not None and not 0.0 <= accuracy <= 1.0:
        hint = f"; log {accuracy / 100:g} for {accuracy:g} %" if 1 < accuracy <= 100 else ""
        raise DataError(f"{where}: accuracy {accuracy:g} is not a fraction between 0 and 1"
                        f"{hint}")
    return MetricsRow(epoch, int(step), loss, accuracy, line)


def _number(where: str, field: str, value: Any) -> float:
    if isinstance(value, bool):
        raise DataError(f"{where}: {field} is {value!r}, expected a number")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise DataError(f"{where}: {field} is {value!r}, expected a number") from None
