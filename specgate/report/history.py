"""Run history in reports/history/verdicts.jsonl, and the regression claims drawn from it."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specgate.claims import result as claims
from specgate.claims.result import ClaimResult

if TYPE_CHECKING:
    from specgate.core.profile import Profile

HISTORY_FILE = "verdicts.jsonl"
DEFAULT_MIN_REL_NOISE = 0.02


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
        low, high = _number(summary.ci_low), _number(summary.ci_high)
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
    """One finished run: which profile and drafter, how it ended, and its key figures."""

    profile: str
    drafter: str | None
    outcome: str
    time: str
    figures: Mapping[str, Figure] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "drafter": self.drafter,
            "outcome": self.outcome,
            "time": self.time,
            "figures": {k: f.to_json() for k, f in self.figures.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunRecord:
        return cls(
            profile=str(data["profile"]),
            drafter=None if data.get("drafter") is None else str(data["drafter"]),
            outcome=str(data["outcome"]),
            time=str(data.get("time", "")),
            figures={str(k): Figure.from_json(v) for k, v in (data.get("figures") or {}).items()},
        )


# figure name → (claim id, details key holding its stats.Summary JSON, unit)
FIGURE_SOURCES: dict[str, tuple[str, str, str]] = {
    "accept_len": ("spec.accept_len", "accept_len", "tokens/verify"),
    "baseline_tps": ("perf.baseline_tps", "tps", "tok/s"),
    "speedup": ("spec.speedup", "speedup", "x"),
    "spec_tps": ("spec.speedup", "spec_tps", "tok/s"),
}

# regress claim id → (figure name, how a user calls it)
REGRESSION_CLAIMS: dict[str, tuple[str, str]] = {
    "regress.accept_len": ("accept_len", "accept length"),
    "regress.tps": ("spec_tps", "speculative tok/s"),
}


def history_file(reports_dir: Path) -> Path:
    return Path(reports_dir) / "history" / HISTORY_FILE


def figures_from_claims(results: Iterable[ClaimResult]) -> dict[str, Figure]:
    """Key figures out of a run's claims, with their confidence intervals.

    Each figure is read from details[key] of its claim (FIGURE_SOURCES): a stats.Summary JSON
    ({"mean", "ci_low", "ci_high", ...}) or a plain number. Failing that, a claim's observed
    value stands in, with details["ci"] = [low, high] when given.
    """
    by_id = {r.id: r for r in results}
    out: dict[str, Figure] = {}
    for name, (claim_id, key, unit) in FIGURE_SOURCES.items():
        result = by_id.get(claim_id)
        if result is None:
            continue
        figure = _summary_figure(result.details.get(key), unit)
        if figure is None and name != "spec_tps":
            value = _number(result.observed)
            if value is not None:
                low, high = _ci(result.details)
                figure = Figure(value, low, high, unit)
        if figure is not None:
            out[name] = figure
    return out


def _summary_figure(data: Any, unit: str) -> Figure | None:
    if isinstance(data, Mapping):
        mean = _number(data.get("mean", data.get("value")))
        if mean is None:
            return None
        low, high = _ci(data)
        return Figure(mean, low, high, unit)
    value = _number(data)
    return None if value is None else Figure(value, unit=unit)


def record_run(
    path: Path,
    *,
    profile: str,
    drafter: str | None,
    outcome: str,
    figures: Mapping[str, Figure],
    when: _dt.datetime | None = None,
) -> RunRecord:
    """Append one finished run to the history file and return its record."""
    when = when or _dt.datetime.now(_dt.UTC)
    record = RunRecord(profile, drafter, outcome, when.isoformat(timespec="seconds"),
                       dict(figures))
    path.parent.mkdir(parents=True, exist_ok=True)
    # One short line in append mode: concurrent writers interleave whole lines, not bytes.
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record.to_json(), ensure_ascii=False) + "\n")
    return record


def append_run(reports_dir: Path, profile: Profile, verdict_doc: Mapping[str, Any]) -> RunRecord:
    """Record a finished run from its verdict document (called after verdict.json is written)."""
    results = [ClaimResult.from_json(c) for c in verdict_doc.get("claims") or []]
    return record_run(
        history_file(reports_dir),
        profile=profile.name,
        drafter=verdict_doc.get("drafter"),
        outcome=str(verdict_doc.get("outcome", "error")),
        figures=figures_from_claims(results),
    )


def check_regression(
    claim_id: str, profile: Profile, reports_dir: Path, current: Mapping[str, Figure]
) -> ClaimResult:
    """regression_claim against this profile's history, with its regression_tolerance."""
    tolerance = profile.thresholds.regression_tolerance
    return regression_claim(
        claim_id, current, read_history(history_file(reports_dir)), profile.name,
        min_rel_noise=DEFAULT_MIN_REL_NOISE if tolerance is None else tolerance,
    )


