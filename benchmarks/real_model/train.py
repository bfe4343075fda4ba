"""Train one EAGLE-3 drafter for the real target on a hidden-state dump with specgate's forward.

The training step is benchmarks/real_sglang/train_drafter.py's `train` (specgate.model.eagle's
EagleDrafter.chain unrolled --ttt draft steps, loss Σ_k 0.8^k CE_k over the draft vocabulary,
samples packed into --pack-tokens sequences, AdamW with warm-up and cosine decay, one JSON line
per epoch with epoch 0 the untrained model). From scratch the lm_head rows start as the target's
(tied) embedding rows of the draft vocabulary; with --init the weights start as that drafter's
(a fine-tune; its lm_head rows are used as they are, whatever map they followed).

usage: python3 train.py --dump DUMP --vocab-map MAP --target TARGET --out OUT [--init DRAFTER]
           [--seconds 120] [--seed 0] [--heldout DUMP]
Writes OUT/config.json + model.safetensors (SGLang's LlamaForCausalLMEagle3 layout),
OUT/logs/train.jsonl, OUT/prediction.json (served walk on --heldout), OUT/summary.json (sha256).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
import time
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

from benchmarks.real_sglang import train_drafter as td  # noqa: E402

PREDICT_STEPS = 5
# The hard end (an epoch still running then is cut, logged as partial) counts from the start,
# before train_drafter's epoch-0 evaluation of the whole dump, which took about a minute for a
# 1.26 M-token dump with four trainings sharing one H200: so it leaves room for that.
HARD_END_S = 90.0
HARD_END_FACTOR = 1.5


def aux_ids_of(dump: Path, num_layers: int) -> tuple[int, ...]:
    """The eagle_aux_hidden_state_layer_ids the dump was captured for (its metadata), else the
    ids of SGLang's default capture [2, n // 2, n - 3] (capture.py): [1, n // 2 - 1, n - 4]."""
    meta = dump / "metadata.json"
    ids = json.loads(meta.read_text()).get("aux_hidden_state_layer_ids") if meta.exists() \
        else None
    if isinstance(ids, list) and len(ids) == 3:
        return tuple(int(i) for i in ids)
    return (1, num_layers // 2 - 1, num_layers - 4)


def target_size(target: Path, draft_vocab: int,
                aux_ids: tuple[int, ...] | None = None) -> td.Size:
    """The drafter's shape for a Llama target: its width, heads and vocabulary, one layer."""
    cfg = json.loads((target / "config.json").read_text())
    if aux_ids is None:
        aux_ids = (1, int(cfg["num_hidden_layers"]) // 2 - 1, int(cfg["num_hidden_layers"]) - 4)
    rope = cfg.get("rope_theta") or (cfg.get("rope_parameters") or {}).get("rope_theta") or 1e4
    heads = int(cfg["num_attention_heads"])
    return td.Size(hidden=int(cfg["hidden_size"]), intermediate=int(cfg["intermediate_size"]),
                   heads=heads, kv_heads=int(cfg.get("num_key_value_heads") or heads),
                   head_dim=int(cfg.get("head_dim") or cfg["hidden_size"] // heads),
                   layers=int(cfg["num_hidden_layers"]), vocab=int(cfg["vocab_size"]),
                   train_prompts=0, train_tokens=0, heldout_tokens=0, draft_vocab=draft_vocab,
                   corpus_files=0, heldout_prompts=0, aux_layers=aux_ids,
                   rope_theta=float(rope),
                   max_positions=int(cfg.get("max_position_embeddings") or 2048))


def load_dump(folder: Path, device: str) -> list[dict[str, Any]]:
    """Every sample of a dump on the device: input_ids, aux (bf16), loss_mask (bool)."""
    from safetensors.torch import load_file

    out = []
    for file in sorted(folder.glob("*.safetensors")):
        if file.name == "embeddings.safetensors":
            continue
        t = load_file(str(file))
        out.append({"input_ids": t["input_ids"].to(device),
                    "aux": t["aux_hidden_states"].to(device),
                    "loss_mask": t["loss_mask"].bool().to(device)})
    return out


def load_init(folder: Path, device: str) -> dict[str, Any]:
    """A drafter's trainable tensors (float32, on the device); d2t/t2d/embeddings left out."""
    from safetensors.torch import load_file

    tensors = load_file(str(folder / "model.safetensors"))
    return {k: v.float().to(device).requires_grad_(True) for k, v in tensors.items()
            if k not in ("d2t", "t2d") and "embed" not in k}


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def add_prediction(result: dict[str, Any], out: Path, heldout: Path, target: Path, device: str,
                   request_tokens: int) -> None:
    """The drafter in OUT walked over the held-out dump as greedy serving verifies, for chains of
    1 to PREDICT_STEPS steps: OUT/prediction.json, and its figures per category in `result`."""
    meta = json.loads((heldout / "metadata.json").read_text())
    cats = {name: s["category"] for name, s in (meta.get("samples") or {}).items()}
    pred = td.predict(out, heldout, target, cats, PREDICT_STEPS, device,
                      list(range(1, PREDICT_STEPS + 1)), request_tokens)
    (out / "prediction.json").write_text(json.dumps(pred, indent=1) + "\n")
    groups = pred.get("groups") or {}
    result["predicted"] = {name: {"per_request": g.get("predicted_per_request"),
                                  "per_verify": g.get("predicted"),
                                  "step_accuracy": g.get("step_accuracy")}
                           for name, g in groups.items()}
    if "error" in pred:
        result["prediction_error"] = pred["error"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dump", type=Path, required=True)
    ap.add_argument("--vocab-map", type=Path, required=True)
    ap.add_argument("--target", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--init", type=Path, help="a drafter to fine-tune from")
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--max-epochs", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--ttt", type=int, default=3)
    ap.add_argument("--pack-tokens", type=int, default=8192)
    ap.add_argument("--heldout", type=Path, help="dump of the probe's prompts: the prediction")
    ap.add_argument("--request-tokens", type=int, default=256)
    ap.add_argument("--device", default=None)
    args = ap.parse_args(argv)

    import torch
    from safetensors.torch import load_file

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    started = time.perf_counter()
    vmap = load_file(str(args.vocab_map))
    d2t, t2d = vmap["d2t"].to(torch.int64), vmap["t2d"].to(torch.bool)
    layers = int(json.loads((args.target / "config.json").read_text())["num_hidden_layers"])
    size = target_size(args.target, int(d2t.shape[0]), aux_ids_of(args.dump, layers))
    embed_w = load_file(str(args.dump / "embeddings.safetensors"))["embed_tokens.weight"]
    data = load_dump(args.dump, device)
    loaded_s = time.perf_counter() - started
    tokens = sum(int(s["loss_mask"].sum()) for s in data)
    print(f"train: {len(data)} samples, {tokens} answer tokens from {args.dump} "
          f"({loaded_s:.1f} s); draft vocab {size.draft_vocab}; device {device}", flush=True)
    hot = d2t + torch.arange(size.draft_vocab)
    if args.init is not None:
        weights = load_init(args.init, device)
        how = f"fine-tuned from {args.init}"
    else:
        # the target's (tied) output rows for the draft vocabulary, as train_drafter does
        target = types.SimpleNamespace(lm_head=types.SimpleNamespace(weight=embed_w))
        weights = td.init_weights(size, target, hot, args.seed, device)
        how = "from scratch"
    embed = td.Embeddings(embed_w.float().to(device))
    summary = td.train(size, weights, d2t, t2d, embed, data, seconds=args.seconds,
                       max_epochs=args.max_epochs, min_epochs=1, ttt=args.ttt, lr=args.lr,
                       log_path=args.out / "logs" / "train.jsonl", seed=args.seed,
                       pack_tokens=args.pack_tokens,
                       stop_at=time.time() + HARD_END_FACTOR * args.seconds + HARD_END_S)
    td.save_drafter(args.out, size, weights, d2t, t2d, args.target)
    print(f"train ({how}): {summary['epochs']} epochs / {summary['steps']} steps in "
          f"{summary['seconds']} s; step-0 loss {summary['initial_loss']:.3f} -> "
          f"{summary['final_loss']:.3f}; accuracy {summary['initial_accuracy']:.3f} -> "
          f"{summary['final_accuracy']:.3f}", flush=True)
    result: dict[str, Any] = {
        "how": how, "dump": str(args.dump), "samples": len(data), "answer_tokens": tokens,
        "seed": args.seed, "lr": args.lr, "ttt": args.ttt, "seconds_asked": args.seconds,
        "size": dataclasses.asdict(size), "train": summary,
        "sha256": sha256(args.out / "model.safetensors"),
        "vocab_map_sha256": sha256(args.vocab_map)}
    if args.heldout is not None:
        add_prediction(result, args.out, args.heldout, args.target, device, args.request_tokens)
    result["total_s"] = round(time.perf_counter() - started, 1)
    (args.out / "summary.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"train: drafter {args.out} sha256 {result['sha256']}; "
          f"{result['total_s']} s in all", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
