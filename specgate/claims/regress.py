"""Regression claims: regress.accept_len and regress.tps against the run history."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specgate.claims import ids
from specgate.claims import result as claims
from specgate.claims.figures import POSITION_PREFIX
from specgate.claims.live_run import needs, sim
from specgate.claims.result import ClaimResult
from specgate.core.profile import Profile
from specgate.io import history as history_store
from specgate.io import identity
from specgate.io.history import HISTORY_FILE, Figure, RunRecord, figure_name
from specgate.results import bench, drift
from specgate.results.live import LiveResults
from specgate.results.stats import t_quantile

DEFAULT_MIN_REL_NOISE = 0.02

# regress claim id → (figure name, how a user calls it)
REGRESSION_CLAIMS: dict[str, tuple[str, str]] = {
    ids.REGRESS_ACCEPT_LEN.id: ("accept_len", "accept length"),
    ids.REGRESS_TPS.id: ("spec_tps", "speculative tok/s"),
}


def regression_claim(claim_id: str, profile: Profile, live: LiveResults,
                     reports_dir: Path, reference: RunRecord | None = None) -> ClaimResult:
    """regress.accept_len / regress.tps: no drop beyond the measured noise since the last
    passing run of this profile (reports/history), or since the run named as the reference."""
    spec = needs(live.speculative, claim_id, live)
    if isinstance(spec, ClaimResult):
        return spec
    current: dict[str, Figure] = {}
    if spec.stat("accept_len") is not None:
        current["accept_len"] = Figure.of(spec.stats["accept_len"], "tokens/verify")
    if spec.stat("tps") is not None:
        current["spec_tps"] = Figure.of(spec.stats["tps"], "tok/s")
    launch = (launch_noise(live.launch_coverage, spec.confidence)
              if claim_id == ids.REGRESS_TPS.id else None)
    result = check_regression(claim_id, profile, reports_dir, current, launch=launch,
                              concurrency=live.gate_level,
                              drafter_digest=identity.drafter_digest(profile.drafter_path),
                              reference=reference)
    if live.simulated and not result.message.startswith(sim(live)):
        result = dataclasses.replace(result, message=sim(live) + result.message)
    return result


@dataclasses.dataclass(frozen=True)
class LaunchNoise:
    """How far a timed figure may move between two launches of one configuration, as a
    fraction of it, and what that spread is."""

    rel: float
    text: str


def launch_noise(coverage: drift.Coverage, confidence: float) -> LaunchNoise:
    """The speculative tok/s of two runs are two launches: ln of their ratio has the launch
    variance 2σ² of the speculative server; the noise is the drop that interval allows."""
    term = drift.Term.of([(2.0, coverage.speculative)])
    q = t_quantile(0.5 + confidence / 2.0, term.df)
    return LaunchNoise(1.0 - math.exp(-q * term.sd),
                       f"launch-to-launch spread of two launches, {term.sd * 100:.1f} % "
                       f"(standard deviation of the log; {coverage.speculative.describe()})")


def check_regression(
    claim_id: str, profile: Profile, reports_dir: Path, current: Mapping[str, Figure], *,
    launch: LaunchNoise | None = None,
    concurrency: int = 1,
    drafter_digest: str | None = None,
    reference: RunRecord | None = None,
) -> ClaimResult:
    """judge_regression against this profile's history (or the named reference run), with its
    regression_tolerance."""
    tolerance = profile.thresholds.regression_tolerance
    return judge_regression(
        claim_id, current, history_store.read_history(history_store.history_file(reports_dir)),
        profile.name,
        min_rel_noise=DEFAULT_MIN_REL_NOISE if tolerance is None else tolerance,
        launch=launch,
        concurrency=concurrency,
        drafter_digest=drafter_digest,
        reference=reference,
    )


def judge_regression(
    claim_id: str,
    current: Mapping[str, Figure],
    history: Sequence[RunRecord],
    profile_name: str,
    *,
    min_rel_noise: float = DEFAULT_MIN_REL_NOISE,
    phase: str = "phase0",
    launch: LaunchNoise | None = None,
    concurrency: int = 1,
    drafter_digest: str | None = None,
    reference: RunRecord | None = None,
) -> ClaimResult:
    """regress.accept_len / regress.tps: no drop beyond the noise since the last passing run,
    or since `reference`, a run the user named (--specgate-reference-run), whatever its outcome.

    The allowed drop is the larger of the two runs' CI half-widths and min_rel_noise times the
    earlier value (a floor for figures measured without a CI); for a timed figure, also the
    drop a new launch alone could show (`launch`). Skipped without a reference. current holds
    this run's figures at the gate's concurrency, which the earlier run must have measured at
    too (history.figure_name). drafter_digest (this run's drafter's weights_digest) and the
    reference run's name the two drafters by their bytes.
    """
    if claim_id not in REGRESSION_CLAIMS:
        raise ValueError(f"unknown regression claim {claim_id!r}; one of {list(REGRESSION_CLAIMS)}")
    figure, spoken = REGRESSION_CLAIMS[claim_id]
    now = current.get(figure)
    name = figure_name(figure, concurrency)
    if concurrency != 1:
        spoken += f" at {concurrency} in flight"
    if now is None:
        return claims.skipped(claim_id, phase, f"this run measured no {spoken} to compare",
                              reason="not_measured", details={"figure": name})
    if reference is not None and name not in reference.figures:
        return claims.skipped(
            claim_id, phase, f"{_reference_named(reference)} measured no {spoken}",
            reason="no_reference", details={"figure": name, "reference_run": reference.run})
    before_run = reference or history_store.last_passing(profile_name, history, figure=name)
    if before_run is None:
        return claims.skipped(
            claim_id, phase,
            f"no earlier passing run of profile {profile_name!r} that measured the {spoken} in "
            f"history/{HISTORY_FILE}; this run becomes the reference once it passes",
            reason="no_reference", details={"figure": name},
        )
    before = before_run.figures[name]
    launch_rel = launch.rel if launch is not None else 0.0
    noise = max(now.half_width, before.half_width,
                abs(before.value) * max(min_rel_noise, launch_rel))
    drop = before.value - now.value
    unit = now.unit or before.unit
    same = drafter_digest is not None and drafter_digest == before_run.drafter_digest
    details = {
        "reference_run": before_run.run,
        "reference_named": reference is not None,
        "reference_time": before_run.time,
        "reference_drafter": before_run.drafter,
        "reference_drafter_digest": before_run.drafter_digest,
        "drafter_digest": drafter_digest,
        "same_drafter_bytes": same,
        "reference": before.to_json(),
        "current": now.to_json(),
        "drop": drop,
        "noise": noise,
    }
    if launch is not None:
        details["launch_spread"] = {"included": True, "rel_noise": round(launch.rel, 6),
                                    "text": launch.text}
    covers = f"; the noise includes the {launch.text}" if launch is not None else ""
    kw: dict[str, Any] = {
        "observed": now.value, "expected": f">= {before.value - noise:.4g}", "unit": unit,
        "details": details,
    }
    figures = (f"{spoken} {_fmt(now)} against {_fmt(before)} in "
               + (_reference_named(reference) if reference is not None else
                  f"the last passing run of {profile_name!r} ({before_run.time}, "
                  f"{_drafter_named(before_run)})"))
    if same:
        figures += (": the same drafter bytes as this run's, so this compares the deployment "
                    "with itself, not two drafters")
    if drop > noise:
        return claims.failed(
            claim_id, phase,
            f"{figures}: it dropped by {drop:.4g}, more than the noise {noise:.4g}{covers}. "
            "Compare the drafter and server settings of the two runs, or restore the earlier "
            "drafter.",
            **kw,
        )
    return claims.passed(claim_id, phase, f"{figures}: within the noise {noise:.4g}{covers}",
                         **kw)


POSITION_CLAIM = ids.REGRESS_ACCEPT_POS.id


def position_regression_claim(profile: Profile, live: LiveResults,
                              reports_dir: Path, reference: RunRecord | None = None
                              ) -> ClaimResult:
    """regress.accept_pos: no draft position's acceptance dropped beyond the measured noise
    since the last passing run of this profile, or since the run named as the reference."""
    spec = needs(live.speculative, POSITION_CLAIM, live)
    if isinstance(spec, ClaimResult):
        return spec
    current = {position_figure(k): Figure.of(summary)
               for k, summary in enumerate(bench.position_acceptance(spec), 1)}
    result = judge_position_regression(
        current, history_store.read_history(history_store.history_file(reports_dir)),
        profile.name, confidence=spec.confidence, concurrency=live.gate_level,
        drafter_digest=identity.drafter_digest(profile.drafter_path), reference=reference)
    if live.simulated and not result.message.startswith(sim(live)):
        result = dataclasses.replace(result, message=sim(live) + result.message)
    return result


def position_figure(k: int) -> str:
    """The history's name of the acceptance at draft position k (at one stream)."""
    return f"{POSITION_PREFIX}{k}"


