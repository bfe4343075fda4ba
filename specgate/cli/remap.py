"""`specgate remap-vocab`: its arguments, and the remapped drafter it writes."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from specgate.core.errors import CheckpointError
from specgate.io.remap import FILLS, remap_vocab


def main_remap(argv: Sequence[str] | None = None) -> int:
    """`specgate remap-vocab --from OLD --to MAP --out NEW [--fill mean|zeros]`."""
    parser = argparse.ArgumentParser(
        prog="specgate remap-vocab",
        description="Write a drafter whose lm_head rows and d2t/t2d follow another vocab map.")
    parser.add_argument("--from", dest="old", required=True, help="the drafter folder to remap")
    parser.add_argument("--to", dest="map", required=True,
                        help="the new map: a drafter folder, .safetensors or SpecForge .pt")
    parser.add_argument("--out", required=True, help="a new (or empty) folder for the result")
    parser.add_argument("--fill", choices=FILLS, default="mean",
                        help="start rows of tokens the old map lacks as the mean old row "
                             "(default) or zeros")
    args = parser.parse_args(argv)
    for flag, given, what in (("--from", args.old, "drafter folder"),
                              ("--to", args.map, "vocab map")):
        if not Path(given).expanduser().exists():
            print(f"specgate remap-vocab: {given}: {what} not found; check {flag}",
                  file=sys.stderr)
            return 2
    try:
        result = remap_vocab(args.old, args.map, args.out, fill=args.fill)
    except CheckpointError as exc:
        print(f"specgate remap-vocab: {exc}", file=sys.stderr)
        return 2
    print(result.summary())
    return 0
