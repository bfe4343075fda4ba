"""Synthetic drafters and target configs with real layouts, sparse on disk, for demos and tests."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specgate.io.checkpoint import INDEX_NAME, expected_layout
from specgate.io.safetensors_io import DTYPES, TensorSpec, dtype_code, write_sparse
from specgate.io.vocab_maps import VocabMap, load_map

FILLS = ("sparse", "marked", "random")
NAME_STYLES = ("layers.0", "midlayer")
RANDOM_CHUNK_ELEMENTS = 8 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class DrafterPreset:
    """A drafter family to generate: its config sizes, tensor naming and export conventions.

    (The sizes a forward needs, read back from config.json, are model.eagle.DrafterShape.)
    """

    name: str
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    draft_vocab_size: int
    max_position_embeddings: int
    aux_layer_ids: tuple[int, ...]
    include_embed: bool = True
    name_style: str = "layers.0"
    bos_token_id: int = 1
    eos_token_id: int = 2
    rope_theta: float = 1000000.0
    transformers_version: str = "4.57.1"

    def config(self, dtype: str = "bfloat16") -> dict[str, Any]:
        """A config.json carrying every field a real SpecForge/AQ-MedAI export carries."""
        return {
            "architectures": ["LlamaForCausalLMEagle3"],
            "attention_bias": False,
            "attention_dropout": 0.0,
            "bos_token_id": self.bos_token_id,
            "draft_vocab_size": self.draft_vocab_size,
            "dtype": dtype,
            "eagle_config": {
                "eagle_aux_hidden_state_layer_ids": list(self.aux_layer_ids),
                "use_aux_hidden_state": True,
            },
            "eos_token_id": self.eos_token_id,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "hidden_size": self.hidden_size,
            "initializer_range": 0.02,
            "intermediate_size": self.intermediate_size,
            "max_position_embeddings": self.max_position_embeddings,
            "max_window_layers": 48,
            "mlp_bias": False,
            "model_type": "llama",
            "num_attention_heads": self.num_attention_heads,
            "num_hidden_layers": 1,
            "num_key_value_heads": self.num_key_value_heads,
            "pretraining_tp": 1,
            "rms_norm_eps": 1e-06,
            "rope_scaling": None,
            "rope_theta": self.rope_theta,
            "tie_word_embeddings": False,
            "torch_dtype": dtype,
            "transformers_version": self.transformers_version,
            "use_cache": True,
            "vocab_size": self.vocab_size,
        }


def kimi_k25() -> DrafterPreset:
    """A drafter shaped like one trained from scratch for Kimi-K2.5 (~4.7 GB with embed_tokens)."""
    return DrafterPreset("kimi-k25", 7168, 18432, 64, 64, 128, 163840, 32000, 262144, (2, 30, 58),
                        include_embed=True, name_style="layers.0", bos_token_id=163584,
                        eos_token_id=163585)


def aq_medai_k2() -> DrafterPreset:
    """AQ-MedAI/Kimi-K2-Instruct-eagle3: same shapes, 131072 positions, no embed, midlayer names."""
    return DrafterPreset("aq-medai-k2", 7168, 18432, 64, 64, 128, 163840, 32000, 131072,
                        (2, 30, 58), include_embed=False, name_style="midlayer",
                        bos_token_id=163584, eos_token_id=163585, transformers_version="4.57.0")


def small() -> DrafterPreset:
    """A few-MB drafter for demos: real structure, small sizes, an 8-layer target."""
    return DrafterPreset("small", 256, 512, 4, 2, 64, 4096, 512, 8192, (1, 3, 5))


def tiny() -> DrafterPreset:
    """A drafter of a few hundred KB for unit tests."""
    return DrafterPreset("tiny", 32, 64, 2, 2, 16, 256, 64, 2048, (1, 3, 5))


PRESETS = {"kimi-k25": kimi_k25, "aq-medai-k2": aq_medai_k2, "small": small, "tiny": tiny}


def default_token_ids(shape: DrafterPreset, seed: int = 0) -> np.ndarray[Any, Any]:
    """A sorted, seeded choice of draft_vocab_size distinct target ids."""
    rng = np.random.default_rng(seed)
    ids = rng.choice(shape.vocab_size, size=shape.draft_vocab_size, replace=False)
    return np.sort(ids.astype(np.int64))


def shifted_token_ids(reference_ids: Sequence[int] | np.ndarray[Any, Any], matches: int = 252,
                      vocab_size: int | None = None) -> np.ndarray[Any, Any]:
    """The seeds' borrowed-drafter case: the first `matches` positions agree, one token differs.

    Drops the reference's id at position `matches` and appends a new id above all others, so
    every later position holds its right neighbour's token and len − 1 tokens are shared.
    """
    ref = np.unique(np.asarray(reference_ids, dtype=np.int64))
    if not 0 <= matches < ref.size:
        raise ValueError(f"matches must be in [0, {ref.size}), got {matches}")
    new_id = int(ref[-1]) + 1
    if vocab_size is not None and new_id >= vocab_size:
        raise ValueError(f"the reference already uses target id {vocab_size - 1}; no id above it "
                         "is left to append")
    return np.concatenate([ref[:matches], ref[matches + 1:], [new_id]])


def write_drafter(out_dir: Path | str, shape: DrafterPreset, *,
                  token_ids: Sequence[int] | np.ndarray[Any, Any] | None = None, seed: int = 0,
                  name_style: str | None = None, include_embed: bool | None = None,
                  dtype: str = "bfloat16", fill: str = "sparse",
                  config_overrides: Mapping[str, Any] | None = None, shards: int = 1) -> Path:
    """Write config.json and safetensors for a drafter of this shape; returns the folder.

    fill: "sparse" leaves every weight a hole (all zeros, ~no disk); "marked" writes one
    non-zero value per weight so the health claim passes at almost no disk cost; "random"
    writes small random values (real disk: for small shapes or deliberate big test files).
    """
    if fill not in FILLS:
        raise ValueError(f"fill must be one of {FILLS}, got {fill!r}")
    style = name_style or shape.name_style
    if style not in NAME_STYLES:
        raise ValueError(f"name_style must be one of {NAME_STYLES}, got {style!r}")
    embed = shape.include_embed if include_embed is None else include_embed
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    code = dtype_code(dtype)
    config = shape.config(dtype)
    config.update(config_overrides or {})
    ids = default_token_ids(shape, seed) if token_ids is None else token_ids
    vmap = VocabMap.from_token_ids(ids, shape.vocab_size)
    if vmap.draft_vocab_size != shape.draft_vocab_size:
        raise ValueError(f"{vmap.draft_vocab_size} distinct token ids given, the shape's "
                         f"draft_vocab_size is {shape.draft_vocab_size}")
    rng_seed = seed
    specs: dict[str, TensorSpec] = {}
    for canonical, want in expected_layout(shape.config(dtype)).items():
        if canonical == "d2t":
            specs["d2t"] = TensorSpec("I64", want.shape, data=vmap.d2t)
        elif canonical == "t2d":
            assert vmap.t2d is not None
            specs["t2d"] = TensorSpec("BOOL", want.shape, data=vmap.t2d)
        elif canonical == "embed_tokens.weight" and not embed:
            continue
        else:
            stored = canonical.replace("layers.0.", "midlayer.") if style == "midlayer" \
                else canonical
            rng_seed += 1
            specs[stored] = _weight_spec(code, want.shape, fill, canonical.endswith("norm.weight"),
                                         rng_seed)
    _write_files(out, specs, shards)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return out


def _weight_spec(code: str, shape: tuple[int, ...], fill: str, is_norm: bool,
                 seed: int) -> TensorSpec:
    if fill == "sparse":
        return TensorSpec(code, shape)
    if fill == "marked":
        return TensorSpec(code, shape, mark=True)
    numel = math.prod(shape)

    def chunks() -> Iterator[bytes]:
        rng = np.random.default_rng(seed)
        for lo in range(0, numel, RANDOM_CHUNK_ELEMENTS):
            n = min(RANDOM_CHUNK_ELEMENTS, numel - lo)
            values = rng.standard_normal(n, dtype=np.float32) * np.float32(0.02)
            if is_norm:
                values += np.float32(1.0)
            yield _encode(values, code)

    return TensorSpec(code, shape, chunks=chunks)


def _encode(values: np.ndarray[Any, Any], code: str) -> bytes:
    if code == "BF16":
        bits = values.view(np.uint32)
        rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
        return (rounded >> np.uint32(16)).astype(np.uint16).tobytes()
    return values.astype(DTYPES[code]).tobytes()


def _write_files(out: Path, specs: dict[str, TensorSpec], shards: int) -> None:
    metadata = {"format": "pt"}
    if shards <= 1:
        write_sparse(out / "model.safetensors", specs, metadata)
        return
    # Greedy by size so shards come out about equal, as real exporters make them.
    loads = [0] * shards
    groups: list[dict[str, TensorSpec]] = [{} for _ in range(shards)]
    for name, spec in sorted(specs.items(), key=lambda kv: -kv[1].nbytes):
        k = loads.index(min(loads))
        groups[k][name] = spec
        loads[k] += spec.nbytes
    weight_map = {}
    for k, group in enumerate(groups):
        file = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        write_sparse(out / file, dict(sorted(group.items())), metadata)
        weight_map.update({name: file for name in group})
    index = {"metadata": {"total_size": sum(loads)}, "weight_map": dict(sorted(weight_map.items()))}
    (out / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")


def kimi_k25_target_config() -> dict[str, Any]:
    """The language-model fields of Kimi-K2.5's config.json (DeepSeek-V3 architecture)."""
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "kimi_k2",
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "num_hidden_layers": 61,
        "num_attention_heads": 64,
        "num_key_value_heads": 64,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "n_routed_experts": 384,
        "num_experts_per_tok": 8,
        "n_shared_experts": 1,
        "first_k_dense_replace": 1,
        "vocab_size": 163840,
        "bos_token_id": 163584,
        "eos_token_id": 163585,
        "pad_token_id": 163839,
        "max_position_embeddings": 262144,
        "rope_theta": 50000.0,
        "rope_scaling": {"type": "yarn", "factor": 64.0,
                         "original_max_position_embeddings": 4096,
                         "beta_fast": 1.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
        "rms_norm_eps": 1e-06,
        "torch_dtype": "bfloat16",
        "tie_word_embeddings": False,
    }