def judge_position_regression(
    current: Mapping[str, Figure],
    history: Sequence[RunRecord],
    profile_name: str,
    *,
    confidence: float,
    concurrency: int = 1,
    drafter_digest: str | None = None,
    phase: str = "phase0",
    reference: RunRecord | None = None,
) -> ClaimResult:
    """regress.accept_pos: at every draft position both runs measured (this one and the last
    passing run of the profile, or `reference` when the user named one), the acceptance may drop
    by no more than the noise of the difference of the two measurements: the root sum of
    squares of their interval half-widths, widened from `confidence` to the Bonferroni level
    for that many positions (a drop at any one of K positions is K chances). No fixed
    percentage: a position measured without an interval cannot be judged, and says so."""
    cid = POSITION_CLAIM
    at = f" at {concurrency} in flight" if concurrency != 1 else ""
    now = {k: current[position_figure(k)] for k in range(1, len(current) + 1)
           if position_figure(k) in current}
    if not now:
        return claims.skipped(cid, phase, f"this run measured no acceptance per draft position"
                              f"{at} (the speculative server sent no "
                              "spec_correct_drafts_histogram)", reason="not_measured")
    first = figure_name(position_figure(1), concurrency)
    if reference is not None and first not in reference.figures:
        return claims.skipped(
            cid, phase, f"{_reference_named(reference)} measured no acceptance per draft "
            f"position{at}", reason="no_reference",
            details={"figure": first, "reference_run": reference.run})
    before_run = reference or history_store.last_passing(profile_name, history, figure=first)
    if before_run is None:
        return claims.skipped(
            cid, phase, f"no earlier passing run of profile {profile_name!r} that measured the "
            f"acceptance per draft position{at} in history/{HISTORY_FILE}; this run becomes the "
            "reference once it passes", reason="no_reference", details={"figure": first})
    before = {k: before_run.figures[name] for k in now
              if (name := figure_name(position_figure(k), concurrency)) in before_run.figures}
    compared = sorted(before)
    alpha = 1.0 - confidence
    widen = (t_quantile(1.0 - alpha / (2.0 * len(compared)), math.inf)
             / t_quantile(1.0 - alpha / 2.0, math.inf))
    rows: list[dict[str, Any]] = []
    for k in compared:
        spread = math.hypot(now[k].half_width, before[k].half_width) * widen
        rows.append({"position": k, "current": now[k].to_json(),
                     "reference": before[k].to_json(), "drop": before[k].value - now[k].value,
                     "noise": spread})
    same = drafter_digest is not None and drafter_digest == before_run.drafter_digest
    details: dict[str, Any] = {
        "positions": rows, "reference_run": before_run.run,
        "reference_named": reference is not None, "reference_time": before_run.time,
        "reference_drafter": before_run.drafter,
        "reference_drafter_digest": before_run.drafter_digest,
        "drafter_digest": drafter_digest, "same_drafter_bytes": same,
        "bonferroni_positions": len(compared), "confidence": confidence}
    # A position without an interval in either run has no noise to judge a drop by and is left
    # out (said); one whose interval has no width (every prompt alike) is judged with none.
    unjudged = [r["position"] for r in rows
                if None in (now[r["position"]].low, before[r["position"]].low)]
    details["unjudged_positions"] = unjudged
    rows = [r for r in rows if r["position"] not in unjudged]
    where = (_reference_named(reference) if reference is not None else
             f"the last passing run of {profile_name!r} ({before_run.time}, "
             f"{_drafter_named(before_run)})")
    if same:
        where += ", the same drafter bytes as this run's"
    table = "; ".join(f"draft {r['position']}: {now[r['position']].value:.3f} against "
                      f"{before[r['position']].value:.3f} (noise {r['noise']:.3f})" for r in rows)
    if unjudged:
        table += (f"; draft {', '.join(map(str, unjudged))} not judged: no interval in this run "
                  "or the reference")
    if not rows:
        return claims.skipped(cid, phase, f"no draft position has an interval in this run and in "
                              f"{where}, so no noise to judge a drop by: {table}",
                              reason="no_interval", details=details)
    worst = max(rows, key=lambda r: r["drop"] - r["noise"])
    k = worst["position"]
    kw: dict[str, Any] = {"observed": round(now[k].value, 4),
                          "expected": f">= {before[k].value - worst['noise']:.4g} at draft {k}",
                          "unit": "of verify passes", "details": details}
    reference_positions = len(before_run_positions(before_run, concurrency))
    fewer = (f"; this run drafts {len(now)} positions, the reference {reference_positions}: "
             f"compared {len(compared)}" if len(compared) != len(now) else "")
    dropped = [r for r in rows if r["drop"] > r["noise"]]
    if dropped:
        named = ", ".join(f"draft {r['position']} by {r['drop']:.3f} (noise {r['noise']:.3f})"
                          for r in dropped)
        return claims.failed(
            cid, phase, f"acceptance dropped at {named} against {where}: {table}{fewer}. A drop "
            "at one position first shows a broken drafter, a vocab map that moved or a chain "
            "served otherwise: compare the two drafters and the server's speculative settings.",
            **kw)
    return claims.passed(cid, phase, f"every draft position within its noise against {where}: "
                         f"{table}{fewer}", **kw)


def before_run_positions(record: RunRecord, concurrency: int) -> list[int]:
    """The draft positions a history record measured (at that concurrency)."""
    found = []
    k = 1
    while figure_name(position_figure(k), concurrency) in record.figures:
        found.append(k)
        k += 1
    return found


def _reference_named(record: RunRecord) -> str:
    """The run a user named as the reference, as a message names it."""
    return (f"run {record.run or '(no id)'} named as the reference (profile {record.profile!r}, "
            f"{record.outcome}, {record.time or 'time not recorded'}, {_drafter_named(record)})")


def _drafter_named(record: RunRecord) -> str:
    """The reference run's drafter by its bytes (an older history line has only its path)."""
    if record.drafter_digest:
        return f"drafter BLAKE3 {record.drafter_digest[:16]}…"
    return f"drafter {record.drafter or '?'}, its bytes not recorded"


def _fmt(figure: Figure) -> str:
    text = f"{figure.value:.4g}"
    if figure.half_width:
        text += f" (±{figure.half_width:.2g})"
    return text
