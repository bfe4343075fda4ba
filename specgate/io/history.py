"""The run history store: reports/history/verdicts.jsonl, one finished run a line."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specgate.io import jsonl, runs

HISTORY_FILE = "verdicts.jsonl"


@dataclasses.dataclass(frozen=True)
class Figure:
    """A measured figure with its confidence interval, when one was measured."""

    value: float
    low: float | None = None
    high: float | None = None
    unit: str = ""

    @property
    def half_width(self) -> float:
        """Half the CI width: the noise of this figure (0 when no CI was measured)."""
        if self.low is None or self.high is None:
            return 0.0
        return abs(self.high - self.low) / 2.0

    @classmethod
    def of(cls, summary: Any, unit: str = "") -> Figure:
        """From a stats.Summary (anything with mean, ci_low and ci_high)."""
        low, high = number(summary.ci_low), number(summary.ci_high)
        if low is None or high is None:
            low = high = None
        return cls(float(summary.mean), low, high, unit)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value": self.value}
        if self.low is not None and self.high is not None:
            out["ci"] = [self.low, self.high]
        if self.unit:
            out["unit"] = self.unit
        return out

    @classmethod
    def from_json(cls, data: Any) -> Figure:
        if isinstance(data, (int, float)):
            return cls(float(data))
        ci = data.get("ci") or [None, None]
        return cls(
            float(data["value"]),
            None if ci[0] is None else float(ci[0]),
            None if ci[1] is None else float(ci[1]),
            str(data.get("unit", "")),
        )


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """One finished run: which profile and drafter, how it ended, its key figures, and the run
    folder it came from (reports/runs/<run>)."""

    profile: str
    drafter: str | None
    outcome: str
    time: str
    figures: Mapping[str, Figure] = dataclasses.field(default_factory=dict)
    run: str | None = None
    # BLAKE3 of every byte of the drafter's weight files (io/identity.py weights_digest): which
    # bytes the run judged, whatever their path.
    drafter_digest: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = {
            "profile": self.profile,
            "drafter": self.drafter,
            "outcome": self.outcome,
            "time": self.time,
            "figures": {k: f.to_json() for k, f in self.figures.items()},
        }
        if self.run is not None:
            out["run"] = self.run
        if self.drafter_digest is not None:
            out["drafter_digest"] = self.drafter_digest
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunRecord:
        return cls(
            profile=str(data["profile"]),
            drafter=None if data.get("drafter") is None else str(data["drafter"]),
            outcome=str(data["outcome"]),
            time=str(data.get("time", "")),
            figures={str(k): Figure.from_json(v) for k, v in (data.get("figures") or {}).items()},
            run=None if data.get("run") is None else str(data["run"]),
            drafter_digest=(None if data.get("drafter_digest") is None
                            else str(data["drafter_digest"])),
        )


def figure_name(name: str, concurrency: int) -> str:
    """A figure's name in the history: `spec_tps`, or `spec_tps@c16` for one measured with 16
    requests in flight (a run only compares with runs at the same concurrency)."""
    return name if concurrency == 1 else f"{name}@c{concurrency}"


def history_file(reports_dir: Path) -> Path:
    """REPORTS/history/verdicts.jsonl (for a run's own folder, that of its reports folder)."""
    return runs.reports_root(Path(reports_dir)) / "history" / HISTORY_FILE


def record_run(
    path: Path,
    *,
    profile: str,
    drafter: str | None,
    outcome: str,
    figures: Mapping[str, Figure],
    when: _dt.datetime | None = None,
    run: str | None = None,
    drafter_digest: str | None = None,
) -> RunRecord:
    """Append one finished run to the history file and return its record; a run already there
    (the same run id) is not appended again."""
    if run is not None:
        for earlier in read_history(path):
            if earlier.run == run:
                return earlier
    when = when or _dt.datetime.now(_dt.UTC)
    record = RunRecord(profile, drafter, outcome, when.isoformat(timespec="seconds"),
                       dict(figures), run, drafter_digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    # One short line in append mode: concurrent writers interleave whole lines, not bytes.
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record.to_json(), ensure_ascii=False) + "\n")
    return record


def read_history(path: Path) -> list[RunRecord]:
    """Every readable line of the history file, oldest first; a torn or foreign line is skipped."""
    # A line a killed run tore (not UTF-8, not JSON) is skipped with a warning naming the file
    # and line; a line of another schema is skipped quietly.
    return jsonl.lenient_records(path, RunRecord.from_json)


def last_passing(profile_name: str, history: Sequence[RunRecord],
                 figure: str | None = None) -> RunRecord | None:
    """The most recent run of this profile whose outcome was passed (and, when figure is given,
    that measured it: an offline-only run passes without measuring anything)."""
    for record in reversed(history):
        if record.profile != profile_name or record.outcome != "passed":
            continue
        if figure is None or figure in record.figures:
            return record
    return None


def number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def ci_of(details: Mapping[str, Any]) -> tuple[float | None, float | None]:
    ci = details.get("ci")
    if isinstance(ci, (list, tuple)) and len(ci) == 2:
        low, high = number(ci[0]), number(ci[1])
    else:
        low, high = number(details.get("ci_low")), number(details.get("ci_high"))
    if low is None or high is None:
        return None, None
    return low, high
