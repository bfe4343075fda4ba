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

import glob
import json
import os
import shutil
import sys
import sysconfig

VOCAB = 1024
HIDDEN = 256
INTERMEDIATE = 704
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 64  # 64: SGLang's fast rope path
TARGET_LAYERS = 4
AUX_LAYERS = [0, 1, 2]  # SGLang captures the inputs of layers id+1 (never layer 0's)
CONTEXT = 2048
SPECIALS = ["<unk>", "<s>", "</s>"]  # ids 0, 1, 2
BOS, EOS = 1, 2
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "assistant:")


def train_tokenizer(folder: str) -> None:
    """Byte-level BPE over the standard library's sources and a few generated sentences."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    def texts():
        stdlib = sysconfig.get_paths()["stdlib"]
        for path in sorted(glob.glob(os.path.join(stdlib, "*.py")))[:200]:
            try:
                with open(path, encoding="utf-8", errors="ignore") as fh:
                    yield fh.read()
            except OSError:
                continue
        for i in range(2000):
            yield f"The quick brown fox {i} jumps over the lazy dog. Hello world number {i}."

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts(), trainer)
    if tok.get_vocab_size() > VOCAB:
        raise SystemExit(f"tokenizer has {tok.get_vocab_size()} tokens, more than {VOCAB}")
    tok.save(os.path.join(folder, "tokenizer.json"))
    write_json(os.path.join(folder, "tokenizer_config.json"), {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "model_max_length": CONTEXT, "add_bos_token": False,
        "chat_template": CHAT_TEMPLATE,
    })
    write_json(os.path.join(folder, "special_tokens_map.json"),
               {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})


def write_json(path: str, data: dict) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1)
        fh.write("\n")


BIG = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
       "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 14336}
MID = {"hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
       "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 8192}
WIDE_HIDDEN = 512


def configs() -> tuple[dict, dict]:
    common = {
        "vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE,
        "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
        "hidden_act": "silu", "max_position_embeddings": CONTEXT, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "bos_token_id": BOS, "eos_token_id": EOS,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    }
    target = dict(common, architectures=["LlamaForCausalLM"], model_type="llama",
                  num_hidden_layers=TARGET_LAYERS)
    draft = dict(common, architectures=["LlamaForCausalLMEagle3"], model_type="llama",
                 num_hidden_layers=1, draft_vocab_size=VOCAB, target_hidden_size=HIDDEN,
                 eagle_config={"eagle_aux_hidden_state_layer_ids": AUX_LAYERS,
                               "use_aux_hidden_state": True})
    return target, draft


def save_config(folder: str, config: dict) -> None:
    """transformers' own serialisation when it imports (its rope format is what SGLang read in
    the tested recipe), else the plain dictionary."""
    try:
        from transformers import LlamaConfig

        fields = dict(config)
        fields.pop("model_type")
        LlamaConfig(**fields).save_pretrained(folder)
    except Exception as exc:  # no transformers, or one that refuses a field
        print(f"{folder}: transformers config save unavailable ({exc.__class__.__name__}); "
              "writing config.json directly")
        write_json(os.path.join(folder, "config.json"), config)


def target_tensors(seed: int) -> dict:
    import torch

    gen = torch.Generator().manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * 0.02).to(torch.bfloat16)

    def ones(n: int) -> torch.Tensor:
        return torch.ones(n, dtype=torch.bfloat16)

    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    out = {"model.embed_tokens.weight": rand(VOCAB, HIDDEN)}
    for i in range(TARGET_LAYERS):
        p = f"model.layers.{i}."
        out.update({
            p + "self_attn.q_proj.weight": rand(q, HIDDEN),
            p + "self_attn.k_proj.weight": rand(kv, HIDDEN),
            p + "self_attn.v_proj.weight": rand(kv, HIDDEN),
            p + "self_attn.o_proj.weight": rand(HIDDEN, q),
            p + "mlp.gate_proj.weight": rand(INTERMEDIATE, HIDDEN),
            p + "mlp.up_proj.weight": rand(INTERMEDIATE, HIDDEN),
            p + "mlp.down_proj.weight": rand(HIDDEN, INTERMEDIATE),
            p + "input_layernorm.weight": ones(HIDDEN),
            p + "post_attention_layernorm.weight": ones(HIDDEN),
        })
    out["model.norm.weight"] = ones(HIDDEN)
    out["lm_head.weight"] = rand(VOCAB, HIDDEN)
    return out


def drafter_tensors(seed: int, hidden: int = HIDDEN, aux_width: int = HIDDEN) -> dict:
    """SpecForge's export names, which SGLang's LlamaForCausalLMEagle3 loader reads. No
    embed_tokens: SGLang gives the drafter the target's embedding."""
    import torch

    gen = torch.Generator().manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * 0.02).to(torch.bfloat16)

    def ones(n: int) -> torch.Tensor:
        return torch.ones(n, dtype=torch.bfloat16)

    q, kv, vd = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, VOCAB
    m = "midlayer."
    return {
        m + "self_attn.q_proj.weight": rand(q, 2 * hidden),   # input: [embed ; hidden]
        m + "self_attn.k_proj.weight": rand(kv, 2 * hidden),
        m + "self_attn.v_proj.weight": rand(kv, 2 * hidden),
        m + "self_attn.o_proj.weight": rand(hidden, q),
        m + "mlp.gate_proj.weight": rand(INTERMEDIATE, hidden),
        m + "mlp.up_proj.weight": rand(INTERMEDIATE, hidden),
        m + "mlp.down_proj.weight": rand(hidden, INTERMEDIATE),
        m + "input_layernorm.weight": ones(hidden),
        m + "hidden_norm.weight": ones(hidden),
        m + "post_attention_layernorm.weight": ones(hidden),
        "fc.weight": rand(hidden, len(AUX_LAYERS) * aux_width),   # the target's aux states
        "norm.weight": ones(hidden),
        "lm_head.weight": rand(vd, hidden),
        # Draft vocab = target vocab: the identity map (d2t all zeros, every t2d bit set).
        "d2t": torch.zeros(vd, dtype=torch.int64),
        "t2d": torch.ones(VOCAB, dtype=torch.bool),
    }


