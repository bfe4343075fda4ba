"""A GPU-bound target and an EAGLE-3 drafter that pays on it, for a first probe on real SGLang.

usage: python3 gpu_bound.py OUT --tokenizer DIR [--shapes 8b|tiny] [--answer " the"]
           [--pattern same|alternate [--second " a"]]
           [--profile OUT/probe.toml --launcher "python3 -m sglang.launch_server"]

  OUT/target   LlamaForCausalLM with Llama-3-8B's shapes (hidden 4096, 32 layers, GQA 32/8,
               MLP 14336, bf16: 13.96 GB of layers, 14.36 GB read per decode step with
               SmolLM2's 49,152-token vocabulary) and the tokenizer of DIR (a
               Hugging Face folder, e.g. SmolLM2-135M-Instruct's, whose chat template the probe
               uses). Seeded random weights (std 0.02) in sharded safetensors, with one
               direction set so that its greedy answer is the token of --answer at every step:
               every embedding carries a large constant on channel 0, the final norm keeps
               channel 0 alone, and the lm_head reads channel 0 only for the answer's token.
               Every matrix is full-size and random elsewhere, so a decode step reads and
               multiplies as many bytes as an 8B model's.
  OUT/drafter  LlamaForCausalLMEagle3, one layer at the target's width (SpecForge's layout:
               midlayer.*, fc, norm, lm_head, d2t int64 [Vd], t2d bool [V]; no embed_tokens),
               draft vocabulary = the Vd target tokens from the answer's id on. It reads channel
               0 of the target's aux states the same way, so it drafts the answer every time:
               every draft is accepted, and what a probe measures is the verify cycle's real
               cost on a GPU-bound deployment.

--pattern alternate: the target's greedy answer alternates between two tokens (--answer, then
               --second, then --answer, ...), carried on channel 1 with a sign: every embedding
               has +LIFT there except --answer's, which has -LIFT, and the lm_head maps + to
               --answer and - to --second. The drafter reads that sign from the target's aux
               state (the token before the one it is given, as EAGLE-3 aligns them), so its
               first draft is right; its later drafts read the sign from its own output, which
               keeps it, so they repeat the first and are rejected. Accept length 2.0 at any
               chain of 2 steps or more: a drafter that pays alone and stops paying where the
               verify of a batch costs twice a decode step (the crossover).

--shapes tiny builds the same construction at hidden 256 / 2 layers on the CPU (the dry run).
--profile also writes the probe's profile for these two folders (both servers with decode CUDA
graphs to batch 4, as a deployment runs them).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.models import (
    EAGLE3_NORMS,
    LAYER_NORMS,
    Random,
    ShardWriter,
    copy_tokenizer,
    eagle3_config,
    llama_config,
    write_json,
)
from benchmarks.real_sglang import suite  # the real-SGLang suite's TOML writer and server flags

SHAPES = {
    "8b": {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 14336},
    "tiny": {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 704},
}
CHANNEL = 0  # the channel that carries the answer
SIGN = 1  # --pattern alternate: the channel whose sign says which of the two comes next
LIFT = 1000.0  # channel 0 of every embedding: far above what 32 random layers add (about 15)
DRAFT_VOCAB = 32000  # SpecForge's default for Llama-3 drafters


def answer_id(tokenizer_dir: Path, text: str) -> tuple[int, int, int | None]:
    """The answer's token id, the vocabulary size and the tokenizer's EOS id."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    ids = tok.encode(text, add_special_tokens=False).ids
    if len(ids) != 1:
        raise SystemExit(f"--answer {text!r} is {len(ids)} tokens in {tokenizer_dir}; give one")
    config = json.loads((tokenizer_dir / "config.json").read_text(encoding="utf-8"))
    eos = config.get("eos_token_id")
    return ids[0], int(config["vocab_size"]), eos if isinstance(eos, int) else None


class Writer(Random):
    """Seeded tensors made on DEVICE, saved in shards of about 4 GB with an index (one
    model.safetensors when they fit one)."""

    def __init__(self, folder: Path, seed: int, device: str) -> None:
        super().__init__(seed, device)
        self.shards = ShardWriter(folder, 4 << 30, single_file=True)

    def add(self, tensors: dict[str, torch.Tensor]) -> None:
        self.shards.add(tensors)

    def close(self) -> None:
        self.shards.close()


