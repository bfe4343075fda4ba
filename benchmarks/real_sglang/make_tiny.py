"""A tiny Llama target and EAGLE-3 drafters that real SGLang serves, built offline in seconds.

usage: python3 make_tiny.py OUTDIR [--seed N] [--no-tokenizer]

  OUTDIR/target     LlamaForCausalLM, 4 layers, hidden 256, vocab 1024: config.json,
                    generation_config.json, byte-level BPE tokenizer (trained here on local
                    text), model.safetensors (seeded random bf16 weights, HF Llama names)
  OUTDIR/draft      LlamaForCausalLMEagle3, 1 layer, aux layers [0, 1, 2], draft vocab = vocab:
                    config.json, the tokenizer, model.safetensors in SGLang's EAGLE-3 layout
                    (midlayer.*, fc, norm, lm_head, d2t int64 [Vd], t2d bool [V])
  OUTDIR/draft_ref  the same drafter with another seed: specgate's reference drafter
                    (weights.shape_parity, vocab.d2t_match, vocab.t2d_match)
  OUTDIR/draft_wide a drafter built for a 512-wide target (hidden_size = target_hidden_size =
                    512), served with the 256-wide one: SGLang gives it the target's embedding
                    and feeds it the target's aux states, neither of which fits (a fault case)
  OUTDIR/draft_narrow_in
                    a drafter of hidden size 512 that reads the 256-wide target's aux states
                    (target_hidden_size 256) and carries no embed_tokens: SGLang shares the
                    target's embedding only when the two sizes agree, so this one drafts from
                    an embedding nobody loaded
  OUTDIR/big        config.json and tokenizer of a Llama with Llama-3-8B's layer shapes
                    (hidden 4096, 32 layers, GQA 32/8, MLP 14336; 7.0 B parameters, 13.9 GB in
                    bf16) and this vocabulary, no weight files: served with
                    `--load-format dummy`, it needs the memory and the decode time of a real
                    8B model (fault cases, launch records)
  OUTDIR/mid        the same for Llama-3.2-1B's layer shapes (hidden 2048, 16 layers, GQA 32/8,
                    MLP 8192; 0.97 B parameters, 1.9 GB): a decode between host- and GPU-bound

Both served models carry real weight files, so SGLang needs no `--load-format dummy` (which would
apply to the drafter too) and specgate's offline claims read real files. Needs torch and
safetensors; tokenizers and transformers when available (config.json falls back to plain JSON,
and --no-tokenizer skips the tokenizer for the simulator's dry run).
"""

from __future__ import annotations

import os
import shutil
import sys

from benchmarks import models

VOCAB = 1024
HIDDEN = 256
INTERMEDIATE = 704
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 64  # 64: SGLang's fast rope path
TARGET_LAYERS = 4
AUX_LAYERS = [0, 1, 2]  # SGLang captures the inputs of layers id+1 (never layer 0's)
CONTEXT = 2048


def tokenizer_texts() -> list[str]:
    """The standard library's sources and a few generated sentences."""
    return models.stdlib_texts(200) + [
        f"The quick brown fox {i} jumps over the lazy dog. Hello world number {i}."
        for i in range(2000)]


BIG = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
       "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 14336}
