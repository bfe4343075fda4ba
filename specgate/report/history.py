"""A finished run's key figures, read from its claims, appended to the run history (io.history)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specgate.claims import ids
from specgate.claims.figures import POSITION_CLAIM, POSITION_PREFIX, position_summaries
from specgate.claims.result import ClaimResult
from specgate.core.errors import DataError, ProfileError
from specgate.io import runs
from specgate.io.history import (
    Figure,
    RunRecord,
    ci_of,
    figure_name,
    history_file,
    number,
    read_history,
    record_run,
)
from specgate.io.identity import drafter_key
from specgate.report.verdict_file import load_verdict

if TYPE_CHECKING:
    from specgate.core.profile import Profile

# figure name → (claim id, details key holding its stats.Summary JSON, unit)
FIGURE_SOURCES: dict[str, tuple[str, str, str]] = {
    "accept_len": (ids.ACCEPT_LEN.id, "accept_len", "tokens/verify"),
    "baseline_tps": (ids.BASELINE_TPS.id, "tps", "tok/s"),
    "speedup": (ids.SPEEDUP.id, "speedup", "x"),
    "spec_tps": (ids.SPEEDUP.id, "spec_tps", "tok/s"),
}

def figures_from_claims(results: Iterable[ClaimResult]) -> dict[str, Figure]:
    """Key figures out of a run's claims, with their confidence intervals.

    Each figure is read from details[key] of its claim (FIGURE_SOURCES): a stats.Summary JSON
    ({"mean", "ci_low", "ci_high", ...}) or a plain number. Failing that, a claim's observed
    value stands in, with details["ci"] = [low, high] when given. A claim judged at another
    concurrency than one stream (details["concurrency"]) names its figures for it.
    """
    by_id = {r.id: r for r in results}
    out: dict[str, Figure] = {}
    for name, (claim_id, key, unit) in FIGURE_SOURCES.items():
        result = by_id.get(claim_id)
        if result is None:
            continue
        figure = _summary_figure(result.details.get(key), unit)
        if figure is None and name != "spec_tps":
            value = number(result.observed)
            if value is not None:
                low, high = ci_of(result.details)
                figure = Figure(value, low, high, unit)
        if figure is not None:
            level = result.details.get("concurrency", 1)
            out[figure_name(name, level if isinstance(level, int) else 1)] = figure
    accept = by_id.get(POSITION_CLAIM)
    if accept is not None:
        level = accept.details.get("concurrency", 1)
        for k, summary in enumerate(position_summaries(accept.details), 1):
            figure = _summary_figure(summary, "")
            if figure is not None:
                out[figure_name(f"{POSITION_PREFIX}{k}",
                                level if isinstance(level, int) else 1)] = figure
    return out


def _summary_figure(data: Any, unit: str) -> Figure | None:
    if isinstance(data, Mapping):
        mean = number(data.get("mean", data.get("value")))
        if mean is None:
            return None
        low, high = ci_of(data)
        return Figure(mean, low, high, unit)
    value = number(data)
    return None if value is None else Figure(value, unit=unit)


def record_of(verdict_doc: Mapping[str, Any], profile: str | None = None) -> RunRecord:
    """A run's history record from its verdict document: its figures read from its claims,
    its drafter named by its bytes when the verdict identified them."""
    results = [ClaimResult.from_json(c) for c in verdict_doc.get("claims") or []]
    run = verdict_doc.get("run")
    identity = verdict_doc.get("identity")
    drafter = identity.get("drafter") if isinstance(identity, Mapping) else None
    digest = None
    if isinstance(drafter, Mapping) and isinstance(drafter.get("weights_blake3"), str) \
            and isinstance(drafter.get("config_sha256"), str):
        digest = drafter_key(drafter["weights_blake3"], drafter["config_sha256"])
    return RunRecord(
        profile=profile if profile is not None else str(verdict_doc.get("profile")),
        drafter=None if verdict_doc.get("drafter") is None else str(verdict_doc["drafter"]),
        outcome=str(verdict_doc.get("outcome", "error")),
        time=str(verdict_doc.get("written_at", "")),
        figures=figures_from_claims(results),
        run=str(run["id"]) if isinstance(run, Mapping) and run.get("id") else None,
        drafter_digest=digest if isinstance(digest, str) else None,
    )


def append_run(reports_dir: Path, profile: Profile, verdict_doc: Mapping[str, Any]) -> RunRecord:
    """Record a finished run from its verdict document (called after verdict.json is written)."""
    record = record_of(verdict_doc, profile.name)
    return record_run(
        history_file(reports_dir),
        profile=record.profile,
        drafter=record.drafter,
        outcome=record.outcome,
        figures=record.figures,
        run=record.run,
        drafter_digest=record.drafter_digest,
    )


REFERENCE_FLAG = "--specgate-reference-run"


def reference_record(given: str, reports_dir: Path) -> RunRecord:
    """The run a user names as the reference of regress.*: a verdict file (or a run folder
    holding one), or a run id (or the start of one) in REPORTS/history/verdicts.jsonl, else in
    REPORTS/runs/. A ProfileError says in one sentence why none of these is it."""
    said = f"{REFERENCE_FLAG} {given}"
    path = Path(given).expanduser()
    if path.is_dir() and (path / "verdict.json").is_file():
        path = path / "verdict.json"
    if path.is_file():
        try:
            doc = load_verdict(path)
        except DataError as exc:
            raise ProfileError(f"{said}: {exc}") from None
        if doc.get("checkpoints"):
            raise ProfileError(f"{said}: {path} is a checkpoint matrix's verdict; name one "
                               "checkpoint's (checkpoints/<name>/verdict.json)")
        return _read_record(said, path, doc)
    if not given or "/" in given or given.endswith(".json"):
        raise ProfileError(f"{said}: no such verdict file (give a verdict.json, a run folder "
                           "holding one, or a run id)")
    history = read_history(history_file(reports_dir))
    exact = [r for r in history if r.run == given]
    if exact:
        return exact[-1]
    runs_dir = runs.reports_root(reports_dir) / runs.RUNS_DIR
    matching = {r.run for r in history if r.run and r.run.startswith(given)}
    if runs_dir.is_dir():
        matching |= {p.name for p in runs_dir.iterdir()
                if p.name == given or (p.name.startswith(given) and _finished(p))}
    if len(matching) > 1:
        shown = ", ".join(sorted(matching)[:5]) + (", …" if len(matching) > 5 else "")
        raise ProfileError(f"{said}: {len(matching)} runs start with it ({shown}); give more of "
                           "the run id")
    if not matching:
        raise ProfileError(
            f"{said}: no run with that id in {history_file(reports_dir)} or {runs_dir}, and no "
            "verdict file by that name (give a run id, a verdict.json or a run folder)")
    (run_id,) = matching
    recorded = [r for r in history if r.run == run_id]
    if recorded:
        return recorded[-1]
    path = runs_dir / run_id / "verdict.json"
    try:
        doc = load_verdict(path)
    except DataError as exc:
        raise ProfileError(f"{said}: {exc}") from None
    return _read_record(said, path, doc)


def _read_record(said: str, path: Path, doc: Mapping[str, Any]) -> RunRecord:
    """record_of a named verdict file, or a ProfileError naming the file when its claims are
    not a verdict's."""
    try:
        return record_of(doc)
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        why = f"a claim has no {exc} key" if isinstance(exc, KeyError) else str(exc)
        raise ProfileError(f"{said}: {path}: not a verdict file: its claims cannot be read "
                           f"({why})") from None


def _finished(folder: Path) -> bool:
    """A run folder whose verdict is a finished run's (complete), not one that never started."""
    try:
        return load_verdict(folder / "verdict.json").get("complete") is True
    except DataError:
        return False