def small_target_config(shape: DrafterPreset | None = None) -> dict[str, Any]:
    """A DeepSeek-V3-style target with 8 layers that fits a small drafter shape."""
    shape = shape or small()
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "hidden_size": shape.hidden_size,
        "intermediate_size": shape.intermediate_size,
        "num_hidden_layers": 8,
        "num_attention_heads": shape.num_attention_heads,
        "num_key_value_heads": shape.num_attention_heads,
        "vocab_size": shape.vocab_size,
        "max_position_embeddings": shape.max_position_embeddings,
        "rope_theta": 10000.0,
        "rms_norm_eps": 1e-06,
        "torch_dtype": "bfloat16",
    }


def write_target_config(out_dir: Path | str, preset: str = "kimi-k25", *,
                        multimodal: bool = False, **overrides: Any) -> Path:
    """Write a target's config.json (multimodal: nested under text_config like Kimi-K2.5's)."""
    if preset in ("kimi-k25", "aq-medai-k2"):
        config = kimi_k25_target_config()
    elif preset in ("small", "tiny"):
        config = small_target_config(PRESETS[preset]())
    else:
        raise ValueError(f"target preset must be one of {', '.join(PRESETS)}, got {preset!r}")
    config.update(overrides)
    if multimodal:
        config = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
                  "text_config": config}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return out


def generate(out_dir: Path, preset: str, *, shift_from: Path | None = None, matches: int = 252,
             fill: str = "marked", seed: int = 0, name_style: str | None = None,
             include_embed: bool | None = None, shards: int = 1, dtype: str = "bfloat16",
             target_out: Path | None = None) -> Path:
    """A synthetic drafter of a preset shape (its token ids shifted from another map's when
    shift_from is given), and a matching target config.json in target_out; returns the folder.
    """
    shape = PRESETS[preset]()
    token_ids = None
    if shift_from is not None:
        reference = load_map(shift_from).target_ids()
        token_ids = shifted_token_ids(reference, matches, shape.vocab_size)
    out = write_drafter(out_dir, shape, token_ids=token_ids, seed=seed, name_style=name_style,
                        include_embed=include_embed, dtype=dtype, fill=fill, shards=shards)
    if target_out is not None:
        write_target_config(target_out, preset)
    return out
