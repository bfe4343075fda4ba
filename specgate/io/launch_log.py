"""The launch log: reports/history/launches.jsonl, one measured server launch a line."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specgate.io import jsonl, runs

LAUNCH_LOG = "launches.jsonl"


@dataclasses.dataclass(frozen=True)
class LaunchRecord:
    """One launch of one server configuration and the speed it measured.

    `fingerprint` names the configuration (everything that decides its speed but the launch);
    `deployment` the baseline's fingerprint of the same target, SGLang and GPUs, so launches of
    several drafters on one deployment can be pooled. `figures` maps a figure (tps, cycle_ms) to
    its natural log over the launch's requests and that log's standard error within the launch.
    `launch` identifies the launch of an attached server (measure/launches.py launch_identity),
    so later measurements of the same running server are known as that launch; "" for a server
    launched here, whose every record is a launch of its own.
    """

    fingerprint: str
    deployment: str
    config: str  # baseline | speculative
    time: str
    design: str = "ab"
    run: str = ""  # the live session it belongs to: an A–B–A run's launches share it
    figures: Mapping[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    launch: str = ""

    def log_of(self, figure: str) -> float | None:
        value = self.figures.get(figure)
        return None if value is None else value[0]

    def to_json(self) -> dict[str, Any]:
        return {"fingerprint": self.fingerprint, "deployment": self.deployment,
                "config": self.config, "time": self.time, "design": self.design,
                "run": self.run, **({"launch": self.launch} if self.launch else {}),
                "figures": {k: [round(v[0], 8), round(v[1], 8)] for k, v in self.figures.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LaunchRecord:
        figures: dict[str, tuple[float, float]] = {}
        for name, pair in dict(data.get("figures") or {}).items():
            log_value, se = float(pair[0]), float(pair[1])
            if math.isfinite(log_value) and math.isfinite(se):
                figures[str(name)] = (log_value, se)
        return cls(fingerprint=str(data["fingerprint"]), deployment=str(data["deployment"]),
                   config=str(data["config"]), time=str(data.get("time", "")),
                   design=str(data.get("design", "ab")), run=str(data.get("run", "")),
                   figures=figures, launch=str(data.get("launch", "")))


def log_file(reports_dir: Path) -> Path:
    """REPORTS/history/launches.jsonl (for a run's own folder, that of its reports folder): every
    run of the reports folder adds to one log."""
    return runs.reports_root(Path(reports_dir)) / "history" / LAUNCH_LOG


def append(path: Path, record: LaunchRecord) -> None:
    """Add one launch; a short line in append mode, so concurrent runs interleave whole lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record.to_json(), ensure_ascii=False) + "\n")


def read(path: Path) -> list[LaunchRecord]:
    """Every readable launch, oldest first; a torn line is skipped with a warning, a line of
    another shape quietly."""
    return jsonl.lenient_records(path, LaunchRecord.from_json)
