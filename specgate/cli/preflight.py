"""`specgate preflight`: its arguments, and each profile's launch commands checked."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from specgate.core import profile as profiles
from specgate.core.errors import SpecgateError
from specgate.serving.launch import build_command
from specgate.serving.preflight import PreflightResult, launcher_python, preflight


def main_preflight(argv: Sequence[str] | None = None) -> int:
    """`specgate preflight [--python PY] [PROFILE ...]`: check each profile's two launch commands.

    Exit 0 when SGLang accepts every command, 1 when it rejects one (or a profile is bad), 2 when
    SGLang is not importable in the given interpreter, so a CI step cannot pass without checking.
    """
    parser = argparse.ArgumentParser(prog="specgate preflight", description=main_preflight.__doc__)
    parser.add_argument("--python", default=None,
                        help="interpreter that has sglang installed (default: the launcher's)")
    parser.add_argument("profiles", nargs="*",
                        help="profile files or shipped profiles' names (default: every profile "
                             "beside the demo profile)")
    args = parser.parse_args(list(argv) if argv is not None else None)
    # A shipped profile's name resolves here as it does for pytest --profile.
    paths = ([profiles.choose_profile_path(p) for p in args.profiles] if args.profiles
             else sorted(profiles.default_profile_path().parent.glob("*.toml")))
    if not paths:
        print("specgate preflight: no profile to check (give PROFILE paths)", file=sys.stderr)
        return 2
    return check_profiles(paths, python=args.python)


def check_profiles(paths: Sequence[Path], *, python: str | None) -> int:
    """Print each profile's verdict; the worst exit status (0 ok, 1 rejected, 2 unavailable)."""
    worst = 0
    for path in paths:
        try:
            profile = profiles.load_profile(path)
        except SpecgateError as exc:
            print(f"FAIL {path}: {exc}")
            worst = max(worst, 1)
            continue
        if profile.server.api_key_env and not os.environ.get(profile.server.api_key_env):
            # The key's value does not matter to the parser; its absence would stop the build.
            os.environ[profile.server.api_key_env] = "placeholder-key-for-preflight"
        configs: tuple[Literal["baseline", "speculative"], ...] = ("baseline", "speculative")
        for config in configs:
            try:
                spec = build_command(profile, config)
            except SpecgateError as exc:
                print(f"FAIL {path.name} {config}: {exc}")
                worst = max(worst, 1)
                continue
            interpreter = python or launcher_python(list(spec.argv[:spec.prefix_len]))
            result = preflight(spec.server_args, python=interpreter, redactor=spec.redactor())
            tag = {"ok": "ok  ", "rejected": "FAIL", "unavailable": "n/a "}[result.status]
            print(f"{tag} {path.name} {config}{_version(result)}: {result.message}")
            print(f"     {spec.display}")
            if result.status == "rejected":
                worst = max(worst, 1)
            elif result.status == "unavailable":
                return 2
    return worst


def _version(result: PreflightResult) -> str:
    """Which SGLang judged: its version, or nothing where none could be imported (the message
    says why)."""
    if result.version:
        return f" (SGLang {result.version})"
    return "" if result.status == "unavailable" else " (SGLang of unknown version)"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main_preflight())
