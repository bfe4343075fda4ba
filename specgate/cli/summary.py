"""`specgate summary [VERDICT]`: a verdict as Markdown, for a CI job's page ($GITHUB_STEP_SUMMARY,
a GitLab job log): the outcome, the key figures with their intervals, the smallest speed-up the
probe could decide, and every claim that did not pass with the first line of its message."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specgate.claims.figures import Figure, decidable_line, figures_of, latency_lines
from specgate.report.verdict_file import load_verdict

# Longest message shown in a table cell; the verdict and the report carry the whole of it.
CELL_CHARS = 300


def cell(text: Any, limit: int = CELL_CHARS) -> str:
    """Text fit for one Markdown table cell: its first line, pipes escaped, shortened."""
    lines = str(text if text is not None else "").splitlines()
    first = lines[0] if lines else ""
    if len(first) > limit:
        first = first[:limit - 1] + "…"
    return first.replace("|", "\\|")


def _counts(doc: Mapping[str, Any]) -> str:
    counts = doc.get("counts")
    if not isinstance(counts, Mapping):
        return ""
    return ", ".join(f"{v} {k}" for k, v in counts.items() if v)


def _value(f: Figure) -> str:
    unit = "×" if f.unit == "x" else f" {f.unit}" if f.unit else ""
    return f"{f.value:.{f.digits}f}{unit}"


def _interval(f: Figure) -> str:
    interval = (f"[{f.ci_low:.{f.digits}f}, {f.ci_high:.{f.digits}f}]"
                if f.ci_low is not None and f.ci_high is not None else "none measured")
    if f.confidence and f.ci_low is not None:
        interval = f"{f.confidence * 100:.4g} % CI {interval}"
    return interval


def render(doc: Mapping[str, Any]) -> str:
    """The Markdown summary of one verdict document."""
    outcome = str(doc.get("outcome", "?")).upper()
    out = [f"## specgate verdict: {outcome}", ""]
    facts = [f"profile `{doc.get('profile')}`" + (" (simulated server)"
                                                   if doc.get("simulated") else "")]
    run = doc.get("run")
    if isinstance(run, Mapping) and run.get("id"):
        facts.append(f"run `{run['id']}`")
    if doc.get("drafter"):
        facts.append(f"drafter `{doc['drafter']}`")
    said = _counts(doc)
    if said:
        facts.append(said)
    out += [" · ".join(facts), ""]
    if doc.get("interim") or doc.get("complete") is False:
        out += ["This verdict is not complete: the run stopped before every selected claim "
                "reported, or ended in a usage or internal error (see the job's log).", ""]
    if doc.get("nothing_ran"):
        out += [f"No claim ran: {cell(doc['nothing_ran'])}", ""]
    figures = figures_of(doc)
    latency = latency_lines(doc.get("latency"))
    if figures or latency:
        out += ["| figure | value | interval |", "|---|---|---|"]
        for f in figures:
            out.append(f"| {cell(f.label)} | {_value(f)} | {_interval(f)} |")
        for label, text in latency:
            out.append(f"| {label} | {cell(text)} | per request, as sglang.bench_serving |")
        out.append("")
    could = decidable_line(doc.get("decidable"))
    if could is not None:
        # The smallest speed-up this probe's own intervals decide: a whole sentence, too long
        # for a table cell, and the reader needs all of it.
        out += [f"**{could[0]}**: {could[1]}", ""]
    rows = doc.get("checkpoints")
    if isinstance(rows, list) and rows:
        out += ["| checkpoint | outcome | claims | verdict |", "|---|---|---|---|"]
        for row in rows:
            if isinstance(row, Mapping):
                out.append(f"| `{cell(row.get('checkpoint'))}` | "
                           f"{str(row.get('outcome')).upper()} | {cell(_counts(row))} | "
                           f"{cell(row.get('verdict'))} |")
        out.append("")
        # each checkpoint's own figures (a matrix's verdict has none of its own)
        own = [(row, f) for row in rows if isinstance(row, Mapping) for f in figures_of(row)
               if f.position is None]
        if own:
            out += ["| checkpoint | figure | value | interval |", "|---|---|---|---|"]
            out += [f"| `{cell(row.get('checkpoint'))}` | {cell(f.label)} | "
                    f"{_value(f)} | {_interval(f)} |" for row, f in own]
            out.append("")
        for row in rows:
            could = decidable_line(row.get("decidable")) if isinstance(row, Mapping) else None
            if could is not None:
                out += [f"**`{cell(row.get('checkpoint'))}` {could[0]}**: {could[1]}", ""]
    causes = [c for c in doc.get("causes") or [] if isinstance(c, Mapping) and c.get("claims")]
    by_cause = {cid for c in causes for cid in c["claims"]}
    shown = [c for c in doc["claims"] if isinstance(c, Mapping)
             and c.get("status") in ("failed", "broken", "skipped")
             and c.get("id") not in by_cause]
    order = {"failed": 0, "broken": 1, "skipped": 2}
    shown.sort(key=lambda c: order[str(c["status"])])
    if shown or causes:
        out += ["| claim | status | why |", "|---|---|---|"]
        for claim in shown:
            where = f"[{claim['checkpoint']}] " if claim.get("checkpoint") else ""
            out.append(f"| {where}`{cell(claim.get('id'))}` | {claim['status']} | "
                       f"{cell(claim.get('message'))} |")
        for cause in causes:
            ids = ", ".join(f"`{i}`" for i in cause["claims"])
            out.append(f"| {ids} | broken | {cell(cause.get('message'))} |")
        out.append("")
    if any(_no_earlier_run(c) for c in doc["claims"]):
        out += ["`regress.*` had no earlier passing run of this profile to compare with: keep "
                "`reports/history/` between runs (a CI cache) or every run is a first run.", ""]
    return "\n".join(out)


def _no_earlier_run(claim: Any) -> bool:
    """A regress.* claim skipped for want of an earlier passing run in the history (not one
    whose named reference run lacked the figure: the history is not what it missed)."""
    if not isinstance(claim, Mapping) or claim.get("reason") != "no_reference":
        return False
    details = claim.get("details")
    return not (isinstance(details, Mapping) and details.get("reference_run"))


def main_summary(argv: Sequence[str] | None = None) -> int:
    """`specgate summary`: print a verdict as Markdown (for $GITHUB_STEP_SUMMARY or a job log)."""
    parser = argparse.ArgumentParser(
        prog="specgate summary", description=main_summary.__doc__,
        epilog="In a GitHub Actions step: specgate summary >> \"$GITHUB_STEP_SUMMARY\"")
    parser.add_argument("verdict", nargs="?", type=Path, default=Path("reports/verdict.json"),
                        metavar="VERDICT", help="a verdict file (default reports/verdict.json)")
    args = parser.parse_args(argv)
    print(render(load_verdict(args.verdict)))
    return 0
