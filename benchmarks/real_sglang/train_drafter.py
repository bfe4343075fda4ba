"""Train an EAGLE-3 drafter for the tiny random Llama target, in the layout real SGLang serves.

usage: python3 -m benchmarks.real_sglang.train_drafter OUT [--device cuda] [--size full|tiny]
           [--scratch-seconds 60] [--finetune-seconds 30] [--seed 0] ...

Everything is built offline in one run (no network): tokenizer, target, data, drafter, prediction.
On one H200 the default (--size full) takes about 2-3 minutes; `--size tiny --device cpu` takes
seconds (the smoke test).

1. target/: a 4-layer Llama (hidden 256, intermediate 704, 4 heads, 2 kv heads, head_dim 64,
   vocab 1024, bf16) with seeded random weights saved by transformers' save_pretrained (so SGLang
   serves exactly these weights with --load-format auto), and a byte-level BPE tokenizer trained
   here from local text (the Python standard library's sources and generated sentences).
   `--layers N` makes it deeper at the same width (a forward that costs the GPU more than
   SGLang's own fixed work per step); its drafter then reads the layers SGLang picks by default.
2. dump/train, dump/heldout: the target's own greedy continuations (temperature 0, stopping at
   </s>) and its hidden states from a plain torch forward, in specgate's dump format (see
   specgate/model/evaluate.py): per sample `input_ids` [T] int64, `aux_hidden_states` [T, 3 × 256]
   bf16 (for the 4-layer target the inputs of decoder layers 1, 2, 3: what SGLang captures for
   eagle_aux_hidden_state_layer_ids [0, 1, 2], since it adds 1 to each id and records
   `hidden_states + residual` entering that layer; = transformers' hidden_states[1..3]; a
   deeper target's ids are in metadata.json and the drafter's config),
   `loss_mask` [T] u8 (1 on generated tokens), plus `final_hidden_states` [T, 256] bf16 (after the
   final norm, what lm_head sees) and `target_next_ids` [T] int64 (the target's argmax at t).
   embeddings.safetensors holds the target's embed_tokens; metadata.json the capture layers.
   dump/train: greedy continuations of varied prompts (text snippets and random token strings).
   dump/heldout: one sample per built-in probe prompt (specgate/data/prompts.jsonl), rendered with
   the chat template the probe would choose for this target and continued for --heldout-tokens
   (default 256 = [bench] max_new_tokens), named <prompt id>.safetensors; metadata.json maps each
   sample to its prompt category. This is the workload `pytest -m probe` sends.
3. Training with the project's EAGLE-3 forward (specgate.model.eagle.EagleDrafter.chain), unrolled
   --ttt-steps draft steps (training-time test: step k > 0 is fed the drafter's own hidden state),
   loss Σ_k 0.8^k CE_k over the draft vocabulary. Two runs:
   scratch/ from random weights (lm_head rows initialised from the target's) for
   --scratch-seconds, then drafter/ fine-tuned from scratch/ for --finetune-seconds (0: the
   drafter is scratch/). logs/scratch.jsonl and logs/finetune.jsonl hold one JSON line per epoch
   (epoch, step, loss = step-0 cross-entropy in nats, accuracy = step-0 top-1, plus per-step
   figures); epoch 0 is the untrained model measured before the first update. specgate reads them
   as [finetune] log (finetune.jsonl) and reference_log (scratch.jsonl), with init = scratch/.
4. drafter/ (and scratch/): config.json (LlamaForCausalLMEagle3, draft_vocab_size,
   target_hidden_size, eagle_config aux ids, [0, 1, 2] by default), model.safetensors (bf16
   midlayer.*, fc.weight, norm.weight, lm_head.weight; int64 d2t, bool t2d; no embed_tokens:
   SGLang uses the target's), tokenizer copies. vocab_map.safetensors: the training data's
   d2t/t2d (SpecForge's construction: the draft_vocab_size most frequent loss-masked tokens,
   sorted).
   With `--deadline` (Unix time, set by loop.py) both runs shrink in proportion to what is left
   once the data is made, and stop before any update past it. The training data stops growing
   DATA_RESERVE_S before the deadline (no generation batch starts later), so a drafter is saved
   even when the data would have taken too long; the log says how many prompts were used.
5. prediction.json: `specgate eval` (teacher_forced) of drafter/ on dump/heldout at --max-steps
   draft steps; predicted accept length per (steps, topk 1, draft tokens steps + 1) config, overall
   and per prompt category, per verify pass (the served walk: greedy serving replayed on the
   teacher-forced table) and as SGLang's per-request figure, with the position-averaged chain
   model beside it (`chain_model`, which over-predicted real SGLang 3.53 against 2.09).
   summary.json: timings and the figures printed at the end.

Serve it (docs/real-sglang.md has the rest of the flags):
   --model-path OUT/target --load-format auto --speculative-algorithm EAGLE3
   --speculative-draft-model-path OUT/drafter --speculative-num-steps 3
   --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --dtype bfloat16
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import shutil
import sys
import time
from collections import Counter
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import torch

from benchmarks.models import (
    BOS,
    EOS,
    copy_tokenizer,
    eagle3_config,
    llama_config,
    save_config,
    save_tensors,
    stdlib_texts,
    train_tokenizer,
    write_generation_config,
)
from specgate.model.eagle import DrafterShape, EagleDrafter, Embeddings
from specgate.model.predict import (
    accept_length,
    conditional_from_chain,
    request_accept_length,
)

AUX_LAYER_IDS = (0, 1, 2)
TTT_DECAY = 0.8
AFTER_TRAINING_S = 20.0  # saving both drafters and the prediction, with room to spare
# With a deadline, the training data stops growing (no new generation batch starts) this long
# before it: room for the held-out data, writing the dumps and at least a short training. A
# drafter from fewer prompts beats no drafter at all.
DATA_RESERVE_S = 170.0
CAPTURE_BATCH = 64  # sequences per capture forward
LOOP_TAIL = 16  # answer tokens that must all be one token for loop_tokens to count a loop


@dataclasses.dataclass(frozen=True)
class Size:
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    layers: int
    vocab: int
    train_prompts: int
    train_tokens: int  # new tokens per training prompt
    heldout_tokens: int
    draft_vocab: int
    corpus_files: int  # standard-library sources the tokenizer is trained on
    heldout_prompts: int  # 0: every built-in probe prompt
    # SGLang's eagle_aux_hidden_state_layer_ids: it captures the inputs of layers id + 1.
    aux_layers: tuple[int, ...] = AUX_LAYER_IDS
    # The drafter's own RoPE base and positions (config.json; a real target's drafter copies
    # the target's rope_theta, target_size below).
    rope_theta: float = 10000.0
    max_positions: int = 2048


SIZES = {
    # The model of make_tiny.py (hidden 256, 4 layers, vocabulary 1024).
    # Full draft vocabulary by default: each prompt of a random target falls into its own short
    # loop, so tokens of the probe's continuations may never occur in training data, and a
    # reduced draft vocabulary (--draft-vocab 512) could not even propose them.
    "full": Size(256, 704, 4, 2, 64, 4, 1024, 480, 96, 256, 1024, 200, 0),
    # For the CPU smoke test: same vocabulary and layer count, narrow layers, little data.
    "tiny": Size(64, 128, 2, 1, 32, 4, 1024, 12, 32, 24, 512, 20, 8),
}


def log(msg: str) -> None:
    print(msg, flush=True)


# --- 1. tokenizer and target ------------------------------------------------------------------

def _sentences(rng: random.Random, n: int) -> list[str]:
    subjects = ["The server", "A small model", "My neighbour", "The old cat", "Every request",
                "This function", "The river", "Our team", "A quiet student", "The drafter"]
    verbs = ["reads", "writes", "sends", "finds", "keeps", "loses", "counts", "builds", "checks"]
    objects = ["the log", "three apples", "a long letter", "every token", "the blue door",
               "forty numbers", "the map", "a warm coat", "the last line", "its own name"]
    tails = ["before noon.", "again and again.", "without a word.", "in the garden.",
             "on Tuesday.", "with great care.", "for the second time.", "and then stops."]
    return [f"{rng.choice(subjects)} {rng.choice(verbs)} {rng.choice(objects)} "
            f"{rng.choice(tails)} ({i})" for i in range(n)]


def target_config(size: Size) -> dict[str, Any]:
    return llama_config({"hidden_size": size.hidden, "intermediate_size": size.intermediate,
                         "num_attention_heads": size.heads, "num_key_value_heads": size.kv_heads,
                         "head_dim": size.head_dim, "num_hidden_layers": size.layers},
                        vocab_size=size.vocab, max_position_embeddings=size.max_positions,
                        rope_theta=size.rope_theta, bos_token_id=BOS, eos_token_id=EOS)


def build_target(out: Path, size: Size, seed: int) -> Any:
    """Seeded random bf16 LlamaForCausalLM, saved (config + model.safetensors) to `out`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    fields = target_config(size)
    fields.pop("model_type")
    config = LlamaConfig(**fields)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(str(out))
    write_generation_config(out, bos_token_id=BOS, eos_token_id=EOS)
    # Serve and measure what was saved: reload from disk.
    return LlamaForCausalLM.from_pretrained(str(out), dtype=torch.bfloat16).eval()


