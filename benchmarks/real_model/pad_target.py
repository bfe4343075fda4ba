"""A GPU-bound deployment of a small real target: the same model with every MLP widened by
channels that add exactly nothing to the residual stream, so that a decode step reads as many
weight bytes as a larger model's while the text stays the small model's.

    python3 -m benchmarks.real_model.pad_target TARGET OUT [--gb 13.97] [--seed 0]
        [--device auto|cpu|cuda]
    python3 -m benchmarks.real_model.pad_target --check TARGET OUT [--gb 13.97] [--seed 0]

TARGET: a Hugging Face Llama-family folder (config.json, safetensors, tokenizer files), e.g. the
SmolLM2-135M-Instruct folder that gguf_to_hf.py writes. A 135M model's decode step is bound by
the host (SGLang's scheduling and kernel launches); an 8B model's by the GPU's memory bandwidth,
and the two put speculative decoding's verify cycle at very different multiples of a decode step.
This keeps the small model's answers and gives its decode step the large model's memory traffic.

Each layer's MLP goes from intermediate size I to I' (a multiple of 128), the smallest that makes
the weights read in a decode step (every tensor; a tied embedding once, as the lm_head reads it
whole) at least --gb decimal GB; the default, 13.97, is what Llama-3-8B's 32 transformer layers
read (6.98 B parameters in bf16; the whole model, with its 128k-token lm_head, reads about 15.0).
The new channels: gate_proj rows of
zeros, up_proj rows and down_proj columns seeded random (std 0.02). A new channel's activation
is silu(0) * u = 0 exactly, so down_proj adds exactly zero for it, while every byte is still read
and multiplied in each forward. The answers differ from TARGET's only where the order of the
floating-point sums in the widened products turns a near-tie the other way.

OUT gets config.json (intermediate_size I' and a `specgate_padding` record: the source's
intermediate size and sha256s, the bytes per step, the seed, the largest difference measured
between each widened MLP and the original on random input), sharded safetensors with
model.safetensors.index.json, and every other file of TARGET (tokenizer, chat template,
generation config). Exit 2 with a message naming the file or key when TARGET is not a folder
this can widen. --check writes nothing: exit 0 when OUT is this widening of TARGET's present
files (their sha256s, --gb and --seed as recorded), 1 when not.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import json_object
from benchmarks.models import ShardWriter
from benchmarks.real_model.sf_train import (
    sha256 as file_sha256,  # the hash the drafters are named by
)

DEFAULT_GB = 13.97
ALIGN = 128
PAD_STD = 0.02
SHARD_BYTES = 2 * 10**9
MLP = ("gate_proj", "up_proj", "down_proj")


class PadError(Exception):
    """TARGET cannot be widened; the message names the file or key."""


def dtype_bytes(dtype: Any) -> int:
    return int(dtype.itemsize)


def read_config(target: Path) -> dict[str, Any]:
    path = target / "config.json"
    if not path.is_file():
        raise PadError(f"{path}: no such file (TARGET must be a Hugging Face model folder)")
    try:
        cfg = json_object(path, "a model config")
    except ValueError as exc:
        raise PadError(str(exc)) from None
    for key in ("num_hidden_layers", "hidden_size", "intermediate_size"):
        if not isinstance(cfg.get(key), int) or cfg[key] <= 0:
            raise PadError(f"{path}: {key} is {cfg.get(key)!r}, not a positive integer")
    if cfg.get("hidden_act", "silu") != "silu":
        raise PadError(f"{path}: hidden_act is {cfg['hidden_act']!r}; the zero gate adds "
                       "nothing only for silu (silu(0) = 0)")
    if cfg.get("mlp_bias"):
        raise PadError(f"{path}: mlp_bias is true; only bias-free MLPs are widened")
    return cfg


def load_tensors(target: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    files = sorted(target.glob("*.safetensors"))
    if not files:
        raise PadError(f"{target}: no *.safetensors file")
    tensors: dict[str, Any] = {}
    for f in files:
        try:
            part = load_file(str(f))
        except Exception as exc:  # safetensors raises its own error types
            raise PadError(f"{f}: not a readable safetensors file ({exc})") from exc
        for name in part:
            if name in tensors:
                raise PadError(f"{f}: tensor {name} is also in another file")
        tensors.update(part)
    return tensors


def step_bytes(tensors: dict[str, Any], cfg: dict[str, Any]) -> int:
    """The weight bytes a decode step reads: every tensor; with a tied embedding the matrix once
    (the lm_head reads it whole); with an untied one the lm_head whole and not the embedding,
    of which a step reads one row."""
    total = sum(t.numel() * dtype_bytes(t.dtype) for t in tensors.values())
    if "lm_head.weight" in tensors and "model.embed_tokens.weight" in tensors:
        # tied: one matrix, stored twice by some checkpoints; untied: the embedding is a row
        drop = "lm_head.weight" if cfg.get("tie_word_embeddings", False) \
            else "model.embed_tokens.weight"
        total -= tensors[drop].numel() * dtype_bytes(tensors[drop].dtype)
    return int(total)


def widened_size(base_bytes: int, goal_bytes: int, layers: int, hidden: int, inter: int,
                 itemsize: int) -> int:
    """The smallest I' >= I, a multiple of ALIGN, with base + layers * 3 * hidden * (I' - I) *
    itemsize >= goal."""
    per_channel = layers * 3 * hidden * itemsize
    need = max(goal_bytes - base_bytes, 0)
    wide = inter + math.ceil(need / per_channel)
    return math.ceil(wide / ALIGN) * ALIGN


def mlp_names(i: int) -> dict[str, str]:
    return {p: f"model.layers.{i}.mlp.{p}.weight" for p in MLP}


def widen_layer(w: dict[str, Any], wide: int, gen: Any, device: Any) -> dict[str, Any]:
    """gate_proj, up_proj [I, H] and down_proj [H, I] widened to I' (new gate rows zero, new up
    rows and down columns random)."""
    import torch

    gate, up, down = (w[p].to(device) for p in MLP)
    inter, hidden = gate.shape
    extra = wide - inter
    dt = gate.dtype
    new_gate = torch.cat([gate, torch.zeros(extra, hidden, dtype=dt, device=device)])
    new_up = torch.cat([up, (torch.randn(extra, hidden, generator=gen, device=device,
                                         dtype=torch.float32) * PAD_STD).to(dt)])
    new_down = torch.cat([down, (torch.randn(hidden, extra, generator=gen, device=device,
                                             dtype=torch.float32) * PAD_STD).to(dt)], dim=1)
    return {"gate_proj": new_gate, "up_proj": new_up, "down_proj": new_down}


def mlp_out(gate: Any, up: Any, down: Any, x: Any) -> Any:
    import torch.nn.functional as F

    return F.linear(F.silu(F.linear(x, gate)) * F.linear(x, up), down)


def mlp_difference(orig: dict[str, Any], wide: dict[str, Any], gen: Any, device: Any) -> float:
    """The largest |difference| between the original MLP's output and the widened one's on four
    random inputs, relative to the original output's largest magnitude."""
    import torch

    hidden = orig["gate_proj"].shape[1]
    x = torch.randn(4, hidden, generator=gen, device=device,
                    dtype=torch.float32).to(orig["gate_proj"].dtype)
    a = mlp_out(*(orig[p].to(device) for p in MLP), x).float()
    b = mlp_out(*(wide[p] for p in MLP), x).float()
    return float((a - b).abs().max() / a.abs().max().clamp_min(1e-30))


