"""`specgate generate`: its arguments, and the synthetic drafter it writes."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from specgate.core.errors import CheckpointError
from specgate.testing.generate import FILLS, NAME_STYLES, PRESETS, generate


def main_generate(argv: Sequence[str] | None = None) -> int:
    """`specgate generate`: write a synthetic drafter (and optionally a target config)."""
    parser = argparse.ArgumentParser(prog="specgate generate", description=main_generate.__doc__)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="small",
                        help="drafter shape: kimi-k25 and aq-medai-k2 are full size (sparse on "
                             "disk), small and tiny are a few MB (default small)")
    parser.add_argument("--out", required=True, type=Path, help="drafter folder to write")
    parser.add_argument("--shift-from", type=Path, metavar="DIR",
                        help="reference drafter or map whose token ids to shift (seeds' case)")
    parser.add_argument("--matches", type=int, default=252,
                        help="positions that still agree with --shift-from (default 252)")
    parser.add_argument("--fill", choices=FILLS, default="marked",
                        help="weight values: sparse = all holes (all zero, no disk), marked = one "
                             "non-zero value per tensor (passes weights.health; default), random "
                             "= small random values (real disk)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the draft vocabulary and the values (default 0)")
    parser.add_argument("--name-style", choices=NAME_STYLES,
                        help="tensor names: layers.0 (SGLang's) or midlayer (legacy EAGLE-3); "
                             "default: the preset's")
    embed = parser.add_mutually_exclusive_group()
    embed.add_argument("--embed", dest="embed", action="store_true", default=None,
                       help="include embed_tokens (default: the preset's)")
    embed.add_argument("--no-embed", dest="embed", action="store_false",
                       help="leave embed_tokens out (the target's is shared)")
    parser.add_argument("--shards", type=int, default=1,
                        help="safetensors files to split the weights over, with an index "
                             "(default 1)")
    parser.add_argument("--dtype", default="bfloat16",
                        help="dtype of the weights (default bfloat16)")
    parser.add_argument("--target-out", type=Path, metavar="DIR",
                        help="also write a matching target config.json there")
    args = parser.parse_args(argv)
    try:
        out = generate(args.out, args.preset, shift_from=args.shift_from, matches=args.matches,
                       fill=args.fill, seed=args.seed, name_style=args.name_style,
                       include_embed=args.embed, shards=args.shards, dtype=args.dtype,
                       target_out=args.target_out)
    except (CheckpointError, ValueError) as exc:
        print(f"specgate generate: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {PRESETS[args.preset]().name} drafter to {out}")
    return 0