# --- 2. greedy continuations and the hidden-state dump ------------------------------------------

@torch.no_grad()
def greedy(model: Any, prompts: list[list[int]], new_tokens: int, device: str,
           batch: int = 64, stop_at: float | None = None) -> list[list[int]]:
    """Greedy continuations (stopping after </s>), batched with left padding, with the KV cache
    (one token per sequence per forward after the prompt; a deep target made the recomputing
    version far too slow). make_samples recomputes every sample (capture: right-padded batches)
    and keeps it only up to the first token where that forward's argmax disagrees. With stop_at
    (Unix time), no batch starts after it: the first len(result) prompts are continued."""
    outs: list[list[int]] = []
    for start in range(0, len(prompts), batch):
        if stop_at is not None and start > 0 and time.time() >= stop_at:
            break
        group = prompts[start:start + batch]
        width = max(len(p) for p in group)
        ids = torch.full((len(group), width), EOS, dtype=torch.long)
        mask = torch.zeros((len(group), width), dtype=torch.long)
        for i, p in enumerate(group):
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        ids, mask = ids.to(device), mask.to(device)
        done = torch.zeros(len(group), dtype=torch.bool, device=device)
        gen = []
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
        for _ in range(new_tokens):
            nxt = out.logits[:, -1].float().argmax(-1)
            gen.append(nxt)
            done |= nxt == EOS
            if bool(done.all()) or len(gen) == new_tokens:
                break
            pos = mask.sum(-1, keepdim=True)  # the new token's position: real tokens before it
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
            out = model(input_ids=nxt[:, None], attention_mask=mask, position_ids=pos,
                        past_key_values=out.past_key_values, use_cache=True)
        table = torch.stack(gen, 1).tolist()
        for row in table:
            cut = row.index(EOS) + 1 if EOS in row else len(row)
            outs.append(row[:cut])
    return outs