def pick_device(name: str) -> Any:
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def pad(target: Path, out: Path, gb: float, seed: int, device_name: str) -> dict[str, Any]:
    import torch

    t0 = time.monotonic()
    cfg = read_config(target)
    tensors = load_tensors(target)
    layers, hidden, inter = (int(cfg[k]) for k in
                             ("num_hidden_layers", "hidden_size", "intermediate_size"))
    for i in range(layers):
        for p, name in mlp_names(i).items():
            if name not in tensors:
                raise PadError(f"{target}: no tensor {name} (config.json says "
                               f"{layers} layers)")
            shape = tuple(tensors[name].shape)
            want = (hidden, inter) if p == "down_proj" else (inter, hidden)
            if shape != want:
                raise PadError(f"{target}: {name} has shape {list(shape)}, not {list(want)} "
                               "(hidden_size, intermediate_size of config.json)")
    itemsize = dtype_bytes(tensors[mlp_names(0)["gate_proj"]].dtype)
    base = step_bytes(tensors, cfg)
    goal = round(gb * 1e9)
    if goal <= base:
        raise PadError(f"--gb {gb}: {target} already reads {base / 1e9:.3f} GB a step")
    wide = widened_size(base, goal, layers, hidden, inter, itemsize)
    device = pick_device(device_name)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    shards = ShardWriter(out, SHARD_BYTES)
    worst = 0.0
    for i in range(layers):
        names = mlp_names(i)
        orig = {p: tensors.pop(names[p]) for p in MLP}
        widened = widen_layer(orig, wide, gen, device)
        worst = max(worst, mlp_difference(orig, widened, gen, device))
        layer = {names[p]: widened[p] for p in MLP}
        layer.update({n: tensors.pop(n) for n in [n for n in tensors
                                                  if n.startswith(f"model.layers.{i}.")]})
        shards.add(layer)
    shards.add(tensors)  # embeddings, final norm, lm_head
    shards.close()
    for f in sorted(target.iterdir()):
        if f.is_file() and f.suffix != ".safetensors" and f.name not in (
                "config.json", "model.safetensors.index.json"):
            shutil.copy(f, out / f.name)
    widened_bytes = base + layers * 3 * hidden * (wide - inter) * itemsize
    record = {"source": str(target), "source_intermediate_size": inter,
              "source_sha256": {f.name: file_sha256(f)
                                for f in sorted(target.glob("*.safetensors"))},
              "gb_asked": gb, "step_bytes": widened_bytes, "source_step_bytes": base,
              "seed": seed, "device": device.type, "pad_std": PAD_STD,
              "max_relative_mlp_difference": worst}
    cfg["intermediate_size"] = wide
    cfg["specgate_padding"] = record
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    record["seconds"] = round(time.monotonic() - t0, 1)
    record["intermediate_size"] = wide
    return record


