"""`specgate tune`'s result as data: the chains it considered, each launch it raced, the model
that predicted the rest, and each level's speed-ups; measure/tune.py fills it, the report
(report/tune_report.py) and its figure (plot/tune.py) read it."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from specgate.io.jsonl import json_safe
from specgate.results import bench
from specgate.results.live import ConfigRun
from specgate.results.stats import Summary

RESULT_FILE = "tune.json"
# How a race that measured nothing stops (its stop reason begins so).
FIRST_FAILED = "the first launch failed"


@dataclasses.dataclass(frozen=True, order=True)
class Candidate:
    """A chain configuration: --speculative-num-steps, topk 1, steps + 1 draft tokens."""

    steps: int
    topk: int = 1

    @property
    def draft_tokens(self) -> int:
        return self.steps + 1

    @property
    def key(self) -> str:
        return f"s{self.steps}-k{self.topk}-d{self.draft_tokens}"

    @property
    def flags(self) -> list[str]:
        return ["--speculative-num-steps", str(self.steps), "--speculative-eagle-topk",
                str(self.topk), "--speculative-num-draft-tokens", str(self.draft_tokens)]


@dataclasses.dataclass(frozen=True)
class CycleFit:
    """cycle_ms(steps) = intercept + slope × steps, and where the line came from."""

    intercept_ms: float
    slope_ms: float
    points: tuple[tuple[int, float], ...]
    how: str

    def at(self, steps: int) -> float:
        return self.intercept_ms + self.slope_ms * steps


@dataclasses.dataclass(frozen=True)
class Prediction:
    tau: float  # tokens per verify (decode), the chain model's expected accept length
    cycle_ms: float
    tps: float  # predicted decode tok/s = tau / cycle


@dataclasses.dataclass(frozen=True)
class Trial:
    candidate: Candidate
    launch: int  # 1-based launch order among speculative launches
    predicted: Prediction | None  # the prediction that chose it (None for the first launch)
    run: ConfigRun
    status: str  # best | dropped | tied | failed
    note: str = ""
    vs_best: Summary | None = None  # paired speed-up over the best when it was raced

    @property
    def measurement(self) -> bench.Measurement | None:
        return self.run.measurement

    @property
    def requests(self) -> int:
        return requests_of(self.run)

    def to_json(self) -> dict[str, Any]:
        return {"candidate": dataclasses.asdict(self.candidate), "key": self.candidate.key,
                "draft_tokens": self.candidate.draft_tokens, "launch": self.launch,
                "predicted": dataclasses.asdict(self.predicted) if self.predicted else None,
                "status": self.status, "note": self.note, "requests": self.requests,
                "vs_best": self.vs_best.to_json() if self.vs_best else None,
                "run": self.run.to_json()}


@dataclasses.dataclass(frozen=True)
class LevelRow:
    """One concurrency level: each measured chain's paired speed-up over the baseline there,
    and the fastest of them (the highest decode tok/s per request)."""

    level: int
    speedups: dict[str, Summary]  # candidate key -> speculative ÷ baseline, paired by prompt
    fastest: str | None

    def to_json(self) -> dict[str, Any]:
        return {"concurrency": self.level, "fastest": self.fastest,
                "speedup": {k: v.to_json() for k, v in self.speedups.items()}}


@dataclasses.dataclass(frozen=True)
class TuneResult:
    profile: str
    simulated: bool
    candidates: tuple[Candidate, ...]
    trials: tuple[Trial, ...]
    baseline: ConfigRun | None
    baseline_note: str
    acceptance: tuple[float, ...]
    fit: CycleFit | None
    predictions: dict[str, Prediction]  # every candidate, by the final model
    best: Candidate | None
    stop_reason: str
    confidence: float
    started_at: str = ""
    finished_at: str = ""
    levels: tuple[int, ...] = (1,)  # [bench] concurrency; the race ran at gate_level
    gate_level: int = 1
    # Each level's measured chains against the baseline there (measure/tune.py level_rows).
    per_level: tuple[LevelRow, ...] = ()
    # The best's paired per-prompt speed-up over the baseline at the gate's level: the figure a
    # probe of the recommended flags would judge (spec.speedup); None without both measured.
    against_baseline: Summary | None = None

    @property
    def launches(self) -> int:
        launched_baseline = self.baseline is not None and not self.baseline.reuse.get("reused")
        return len(self.trials) + int(launched_baseline)

    @property
    def requests(self) -> int:
        base = 0
        if self.baseline is not None and not self.baseline.reuse.get("reused"):
            base = requests_of(self.baseline)
        return base + sum(t.requests for t in self.trials)

    def trial(self, candidate: Candidate) -> Trial | None:
        return next((t for t in self.trials if t.candidate == candidate), None)

    def to_json(self) -> dict[str, Any]:
        return {"schema": 1, "profile": self.profile, "simulated": self.simulated,
                "started_at": self.started_at, "finished_at": self.finished_at,
                "candidates": [c.key for c in self.candidates],
                "trials": [t.to_json() for t in self.trials],
                "baseline": self.baseline.to_json() if self.baseline else None,
                "baseline_note": self.baseline_note, "acceptance": list(self.acceptance),
                "cycle_fit": dataclasses.asdict(self.fit) if self.fit else None,
                "predictions": {k: dataclasses.asdict(p) for k, p in self.predictions.items()},
                "best": self.best.key if self.best else None,
                "recommended_flags": self.best.flags if self.best else None,
                "launches": self.launches, "requests": self.requests,
                "stop_reason": self.stop_reason, "confidence": self.confidence,
                "concurrency": list(self.levels), "gate_concurrency": self.gate_level,
                "per_level": [row.to_json() for row in self.per_level],
                "against_baseline": self.against_baseline.to_json()
                if self.against_baseline else None}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TuneResult:
        """A result as tune.json holds it (to_json), e.g. to write its report again."""
        def summary(value: Any) -> Summary | None:
            return Summary.from_json(value) if isinstance(value, dict) else None

        def candidate(key: str) -> Candidate:
            steps, topk, _ = key.split("-")
            return Candidate(int(steps[1:]), int(topk[1:]))

        trials = tuple(
            Trial(candidate=Candidate(**t["candidate"]), launch=int(t["launch"]),
                  predicted=Prediction(**t["predicted"]) if t.get("predicted") else None,
                  run=ConfigRun.from_json(t["run"]), status=str(t["status"]),
                  note=str(t.get("note", "")), vs_best=summary(t.get("vs_best")))
            for t in data.get("trials", []))
        fit = data.get("cycle_fit")
        best = data.get("best")
        return cls(
            profile=str(data["profile"]), simulated=bool(data.get("simulated")),
            candidates=tuple(candidate(k) for k in data["candidates"]), trials=trials,
            baseline=ConfigRun.from_json(data["baseline"]) if data.get("baseline") else None,
            baseline_note=str(data.get("baseline_note", "")),
            acceptance=tuple(float(a) for a in data.get("acceptance", [])),
            fit=CycleFit(float(fit["intercept_ms"]), float(fit["slope_ms"]),
                         tuple((int(s), float(c)) for s, c in fit["points"]), str(fit["how"]))
            if fit else None,
            predictions={k: Prediction(**v) for k, v in (data.get("predictions") or {}).items()},
            best=candidate(best) if best else None, stop_reason=str(data["stop_reason"]),
            confidence=float(data["confidence"]), started_at=str(data.get("started_at", "")),
            finished_at=str(data.get("finished_at", "")),
            levels=tuple(int(v) for v in data.get("concurrency", [1])),
            gate_level=int(data.get("gate_concurrency", 1)),
            per_level=tuple(LevelRow(level=int(r["concurrency"]), fastest=r.get("fastest"),
                                     speedups={k: Summary.from_json(v) for k, v in
                                               (r.get("speedup") or {}).items()})
                            for r in data.get("per_level", [])),
            against_baseline=summary(data.get("against_baseline")))

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(json_safe(self.to_json()), indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, path)


def requests_of(run: ConfigRun) -> int:
    """Requests a run sent at every level: measured, warm-up and fillers."""
    found = [m for m in (run.measurement, *run.levels.values()) if m is not None]
    return sum(len(m.samples) + m.warmup * m.concurrency + m.fillers for m in found)
