"""`specgate calibrate-simulator`: fit the simulator's batching to a session measured at several
concurrency levels."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specgate.measure.results import LiveResults
from specgate.testing.simulator import calibrate, model


def main_calibrate_simulator(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="specgate calibrate-simulator",
        description="Fit the simulator's batching to a live session measured at several "
                    "[bench] concurrency levels (REPORTS/live/results.json).")
    parser.add_argument("results", type=Path, help="a live session's results.json")
    parser.add_argument("--draft-step-ms", type=float, default=model.DEFAULT_DRAFT_STEP_MS,
                        help="one draft forward at one sequence (kept; the verify takes the "
                             "rest of the cycle)")
    args = parser.parse_args(argv)
    try:
        live = LiveResults.read(args.results)
        found = calibrate.fit(live, draft_step_ms=args.draft_step_ms)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"{args.results}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(found.to_json(), indent=1))
    return 0
