"""Make the random target's weights again from its seed, and check them against the dump.

usage: python3 -m benchmarks.real_sglang.rebuild_target MODEL_DIR [--seed N] [--samples 8]
           [--min-agreement 0.95] [--device cuda|cpu]

loop.py packs OUT/model.tar.gz without the target's weights (95 MB at 64 layers): the rest
of MODEL_DIR (drafter, scratch, held-out dump, target config and tokenizer) is there. The target
is train_drafter.py's seeded random Llama, so its weights are made again from MODEL_DIR/target/
config.json and the seed (train_drafter.py's --seed, which MODEL_DIR/summary.json records;
0 by default), in a folder beside the target. The check runs them over the held-out dump's
first samples and compares their argmax with the greedy tokens the dump recorded
(target_next_ids): a wrong seed or a changed recipe agrees on about 1/1024 of them, the same
weights on nearly all (bf16 kernels differ between machines at near-ties). Only weights that
pass are moved into MODEL_DIR/target. Exit 0 when the agreement reaches --min-agreement, 1 when
not, 2 on bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path

from benchmarks.real_sglang import train_drafter as td


def size_of(config: dict[str, object]) -> td.Size:
    """train_drafter's Size for a target config it wrote (the fields build_target reads)."""
    def num(key: str) -> int:
        value = config.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"config.json: {key} is {value!r}, not an integer")
        return value

    return dataclasses.replace(
        td.SIZES["full"], hidden=num("hidden_size"), intermediate=num("intermediate_size"),
        heads=num("num_attention_heads"), kv_heads=num("num_key_value_heads"),
        head_dim=num("head_dim"), layers=num("num_hidden_layers"), vocab=num("vocab_size"))


def agreement(model: object, dump: Path, samples: int, device: str) -> tuple[int, int]:
    """(argmax == recorded next token, positions) over the answers of the first samples."""
    import torch
    from safetensors.torch import load_file

    files = sorted(p for p in dump.glob("*.safetensors") if p.name != "embeddings.safetensors")
    hit = total = 0
    with torch.no_grad():
        for path in files[:samples]:
            t = load_file(str(path))
            ids, mask, want = t["input_ids"], t["loss_mask"].bool(), t["target_next_ids"]
            logits = model(input_ids=ids[None].to(device)).logits[0]  # type: ignore[operator]
            got = logits.float().argmax(-1).cpu()
            # positions whose next token is an answer token: the generation decided them
            pos = torch.nonzero(mask[1:]).flatten()
            hit += int((got[pos] == want[pos]).sum())
            total += int(pos.numel())
    return hit, total


def main(argv: list[str] | None = None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--seed", type=int,
                    help="train_drafter.py's --seed (default: the one MODEL_DIR/summary.json "
                         "records, else 0)")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--min-agreement", type=float, default=0.95)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args(argv)
    target = args.model / "target"
    dump = args.model / "dump" / "heldout"
    try:
        config = json.loads((target / "config.json").read_text())
        size = size_of(config)
    except (OSError, ValueError) as exc:
        print(f"rebuild_target.py: {target / 'config.json'}: {exc}", file=sys.stderr)
        return 2
    if not dump.is_dir():
        print(f"rebuild_target.py: {dump}: no held-out dump to check the weights against",
              file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else recorded_seed(args.model / "summary.json")
    # Built beside the target and moved in only once checked: weights that fail the check (or
    # a run killed half-way) must not be found and served by the next run.
    scratch = args.model / "target.rebuild"
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        model = td.build_target(scratch, size, seed).to(args.device)
        try:
            hit, total = agreement(model, dump, args.samples, args.device)
        except (KeyError, OSError, ValueError) as exc:
            print(f"rebuild_target.py: {dump}: cannot read the recorded tokens ({exc!r}): a "
                  "sample lacks input_ids, loss_mask or target_next_ids", file=sys.stderr)
            return 2
        if total == 0:
            print(f"rebuild_target.py: {dump}: no answer positions to check against",
                  file=sys.stderr)
            return 2
        share = hit / total
        print(f"rebuilt {target} ({size.layers} layers, seed {seed}); its argmax matches the "
              f"dump's recorded tokens at {hit} of {total} answer positions ({share:.2%})")
        if share < args.min_agreement:
            print(f"rebuild_target.py: {share:.2%} < {args.min_agreement:.0%}: these are not "
                  "the weights the dump was made with (another --seed, or another recipe); "
                  "nothing was written to the target", file=sys.stderr)
            return 1
        for name in ("model.safetensors", "generation_config.json"):
            os.replace(scratch / name, target / name)
        return 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def recorded_seed(summary: Path) -> int:
    """The seed train_drafter.py recorded in summary.json; 0 (its default) without one."""
    try:
        value = json.loads(summary.read_text()).get("seed", 0)
    except (OSError, ValueError, AttributeError):
        return 0
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


if __name__ == "__main__":
    sys.exit(main())
