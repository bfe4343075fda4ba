"""The one place the benchmarks build model folders: Llama-shaped and EAGLE-3 configs, seeded
random bf16 weights with Hugging Face's tensor names, safetensors files (one, or shards with an
index), a byte-level BPE tokenizer, and tokenizer files copied from another folder.

make_tiny.py, gpu_bound.py, train_drafter.py (real_sglang) and pad_target.py (real_model) write
their folders through these functions, so a folder SGLang serves is laid out the same way
whichever of them wrote it. torch, safetensors, tokenizers and transformers are imported where
they are used: a caller needs only what its folders need.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import sysconfig
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

# What a served folder may hold beside its config and weights; a copy takes those present.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "chat_template.jinja", "vocab.json", "merges.txt")
# The trained tokenizer's special tokens take ids 0, 1 and 2.
SPECIALS = ["<unk>", "<s>", "</s>"]
BOS, EOS = 1, 2
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "assistant:")
# A decoder layer's norms: a Llama layer's, and an EAGLE-3 midlayer's (hidden_norm normalises
# the target's state before it joins the embedding).
LAYER_NORMS = ("input_layernorm", "post_attention_layernorm")
EAGLE3_NORMS = ("input_layernorm", "hidden_norm", "post_attention_layernorm")


def write_json(path: str | Path, data: Mapping[str, Any], indent: int | None = 1) -> None:
    Path(path).write_text(json.dumps(data, indent=indent) + "\n", encoding="utf-8")


# --- configs --------------------------------------------------------------------------------

def llama_config(shapes: Mapping[str, int], **fields: Any) -> dict[str, Any]:
    """A LlamaForCausalLM config.json: the layer shapes (hidden_size, num_hidden_layers, ...),
    SiLU, RMSNorm eps 1e-5, untied bf16 weights, and `fields` over all of these."""
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **shapes,
            "hidden_act": "silu", "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
            "torch_dtype": "bfloat16", **fields}


def eagle3_config(target: Mapping[str, Any], draft_vocab: int, target_hidden: int,
                  aux_layers: Iterable[int] | None = None, **fields: Any) -> dict[str, Any]:
    """The config of a one-layer LlamaForCausalLMEagle3 drafter with the target config's fields;
    with aux_layers, the eagle_config that names the target layers SGLang captures."""
    config = dict(target, architectures=["LlamaForCausalLMEagle3"], model_type="llama",
                  num_hidden_layers=1, draft_vocab_size=draft_vocab,
                  target_hidden_size=target_hidden, **fields)
    if aux_layers is not None:
        config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": list(aux_layers),
                                  "use_aux_hidden_state": True}
    return config


def save_config(folder: str | Path, config: Mapping[str, Any],
                log: Callable[[str], None] = print) -> None:
    """transformers' own serialisation when it imports (its rope format is what SGLang read in
    the tested recipe), else the plain dictionary."""
    try:
        from transformers import LlamaConfig

        fields = dict(config)
        fields.pop("model_type", None)
        LlamaConfig(**fields).save_pretrained(str(folder))
    except Exception as exc:  # no transformers, or one that refuses a field
        log(f"{folder}: transformers config save unavailable ({exc.__class__.__name__}); "
            "writing config.json directly")
        write_json(Path(folder) / "config.json", config)


def write_generation_config(folder: str | Path, **ids: int) -> None:
    """generation_config.json with the token ids given (bos_token_id, eos_token_id)."""
    write_json(Path(folder) / "generation_config.json", ids)


# --- tokenizer ------------------------------------------------------------------------------

def stdlib_texts(limit: int) -> list[str]:
    """The first `limit` of the standard library's top-level sources, as text."""
    texts = []
    for path in sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))[:limit]:
        try:
            texts.append(Path(path).read_text(encoding="utf-8", errors="ignore"))
        except OSError:
            continue
    return texts


