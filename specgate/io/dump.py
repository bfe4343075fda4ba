"""The hidden-state dump format: reading (headers first) and the bf16 encoding it stores.

Dump format (a folder; SpecForge-like, one safetensors file per sample):

- `*.safetensors` (every file except `embeddings.safetensors`): one sample each, with
  `input_ids` [T] int64 (or int32), `aux_hidden_states` [T, n_aux × target_hidden] bf16/f16/f32
  (SpecForge's name `hidden_state` is accepted too), `loss_mask` [T] (bool or int; 1 marks a token
  the drafter is trained to predict; absent = every token).
  aux_hidden_states[t] are the target's captured states while processing input_ids[t].
- `embeddings.safetensors` (optional): the target's token embedding, either `embed_tokens.weight`
  [V, h] or the rows of some tokens as `token_ids` [N] int64 + `weight` [N, h]. SGLang always
  serves an EAGLE-3 drafter with the target's embedding, so the evaluation uses, in this order:
  this file, the target model's embed_tokens (`[target] path`), the drafter's own embed_tokens.
- `metadata.json` (optional): {"format": "specgate.hidden_states", "aux_hidden_state_layer_ids":
  [...] (as the drafter config spells them), "target_model_type": "...", ...}.

Alignment: draft step k at position t is fed aux[t] (step 0) or its own previous output, and the
embedding of input_ids[t + 1 + k]; it predicts input_ids[t + 2 + k], scored where that token's
loss_mask is 1.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from specgate.core import files
from specgate.core.errors import CheckpointError, DataError
from specgate.io.safetensors_io import DTYPES, TensorInfo, read_array, read_header

EMBED_FILE = "embeddings.safetensors"
META_FILE = "metadata.json"
AUX_NAMES = ("aux_hidden_states", "hidden_state", "hidden_states")


@dataclasses.dataclass(frozen=True)
class DumpSample:
    """One sample file's tensors (headers only)."""

    file: Path
    input_ids: TensorInfo
    aux: TensorInfo
    loss_mask: TensorInfo | None

    @property
    def tokens(self) -> int:
        return self.input_ids.shape[0] if self.input_ids.shape else 0


@dataclasses.dataclass(frozen=True)
class HiddenStateDump:
    """An opened dump folder: its samples, metadata and embedding file."""

    path: Path
    samples: tuple[DumpSample, ...]
    metadata: dict[str, Any]
    embeddings: Path | None


def open_dump(path: Path | str) -> HiddenStateDump:
    """Open a dump folder, raising DataError that names the file when its layout is wrong."""
    folder = Path(path)
    if not folder.is_dir():
        raise DataError(f"{folder}: hidden-state dump folder not found; check [finetune] "
                        "hidden_states / [data] path")
    sample_files = sorted(p for p in folder.glob("*.safetensors") if p.name != EMBED_FILE)
    if not sample_files:
        raise DataError(f"{folder}: no sample *.safetensors files; a dump holds one file per "
                        "sample with input_ids, aux_hidden_states and loss_mask")
    samples = []
    for file in sample_files:
        try:
            tensors = read_header(file)
        except CheckpointError as exc:
            raise DataError(str(exc)) from None
        ids = tensors.get("input_ids")
        aux = next((tensors[n] for n in AUX_NAMES if n in tensors), None)
        if ids is None or aux is None:
            raise DataError(f"{file}: lacks {'input_ids' if ids is None else 'aux_hidden_states'}"
                            f" (found: {', '.join(sorted(tensors)) or 'nothing'}); each sample "
                            "needs input_ids [T] and aux_hidden_states [T, 3 × hidden]")
        samples.append(DumpSample(file, ids, aux, tensors.get("loss_mask")))
    metadata: dict[str, Any] = {}
    meta = folder / META_FILE
    if meta.exists():
        try:
            loaded = files.read_json(meta, limit=files.CONFIG_BYTES)
        except (OSError, ValueError) as exc:
            raise DataError(f"{meta}: not readable JSON ({exc})") from None
        if not isinstance(loaded, dict):
            raise DataError(f"{meta}: holds JSON {type(loaded).__name__}, expected an object")
        metadata = loaded
    embed = folder / EMBED_FILE
    return HiddenStateDump(folder, tuple(samples), metadata, embed if embed.is_file() else None)


def read_sample(sample: DumpSample) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any],
                                             np.ndarray[Any, Any]]:
    """input_ids (int64), aux hidden states (float32) and loss mask (bool) of one sample."""
    ids = read_array(sample.file, sample.input_ids).astype(np.int64).reshape(-1)
    aux = read_array(sample.file, sample.aux).astype(np.float32, copy=False)
    if sample.loss_mask is None:
        mask = np.ones(ids.shape[0], dtype=bool)
    else:
        mask = read_array(sample.file, sample.loss_mask).reshape(-1).astype(bool)
    if aux.ndim != 2 or aux.shape[0] != ids.shape[0] or mask.shape[0] != ids.shape[0]:
        raise DataError(f"{sample.file}: input_ids [{ids.shape[0]}], aux_hidden_states "
                        f"{list(aux.shape)}, loss_mask [{mask.shape[0]}]: expected [T], "
                        "[T, 3 × hidden] and [T] for one T")
    return ids, aux, mask


def read_answer(sample: DumpSample) -> tuple[int, ...]:
    """The token ids of a sample's first answer: its first run of loss-masked tokens after a
    prompt (the continuation the dump's generator produced). Empty when that is not known: no
    loss mask, no masked token, or a mask that starts at the first token (no prompt)."""
    if sample.loss_mask is None:
        return ()
    ids = read_array(sample.file, sample.input_ids).astype(np.int64).reshape(-1)
    mask = read_array(sample.file, sample.loss_mask).reshape(-1).astype(bool)
    if mask.shape[0] != ids.shape[0]:
        raise DataError(f"{sample.file}: input_ids [{ids.shape[0]}] and loss_mask "
                        f"[{mask.shape[0]}]: expected one length")
    on = np.flatnonzero(mask)
    if not on.size or on[0] == 0:
        return ()
    start = int(on[0])
    off = np.flatnonzero(~mask[start:])
    end = start + int(off[0]) if off.size else ids.shape[0]
    return tuple(int(i) for i in ids[start:end])


def stored_as(array: np.ndarray[Any, Any], dtype: str) -> np.ndarray[Any, Any]:
    """array as the dump will store it, back in float32 (so generation sees what eval reads)."""
    if dtype == "BF16":
        return (bf16_bits(array).astype(np.uint32) << 16).view(np.float32)
    return array.astype(DTYPES[dtype]).astype(np.float32)


def encode(array: np.ndarray[Any, Any], dtype: str) -> np.ndarray[Any, Any]:
    return bf16_bits(array) if dtype == "BF16" else array.astype(DTYPES[dtype])


def bf16_bits(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """float32 → bfloat16 bit patterns (uint16), rounding to nearest even like torch."""
    bits = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    out = (rounded >> np.uint32(16)).astype(np.uint16)
    nan = np.isnan(array)
    if nan.any():
        out[nan] = np.uint16(0x7FC0)
    return out