@torch.no_grad()
def capture(model: Any, seqs: list[list[int]], device: str,
            aux_layers: tuple[int, ...] = AUX_LAYER_IDS) -> list[dict[str, torch.Tensor]]:
    """One forward over a batch of sequences, right-padded from position 0: each real token sees
    only the tokens before it (causal), so its states are the unpadded forward's up to bf16
    rounding of the batch's shapes (make_samples cuts a sample where the argmax stops agreeing
    with the generation). Per sequence: aux states (inputs of layers id + 1), final hidden
    (after the norm), argmax, and how far the hooks' states are from output_hidden_states."""
    layers = model.model.layers
    grabbed: dict[int, torch.Tensor] = {}
    hooks = []
    for layer_id in aux_layers:
        index = layer_id + 1

        def hook(_mod: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                 index: int = index) -> None:
            x = args[0] if args else kwargs["hidden_states"]
            grabbed[index] = x.detach()

        hooks.append(layers[index].register_forward_pre_hook(hook, with_kwargs=True))
    final: dict[str, torch.Tensor] = {}
    hooks.append(model.model.norm.register_forward_hook(
        lambda _m, _a, out: final.__setitem__("h", out.detach())))
    width = max(len(ids) for ids in seqs)
    batch = torch.full((len(seqs), width), EOS, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, ids in enumerate(seqs):
        batch[i, :len(ids)] = torch.tensor(ids)
        mask[i, :len(ids)] = 1
    try:
        out = model(input_ids=batch.to(device), attention_mask=mask.to(device),
                    output_hidden_states=True)
    finally:
        for h in hooks:
            h.remove()
    hs = out.hidden_states
    aux = torch.cat([grabbed[i + 1] for i in aux_layers], -1)
    nxt = out.logits.float().argmax(-1)
    result = []
    for row, ids in enumerate(seqs):
        n = len(ids)
        # transformers' hidden_states[i] is the input of decoder layer i (i < n_layers)
        agree = max(float((grabbed[i + 1][row, :n] - hs[i + 1][row, :n]).abs().max())
                    for i in aux_layers)
        result.append({"aux": aux[row, :n], "final": final["h"][row, :n], "next": nxt[row, :n],
                       "hook_vs_hidden_states": torch.tensor(agree)})
    return result


def write_dump(folder: Path, samples: list[dict[str, Any]], embed: torch.Tensor,
               meta: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    for s in samples:
        save_file({"input_ids": s["input_ids"], "aux_hidden_states": s["aux"],
                   "loss_mask": s["loss_mask"], "final_hidden_states": s["final"],
                   "target_next_ids": s["next"]}, str(folder / f"{s['name']}.safetensors"))
    save_file({"embed_tokens.weight": embed.to(torch.bfloat16).contiguous().cpu()},
              str(folder / "embeddings.safetensors"))
    (folder / "metadata.json").write_text(json.dumps(meta, indent=2) + "\n")


def make_samples(model: Any, prompts: list[tuple[str, str, list[int]]], new_tokens: int,
                 device: str, batch: int = 64, aux_layers: tuple[int, ...] = AUX_LAYER_IDS,
                 stop_at: float | None = None,
                 ) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Generate, recompute in right-padded batches, keep each sample up to its first
    generation/argmax split. With stop_at, only the prompts whose batch started before it."""
    started = time.perf_counter()
    conts = greedy(model, [p for _, _, p in prompts], new_tokens, device, batch, stop_at)
    generated_s = time.perf_counter() - started
    prompts = prompts[:len(conts)]
    seqs = [p + c for (_, _, p), c in zip(prompts, conts, strict=True)]

    def captured() -> Iterator[dict[str, torch.Tensor]]:
        # One batch on the device at a time: each sample is copied to the CPU below before the
        # next batch's forward.
        for start in range(0, len(seqs), CAPTURE_BATCH):
            yield from capture(model, seqs[start:start + CAPTURE_BATCH], device, aux_layers)

    samples, agree, total, worst = [], 0, 0, 0.0
    for (name, category, prompt), ids, cap in zip(prompts, seqs, captured(), strict=True):
        worst = max(worst, float(cap["hook_vs_hidden_states"]))
        # The target's argmax at t should be the generated token at t + 1.
        nxt = cap["next"].cpu()
        gen_pos = torch.arange(len(prompt) - 1, len(ids) - 1)
        match = (nxt[gen_pos] == torch.tensor(ids)[gen_pos + 1]).tolist()
        keep = match.index(False) if False in match else len(match)
        agree += sum(match)
        total += len(match)
        length = len(prompt) + keep
        if keep < 2:
            continue
        mask = torch.zeros(length, dtype=torch.uint8)
        mask[len(prompt):] = 1
        samples.append({
            "name": name, "category": category, "prompt_tokens": len(prompt),
            "input_ids": torch.tensor(ids[:length], dtype=torch.int64),
            "aux": cap["aux"][:length].to(torch.bfloat16).contiguous().cpu(),
            "final": cap["final"][:length].to(torch.bfloat16).contiguous().cpu(),
            "next": nxt[:length].to(torch.int64).contiguous(),
            "loss_mask": mask})
    return samples, {"generated": float(total), "argmax_agreement": agree / max(total, 1),
                     "hook_vs_hidden_states_max_abs": worst, "prompts": float(len(prompts)),
                     "generate_s": round(generated_s, 2),
                     "capture_s": round(time.perf_counter() - started - generated_s, 2)}


def loop_tokens(samples: list[dict[str, Any]], tail: int = LOOP_TAIL) -> Counter[int]:
    """How many answers end in a loop of one repeated token, per token: the last `tail` answer
    tokens all equal (a random target falls into such loops on most prompts)."""
    found: Counter[int] = Counter()
    for s in samples:
        answer = s["input_ids"][s["loss_mask"].bool()].tolist()
        if len(answer) >= tail and len(set(answer[-tail:])) == 1:
            found[answer[-1]] += 1
    return found


QUESTIONS = ["Explain what this line does: {}", "Summarize in one sentence: {}",
             "Translate to French: {}", "What is wrong with this? {}", "Rewrite politely: {}",
             "List the nouns in: {}", "Continue the story: {}", "Why would someone write: {}"]


PROMPT_KINDS = ("sentence", "code", "random", "chat", "long")
LONG_PROMPT_TOKENS = 224  # the probe's summarization prompts are 160-210 tokens


def parse_mix(text: str) -> tuple[tuple[str, int], ...]:
    """`code=3,random=3,sentence=1,chat=1,long=2` -> the kinds in that order with their weights."""
    mix = []
    for part in text.split(","):
        kind, _, weight = part.strip().partition("=")
        if kind not in PROMPT_KINDS:
            raise ValueError(f"unknown prompt kind {kind!r} (kinds: {', '.join(PROMPT_KINDS)})")
        if not weight.isdigit() or int(weight) < 1:
            raise ValueError(f"{kind}={weight}: the weight must be a positive integer")
        if any(kind == k for k, _ in mix):
            raise ValueError(f"prompt kind {kind!r} given twice")
        mix.append((kind, int(weight)))
    return tuple(mix)


def train_prompts(tok: Any, n: int, rng: random.Random, vocab: int,
                  template: Any = None,
                  mix: tuple[tuple[str, int], ...] | None = None,
                  ) -> list[tuple[str, str, list[int]]]:
    """Varied prompts (none of the probe's own texts). By default a quarter each: sentences,
    stdlib code lines, random token strings, and questions rendered with the chat template the
    probe uses (a third each of the first three without a template). With a mix, the kinds in
    proportion to their weights, in turn; "long" is 4-8 sentences, up to LONG_PROMPT_TOKENS.

    Every kind other than long is cut to 64 tokens. The random target falls into a loop of one
    repeated token on most prompts, and each kind leads to its own loops. Over 4,000 of the
    recipe's prompts (the 64-layer target rebuilt on a CPU), code and random strings gave 4-6 times
    more distinct loop tokens per prompt than sentences and chat, and long prompts 2.6 times more
    than short ones. The drafter only learns the loops that it sees.
    """
    if mix is None:
        order = [("sentence", "code", "random", "chat")[i]
                 for i in range(4 if template is not None else 3)]
    else:
        order = [kind for kind, weight in mix for _ in range(weight)]
        if "chat" in order and template is None:
            raise ValueError("prompt kind chat needs the probe's chat template")
    code_lines = [ln.strip() for t in stdlib_texts(60) for ln in t.splitlines()
                  if 20 < len(ln.strip()) < 120]
    sentences = _sentences(rng, 400)
    out = []
    for i in range(n):
        kind = order[i % len(order)]
        limit = 64
        if kind == "sentence":
            ids = tok.encode(" ".join(rng.sample(sentences, 2))).ids
        elif kind == "code":
            ids = tok.encode(rng.choice(code_lines)).ids
        elif kind == "random":
            ids = [rng.randrange(3, vocab) for _ in range(rng.randrange(6, 24))]
        elif kind == "long":
            ids = tok.encode(" ".join(rng.sample(sentences, rng.randrange(4, 9)))).ids
            limit = LONG_PROMPT_TOKENS
        else:
            body = rng.choice(QUESTIONS).format(rng.choice(sentences + code_lines))
            ids = tok.encode(template.render(body)).ids[-64:]
        out.append((f"train_{i:05d}", kind, ids[:limit] or [BOS]))
    return out


def heldout_prompts(tok: Any, target_dir: Path,
                    limit: int = 0) -> tuple[list[tuple[str, str, list[int]]], str]:
    """The probe's built-in prompts, rendered as the probe renders them for this target.

    With a limit, an evenly spaced subset (so several categories stay represented).
    """
    from specgate.results import prompts as probe_prompts

    template = probe_prompts.choose_template(None, target_dir)
    chosen = probe_prompts.load_builtin()
    if 0 < limit < len(chosen):
        chosen = [chosen[round(i * len(chosen) / limit)] for i in range(limit)]
    out = [(p.id, p.category, tok.encode(template.render(p.text)).ids) for p in chosen]
    return out, template.name


# --- 3. the drafter and its training ------------------------------------------------------------

def vocab_map(samples: list[dict[str, Any]], vocab: int, vd: int) -> tuple[torch.Tensor,
                                                                          torch.Tensor]:
    """SpecForge's d2t/t2d: the vd most frequent loss-masked tokens (padded from 0..), sorted."""
    counts: Counter[int] = Counter()
    for s in samples:
        counts.update(s["input_ids"][s["loss_mask"].bool()].tolist())
    for i in range(vd):
        if len(counts) >= vd:
            break
        counts.setdefault(i, 0)
    used = sorted(t for t, _ in counts.most_common(vd))
    ids = torch.tensor(used, dtype=torch.int64)
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[ids] = True
    return ids - torch.arange(vd), t2d


def default_aux_layers(layers: int) -> tuple[int, ...]:
    """The first three layers' inputs below 8 layers (the 4-layer target); for a deeper one the
    layers SGLang captures when a drafter names none (inputs of layers 2, L // 2 and L - 3)."""
    if layers < 8:
        return AUX_LAYER_IDS
    return (1, layers // 2 - 1, layers - 4)


def drafter_config(size: Size) -> dict[str, Any]:
    return eagle3_config(target_config(size), draft_vocab=size.draft_vocab,
                         target_hidden=size.hidden, aux_layers=size.aux_layers)


def init_weights(size: Size, target: Any, hot: torch.Tensor, seed: int,
                 device: str, fc_init: str = "random") -> dict[str, torch.Tensor]:
    """Small random weights, norms at one, the target's lm_head rows for the draft vocabulary.
    fc_init "last": fc starts as the identity on the deepest aux state (zero on the others), so
    the untrained drafter's residual stream is the target's own state a few layers before its
    output, and with the target's head it starts out naming roughly the target's next token."""
    g = torch.Generator().manual_seed(seed + 1)
    h, i, d = size.hidden, size.intermediate, size.head_dim

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * 0.02

    fc = normal(h, 3 * h)
    if fc_init == "last":
        fc = torch.cat([torch.zeros(h, 2 * h), torch.eye(h)], 1)
    w = {
        "fc.weight": fc,
        "midlayer.self_attn.q_proj.weight": normal(size.heads * d, 2 * h),
        "midlayer.self_attn.k_proj.weight": normal(size.kv_heads * d, 2 * h),
        "midlayer.self_attn.v_proj.weight": normal(size.kv_heads * d, 2 * h),
        "midlayer.self_attn.o_proj.weight": normal(h, size.heads * d),
        "midlayer.mlp.gate_proj.weight": normal(i, h),
        "midlayer.mlp.up_proj.weight": normal(i, h),
        "midlayer.mlp.down_proj.weight": normal(h, i),
        "midlayer.input_layernorm.weight": torch.ones(h),
        "midlayer.hidden_norm.weight": torch.ones(h),
        "midlayer.post_attention_layernorm.weight": torch.ones(h),
        "norm.weight": torch.ones(h),
        # The target's own output rows for the draft vocabulary: a head that already names tokens.
        "lm_head.weight": target.lm_head.weight.detach().float().cpu()[hot].clone(),
    }
    return {k: v.to(device).requires_grad_(True) for k, v in w.items()}


def fit_training(scratch_s: float, finetune_s: float, left_s: float | None,
                 after_s: float = AFTER_TRAINING_S) -> tuple[float, float, str]:
    """The two training runs' seconds, shrunk in proportion so that they end `after_s` before
    the deadline (saving and the prediction come after them), and a line saying so. With no
    deadline (left_s None) or enough time, the asked seconds."""
    asked = scratch_s + finetune_s
    if left_s is None or asked <= 0 or left_s - after_s >= asked:
        return scratch_s, finetune_s, ""
    room = max(left_s - after_s, 0.0)
    scale = room / asked
    note = (f"deadline: {left_s:.0f} s left after the data, {after_s:.0f} s kept for saving and "
            f"the prediction; training {scratch_s * scale:.0f} + {finetune_s * scale:.0f} s "
            f"instead of {scratch_s:.0f} + {finetune_s:.0f} s")
    return scratch_s * scale, finetune_s * scale, note


def make_model(size: Size, weights: dict[str, torch.Tensor], d2t: torch.Tensor) -> EagleDrafter:
    return EagleDrafter(DrafterShape.from_config(drafter_config(size)), weights, d2t)


def step_losses(model: EagleDrafter, embed: Embeddings, sample: dict[str, torch.Tensor],
                t2d_index: torch.Tensor, steps: int) -> tuple[list[torch.Tensor], list[int],
                                                              list[int]]:
    """Per-step summed CE, hit count and scored count over one sample (teacher-forced chain)."""
    ids, aux, mask = sample["input_ids"], sample["aux"], sample["loss_mask"]
    seg = sample.get("segments")
    n = ids.shape[0]
    outs = model.chain(embed, ids, aux, steps, segments=seg)
    losses, hits, counts = [], [], []
    for k, hidden in enumerate(outs):
        tpos = torch.arange(n, device=ids.device) + 2 + k
        valid = tpos < n
        valid[valid.clone()] &= mask[tpos[valid]]
        if seg is not None:  # packed: a prediction counts only inside its own sequence
            valid[valid.clone()] &= seg[tpos[valid]] == seg[valid.nonzero()[:, 0]]
        truth = t2d_index[ids[tpos[valid]]]
        rows = valid.nonzero()[:, 0]
        known = truth >= 0
        logits = model.logits(hidden[rows]).float()
        pred = logits.argmax(-1)
        hits.append(int((pred[known] == truth[known]).sum()))
        counts.append(int(valid.sum()))
        if bool(known.any()):
            losses.append(torch.nn.functional.cross_entropy(
                logits[known], truth[known], reduction="sum"))
        else:
            losses.append(logits.sum() * 0.0)
    return losses, hits, counts


def pack(data: list[dict[str, torch.Tensor]], order: list[int],
         tokens: int) -> list[dict[str, torch.Tensor]]:
    """Samples in `order`, concatenated into sequences of about `tokens` tokens with segment ids."""
    out, group, length = [], [], 0

    def flush() -> None:
        if group:
            out.append({key: torch.cat([data[i][key] for i in group])
                        for key in ("input_ids", "aux", "loss_mask")}
                       | {"segments": torch.cat([
                           torch.full_like(data[i]["input_ids"], j)
                           for j, i in enumerate(group)])})

    for i in order:
        group.append(i)
        length += int(data[i]["input_ids"].shape[0])
        if length >= tokens:
            flush()
            group, length = [], 0
    flush()
    return out


def train(size: Size, weights: dict[str, torch.Tensor], d2t: torch.Tensor, t2d: torch.Tensor,
          embed: Embeddings, data: list[dict[str, torch.Tensor]], *, seconds: float,
          max_epochs: int, min_epochs: int, ttt: int, lr: float, log_path: Path,
          seed: int, pack_tokens: int = 0, stop_at: float | None = None,
          frozen: Collection[str] = ()) -> dict[str, Any]:
    """Train in place for `seconds` (whole epochs, at least min_epochs); one JSON line per epoch.
    stop_at (Unix time) is a hard end: checked before every update, it cuts the epoch short
    (its line says "partial": true), min_epochs notwithstanding.

    pack_tokens > 0: each update sees shuffled samples packed into one sequence of about that
    many tokens (attention kept within each sample), instead of one sample per update.
    frozen: weight names left as they are (e.g. lm_head.weight).
    """
    model = make_model(size, weights, d2t)
    for name in frozen:
        weights[name].requires_grad_(False)
    params = [v for k, v in weights.items() if k not in frozen]
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    device = params[0].device
    t2d_index = torch.full((size.vocab,), -1, dtype=torch.long)
    t2d_index[t2d] = torch.arange(int(t2d.sum()))
    t2d_index = t2d_index.to(device)
    rng = random.Random(seed)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []

    def record(epoch: int, step: int, loss: list[float], hits: list[int], counts: list[int],
               lr_now: float, elapsed: float, partial: bool = False) -> None:
        acc = [h / c if c else 0.0 for h, c in zip(hits, counts, strict=True)]
        row = {"epoch": epoch, "step": step, "loss": round(loss[0] / max(counts[0], 1), 5),
               "accuracy": round(acc[0], 5),
               "loss_steps": [round(x / max(c, 1), 5) for x, c in zip(loss, counts, strict=True)],
               "accuracy_steps": [round(a, 5) for a in acc], "lr": lr_now,
               "seconds": round(elapsed, 2), **({"partial": True} if partial else {})}
        rows.append(row)
        with log_path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")

    log_path.write_text("")
    with torch.no_grad():  # epoch 0: the untrained model, before any update
        tot, hit, cnt = [0.0] * ttt, [0] * ttt, [0] * ttt
        everything = list(range(len(data)))
        for s in (pack(data, everything, pack_tokens) if pack_tokens > 0 else data):
            losses, hits, counts = step_losses(model, embed, s, t2d_index, ttt)
            for k in range(ttt):
                tot[k] += float(losses[k])
                hit[k] += hits[k]
                cnt[k] += counts[k]
        record(0, 0, tot, hit, cnt, 0.0, 0.0)
    started, step, warmup = time.perf_counter(), 0, 20
    weights_k = [TTT_DECAY ** k for k in range(ttt)]
    for epoch in range(1, max_epochs + 1):
        order = list(range(len(data)))
        rng.shuffle(order)
        batches = pack(data, order, pack_tokens) if pack_tokens > 0 else [data[i] for i in order]
        tot, hit, cnt = [0.0] * ttt, [0] * ttt, [0] * ttt
        cut = False
        for batch in batches:
            if stop_at is not None and time.time() >= stop_at:
                cut = True
                break
            frac = min(1.0, (time.perf_counter() - started) / max(seconds, 1e-9))
            lr_now = lr * min(1.0, (step + 1) / warmup) * (0.1 + 0.45 * (1 + math.cos(
                math.pi * frac)))
            for group in opt.param_groups:
                group["lr"] = lr_now
            losses, hits, counts = step_losses(model, embed, batch, t2d_index, ttt)
            denom = max(counts[0], 1)
            loss = sum(w * x for w, x in zip(weights_k, losses, strict=True)) / denom
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            step += 1
            for k in range(ttt):
                tot[k] += float(losses[k].detach())
                hit[k] += hits[k]
                cnt[k] += counts[k]
        elapsed = time.perf_counter() - started
        if cut and not cnt[0]:  # the deadline came before this epoch's first update
            break
        record(epoch, step, tot, hit, cnt, lr_now, elapsed, partial=cut)
        if cut or (elapsed >= seconds and epoch >= min_epochs):
            break
    return {"epochs": rows[-1]["epoch"], "steps": step, "seconds": rows[-1]["seconds"],
            "initial_loss": rows[0]["loss"], "final_loss": rows[-1]["loss"],
            "initial_accuracy": rows[0]["accuracy"], "final_accuracy": rows[-1]["accuracy"],
            "log": str(log_path)}


def save_drafter(folder: Path, size: Size, weights: dict[str, torch.Tensor], d2t: torch.Tensor,
                 t2d: torch.Tensor, tokenizer_dir: Path) -> None:
    """config.json + model.safetensors in the layout SGLang's LlamaForCausalLMEagle3 loads."""
    folder.mkdir(parents=True, exist_ok=True)
    save_config(folder, drafter_config(size), log)
    tensors = {k: v.detach().to(torch.bfloat16).cpu().contiguous() for k, v in weights.items()}
    tensors["d2t"] = d2t.to(torch.int64).contiguous()
    tensors["t2d"] = t2d.to(torch.bool).contiguous()
    save_tensors(folder, tensors)
    copy_tokenizer(tokenizer_dir, folder)


# --- 5. prediction ---------------------------------------------------------------------------

def predict(drafter_dir: Path, heldout: Path, target_dir: Path, categories: dict[str, str],
            max_steps: int, device: str, configs: list[int],
            request_tokens: int) -> dict[str, Any]:
    """`specgate eval` on the held-out dump, then the chain model per config and category."""
    try:
        from specgate.model.evaluate import evaluate_model, open_dump, resolve_embeddings
    except ImportError as exc:  # e.g. pydantic missing: the dump and drafter are still written
        return {"error": f"the evaluation could not be imported ({exc}); run `specgate eval "
                         f"--drafter {drafter_dir} --hidden-states {heldout} --steps "
                         f"{max_steps} --json` where specgate is installed"}
    model = EagleDrafter.from_checkpoint(drafter_dir, device=device, dtype=torch.float32)
    dump = open_dump(heldout)
    embed, source = resolve_embeddings(model, dump, target_dir, drafter_dir)
    groups: dict[str, Any] = {"all": dump.samples}
    for cat in sorted(set(categories.values())):
        groups[cat] = tuple(s for s in dump.samples if categories.get(s.file.stem) == cat)
    out: dict[str, Any] = {"drafter": str(drafter_dir), "dump": str(heldout),
                           "embedding_source": source, "max_steps": max_steps, "groups": {}}
    for name, samples in groups.items():
        if not samples:
            continue
        report = evaluate_model(model, dataclasses.replace(dump, samples=samples), embed,
                                steps=max_steps, drafter_label=str(drafter_dir),
                                embedding_source=source)
        cond = conditional_from_chain(report.chain_accept)
        # the served walk (specgate.model.evaluate._served_walk): chains anchored where greedy
        # serving anchors them; the chain model over every position beside it (biased high)
        walk = {s: report.served_accept[s - 1] for s in configs}
        per_req = {s: request_accept_length(walk[s], request_tokens) for s in configs}
        out["groups"][name] = {
            "samples": len(samples), "tokens": report.tokens, "positions": report.chain_positions,
            "step_accuracy": [round(s.accuracy, 4) for s in report.steps],
            "step_loss": [round(s.loss, 4) for s in report.steps],
            "conditional_acceptance": [round(c, 4) for c in cond],
            "predicted": {f"steps{s}_topk1_draft{s + 1}": round(walk[s], 4) for s in configs},
            "chain_model": {f"steps{s}_topk1_draft{s + 1}": round(accept_length(cond, s), 4)
                            for s in configs},
            "served_verifies": report.served_verifies,
            "predicted_per_request": {f"steps{s}_topk1_draft{s + 1}": round(v, 4)
                                                 for s, v in per_req.items()},
        }
    return out


# chains of 1 to PREDICT_STEPS draft steps in a prediction
PREDICT_STEPS = 5


def target_size(target: Path, draft_vocab: int,
                aux_ids: tuple[int, ...] | None = None) -> Size:
    """The drafter's shape for a Llama target: its width, heads and vocabulary, one layer."""
    cfg = json.loads((target / "config.json").read_text())
    if aux_ids is None:
        aux_ids = (1, int(cfg["num_hidden_layers"]) // 2 - 1, int(cfg["num_hidden_layers"]) - 4)
    rope = cfg.get("rope_theta") or (cfg.get("rope_parameters") or {}).get("rope_theta") or 1e4
    heads = int(cfg["num_attention_heads"])
    return Size(hidden=int(cfg["hidden_size"]), intermediate=int(cfg["intermediate_size"]),
                heads=heads, kv_heads=int(cfg.get("num_key_value_heads") or heads),
                head_dim=int(cfg.get("head_dim") or cfg["hidden_size"] // heads),
                layers=int(cfg["num_hidden_layers"]), vocab=int(cfg["vocab_size"]),
                train_prompts=0, train_tokens=0, heldout_tokens=0, draft_vocab=draft_vocab,
                corpus_files=0, heldout_prompts=0, aux_layers=aux_ids,
                rope_theta=float(rope),
                max_positions=int(cfg.get("max_position_embeddings") or 2048))


def add_prediction(result: dict[str, Any], out: Path, heldout: Path, target: Path, device: str,
                   request_tokens: int) -> None:
    """The drafter in OUT walked over the held-out dump as greedy serving verifies, for chains of
    1 to PREDICT_STEPS steps: OUT/prediction.json, and its figures per category in `result`."""
    meta = json.loads((heldout / "metadata.json").read_text())
    cats = {name: s["category"] for name, s in (meta.get("samples") or {}).items()}
    pred = predict(out, heldout, target, cats, PREDICT_STEPS, device,
                   list(range(1, PREDICT_STEPS + 1)), request_tokens)
    (out / "prediction.json").write_text(json.dumps(pred, indent=1) + "\n")
    groups = pred.get("groups") or {}
    result["predicted"] = {name: {"per_request": g.get("predicted_per_request"),
                                  "per_verify": g.get("predicted"),
                                  "step_accuracy": g.get("step_accuracy")}
                           for name, g in groups.items()}
    if "error" in pred:
        result["prediction_error"] = pred["error"]


# --- main ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scratch-seconds", type=float, default=60.0)
    parser.add_argument("--finetune-seconds", type=float, default=30.0)
    parser.add_argument("--max-epochs", type=int, default=1000)
    parser.add_argument("--min-epochs", type=int, default=1)
    parser.add_argument("--ttt-steps", type=int, default=3, help="draft steps unrolled in training")
    parser.add_argument("--pack-tokens", type=int, default=2048,
                        help="tokens per update, samples packed (0: one sample per update)")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--finetune-lr", type=float, default=1e-3)
    parser.add_argument("--train-prompts", type=int, help="override the size's prompt count")
    parser.add_argument("--train-tokens", type=int, help="new tokens per training prompt")
    parser.add_argument("--heldout-tokens", type=int, help="new tokens per held-out prompt")
    parser.add_argument("--heldout-prompts", type=int, help="0: all built-in probe prompts")
    parser.add_argument("--draft-vocab", type=int, help="draft_vocab_size (<= 1024)")
    parser.add_argument("--deadline", type=float,
                        help="Unix time by which everything must be written: the training "
                             "seconds shrink to fit once the data is made (loop.py sets it)")
    parser.add_argument("--layers", type=int,
                        help="the target's decoder layers (default 4); a deeper target costs "
                             "the GPU more per forward, in decode and verify alike")
    parser.add_argument("--aux-layers",
                        help="eagle_aux_hidden_state_layer_ids, comma-separated (default: 0,1,2 "
                             "below 8 layers, else SGLang's own choice for the depth)")
    parser.add_argument("--max-steps", type=int, default=5, help="deepest config predicted")
    parser.add_argument("--threads", type=int, help="torch CPU threads")
    parser.add_argument("--gen-batch", type=int, default=64,
                        help="prompts per batch of the greedy generation")
    parser.add_argument("--prompt-mix",
                        help="training prompt kinds and weights, e.g. code=3,random=3,"
                             "sentence=1,chat=1,long=2 (kinds: " + ", ".join(PROMPT_KINDS)
                             + "; default a quarter each of the first four)")
    parser.add_argument("--freeze-head", action="store_true",
                        help="keep lm_head at the target's rows: tokens rare in the training "
                             "data keep the target's own output direction")
    parser.add_argument("--fc-init", choices=("random", "last"), default="random",
                        help="fc's start: small random, or the identity on the deepest aux state")
    args = parser.parse_args(argv)
    try:
        mix = parse_mix(args.prompt_mix) if args.prompt_mix else None
    except ValueError as exc:
        parser.error(f"--prompt-mix {args.prompt_mix}: {exc}")
    size = dataclasses.replace(
        SIZES[args.size],
        **{k: v for k, v in (("train_prompts", args.train_prompts),
                             ("train_tokens", args.train_tokens),
                             ("heldout_tokens", args.heldout_tokens),
                             ("heldout_prompts", args.heldout_prompts),
                             ("draft_vocab", args.draft_vocab),
                             ("layers", args.layers)) if v is not None})
    try:
        aux = (tuple(int(x) for x in args.aux_layers.split(",")) if args.aux_layers
               else default_aux_layers(size.layers))
    except ValueError:
        parser.error(f"--aux-layers {args.aux_layers}: not comma-separated integers")
    if len(aux) != 3 or list(aux) != sorted(set(aux)) or not all(
            0 <= i < size.layers - 1 for i in aux):
        parser.error(f"--aux-layers {','.join(map(str, aux))}: need three distinct ids in "
                     f"increasing order within [0, {size.layers - 2}] for {size.layers} layers")
    size = dataclasses.replace(size, aux_layers=aux)
    if args.threads:
        torch.set_num_threads(args.threads)
    out: Path = args.out
    device = args.device
    t0 = time.perf_counter()
    times: dict[str, float] = {}

    def lap(name: str) -> None:
        times[name] = round(time.perf_counter() - t0 - sum(times.values()), 2)

    out.mkdir(parents=True, exist_ok=True)
    target_dir = out / "target"
    # Nothing of an earlier run may survive into this one: a drafter left by a killed run would
    # otherwise be served against the new target.
    for stale in ("target", "drafter", "scratch", "logs", "dump"):
        if (out / stale).exists():
            shutil.rmtree(out / stale)
    for stale in ("summary.json", "prediction.json", "vocab_map.safetensors"):
        (out / stale).unlink(missing_ok=True)
    rng = random.Random(args.seed)
    corpus = stdlib_texts(size.corpus_files) + _sentences(random.Random(12345), 2000)
    tok = train_tokenizer(target_dir, size.vocab, corpus)
    lap("tokenizer")
    target = build_target(target_dir, size, args.seed).to(device)
    lap("target")
    log(f"target: {target_dir} ({sum(p.numel() for p in target.parameters())} parameters, "
        f"tokenizer {tok.get_vocab_size()} tokens)")

    held_p, template = heldout_prompts(tok, target_dir, size.heldout_prompts)
    from specgate.results import prompts as probe_prompts
    try:
        train_p = train_prompts(tok, size.train_prompts, rng, size.vocab,
                                probe_prompts.choose_template(None, target_dir), mix)
    except ValueError as exc:  # a mix the target cannot serve (chat without a template)
        print(f"train_drafter.py: --prompt-mix {args.prompt_mix}: {exc}", file=sys.stderr)
        return 2
    data_stop = None if args.deadline is None else args.deadline - DATA_RESERVE_S
    train_samples, train_stats = make_samples(target, train_p, size.train_tokens, device,
                                              args.gen_batch, size.aux_layers, data_stop)
    if train_stats["prompts"] < len(train_p):
        log(f"data: the deadline stopped the generation after {train_stats['prompts']:.0f} of "
            f"{len(train_p)} training prompts ({DATA_RESERVE_S:.0f} s kept for the held-out "
            "data and training)")
    held_samples, held_stats = make_samples(target, held_p, size.heldout_tokens, device,
                                            args.gen_batch, size.aux_layers)
    lap("generate+capture")
    embed_w = target.model.embed_tokens.weight.detach()
    meta = {"format": "specgate.hidden_states", "version": 1,
            "aux_hidden_state_layer_ids": list(size.aux_layers),
            "captured_layer_inputs": [i + 1 for i in size.aux_layers],
            "target_model_type": "llama", "target_hidden_size": size.hidden,
            "num_aux_hidden_states": len(size.aux_layers), "dtype": "bfloat16",
            "generated_by": "benchmarks/real_sglang/train_drafter.py (transformers forward)"}
    for name, samples, stats, extra in (
            ("train", train_samples, train_stats, {}),
            ("heldout", held_samples, held_stats, {"chat_template": template,
                                                   "max_new_tokens": size.heldout_tokens})):
        write_dump(out / "dump" / name, samples, embed_w, dict(
            meta, **stats, **extra, samples={s["name"]: {
                "category": s["category"], "prompt_tokens": s["prompt_tokens"],
                "tokens": int(s["input_ids"].shape[0])} for s in samples}))
    hook_diff = max(train_stats["hook_vs_hidden_states_max_abs"],
                    held_stats["hook_vs_hidden_states_max_abs"])
    n_train = sum(int(s["loss_mask"].sum()) for s in train_samples)
    n_held = sum(int(s["loss_mask"].sum()) for s in held_samples)
    log(f"data: train {len(train_samples)} samples / {n_train} generated tokens, held-out "
        f"{len(held_samples)} / {n_held}; generation vs capture-forward argmax agreement "
        f"{train_stats['argmax_agreement']:.4f} / {held_stats['argmax_agreement']:.4f}; "
        f"hooks vs output_hidden_states max |diff| {hook_diff:.3g}; generation "
        f"{train_stats['generate_s'] + held_stats['generate_s']:.1f} s, capture "
        f"{train_stats['capture_s'] + held_stats['capture_s']:.1f} s")
    seen, held_loops = loop_tokens(train_samples), loop_tokens(held_samples)
    unseen = sorted({t for t in held_loops if t not in seen})
    log(f"one-token loops: {sum(seen.values())} of {len(train_samples)} training answers end in "
        f"one, on {len(seen)} distinct tokens; {sum(held_loops.values())} of "
        f"{len(held_samples)} held-out answers, on {len(held_loops)}, of which "
        f"{len(unseen)} never loop in training{': ' + str(unseen) if unseen else ''} "
        "(the drafter cannot know those: expect no accepted draft there)")
    lap("write dumps")

    d2t, t2d = vocab_map(train_samples, size.vocab, size.draft_vocab)
    hot = d2t + torch.arange(size.draft_vocab)
    from safetensors.torch import save_file
    save_file({"d2t": d2t, "t2d": t2d}, str(out / "vocab_map.safetensors"))
    covered = sum(int(t2d[s["input_ids"][s["loss_mask"].bool()]].sum()) for s in held_samples)
    log(f"draft vocabulary: {size.draft_vocab} of {size.vocab} tokens; covers "
        f"{covered / max(n_held, 1):.2%} of held-out generated tokens")

    data = [{"input_ids": s["input_ids"].to(device), "aux": s["aux"].to(device),
             "loss_mask": s["loss_mask"].bool().to(device)} for s in train_samples]
    embed = Embeddings(embed_w.float().to(device))
    weights = init_weights(size, target, hot, args.seed, device, args.fc_init)
    frozen = ("lm_head.weight",) if args.freeze_head else ()
    scratch_s, finetune_s, note = fit_training(
        args.scratch_seconds, args.finetune_seconds,
        None if args.deadline is None else args.deadline - time.time())
    if note:
        log(note)
    # Hard ends: whole epochs may overrun the seconds, the deadline may not.
    end = None if args.deadline is None else args.deadline - AFTER_TRAINING_S
    scratch = train(size, weights, d2t, t2d, embed, data, seconds=scratch_s,
                    max_epochs=args.max_epochs, min_epochs=args.min_epochs,
                    ttt=args.ttt_steps, lr=args.lr,
                    log_path=out / "logs" / "scratch.jsonl", seed=args.seed,
                    pack_tokens=args.pack_tokens,
                    stop_at=None if end is None else end - finetune_s, frozen=frozen)
    save_drafter(out / "scratch", size, weights, d2t, t2d, target_dir)
    log(f"scratch: {scratch['epochs']} epochs / {scratch['steps']} steps in "
        f"{scratch['seconds']} s; step-0 loss {scratch['initial_loss']:.3f} -> "
        f"{scratch['final_loss']:.3f} (ln {size.draft_vocab} = "
        f"{math.log(size.draft_vocab):.3f}); accuracy {scratch['initial_accuracy']:.3f} -> "
        f"{scratch['final_accuracy']:.3f}")
    lap("train scratch")
    finetune = None
    if args.finetune_seconds > 0:
        finetune = train(size, weights, d2t, t2d, embed, data, seconds=finetune_s,
                         max_epochs=args.max_epochs, min_epochs=args.min_epochs,
                    ttt=args.ttt_steps, lr=args.finetune_lr,
                         log_path=out / "logs" / "finetune.jsonl", seed=args.seed + 1,
                         pack_tokens=args.pack_tokens, stop_at=end, frozen=frozen)
        save_drafter(out / "drafter", size, weights, d2t, t2d, target_dir)
        log(f"finetune: {finetune['epochs']} epochs / {finetune['steps']} steps in "
            f"{finetune['seconds']} s; step-0 loss {finetune['initial_loss']:.3f} -> "
            f"{finetune['final_loss']:.3f}; accuracy {finetune['initial_accuracy']:.3f} -> "
            f"{finetune['final_accuracy']:.3f}")
    else:
        if (out / "drafter").exists():
            shutil.rmtree(out / "drafter")
        shutil.copytree(out / "scratch", out / "drafter")
    lap("train finetune")

    configs = list(range(1, args.max_steps + 1))
    categories = {s["name"]: s["category"] for s in held_samples}
    pred = predict(out / "drafter", out / "dump" / "heldout", target_dir, categories,
                   args.max_steps, device, configs, size.heldout_tokens)
    (out / "prediction.json").write_text(json.dumps(pred, indent=2) + "\n")
    lap("predict")
    summary = {"size": args.size, "device": device, "seed": args.seed, "seconds": times,
               "total_seconds": round(time.perf_counter() - t0, 2),
               "train_tokens": n_train, "heldout_tokens": n_held,
               "training_seconds": {"asked": [args.scratch_seconds, args.finetune_seconds],
                                    "given": [round(scratch_s, 1), round(finetune_s, 1)],
                                    "note": note},
               "scratch": scratch,
               "finetune": finetune, "prediction": str(out / "prediction.json")}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")

    if "error" in pred:
        log(pred["error"])
    else:
        log(f"held-out ({pred['embedding_source']}):")
        log("  group        tokens  step-1 acc  conditional acceptance        predicted tau "
            + " ".join(f"s{s}" for s in configs))
        for name, g in pred["groups"].items():
            taus = " ".join(f"{v:.2f}" for v in g["predicted"].values())
            cond = ", ".join(f"{c:.2f}" for c in g["conditional_acceptance"])
            log(f"  {name:<12} {g['tokens']:>6}  {g['step_accuracy'][0]:>9.3f}  "
                f"[{cond}]  {taus}")
        served = pred["groups"]["all"]["predicted"].get("steps3_topk1_draft4")
        if served is not None:
            log(f"predicted accept length for the served config (steps 3, topk 1, draft tokens "
                f"4): {served:.3f} per verify pass "
                f"({pred['groups']['all']['predicted_per_request']['steps3_topk1_draft4']:.3f}"
                " as SGLang's per-request completion_tokens / spec_verify_ct at "
                f"{size.heldout_tokens} tokens)")
    log(f"times: {json.dumps(times)}; total {summary['total_seconds']} s; outputs in {out}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
