"""Every benchmark in one process tree (`tox -e bench`): writes reports/bench.json and a table.

Generated checkpoints go to a temporary folder (sparse: the 4.7 + 2.4 GB pair costs ~1 MB of
disk; the health-scan drafter is a real ~1.4 GB file) and are removed at the end unless --keep.
Run: `python -m benchmarks.run_all [--only 1,2,...] [--quick] [--out reports/bench.json]`.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import bounded_work, health_scan, launches, offline_claims, oracle, probe_run
from benchmarks.common import ROOT, table

HEADER = ["benchmark", "specgate", "compared with", "ratio / figure", "target"]


def _bench1(work: Path, quick: bool) -> dict[str, Any]:
    return offline_claims.run(work, "small" if quick else "full")


def _bench2(work: Path, quick: bool) -> dict[str, Any]:
    return health_scan.run(work, "small" if quick else "mid", repeats=1 if quick else 5)


def _bench3(work: Path, quick: bool) -> dict[str, Any]:
    drafter, reference = offline_claims.make_pair(work, "small" if quick else "full")
    return probe_run.run(work, drafter, reference, repeats=1 if quick else 3)


def _bench4(work: Path, quick: bool) -> dict[str, Any]:
    from benchmarks import (
        live_sim,  # imports requests and the simulator: only when this benchmark runs
    )

    if quick:
        return live_sim.run(work / "live", fixed_n=6, fixed_repeats=2, max_new_tokens=16,
                            per_category=1)
    return live_sim.run(work / "live")


def _bench5(work: Path, quick: bool) -> dict[str, Any]:
    return launches.run(work, workers=(1,) if quick else (1, 4))


def _bench6(work: Path, quick: bool) -> dict[str, Any]:
    from benchmarks import tune_bench

    return tune_bench.run(work)


def _bench8(work: Path, quick: bool) -> dict[str, Any]:
    from benchmarks import paired_design

    return paired_design.run(trials=50 if quick else 400)


def _bench9(work: Path, quick: bool) -> dict[str, Any]:
    from benchmarks import accuracy

    return accuracy.run(work)


def _bench11(work: Path, quick: bool) -> dict[str, Any]:
    from benchmarks import launch_drift

    return launch_drift.run(trials=20 if quick else 400)


def _bench12(work: Path, quick: bool) -> dict[str, Any]:
    from benchmarks import first_probe

    return first_probe.run(false_trials=40, trials=10) if quick else first_probe.run()


def _bench7(work: Path, quick: bool) -> dict[str, Any]:
    return oracle.run(oracle.QUICK_EXAMPLES if quick else oracle.FULL_EXAMPLES)


def _bench10(work: Path, quick: bool) -> dict[str, Any]:
    return bounded_work.run(work, quick)


def _rows_of(module: str, name: str = "rows") -> Callable[[dict[str, Any]], list[list[str]]]:
    """benchmarks.<module>'s table rows, the module imported only when the table is made (some
    import requests and the simulator)."""
    def rows(result: dict[str, Any]) -> list[list[str]]:
        made: list[list[str]] = getattr(importlib.import_module(f"benchmarks.{module}"),
                                        name)(result)
        return made

    return rows


BENCHES: dict[str, tuple[str, Callable[[Path, bool], dict[str, Any]],
                         Callable[[dict[str, Any]], list[list[str]]]]] = {
    "1": ("offline_claims", _bench1, offline_claims.rows),
    "2": ("health_scan", _bench2, health_scan.rows),
    "3": ("probe_run", _bench3, probe_run.rows),
    "4": ("live_sim", _bench4, _rows_of("live_sim")),
    "5": ("launches", _bench5, launches.rows),
    "6": ("fewer_launches", _bench6, _rows_of("tune_bench")),
    "7": ("safetensors_oracle", _bench7, oracle.rows),
    "8": ("paired_design", _bench8, _rows_of("paired_design")),
    "9": ("accuracy", _bench9, _rows_of("accuracy", "bench_rows")),
    "10": ("bounded_work", _bench10, bounded_work.rows),
    "11": ("launch_drift", _bench11, _rows_of("launch_drift")),
    "12": ("first_probe", _bench12, _rows_of("first_probe")),
}


def run_all(out: Path, only: list[str], quick: bool, keep: bool,
            workdir: Path | None = None) -> dict[str, Any]:
    work = workdir or Path(tempfile.mkdtemp(prefix="specgate-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {
        "schema": 1, "started_at": _dt.datetime.now(_dt.UTC).isoformat(
            timespec="seconds"),
        "quick": quick, "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                    "platform": platform.platform()},
        "benchmarks": {}, "errors": {}}
    rows: list[list[str]] = [HEADER]
    started = time.perf_counter()
    try:
        for key in only:
            name, fn, to_rows = BENCHES[key]
            t0 = time.perf_counter()
            print(f"[bench] {key} {name} …", file=sys.stderr, flush=True)
            try:
                result = fn(work, quick)
            except Exception:  # one broken benchmark must not lose the others' figures
                doc["errors"][name] = traceback.format_exc()
                rows.append([f"{key} {name}", "ERROR (see bench.json errors)", "", "", ""])
                print(doc["errors"][name], file=sys.stderr)
                continue
            result["bench_seconds"] = time.perf_counter() - t0
            doc["benchmarks"][name] = result
            rows.extend(to_rows(result))
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    finally:
        if not keep and workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    doc["total_seconds"] = time.perf_counter() - started
    doc["table"] = table(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return doc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", default=",".join(BENCHES),
                        help="comma-separated benchmark numbers (default: all)")
    parser.add_argument("--quick", action="store_true",
                        help="small inputs (the smoke test's mode; figures mean little)")
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "bench.json")
    parser.add_argument("--workdir", type=Path, help="keep generated files here (reused)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    only = [k.strip() for k in args.only.split(",") if k.strip()]
    unknown = [k for k in only if k not in BENCHES]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; expected some of {list(BENCHES)}")
    doc = run_all(args.out, only, args.quick, args.keep, args.workdir)
    print(doc["table"])
    print(f"\n{args.out} ({doc['total_seconds']:.0f} s)")
    return 1 if doc["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
