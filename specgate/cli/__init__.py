"""The `specgate` command: report, generate, remap-vocab, eval, preflight, tune, profile-doc."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from specgate.core.errors import SpecgateError

if TYPE_CHECKING:
    from specgate.core.profile import Profile

USAGE = """specgate COMMAND [options]

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

The claims themselves run under pytest, from any folder:
  pytest -m probe --profile my.toml    (--specgate-profile where pytest-profiling owns --profile)
  pytest -m gate --profile my.toml --drafter NEW_CHECKPOINT
"""


def _report(argv: Sequence[str]) -> int:
    from specgate.report.build import main_report

    return main_report(list(argv))


def _generate(argv: Sequence[str]) -> int:
    from specgate.testing.generate import main_generate

    return main_generate(list(argv))


def _remap(argv: Sequence[str]) -> int:
    from specgate.io.remap import main_remap

    return main_remap(list(argv))


def _eval(argv: Sequence[str]) -> int:
    from specgate.model.evaluate import main_eval

    return main_eval(list(argv), probe_names=_probe_prompt_categories)


def _probe_prompt_categories(profile: Profile | None) -> dict[str, str]:
    """The probe's prompt ids and their categories: the profile's [bench] prompts (all of them,
    before any category selection), else the builtin set."""
    from specgate.measure import prompts

    chosen = profile.bench.prompts if profile is not None else prompts.BUILTIN
    if chosen == prompts.BUILTIN or profile is None:
        found = prompts.load_builtin()
    else:
        path = profile.resolve(chosen)
        found = prompts.load_jsonl(path) if path is not None else []
    return {p.id: p.category for p in found}


def _preflight(argv: Sequence[str]) -> int:
    from specgate.serving.preflight import main_preflight

    return main_preflight(list(argv))


def _profile_doc(argv: Sequence[str]) -> int:
    from specgate.core.profile_doc import main_profile_doc

    return main_profile_doc(list(argv))


def _tune(argv: Sequence[str]) -> int:
    from specgate.cli.tune import main_tune

    return main_tune(list(argv))


COMMANDS: dict[str, Callable[[Sequence[str]], int]] = {
    "report": _report,
    "generate": _generate,
    "remap-vocab": _remap,
    "eval": _eval,
    "preflight": _preflight,
    "profile-doc": _profile_doc,
    "tune": _tune,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
