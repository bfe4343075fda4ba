"""A finished run's key figures, read from its claims, appended to the run history (io.history)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specgate.claims import ids
from specgate.claims.figures import POSITION_CLAIM, POSITION_PREFIX, position_summaries
from specgate.claims.result import ClaimResult
from specgate.io.history import (
    Figure,
    RunRecord,
    ci_of,
    figure_name,
    history_file,
    number,
    record_run,
)
from specgate.io.identity import drafter_key

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


def append_run(reports_dir: Path, profile: Profile, verdict_doc: Mapping[str, Any]) -> RunRecord:
    """Record a finished run from its verdict document (called after verdict.json is written)."""
    results = [ClaimResult.from_json(c) for c in verdict_doc.get("claims") or []]
    run = verdict_doc.get("run")
    identity = verdict_doc.get("identity")
    drafter = identity.get("drafter") if isinstance(identity, Mapping) else None
    digest = None
    if isinstance(drafter, Mapping) and isinstance(drafter.get("weights_blake3"), str) \
            and isinstance(drafter.get("config_sha256"), str):
        digest = drafter_key(drafter["weights_blake3"], drafter["config_sha256"])
    return record_run(
        history_file(reports_dir),
        profile=profile.name,
        drafter=verdict_doc.get("drafter"),
        outcome=str(verdict_doc.get("outcome", "error")),
        figures=figures_from_claims(results),
        run=str(run["id"]) if isinstance(run, Mapping) and run.get("id") else None,
        drafter_digest=digest if isinstance(digest, str) else None,
    )
