"""Train an EAGLE-3 drafter with SpecForge 0.2.0's own training code, bounded by work, seeded.

The drafter is SpecForge's `LlamaForCausalLMEagle3`, trained through its `OnlineEagle3Model`:
the test-time-training unroll of --ttt draft steps (step k attends to the positions before it
and to its own position in steps 1..k), the KL loss against the target's distribution over the
draft vocabulary (its Triton `LogSoftmaxLoss` on a GPU; its reference `_compute_loss` on a CPU,
which has no Triton), the step losses summed with weights 0.8^k (as its Eagle3TrainStrategy),
and its `BF16Optimizer` (AdamW over fp32 masters, gradient clipping, linear warm-up then cosine
decay). The target's states come online, as SpecForge's online mode takes them: each batch goes
through transformers' forward of the target (bf16), whose hidden states at the inputs of the
layers SGLang captures (2, n // 2, n - 3) are the drafter's input and whose logits are the
teacher; the batch is then shifted as SpecForge's TargetHead.preprocess shifts it.

Bounded by work, not time: --epochs passes over the data in an order drawn from --seed, fixed
batches of --batch-rows samples (length-sorted buckets, shuffled), and deterministic kernels. The
same command on the same data gives the same weights; summary.json holds the sha256 of
model.safetensors, the epochs and updates done, and every setting.

usage: python3 sf_train.py --data ANSWERS.jsonl.gz --target TARGET --vocab-map MAP --out OUT
           --specforge UNPACKED_SPECFORGE_0.2.0 [--epochs 2] [--seed 0] [--rows N]
           [--batch-rows 16] [--lr 2e-4] [--ttt 7] [--heldout DUMP]
ANSWERS: one JSON object per line with prompt_ids and answer_ids (earn.py writes it); --rows N
takes the first N samples of the data's seeded order (the data-size runs).
Writes OUT/config.json + model.safetensors (SGLang's LlamaForCausalLMEagle3 layout),
OUT/logs/train.jsonl (one line per epoch, and every --log-every updates), OUT/summary.json and,
with --heldout, OUT/prediction.json (the served walk on the probe's prompts).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

PLOSS_DECAY = 0.8  # SpecForge's Eagle3TrainStrategy weights step k's loss by 0.8 ** k


def read_rows(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    rows = []
    with opener(path, "rt", encoding="utf-8") as f:  # type: ignore[operator]
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if not row.get("answer_ids"):
                continue
            if not isinstance(row.get("prompt_ids"), list):
                raise SystemExit(f"{path}:{n}: no prompt_ids list")
            rows.append(row)
    return rows


def data_order(n: int, seed: int) -> list[int]:
    """The data's seeded order: --rows N takes its first N (so the smaller sets are nested)."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return order


