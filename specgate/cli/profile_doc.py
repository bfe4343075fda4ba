"""`specgate profile-doc`: its arguments, and where the profile reference goes."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from specgate.core import files
from specgate.core.profile_doc import render

# The reference is tens of KB; a file far larger is not one.
REFERENCE_BYTES = files.PROFILE_BYTES


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
        try:
            current = files.read_text(args.out, limit=REFERENCE_BYTES)
        except FileNotFoundError:
            current = ""
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            print(f"specgate profile-doc: {args.out}: {reason}", file=sys.stderr)
            return 2
        if current != text:
            print(f"{args.out} is out of date: run specgate profile-doc --out {args.out}",
                  file=sys.stderr)
            return 1
    else:
        args.out.write_text(text, encoding="utf-8")
    return 0
