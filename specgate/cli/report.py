"""`specgate report`: its arguments, and the HTML report built from a run's Allure results."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from specgate.report.build import build, summary_line


def main_report(argv: Sequence[str] | None = None) -> int:
    """`specgate report`: build DIR/allure-report/index.html from DIR/allure-results."""
    parser = argparse.ArgumentParser(prog="specgate report", description=main_report.__doc__)
    parser.add_argument("--reports", type=Path, default=Path("reports"), metavar="DIR",
                        help="the reports folder of a run (default reports/)")
    parser.add_argument("--name", help="report title (default: specgate — <profile>)")
    args = parser.parse_args(argv)
    built = build(args.reports, name=args.name)
    print(f"report: {built.index} ({summary_line(built.summary)})")
    print(f"history: {built.index.parent.parent / 'history'}"
          + ("" if built.history_appended else " (this run was already in it)"))
    return 0