def batches(lengths: list[int], batch_rows: int, rng: random.Random) -> list[list[int]]:
    """Fixed-size batches of samples of similar length (sorted, cut, then shuffled)."""
    idx = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    out = [idx[i:i + batch_rows] for i in range(0, len(idx), batch_rows)]
    rng.shuffle(out)
    return out


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def import_specforge(root: Path) -> Any:
    """SpecForge's model, training model, optimizer and loss, from an unpacked wheel."""
    import types

    from benchmarks.common import import_package

    import_package(root, "specforge")
    from specforge.algorithms.eagle3 import model as sf_model
    from specforge.core import loss as sf_loss
    from specforge.modeling.draft.llama3_eagle import LlamaForCausalLMEagle3
    from specforge.optimizer import BF16Optimizer

    return types.SimpleNamespace(model=sf_model, loss=sf_loss, drafter=LlamaForCausalLMEagle3,
                                 optimizer=BF16Optimizer)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--target", type=Path, required=True)
    ap.add_argument("--vocab-map", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--specforge", type=Path, required=True,
                    help="an unpacked specforge==0.2.0 wheel")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rows", type=int, help="the first N samples of the seeded order")
    ap.add_argument("--batch-rows", type=int, default=16)
    ap.add_argument("--max-len", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup-ratio", type=float, default=0.015)
    ap.add_argument("--max-grad-norm", type=float, default=0.5)
    ap.add_argument("--ttt", type=int, default=7)
    ap.add_argument("--log-every", type=int, default=200)
    ap.add_argument("--heldout", type=Path, help="dump of the probe's prompts: the prediction")
    ap.add_argument("--request-tokens", type=int, default=256)
    ap.add_argument("--device", default=None)
    args = ap.parse_args(argv)

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch
    from safetensors.torch import load_file

    from benchmarks.real_model import capture
    from benchmarks.real_sglang import train_drafter as td

    started = time.perf_counter()
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    sf = import_specforge(args.specforge)
    if device == "cpu":  # no Triton kernel there: SpecForge's own reference implementation
        class _Reference(torch.autograd.Function):
            @staticmethod
            def apply(logits: Any, target: Any, mask: Any) -> Any:  # type: ignore[override]
                return sf.loss._compute_loss(logits, target, mask)
        sf.model.LogSoftmaxLoss = _Reference

    rows = read_rows(args.data)
    order = data_order(len(rows), args.seed)
    if args.rows is not None:
        order = order[:args.rows]
    samples = []
    for i in order:
        r = rows[i]
        ids = (list(r["prompt_ids"]) + list(r["answer_ids"]))[:args.max_len]
        n_prompt = min(len(r["prompt_ids"]), len(ids))
        if len(ids) - n_prompt < 2:
            continue
        samples.append((ids, n_prompt))
    answer_tokens = sum(len(ids) - p for ids, p in samples)

    from transformers import AutoModelForCausalLM, LlamaConfig

    target: Any = AutoModelForCausalLM.from_pretrained(str(args.target), dtype=torch.bfloat16)
    target = target.to(device).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    n_layers = int(target.config.num_hidden_layers)
    layers = capture.sglang_capture_layers(None, n_layers)  # inputs of these layers
    aux_ids = tuple(capture.config_ids_for(layers))
    vmap = load_file(str(args.vocab_map))
    d2t, t2d = vmap["d2t"].to(torch.int64), vmap["t2d"].to(torch.bool)
    size = td.target_size(args.target, int(d2t.shape[0]), aux_ids)
    cfg = dict(td.drafter_config(size))
    cfg.pop("model_type")
    config = LlamaConfig(**cfg)
    torch.manual_seed(args.seed)
    drafter = sf.drafter(config, attention_backend="sdpa")
    with torch.no_grad():
        drafter.embed_tokens.weight.copy_(target.model.embed_tokens.weight.float())
        drafter.t2d.copy_(t2d)
        drafter.d2t.copy_(d2t)
    drafter.freeze_embedding()
    drafter = drafter.to(device=device, dtype=torch.bfloat16)
    eagle = sf.model.OnlineEagle3Model(drafter, length=args.ttt, attention_backend="sdpa")
    rng = random.Random(args.seed + 1)
    plan = [batches([len(ids) for ids, _ in samples], args.batch_rows, rng)
            for _ in range(args.epochs)]
    total_steps = sum(len(p) for p in plan)
    opt = sf.optimizer(eagle, lr=args.lr, max_grad_norm=args.max_grad_norm,
                       total_steps=total_steps, warmup_ratio=args.warmup_ratio)
    print(f"sf_train: {len(samples)} samples, {answer_tokens} answer tokens, {args.epochs} "
          f"epochs, {total_steps} updates of {args.batch_rows} samples; ttt {args.ttt}, lr "
          f"{args.lr}; device {device}; set-up {time.perf_counter() - started:.1f} s", flush=True)

    def batch_tensors(group: list[int]) -> tuple[Any, Any, Any]:
        width = max(len(samples[i][0]) for i in group)
        ids = torch.zeros((len(group), width), dtype=torch.long)
        att = torch.zeros((len(group), width), dtype=torch.long)
        lmask = torch.zeros((len(group), width), dtype=torch.long)
        for row, i in enumerate(group):
            seq, n_prompt = samples[i]
            ids[row, :len(seq)] = torch.tensor(seq)
            att[row, :len(seq)] = 1
            lmask[row, n_prompt:len(seq) - 1] = 1  # answer tokens; the last one scores nothing
        return ids.to(device), att.to(device), lmask.to(device)

    log_path = args.out / "logs" / "train.jsonl"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text("")

    def write_log(row: dict[str, Any]) -> None:
        with log_path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")

    def save(done: int) -> dict[str, Any]:
        """The drafter after `done` epochs, and a summary saying so: a run stopped later
        still leaves its last whole epoch."""
        state = {k: v for k, v in drafter.state_dict().items() if "embed" not in k}
        weights = {k: v for k, v in state.items() if k not in ("d2t", "t2d")}
        td.save_drafter(args.out, size, weights, d2t, t2d, args.target)
        partial = {"epochs_done": done, "epochs": args.epochs, "updates": step,
                   "sha256": sha256(args.out / "model.safetensors"), "samples": len(samples),
                   "answer_tokens": answer_tokens, "seed": args.seed, "rows": args.rows,
                   "train_s": round(time.perf_counter() - t_train, 1)}
        (args.out / "summary.json").write_text(json.dumps(partial, indent=1) + "\n")
        return partial

    # SIGTERM (a deadline) ends the run after the update in progress, saving what it has
    import signal

    stop = {"asked": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__("asked", True))
    step = 0
    t_train = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        sums = {"loss": [0.0] * args.ttt, "correct": [0.0] * args.ttt, "denom": [0.0] * args.ttt}
        for group in plan[epoch - 1]:
            ids, att, lmask = batch_tensors(group)
            with torch.no_grad():
                out = target(input_ids=ids, attention_mask=att, output_hidden_states=True)
                aux = torch.cat([out.hidden_states[i] for i in layers], -1)
                logits = out.logits
                del out
            # SpecForge's TargetHead.preprocess: the target and the input ids move one left
            logits = torch.cat([logits[:, 1:], torch.zeros_like(logits[:, :1])], 1)
            in_ids = torch.cat([ids[:, 1:], torch.zeros_like(ids[:, :1])], 1)
            plosses, _acc_rates, _acces, corrects, denoms, _ml, _mld = eagle(
                input_ids=in_ids, attention_mask=att, target=logits,
                loss_mask=lmask[..., None], hidden_states=aux)
            loss = sum(PLOSS_DECAY ** k * p for k, p in enumerate(plosses))
            loss.backward()  # type: ignore[union-attr]
            opt.step()
            step += 1
            for k in range(args.ttt):
                sums["loss"][k] += float(plosses[k].detach())
                sums["correct"][k] += float(corrects[k])
                sums["denom"][k] += float(denoms[k])
            if stop["asked"]:
                break
            if args.log_every and step % args.log_every == 0:
                print(f"sf_train: epoch {epoch} update {step}/{total_steps}, step-0 accuracy "
                      f"{float(corrects[0]) / max(float(denoms[0]), 1e-9):.3f}, "
                      f"{time.perf_counter() - t_train:.0f} s", flush=True)
        n = max(len(plan[epoch - 1]), 1)
        acc = [c / max(d, 1e-9) for c, d in zip(sums["correct"], sums["denom"], strict=True)]
        write_log({"epoch": epoch, "step": step, "loss": round(sums["loss"][0] / n, 5),
                   "accuracy": round(acc[0], 5),
                   "loss_steps": [round(x / n, 5) for x in sums["loss"]],
                   "accuracy_steps": [round(a, 5) for a in acc],
                   "lr": opt.get_learning_rate(),
                   "seconds": round(time.perf_counter() - t_train, 2)})
        print(f"sf_train: epoch {epoch} done: {step} updates, step-0 accuracy {acc[0]:.4f}, "
              f"steps {[round(a, 3) for a in acc]}", flush=True)
        if stop["asked"]:
            partial = save(epoch - 1)
            partial["stopped"] = (f"SIGTERM after update {step} of {total_steps} (epoch {epoch} "
                                  "not finished)")
            (args.out / "summary.json").write_text(json.dumps(partial, indent=1) + "\n")
            print(f"sf_train: stopped: {partial['stopped']}; sha256 {partial['sha256']}",
                  flush=True)
            return 4
        if epoch < args.epochs:
            save(epoch)
    train_s = time.perf_counter() - t_train

    save(args.epochs)
    result: dict[str, Any] = {
        "epochs_done": args.epochs,
        "trainer": "SpecForge 0.2.0 (OnlineEagle3Model, LlamaForCausalLMEagle3, BF16Optimizer)",
        "command": sys.argv if argv is None else ["sf_train.py", *argv],
        "data": str(args.data), "data_sha256": sha256(args.data), "samples": len(samples),
        "answer_tokens": answer_tokens, "rows": args.rows, "seed": args.seed,
        "epochs": args.epochs, "updates": step, "batch_rows": args.batch_rows,
        "tokens_per_update": round(sum(len(ids) for ids, _ in samples) * args.epochs
                                   / max(step, 1)),
        "max_len": args.max_len, "lr": args.lr, "warmup_ratio": args.warmup_ratio,
        "max_grad_norm": args.max_grad_norm, "ttt": args.ttt, "ploss_decay": PLOSS_DECAY,
        "aux_layer_ids": list(aux_ids), "captured_layer_inputs": list(layers),
        "device": device, "torch": torch.__version__, "train_s": round(train_s, 1),
        "answer_tokens_per_s": round(answer_tokens * args.epochs / max(train_s, 1e-9)),
        "sha256": sha256(args.out / "model.safetensors"),
        "vocab_map_sha256": sha256(args.vocab_map)}
    if device == "cuda":
        result["gpu"] = torch.cuda.get_device_name(0)
    del target, eagle, opt
    if args.heldout is not None:
        td.add_prediction(result, args.out, args.heldout, args.target, device,
                                args.request_tokens)
    result["total_s"] = round(time.perf_counter() - started, 1)
    (args.out / "summary.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"sf_train: drafter {args.out} sha256 {result['sha256']}; {step} updates in "
          f"{train_s:.0f} s; {result['total_s']} s in all", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
