"""Make the random target's weights again from its seed, and check them against the dump.

usage: python3 benchmarks/real_sglang/rebuild_target.py MODEL_DIR [--seed 0] [--samples 8]
           [--min-agreement 0.95] [--device cuda|cpu]

loop.py sends back OUT/model.tar.gz without the target's weights (95 MB at 64 layers): the rest
of MODEL_DIR (drafter, scratch, held-out dump, target config and tokenizer) is there. The target
is train_drafter.py's seeded random Llama, so its weights are made again from MODEL_DIR/target/
config.json and the seed (train_drafter.py's --seed, 0 by default). The check then runs the
rebuilt target over the held-out dump's first samples and compares its argmax with the greedy
tokens the dump recorded (target_next_ids): a wrong seed or a changed recipe agrees on about
1/1024 of them, the same weights on nearly all (bf16 kernels differ between machines at
near-ties). Exit 0 when the agreement reaches --min-agreement, 1 when not, 2 on bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import train_drafter as td


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
    ap.add_argument("--seed", type=int, default=0)
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
    model = td.build_target(target, size, args.seed).to(args.device)
    hit, total = agreement(model, dump, args.samples, args.device)
    share = hit / total if total else 0.0
    print(f"rebuilt {target} ({size.layers} layers, seed {args.seed}); its argmax matches the "
          f"dump's recorded tokens at {hit} of {total} answer positions ({share:.2%})")
    if share < args.min_agreement:
        print(f"rebuild_target.py: {share:.2%} < {args.min_agreement:.0%}: these are not the "
              "weights the dump was made with (another --seed, or another recipe)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
