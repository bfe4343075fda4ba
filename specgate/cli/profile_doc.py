"""`specgate profile-doc`: its arguments, and where the profile reference goes."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from specgate.core.profile_doc import render


def main_profile_doc(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specgate profile-doc",
                                     description="write the profile reference (Markdown)")
    parser.add_argument("--out", type=Path, help="file to write (default: standard output)")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when --out differs from what the model gives")
    args = parser.parse_args(argv)
    text = render()
    if args.out is None:
        sys.stdout.write(text)
    elif args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is out of date: run specgate profile-doc --out {args.out}",
                  file=sys.stderr)
            return 1
    else:
        args.out.write_text(text, encoding="utf-8")
    return 0
