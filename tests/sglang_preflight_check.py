"""Check the launch command of every profile with a real SGLang's own argument parser.

    python tests/sglang_preflight_check.py --python /tmp/sgvenv/bin/python [profiles/*.toml]

Exit 0 when SGLang accepts every command, 1 when it rejects one, 2 when SGLang is not
importable in the given interpreter (so a CI step cannot pass without checking anything).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from specgate.errors import SpecgateError
from specgate.launch import build_command
from specgate.preflight import preflight
from specgate.profile import load_profile

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter that has sglang installed")
    parser.add_argument("profiles", nargs="*", type=Path)
    args = parser.parse_args(argv)
    paths = args.profiles or sorted((ROOT / "profiles").glob("*.toml"))
    worst = 0
    for path in paths:
        try:
            profile = load_profile(path)
        except SpecgateError as exc:
            print(f"FAIL {path}: {exc}")
            worst = max(worst, 1)
            continue
        if profile.server.api_key_env and not os.environ.get(profile.server.api_key_env):
            os.environ[profile.server.api_key_env] = "placeholder-key-for-preflight"
        for config in ("baseline", "speculative"):
            try:
                spec = build_command(profile, config)
            except SpecgateError as exc:
                print(f"FAIL {path.name} {config}: {exc}")
                worst = max(worst, 1)
                continue
            result = preflight(spec.server_args, python=args.python,
                               redactor=spec.redactor())
            tag = {"ok": "ok  ", "rejected": "FAIL", "unavailable": "n/a "}[result.status]
            print(f"{tag} {path.name} {config} (sglang {result.version}): {result.message}")
            print(f"     {spec.display()}")
            if result.status == "rejected":
                worst = max(worst, 1)
            elif result.status == "unavailable":
                return 2
    return worst


if __name__ == "__main__":
    sys.exit(main())