def build_target(folder: Path, shapes: dict[str, int], vocab: int, answer: int,
                 eos: int | None, tokenizer_dir: Path, device: str,
                 second: int | None = None) -> None:
    """The target; with `second`, its answers alternate: answer, second, answer, ..."""
    h, layers = shapes["hidden_size"], shapes["num_hidden_layers"]
    heads, kv, d = shapes["num_attention_heads"], shapes["num_key_value_heads"], shapes["head_dim"]
    inter = shapes["intermediate_size"]
    w = Writer(folder, 0, device)
    embed = w.rand(vocab, h)
    embed[:, CHANNEL] = LIFT
    if second is not None:
        embed[:, SIGN] = LIFT
        embed[answer, SIGN] = -LIFT
    w.add({"model.embed_tokens.weight": embed})
    for i in range(layers):
        w.add(w.layer(f"model.layers.{i}.", LAYER_NORMS, h, heads, kv, d, inter))
    norm = torch.zeros(h, dtype=torch.bfloat16, device=device)
    head = w.rand(vocab, h)
    if second is None:
        norm[CHANNEL] = 1.0
        head[:, CHANNEL] = 0.0
        head[answer, CHANNEL] = 1.0
    else:  # after any token but the answer comes the answer; after the answer, the second
        norm[SIGN] = 1.0
        head[:, SIGN] = 0.0
        head[answer, SIGN] = 1.0
        head[second, SIGN] = -1.0
    w.add({"model.norm.weight": norm, "lm_head.weight": head})
    w.close()
    write_json(folder / "config.json", target_config(shapes, vocab, eos))
    write_json(folder / "generation_config.json",
               {"eos_token_id": eos} if eos is not None else {})
    copy_tokenizer(tokenizer_dir, folder)


def target_config(shapes: dict[str, int], vocab: int, eos: int | None) -> dict[str, Any]:
    return llama_config(shapes, vocab_size=vocab, rope_theta=500000.0,
                        max_position_embeddings=8192,
                        **({"eos_token_id": eos} if eos is not None else {}))


def build_drafter(folder: Path, shapes: dict[str, int], vocab: int, answer: int,
                  draft_vocab: int, device: str, second: int | None = None) -> None:
    """The drafter; with `second` (--pattern alternate) its first draft is right and the
    later ones repeat it."""
    h, heads = shapes["hidden_size"], shapes["num_attention_heads"]
    kv, d, inter = shapes["num_key_value_heads"], shapes["head_dim"], shapes["intermediate_size"]
    first = answer if second is None else min(answer, second)
    if first + draft_vocab > vocab or (second is not None
                                       and max(answer, second) >= first + draft_vocab):
        raise SystemExit(f"the answers' ids from {first} and a draft vocabulary of "
                         f"{draft_vocab} do not fit the vocabulary ({vocab}); choose another "
                         f"--answer or --second")
    w = Writer(folder, 1, device)
    w.add(w.layer("midlayer.", EAGLE3_NORMS, h, heads, kv, d, inter, in_width=2 * h))
    fc = w.rand(h, 3 * h)
    for channel in (CHANNEL, SIGN):  # channels 0 and 1 of the first aux state, about LIFT
        fc[channel, :] = 0.0
        fc[channel, channel] = 1.0
    w.add({"fc.weight": fc})
    norm = torch.zeros(h, dtype=torch.bfloat16, device=device)
    head = w.rand(draft_vocab, h)
    if second is None:
        norm[CHANNEL] = 1.0
        head[:, CHANNEL] = 0.0
        head[0, CHANNEL] = 1.0  # draft id 0 is the answer
    else:
        # The aux state is the target's at the token before the one the drafter is given, so
        # the first draft is two answers on: the answer again after the answer (sign -), the
        # second after the second or a prompt's token (sign +).
        norm[SIGN] = 1.0
        head[:, SIGN] = 0.0
        head[answer - first, SIGN] = -1.0
        head[second - first, SIGN] = 1.0
    # Draft ids 0..Vd-1 are the target ids first..first+Vd-1: d2t = first everywhere.
    t2d = torch.zeros(vocab, dtype=torch.bool, device=device)
    t2d[first:first + draft_vocab] = True
    w.add({"norm.weight": norm, "lm_head.weight": head,
           "d2t": torch.full((draft_vocab,), first, dtype=torch.int64, device=device),
           "t2d": t2d})
    w.close()
    write_json(folder / "config.json", eagle3_config(target_config(shapes, vocab, None),
                                                     draft_vocab=draft_vocab, target_hidden=h))


