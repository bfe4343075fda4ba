"""`specgate compare A B`: two runs' verdicts side by side: each key figure with its interval and
the change from A to B, then each claim's status and observed value in both."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specgate.claims.figures import LATENCY_LABELS, LATENCY_SHOWN, Figure, figures_of
from specgate.core.errors import DataError
from specgate.report.verdict_file import find_verdict, load_verdict

# Widest observed value a claim row shows; the verdicts carry the whole of it.
OBSERVED_CHARS = 34


def _figure_cell(figure: Figure | None) -> str:
    return figure.short_text() if figure is not None else "-"


def _change(a: Figure | None, b: Figure | None) -> str:
    if a is None or b is None:
        return ""
    delta = b.value - a.value
    text = f"{delta:+.{a.digits}f}"
    if a.value:
        text += f" ({delta / abs(a.value) * 100:+.1f} %)"
    if (a.ci_low is not None and a.ci_high is not None and b.ci_low is not None
            and b.ci_high is not None):
        if b.ci_low > a.ci_high or b.ci_high < a.ci_low:
            text += ", intervals apart"
        else:
            text += ", intervals overlap"
    return text


def _observed(claim: Mapping[str, Any] | None) -> str:
    if claim is None:
        return "-"
    status = str(claim.get("status", "?"))
    observed = claim.get("observed")
    if observed is None or status == "skipped":
        return status
    value = (f"{observed:.4g}" if isinstance(observed, float)
             else json.dumps(observed, ensure_ascii=False) if not isinstance(observed, str)
             else observed)
    unit = claim.get("unit")
    if unit and unit != "x":
        value += f" {unit}"
    elif unit == "x":
        value += "×"
    if len(value) > OBSERVED_CHARS:
        value = value[:OBSERVED_CHARS - 1] + "…"
    return f"{status} {value}"


def _triple(table: Any, config: str, metric: str) -> list[float] | None:
    """A server's p50/p90/p99 of one latency metric in a verdict's latency table."""
    servers = table.get("servers") if isinstance(table, Mapping) else None
    server = servers.get(config) if isinstance(servers, Mapping) else None
    stats = server.get(metric) if isinstance(server, Mapping) else None
    if not isinstance(stats, Mapping):
        return None
    values = [stats.get(k) for k in LATENCY_SHOWN]
    return [float(v) for v in values if isinstance(v, (int, float))] \
        if all(isinstance(v, (int, float)) for v in values) else None


def _latency_rows(a: Any, b: Any) -> list[list[str]]:
    """TTFT and TPOT p50/p90/p99 of each server in both runs, and B over A."""
    rows = []
    for metric, label in LATENCY_LABELS.items():
        for config in ("baseline", "speculative"):
            ta, tb = _triple(a, config, metric), _triple(b, config, metric)
            if ta is None and tb is None:
                continue
            change = ("/".join(f"{y / x:.2f}" if x > 0 else "-" for x, y in zip(ta, tb,
                                                                              strict=True))
                      if ta is not None and tb is not None else "")
            rows.append([f"{label} {config}",
                         "/".join(f"{v:.3g}" for v in ta) if ta is not None else "-",
                         "/".join(f"{v:.3g}" for v in tb) if tb is not None else "-", change])
    return rows


def _title(label: str, path: Path, doc: Mapping[str, Any]) -> str:
    run = doc.get("run")
    run_id = run.get("id") if isinstance(run, Mapping) else None
    sim = " (simulated server)" if doc.get("simulated") else ""
    return (f"{label}  run {run_id or '(no id)'} · profile {doc.get('profile')}{sim} · "
            f"{str(doc.get('outcome')).upper()} · {doc.get('written_at', '?')}\n"
            f"   {path}")


def _rows(table: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in table]


def render(a_path: Path, a: Mapping[str, Any], b_path: Path, b: Mapping[str, Any]) -> str:
    """The comparison of verdict a (the earlier, or the reference) with verdict b."""
    out = [_title("A", a_path, a), _title("B", b_path, b), ""]
    a_figs = {f.key: f for f in figures_of(a)}
    b_figs = {f.key: f for f in figures_of(b)}
    keys = list(a_figs) + [k for k in b_figs if k not in a_figs]
    if keys:
        table = [["figure", "A", "B", "B - A"]]
        for key in keys:
            fa, fb = a_figs.get(key), b_figs.get(key)
            either = fa or fb
            label = either.label if either is not None else key
            table.append([label, _figure_cell(fa), _figure_cell(fb), _change(fa, fb)])
        out += [*_rows(table), ""]
    else:
        out += ["neither run measured a key figure", ""]
    latency = _latency_rows(a.get("latency"), b.get("latency"))
    if latency:
        out += [*_rows([["latency, ms (p50/p90/p99)", "A", "B", "B / A"], *latency]), ""]
    a_claims = {str(c.get("id")): c for c in a.get("claims", []) if isinstance(c, Mapping)}
    b_claims = {str(c.get("id")): c for c in b.get("claims", []) if isinstance(c, Mapping)}
    ids = list(a_claims) + [i for i in b_claims if i not in a_claims]
    if ids:
        table = [["claim", "A", "B", ""]]
        for cid in ids:
            ca, cb = a_claims.get(cid), b_claims.get(cid)
            moved = ("status changed" if ca is not None and cb is not None
                     and ca.get("status") != cb.get("status") else "")
            table.append([cid, _observed(ca), _observed(cb), moved])
        out += _rows(table)
    return "\n".join(out)


def main_compare(argv: Sequence[str] | None = None) -> int:
    """`specgate compare A B`: two runs' key figures, intervals and claims side by side."""
    parser = argparse.ArgumentParser(
        prog="specgate compare", description=main_compare.__doc__,
        epilog="A and B are each a verdict.json, a run folder, or a run id (or its start) of "
               "REPORTS/runs/. regress.* compare a run with one reference the same way: "
               "pytest ... --specgate-reference-run RUN.")
    parser.add_argument("a", metavar="A", help="the earlier run, or the reference")
    parser.add_argument("b", metavar="B", help="the run to compare with it")
    parser.add_argument("--reports", type=Path, default=Path("reports"), metavar="DIR",
                        help="where run ids are looked up (default reports/)")
    args = parser.parse_args(argv)
    docs = []
    for given in (args.a, args.b):
        path = find_verdict(given, args.reports)
        try:
            docs.append((path, load_verdict(path)))
        except DataError as exc:
            raise DataError(f"{given}: {exc}" if str(path) != given else str(exc)) from None
    (a_path, a), (b_path, b) = docs
    print(render(a_path, a, b_path, b))
    return 0