def copy_tokenizer(source: str, folder: str) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if os.path.exists(os.path.join(source, name)):
            shutil.copy(os.path.join(source, name), folder)


def save_tensors(folder: str, tensors: dict) -> None:
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in tensors.items()},
              os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})


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
        train_tokenizer(target_dir)
    target_cfg, draft_cfg = configs()
    save_config(target_dir, target_cfg)
    write_json(os.path.join(target_dir, "generation_config.json"),
               {"bos_token_id": BOS, "eos_token_id": EOS})
    save_tensors(target_dir, target_tensors(seed))
    wide_cfg = dict(draft_cfg, hidden_size=WIDE_HIDDEN, target_hidden_size=WIDE_HIDDEN)
    narrow_cfg = dict(draft_cfg, hidden_size=WIDE_HIDDEN, target_hidden_size=HIDDEN)
    for folder, drafter_seed, cfg, hidden, aux in (
            (draft_dir, seed + 1, draft_cfg, HIDDEN, HIDDEN),
            (ref_dir, seed + 2, draft_cfg, HIDDEN, HIDDEN),
            (wide_dir, seed + 3, wide_cfg, WIDE_HIDDEN, WIDE_HIDDEN),
            (narrow_dir, seed + 4, narrow_cfg, WIDE_HIDDEN, HIDDEN)):
        save_config(folder, cfg)
        copy_tokenizer(target_dir, folder)
        save_tensors(folder, drafter_tensors(drafter_seed, hidden, aux))
    for folder, shapes in ((big_dir, BIG), (mid_dir, MID)):
        save_config(folder, dict(target_cfg, **shapes))
        write_json(os.path.join(folder, "generation_config.json"),
                   {"bos_token_id": BOS, "eos_token_id": EOS})
        copy_tokenizer(target_dir, folder)
    for d in (target_dir, draft_dir, ref_dir, wide_dir, narrow_dir, big_dir, mid_dir):
        print(f"{d}: {sorted(os.listdir(d))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