def is_widening(target: Path, out: Path, gb: float, seed: int) -> bool:
    """OUT holds this widening of TARGET's present safetensors files, --gb and --seed."""
    try:
        rec = json.loads((out / "config.json").read_text())["specgate_padding"]
        return bool(rec["gb_asked"] == gb and rec["seed"] == seed and rec["source_sha256"] == {
            f.name: file_sha256(f) for f in sorted(target.glob("*.safetensors"))})
    except (OSError, ValueError, KeyError, TypeError):
        return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("target", type=Path, help="a Hugging Face Llama-family folder")
    ap.add_argument("out", type=Path, help="the widened folder to write (replaced)")
    ap.add_argument("--gb", type=float, default=DEFAULT_GB,
                    help="weight bytes a decode step reads, decimal GB (default %(default)s)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="auto", help="auto, cpu or cuda (where it is built)")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 0 when OUT is this widening of TARGET, else 1")
    args = ap.parse_args(argv)
    if args.check:
        return 0 if is_widening(args.target, args.out, args.gb, args.seed) else 1
    if args.target.resolve().is_relative_to(args.out.resolve()):
        print(f"{args.out}: OUT is replaced, so it must not be TARGET or hold it",
              file=sys.stderr)
        return 2
    try:
        rec = pad(args.target, args.out, args.gb, args.seed, args.device)
    except PadError as exc:
        print(f"pad_target: {exc}", file=sys.stderr)
        return 2
    print(f"{args.out}: intermediate size {rec['source_intermediate_size']} -> "
          f"{rec['intermediate_size']}, {rec['source_step_bytes'] / 1e9:.3f} -> "
          f"{rec['step_bytes'] / 1e9:.3f} GB a decode step; widened MLPs against the "
          f"original on random input: largest relative difference "
          f"{rec['max_relative_mlp_difference']:.2e}; {rec['seconds']} s on {rec['device']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