MID = {"hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
       "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 8192}
WIDE_HIDDEN = 512
SHAPES = {"hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE,
          "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM}


def configs() -> tuple[dict, dict]:
    target = models.llama_config(SHAPES, vocab_size=VOCAB, num_hidden_layers=TARGET_LAYERS,
                                 max_position_embeddings=CONTEXT, rope_theta=10000.0,
                                 bos_token_id=models.BOS, eos_token_id=models.EOS)
    draft = models.eagle3_config(target, draft_vocab=VOCAB, target_hidden=HIDDEN,
                                 aux_layers=AUX_LAYERS)
    return target, draft


def target_tensors(seed: int) -> dict:
    r = models.Random(seed)
    out = {"model.embed_tokens.weight": r.rand(VOCAB, HIDDEN)}
    for i in range(TARGET_LAYERS):
        out.update(r.layer(f"model.layers.{i}.", models.LAYER_NORMS, HIDDEN, HEADS, KV_HEADS,
                           HEAD_DIM, INTERMEDIATE))
    out["model.norm.weight"] = r.ones(HIDDEN)
    out["lm_head.weight"] = r.rand(VOCAB, HIDDEN)
    return out


def drafter_tensors(seed: int, hidden: int = HIDDEN, aux_width: int = HIDDEN) -> dict:
    """SpecForge's export names, which SGLang's LlamaForCausalLMEagle3 loader reads. No
    embed_tokens: SGLang gives the drafter the target's embedding."""
    import torch

    r = models.Random(seed)
    # q, k and v read [embed ; hidden]; fc reads the target's aux states.
    out = r.layer("midlayer.", models.EAGLE3_NORMS, hidden, HEADS, KV_HEADS, HEAD_DIM,
                  INTERMEDIATE, in_width=2 * hidden)
    out.update({
        "fc.weight": r.rand(hidden, len(AUX_LAYERS) * aux_width),
        "norm.weight": r.ones(hidden),
        "lm_head.weight": r.rand(VOCAB, hidden),
        # Draft vocab = target vocab: the identity map (d2t all zeros, every t2d bit set).
        "d2t": torch.zeros(VOCAB, dtype=torch.int64),
        "t2d": torch.ones(VOCAB, dtype=torch.bool),
    })
    return out


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="tiny Llama target + EAGLE-3 drafters")
    parser.add_argument("out", help="output folder (target/, draft/, draft_ref/ go inside)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-tokenizer", action="store_true",
                        help="skip the tokenizer (the simulator's dry run needs none)")
    ns = parser.parse_args(argv)
    out, seed = ns.out, ns.seed
    names = ("target", "draft", "draft_ref", "draft_wide", "draft_narrow_in", "big", "mid")
    target_dir, draft_dir, ref_dir, wide_dir, narrow_dir, big_dir, mid_dir = (
        os.path.join(out, n) for n in names)
    for d in (target_dir, draft_dir, ref_dir, wide_dir, narrow_dir, big_dir, mid_dir):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    if not ns.no_tokenizer:
        models.train_tokenizer(target_dir, VOCAB, tokenizer_texts(), CONTEXT)
    target_cfg, draft_cfg = configs()
    models.save_config(target_dir, target_cfg)
    generation = {"bos_token_id": models.BOS, "eos_token_id": models.EOS}
    models.write_generation_config(target_dir, **generation)
    models.save_tensors(target_dir, target_tensors(seed))
    wide_cfg = dict(draft_cfg, hidden_size=WIDE_HIDDEN, target_hidden_size=WIDE_HIDDEN)
    narrow_cfg = dict(draft_cfg, hidden_size=WIDE_HIDDEN, target_hidden_size=HIDDEN)
    for folder, drafter_seed, cfg, hidden, aux in (
            (draft_dir, seed + 1, draft_cfg, HIDDEN, HIDDEN),
            (ref_dir, seed + 2, draft_cfg, HIDDEN, HIDDEN),
            (wide_dir, seed + 3, wide_cfg, WIDE_HIDDEN, WIDE_HIDDEN),
            (narrow_dir, seed + 4, narrow_cfg, WIDE_HIDDEN, HIDDEN)):
        models.save_config(folder, cfg)
        models.copy_tokenizer(target_dir, folder)
        models.save_tensors(folder, drafter_tensors(drafter_seed, hidden, aux))
    for folder, shapes in ((big_dir, BIG), (mid_dir, MID)):
        models.save_config(folder, dict(target_cfg, **shapes))
        models.write_generation_config(folder, **generation)
        models.copy_tokenizer(target_dir, folder)
    for d in (target_dir, draft_dir, ref_dir, wide_dir, narrow_dir, big_dir, mid_dir):
        print(f"{d}: {sorted(os.listdir(d))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