def profile(out: Path, launcher: list[str], sim: bool) -> dict[str, Any]:
    flags = suite.server_flags(sim, cuda_graphs=True)
    flags[flags.index("--mem-fraction-static") + 1] = "0.5"
    return {
        "name": f"real-sglang-{suite.SGLANG_VERSION}-llama8b-shapes-one-answer"
                + ("-sim" if sim else ""),
        "description": ("SGLang on one GPU: a random target with Llama-3-8B's shapes whose "
                        "greedy answer is one token, and a drafter that drafts it"),
        "target": {"path": str(out / "target")},
        "drafter": {"path": str(out / "drafter")},
        "server": {"launcher": launcher, "host": "127.0.0.1", "port": 0, "tp": 1,
                   "startup_timeout_s": 480.0, "stop_timeout_s": 30.0, "args": flags},
        "speculative": {"algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1,
                        "num_draft_tokens": 4},
        "bench": {"prompts": "builtin", "prompts_per_category": 2, "max_new_tokens": 128,
                  "temperature": 0.0, "warmup": 1, "repeats": 1, "max_repeats": 2,
                  "request_timeout_s": 60.0},
        "thresholds": {"baseline_tps_min": 150.0, "accept_len_min": "breakeven",
                       "d2t_match_min": 0.99},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--tokenizer", type=Path, required=True,
                        help="a Hugging Face folder: config.json and tokenizer.json")
    parser.add_argument("--shapes", choices=sorted(SHAPES), default="8b")
    parser.add_argument("--answer", default=" the", help="the text of the one-token answer")
    parser.add_argument("--pattern", choices=("same", "alternate"), default="same",
                        help="same: the answer every step, every draft accepted; alternate: "
                             "the answer and --second in turn, accept length 2.0")
    parser.add_argument("--second", default=" a",
                        help="--pattern alternate: the other one-token answer")
    parser.add_argument("--draft-vocab", type=int, default=DRAFT_VOCAB)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--profile", type=Path, help="also write the probe's profile here")
    parser.add_argument("--launcher", default=f"{sys.executable} -m sglang.launch_server")
    parser.add_argument("--sim", action="store_true", help="the profile is for the simulator")
    ns = parser.parse_args(argv)
    t0 = time.time()
    answer, vocab, eos = answer_id(ns.tokenizer, ns.answer)
    second = answer_id(ns.tokenizer, ns.second)[0] if ns.pattern == "alternate" else None
    if second == answer:
        raise SystemExit(f"--second {ns.second!r} is --answer's token; give another")
    shapes = SHAPES[ns.shapes]
    for name in ("target", "drafter"):
        shutil.rmtree(ns.out / name, ignore_errors=True)
        os.makedirs(ns.out / name)
    first = answer if second is None else min(answer, second)
    build_target(ns.out / "target", shapes, vocab, answer, eos, ns.tokenizer, ns.device, second)
    build_drafter(ns.out / "drafter", shapes, vocab, answer, min(ns.draft_vocab, vocab - first),
                  ns.device, second)
    told = (f"answer {ns.answer!r} = id {answer}" if second is None else
            f"answers {ns.answer!r} = id {answer} and {ns.second!r} = id {second} in turn")
    print(f"{ns.out}: target ({ns.shapes} shapes, {told}) and drafter written in "
          f"{time.time() - t0:.1f} s", flush=True)
    if ns.profile:
        ns.profile.write_text(suite.toml(profile(ns.out, shlex.split(ns.launcher), ns.sim)),
                              encoding="utf-8")
        print(f"profile: {ns.profile}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
