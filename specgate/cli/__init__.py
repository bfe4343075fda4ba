"""The `specgate` command: report, generate, remap-vocab, eval, preflight, tune, profile-doc."""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
from collections.abc import Callable, Sequence

from specgate.core.errors import SpecgateError

USAGE = """specgate COMMAND [options]   (specgate --version: the installed version)

commands:
  report       build the Allure HTML report from reports/allure-results (with history)
  generate     write a drafter checkpoint (any shape; sparse full-size Kimi presets)
  remap-vocab  move a drafter's lm_head rows to another vocab map (--from OLD --to MAP --out NEW)
  eval         offline teacher-forced evaluation of a drafter on a hidden-state dump, and the
               accept length it predicts for the served chain (--served-steps, --profile)
  preflight    check the launch commands of a profile with the installed SGLang's own parser
  tune         find the fastest --speculative-num-steps chain from few launches (table, plot,
               a [speculative] snippet in reports/tune/)
  profile-doc  write the profile reference (every key, type, default and meaning) as Markdown
  calibrate-simulator
               fit the simulator's batching to a live session measured at several
               [bench] concurrency levels (REPORTS/live/results.json)
  summary      a verdict as Markdown for a CI job's page (specgate summary [VERDICT])
  compare      two runs' key figures, intervals and claims side by side (specgate compare A B:
               verdict files, run folders or run ids)

The claims themselves run under pytest, from any folder:
  pytest -m probe --profile my.toml    (--specgate-profile where pytest-profiling owns --profile)
  pytest -m gate --profile my.toml --drafter NEW_CHECKPOINT
"""


def _command(module: str, name: str) -> Callable[[Sequence[str]], int]:
    """A subcommand's main, imported only when it runs (eval and report pull in heavy modules)."""

    def run(argv: Sequence[str]) -> int:
        main_of: Callable[[list[str]], int] = getattr(
            importlib.import_module(f"specgate.cli.{module}"), name)
        return main_of(list(argv))

    return run


COMMANDS: dict[str, Callable[[Sequence[str]], int]] = {
    "report": _command("report", "main_report"),
    "generate": _command("generate", "main_generate"),
    "remap-vocab": _command("remap", "main_remap"),
    "eval": _command("eval", "main_eval"),
    "preflight": _command("preflight", "main_preflight"),
    "profile-doc": _command("profile_doc", "main_profile_doc"),
    "tune": _command("tune", "main_tune"),
    "calibrate-simulator": _command("calibrate_simulator", "main_calibrate_simulator"),
    "summary": _command("summary", "main_summary"),
    "compare": _command("compare", "main_compare"),
}


def version() -> str:
    """The installed specgate's version (its distribution metadata)."""
    try:
        return importlib.metadata.version("specgate")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        print(f"specgate {version()}")
        return 0
    command = COMMANDS.get(args[0])
    if command is None:
        print(f"specgate: unknown command {args[0]!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    try:
        return command(args[1:])
    except SpecgateError as exc:
        print(f"specgate {args[0]}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"specgate {args[0]}: interrupted", file=sys.stderr)
        return 130