def read_history(path: Path) -> list[RunRecord]:
    """Every readable line of the history file, oldest first; a torn or foreign line is skipped."""
    if not path.exists():
        return []
    records: list[RunRecord] = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                records.append(RunRecord.from_json(json.loads(line)))
            except (ValueError, KeyError, TypeError, AttributeError, IndexError):
                continue
    return records


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


def regression_claim(
    claim_id: str,
    current: Mapping[str, Figure],
    history: Sequence[RunRecord],
    profile_name: str,
    *,
    min_rel_noise: float = DEFAULT_MIN_REL_NOISE,
    phase: str = "phase0",
) -> ClaimResult:
    """regress.accept_len / regress.tps: no drop beyond the noise since the last passing run.

    The allowed drop is the larger of the two runs' CI half-widths and min_rel_noise times the
    earlier value (a floor for figures measured without a CI). Skipped without a reference.
    """
    if claim_id not in REGRESSION_CLAIMS:
        raise ValueError(f"unknown regression claim {claim_id!r}; one of {list(REGRESSION_CLAIMS)}")
    name, spoken = REGRESSION_CLAIMS[claim_id]
    now = current.get(name)
    if now is None:
        return claims.skipped(claim_id, phase, f"this run measured no {spoken} to compare")
    before_run = last_passing(profile_name, history, figure=name)
    if before_run is None:
        return claims.skipped(
            claim_id, phase,
            f"no earlier passing run of profile {profile_name!r} that measured the {spoken} in "
            f"history/{HISTORY_FILE}; this run becomes the reference once it passes",
        )
    before = before_run.figures[name]
    noise = max(now.half_width, before.half_width, abs(before.value) * min_rel_noise)
    drop = before.value - now.value
    unit = now.unit or before.unit
    details = {
        "reference_time": before_run.time,
        "reference_drafter": before_run.drafter,
        "reference": before.to_json(),
        "current": now.to_json(),
        "drop": drop,
        "noise": noise,
    }
    kw: dict[str, Any] = {
        "observed": now.value, "expected": f">= {before.value - noise:.4g}", "unit": unit,
        "details": details,
    }
    figures = (f"{spoken} {_fmt(now)} against {_fmt(before)} in the last passing run of "
               f"{profile_name!r} ({before_run.time})")
    if drop > noise:
        return claims.failed(
            claim_id, phase,
            f"{figures}: it dropped by {drop:.4g}, more than the noise {noise:.4g}. Compare the "
            "drafter and server settings of the two runs, or restore the earlier drafter.",
            **kw,
        )
    return claims.passed(claim_id, phase, f"{figures}: within the noise {noise:.4g}", **kw)


def _fmt(figure: Figure) -> str:
    text = f"{figure.value:.4g}"
    if figure.half_width:
        text += f" (±{figure.half_width:.2g})"
    return text


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _ci(details: Mapping[str, Any]) -> tuple[float | None, float | None]:
    ci = details.get("ci")
    if isinstance(ci, (list, tuple)) and len(ci) == 2:
        low, high = _number(ci[0]), _number(ci[1])
    else:
        low, high = _number(details.get("ci_low")), _number(details.get("ci_high"))
    if low is None or high is None:
        return None, None
    return low, high
