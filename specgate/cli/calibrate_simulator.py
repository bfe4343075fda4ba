"""`specgate calibrate-simulator`: fit the simulator's batching to a session measured at several
concurrency levels."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specgate.results.live import LiveResults
from specgate.testing.simulator import calibrate, model


def _say(message: str) -> None:
    print(f"specgate calibrate-simulator: {message}", file=sys.stderr)


def main_calibrate_simulator(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="specgate calibrate-simulator",
        description="Fit the simulator's batching to a live session measured at several "
                    "[bench] concurrency levels (REPORTS/live/results.json).")
    parser.add_argument("results", type=Path, help="a live session's results.json")
    parser.add_argument("--draft-step-ms", type=float, default=model.DEFAULT_DRAFT_STEP_MS,
                        help="one draft forward at one sequence (kept; the verify takes the "
                             "rest of the cycle)")
    parser.add_argument("--fit-levels", type=_levels, default=None, metavar="N,N,...",
                        help="fit to these levels alone (default: every level at which "
                             "both servers ran the requests held in flight, neither queueing "
                             "above its max_running_requests); each other "
                             "level is held out and its predicted speed-up set against the "
                             "measured one")
    for config in ("baseline", "speculative"):
        parser.add_argument(f"--{config}-max-running", type=_positive, default=None, metavar="N",
                            help=f"the most requests the {config} server runs at once, for a "
                                 "session whose results do not record it (its /server_info's "
                                 "max_running_requests; SGLang's log prints it)")
    args = parser.parse_args(argv)
    try:
        live = LiveResults.read(args.results)
    except FileNotFoundError:
        _say(f"{args.results}: no such file; give a live session's results.json "
              "(REPORTS/live/results.json of a run with live claims)")
        return 1
    except OSError as exc:
        _say(f"{args.results}: cannot be read ({exc.strerror or exc}); give a live session's "
              "results.json")
        return 1
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        why = (f"not JSON: {exc}" if isinstance(exc, json.JSONDecodeError)
               else f"no {exc} key" if isinstance(exc, KeyError)
               else "its contents have another shape")
        _say(f"{args.results}: not a live session's results.json ({why})")
        return 1
    try:
        found = calibrate.fit(live, draft_step_ms=args.draft_step_ms, fit_levels=args.fit_levels,
                              baseline_max_running=args.baseline_max_running,
                              speculative_max_running=args.speculative_max_running)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        _say(f"{args.results}: {exc}")
        return 1
    out = found.to_json()
    worst = found.worst_held_out_error
    if worst is not None:
        out["worst_held_out_speedup_error"] = round(worst, 4)
    print(json.dumps(out, indent=1))
    return 0


def _levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give whole numbers, e.g. 1,4,16") from None
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give levels of 1 or more, e.g. 1,4,16")
    return levels


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number, e.g. 48") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give 1 or more")
    return value