def train_tokenizer(folder: str | Path, vocab: int, texts: Iterable[str],
                    context: int = 2048) -> Any:
    """A byte-level BPE of at most `vocab` tokens trained on `texts`, with SPECIALS at ids 0-2,
    saved to `folder` with its tokenizer_config.json (CHAT_TEMPLATE) and special tokens map."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    if tok.get_vocab_size() > vocab:
        raise RuntimeError(f"tokenizer has {tok.get_vocab_size()} tokens, more than {vocab}")
    if [tok.token_to_id(s) for s in SPECIALS] != [0, BOS, EOS]:
        raise RuntimeError("special tokens did not get ids 0, 1, 2")
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    write_json(out / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "model_max_length": context, "add_bos_token": False,
        "chat_template": CHAT_TEMPLATE,
    })
    write_json(out / "special_tokens_map.json",
               {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})
    return tok


def copy_tokenizer(source: str | Path, folder: str | Path,
                   names: Iterable[str] = TOKENIZER_FILES) -> None:
    """The tokenizer files of `source` that are there (a converted model may lack some)."""
    for name in names:
        if (Path(source) / name).is_file():
            shutil.copy(Path(source) / name, Path(folder) / name)


# --- weights --------------------------------------------------------------------------------

def layer_shapes(prefix: str, hidden: int, heads: int, kv_heads: int, head_dim: int,
                 intermediate: int, in_width: int | None = None) -> dict[str, tuple[int, int]]:
    """The matrices of one Llama decoder layer, by Hugging Face name under `prefix`, in the
    order they are drawn. in_width: what q, k and v read (an EAGLE-3 midlayer reads the
    embedding and the hidden state side by side, 2 * hidden)."""
    width = hidden if in_width is None else in_width
    q, kv = heads * head_dim, kv_heads * head_dim
    return {
        prefix + "self_attn.q_proj.weight": (q, width),
        prefix + "self_attn.k_proj.weight": (kv, width),
        prefix + "self_attn.v_proj.weight": (kv, width),
        prefix + "self_attn.o_proj.weight": (hidden, q),
        prefix + "mlp.gate_proj.weight": (intermediate, hidden),
        prefix + "mlp.up_proj.weight": (intermediate, hidden),
        prefix + "mlp.down_proj.weight": (hidden, intermediate),
    }


class Random:
    """Seeded bf16 tensors on `device`: normal with std 0.02, and norms of ones."""

    def __init__(self, seed: int, device: str = "cpu") -> None:
        import torch

        self.device = device
        self.gen = torch.Generator(device=device).manual_seed(seed)

    def rand(self, *shape: int) -> Any:
        import torch

        return (torch.randn(*shape, generator=self.gen, device=self.device) * 0.02).to(
            torch.bfloat16)

    def ones(self, n: int) -> Any:
        import torch

        return torch.ones(n, dtype=torch.bfloat16, device=self.device)

    def layer(self, prefix: str, norms: Iterable[str], hidden: int, heads: int, kv_heads: int,
              head_dim: int, intermediate: int, in_width: int | None = None) -> dict[str, Any]:
        """One decoder layer: random matrices (layer_shapes) and the named norms at one."""
        out = {name: self.rand(*shape) for name, shape in layer_shapes(
            prefix, hidden, heads, kv_heads, head_dim, intermediate, in_width).items()}
        out.update({f"{prefix}{norm}.weight": self.ones(hidden) for norm in norms})
        return out


def save_tensors(folder: str | Path, tensors: Mapping[str, Any]) -> None:
    """All of `tensors` in folder/model.safetensors."""
    from safetensors.torch import save_file

    save_file({k: v.contiguous().cpu() for k, v in tensors.items()},
              str(Path(folder) / "model.safetensors"), metadata={"format": "pt"})


class ShardWriter:
    """Tensors saved in shards of about `shard_bytes`, named as Hugging Face names them
    (model-00001-of-00003.safetensors), with model.safetensors.index.json. A group added at
    once stays in one shard. single_file: when everything fits one shard, it is
    model.safetensors and there is no index."""

    def __init__(self, folder: Path, shard_bytes: int, single_file: bool = False) -> None:
        self.folder, self.shard_bytes, self.single_file = folder, shard_bytes, single_file
        self.shard: dict[str, Any] = {}
        self.size = 0
        self.index: dict[str, int] = {}  # tensor name -> shard number
        self.count = 0

    def add(self, tensors: Mapping[str, Any]) -> None:
        for name, tensor in tensors.items():
            self.shard[name] = tensor
            self.size += tensor.numel() * tensor.element_size()
        if self.size >= self.shard_bytes:
            self.flush()

    def flush(self) -> None:
        from safetensors.torch import save_file

        if not self.shard:
            return
        self.count += 1
        save_file({k: v.contiguous().cpu() for k, v in self.shard.items()},
                  str(self.folder / f"part-{self.count:05d}.safetensors"),
                  metadata={"format": "pt"})
        self.index.update(dict.fromkeys(self.shard, self.count))
        self.shard, self.size = {}, 0

    def close(self) -> None:
        self.flush()
        parts = {k: self.folder / f"part-{k:05d}.safetensors" for k in range(1, self.count + 1)}
        if self.single_file and self.count == 1:
            parts[1].rename(self.folder / "model.safetensors")
            return
        names = {k: f"model-{k:05d}-of-{self.count:05d}.safetensors" for k in parts}
        for k, part in parts.items():
            part.rename(self.folder / names[k])
        weight_map = {name: names[k] for name, k in sorted(self.index.items())}
        total = sum((self.folder / f).stat().st_size for f in names.values())
        write_json(self.folder / "model.safetensors.index.json",
                   {"metadata": {"total_size": total}, "weight_map": weight_map})
