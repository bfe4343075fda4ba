"""`specgate tune`: its arguments, the profile it runs on, and the files it writes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from specgate.report.tune_report import snippet, summary_text, write_outputs


def main_tune(argv: list[str]) -> int:
    from specgate.core.profile import choose_profile_path, load_profile
    from specgate.measure.tune import cannot_launch, run_tune

    parser = argparse.ArgumentParser(
        prog="specgate tune",
        description="Find the fastest --speculative-num-steps chain from few launches: measure "
                    "the longest chain, predict the others, race the most promising few.")
    parser.add_argument("--profile", help="profile file or shipped name (default: demo)")
    parser.add_argument("--reports", type=Path, default=Path("reports"), metavar="DIR",
                        help="the reports folder: the tune's table, plot, recommended.toml and "
                             "tune.json go to DIR/tune/, its servers' logs beside them, and "
                             "stored baselines are shared with the claims runs there "
                             "(default reports/)")
    parser.add_argument("--drafter", help="drafter checkpoint (overrides the profile)")
    parser.add_argument("--target-model", help="target model folder (overrides the profile)")
    parser.add_argument("--sglang-launcher", help="argv prefix that starts SGLang")
    parser.add_argument("--steps", help="comma-separated steps to consider (overrides [tune])")
    parser.add_argument("--max-launches", type=int, help="overrides [tune] max_launches")
    parser.add_argument("--no-baseline", action="store_true",
                        help="launch no baseline (the cycle fit starts without its prior)")
    parser.add_argument("--from-json", type=Path, metavar="TUNE_JSON",
                        help="launch nothing: write tune.md, tune.png and recommended.toml "
                             "again from an earlier run's tune.json, under --reports")
    args = parser.parse_args(argv)
    if args.from_json is not None:
        return _rebuild(args.from_json, args.reports)
    profile = load_profile(choose_profile_path(args.profile)).with_overrides(
        drafter=args.drafter, target_model=args.target_model,
        sglang_launcher=args.sglang_launcher)
    if profile.demo is not None:
        from specgate.testing import demo

        demo.prepare(profile)
    update: dict[str, Any] = {}
    if args.steps is not None:
        try:
            update["steps"] = sorted({int(s) for s in args.steps.split(",") if s.strip()})
        except ValueError:
            parser.error(f"--steps {args.steps!r}: give whole numbers separated by commas, "
                         "e.g. --steps 1,2,3,4")
    if args.max_launches is not None:
        update["max_launches"] = args.max_launches
    if update:
        from pydantic import ValidationError

        from specgate.core.profile import TuneSection

        try:  # validated as a [tune] section in a profile would be
            tune = TuneSection.model_validate({**profile.tune.model_dump(), **update})
        except ValidationError as exc:
            parser.error("; ".join(f"--{'-'.join(map(str, e['loc'])).replace('_', '-')}: "
                                   f"{e['msg']}" for e in exc.errors()))
        profile = profile.model_copy(update={"tune": tune})
    blocked = cannot_launch(profile, args.reports)
    if blocked is not None:
        print(f"specgate tune: {blocked}", file=sys.stderr)
        return 1
    # SIGTERM (a plain `timeout`) ends the run as Ctrl-C does: servers stopped, results written.
    from specgate.serving.safety_net import install_signal_handlers

    install_signal_handlers()

    def say(message: str) -> None:
        print(f"[specgate tune] {message}", file=sys.stderr, flush=True)

    result = run_tune(profile, args.reports, progress=say, use_baseline=not args.no_baseline)
    paths = write_outputs(result, args.reports, profile.speculative.algorithm)
    print(summary_text(result))
    print(snippet(result, profile.speculative.algorithm))
    print("written: " + ", ".join(str(paths[k]) for k in ("table", "plot", "snippet", "json")))
    if result.stop_reason.startswith("interrupted"):
        return 130  # what it measured is written, but the run did not finish
    return 0 if result.best is not None else 1


def _rebuild(source: Path, reports: Path) -> int:
    """The report of a tune.json (launching nothing); a file that is not one is a clear error."""
    import json

    from specgate.results.tune import TuneResult

    try:
        data = json.loads(source.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"a JSON {type(data).__name__}, not an object")
        result = TuneResult.from_json(data)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        print(f"specgate tune --from-json {source}: not a readable tune.json "
              f"({type(exc).__name__}: {exc})", file=sys.stderr)
        return 2
    out = reports / "tune"
    out.mkdir(parents=True, exist_ok=True)
    if (out / "tune.json").resolve() != source.resolve():
        result.write(out / "tune.json")
    paths = write_outputs(result, reports)
    print(summary_text(result))
    print("written: " + ", ".join(str(paths[k]) for k in ("table", "plot", "snippet", "json")))
    return 0

