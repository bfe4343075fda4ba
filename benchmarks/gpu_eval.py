"""Drafter forward cost and teacher-forced eval throughput at Kimi-K2.5 drafter size.

Builds an EAGLE-3 drafter of the real K2.5 shapes (hidden 7168, 64 heads of 128, MLP 18432,
draft vocab 32000 of 163840) with random bf16 weights directly on the device, and a random
hidden-state dump of a few thousand tokens, then measures:

- one draft step at batch 1 against a key/value cache (what a serving draft step does): eager,
  and replayed from a CUDA graph when on CUDA; a cycle is `--steps` such steps;
- the teacher-forced evaluation (specgate eval's forward: `--steps` chained steps over every
  position, lm_head, argmax, cross-entropy) in tokens per second.

Prints one JSON line, with two reference figures beside the measured ones: 0.66 ms per draft
cycle reported for a TP-8 deployment of this drafter, and 0.62 ms per draft step (CUDA graph)
measured on one H200.
Run: `python -m benchmarks.gpu_eval` on a GPU box, `python -m benchmarks.gpu_eval --small` on CPU.
Only torch and numpy are needed (no pydantic: specgate.model.eagle is imported alone).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any

import torch

from specgate.model.eagle import DrafterShape, EagleDrafter, Embeddings

K25 = DrafterShape(hidden_size=7168, target_hidden_size=7168, num_heads=64, num_kv_heads=64,
                   head_dim=128, intermediate_size=18432, vocab_size=163840,
                   draft_vocab_size=32000, n_aux=3, rope_theta=1000000.0, rms_norm_eps=1e-6)
SMALL = DrafterShape(hidden_size=256, target_hidden_size=256, num_heads=4, num_kv_heads=2,
                     head_dim=64, intermediate_size=512, vocab_size=4096, draft_vocab_size=512,
                     n_aux=3, rope_theta=1000000.0, rms_norm_eps=1e-6)


def build(shape: DrafterShape, device: str, dtype: torch.dtype, seed: int = 0) -> EagleDrafter:
    """Random weights (std 1/sqrt(fan_in)) of the real layout, made on the device."""
    g = torch.Generator(device=device).manual_seed(seed)
    h, d = shape.hidden_size, shape.head_dim

    def rand(*size: int) -> torch.Tensor:
        t = torch.randn(*size, generator=g, device=device, dtype=torch.float32)
        return (t / math.sqrt(size[-1])).to(dtype)

    def ones(n: int) -> torch.Tensor:
        return torch.ones(n, device=device, dtype=dtype)

    w = {"fc.weight": rand(h, shape.n_aux * shape.target_hidden_size),
         "layers.0.self_attn.q_proj.weight": rand(shape.num_heads * d, 2 * h),
         "layers.0.self_attn.k_proj.weight": rand(shape.num_kv_heads * d, 2 * h),
         "layers.0.self_attn.v_proj.weight": rand(shape.num_kv_heads * d, 2 * h),
         "layers.0.self_attn.o_proj.weight": rand(h, shape.num_heads * d),
         "layers.0.mlp.gate_proj.weight": rand(shape.intermediate_size, h),
         "layers.0.mlp.up_proj.weight": rand(shape.intermediate_size, h),
         "layers.0.mlp.down_proj.weight": rand(h, shape.intermediate_size),
         "layers.0.input_layernorm.weight": ones(h), "layers.0.hidden_norm.weight": ones(h),
         "layers.0.post_attention_layernorm.weight": ones(h), "norm.weight": ones(h),
         "lm_head.weight": rand(shape.draft_vocab_size, h)}
    ids = torch.randperm(shape.vocab_size, generator=torch.Generator().manual_seed(seed))
    ids = ids[: shape.draft_vocab_size].sort().values
    return EagleDrafter(shape, w, ids - torch.arange(shape.draft_vocab_size))


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_decode(model: EagleDrafter, embed: Embeddings, *, cache_len: int, iters: int,
                graph: bool) -> float:
    """Milliseconds per draft step at batch 1: decode + lm_head + argmax + d2t + next embedding."""
    device = str(model.device)
    cache = model.new_cache(cache_len)
    hidden = torch.randn(1, model.shape.hidden_size, device=model.device, dtype=model.dtype)
    token = torch.zeros(1, dtype=torch.int64, device=model.device)
    position = torch.full((1,), cache_len // 2, dtype=torch.int64, device=model.device)
    state: dict[str, Any] = {"hidden": hidden, "token": token}

    def step() -> None:
        out = model.decode(embed(state["token"]), state["hidden"], position, cache)
        state["token"].copy_(model.to_target(model.logits(out).argmax(-1)))
        state["hidden"].copy_(out)

    with torch.no_grad():
        for _ in range(5):
            step()
        sync(device)
        if graph:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(3):
                    step()
            torch.cuda.current_stream().wait_stream(stream)
            cuda_graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(cuda_graph):
                step()
            run = cuda_graph.replay
        else:
            run = step
        for _ in range(5):
            run()
        sync(device)
        started = time.perf_counter()
        for _ in range(iters):
            run()
        sync(device)
    return (time.perf_counter() - started) * 1000 / iters


def time_eval(model: EagleDrafter, embed: Embeddings, *, tokens: int, sample_len: int,
              steps: int) -> tuple[float, float]:
    """Seconds and tokens/s of specgate eval's forward over a random dump of `tokens` tokens."""
    device = str(model.device)
    s = model.shape
    g = torch.Generator(device=device).manual_seed(1)
    samples = []
    for start in range(0, tokens, sample_len):
        n = min(sample_len, tokens - start)
        ids = model.hot_ids[torch.randint(0, s.draft_vocab_size, (n,), generator=g,
                                          device=device)]
        aux = torch.randn(n, s.n_aux * s.target_hidden_size, generator=g, device=device,
                          dtype=torch.float32).to(model.dtype)
        samples.append((ids, aux))

    def run(batch: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
        loss = torch.zeros((), device=model.device)
        for ids, aux in batch:
            for k, hidden in enumerate(model.chain(embed, ids, aux, steps)):
                logits = model.logits(hidden[: ids.shape[0] - 2 - k]).float()
                truth = ids[2 + k:]
                pred = model.to_target(logits.argmax(-1))
                idx = torch.searchsorted(model.hot_ids, truth).clamp(max=s.draft_vocab_size - 1)
                ce = torch.logsumexp(logits, -1) - logits.gather(1, idx[:, None])[:, 0]
                loss = loss + ce.sum() + (pred == truth).sum()
        return float(loss)

    with torch.no_grad():
        run(samples[:1])  # warm-up
        sync(device)
        started = time.perf_counter()
        run(samples)
        sync(device)
    seconds = time.perf_counter() - started
    return seconds, tokens / seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="small shapes (CPU-friendly)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default=None, help="bfloat16 on CUDA, float32 on CPU")
    parser.add_argument("--steps", type=int, default=3, help="draft steps per cycle")
    parser.add_argument("--tokens", type=int, default=None, help="tokens in the eval dump")
    parser.add_argument("--sample-len", type=int, default=1024)
    parser.add_argument("--cache-len", type=int, default=2048)
    parser.add_argument("--iters", type=int, default=None)
    args = parser.parse_args(argv)
    cuda = args.device.startswith("cuda")
    dtype = getattr(torch, args.dtype or ("bfloat16" if cuda else "float32"))
    shape = SMALL if args.small else K25
    tokens = args.tokens or (4096 if cuda or args.small else 512)
    iters = args.iters or (200 if cuda else 20)
    torch.manual_seed(0)
    model = build(shape, args.device, dtype)
    g = torch.Generator(device=args.device).manual_seed(2)
    embed = Embeddings(torch.randn(shape.vocab_size, shape.hidden_size, generator=g,
                                   device=args.device, dtype=torch.float32).to(dtype))
    weight_bytes = sum(t.numel() * t.element_size() for t in model.w.values())
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "torch": torch.__version__, "dtype": str(dtype).removeprefix("torch."),
        "shape": "small" if args.small else "kimi-k2.5", "steps": args.steps,
        "weights_gb": round(weight_bytes / 1e9, 3), "cache_len": args.cache_len,
    }
    eager = time_decode(model, embed, cache_len=args.cache_len, iters=iters, graph=False)
    result["step_ms_eager"] = round(eager, 4)
    result["cycle_ms_eager"] = round(eager * args.steps, 4)
    if cuda:
        try:
            graphed = time_decode(model, embed, cache_len=args.cache_len, iters=iters, graph=True)
            result["step_ms_graph"] = round(graphed, 4)
            result["cycle_ms_graph"] = round(graphed * args.steps, 4)
            result["weight_read_tb_s"] = round(weight_bytes / (graphed / 1000) / 1e12, 2)
        except RuntimeError as exc:  # capture can fail on some stacks; eager still stands
            result["graph_error"] = str(exc).splitlines()[0]
    else:  # CUDA graphs exist only on CUDA: the same keys, no figures
        result.update({"step_ms_graph": None, "cycle_ms_graph": None, "weight_read_tb_s": None})
    seconds, rate = time_eval(model, embed, tokens=tokens, sample_len=args.sample_len,
                              steps=args.steps)
    result.update({"eval_tokens": tokens, "eval_seconds": round(seconds, 3),
                   "eval_tokens_per_s": round(rate, 1),
                   "reference": {"seeds_cycle_ms_tp8": 0.66, "gpu_notes_step_ms_h200": 0.62}})
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
