"""The draft model's folder as SGLang loads it at start-up: what stops the server, and what it
starts without.

SGLang reads the draft's config.json with transformers, finds its weight files, reads each
safetensors header and copies every tensor into the parameter of its name, asserting the shapes
agree (facts: srt/models/llama_eagle3.py, model_loader/weight_utils.py). Each failure there ends
start-up with the exception below. A tensor the checkpoint lacks is not checked: the parameter
keeps whatever memory it was given (d2t missing leaves the draft ids unmapped), the server
starts, and its drafts are not accepted. The drafter takes the target's embedding only when its
hidden_size equals its target_hidden_size (LlamaForCausalLM.set_embed); otherwise its own
embed_tokens is used, loaded or not. A drafter whose fc reads aux states of another width than
the target's stops the server at its first forward, the warm-up request (seen on SGLang 0.5.17:
"RuntimeError: mat1 and mat2 shapes cannot be multiplied (13x768 and 1536x512)").
"""

from __future__ import annotations

import json
from pathlib import Path

from specgate.core.errors import CheckpointError
from specgate.io.checkpoint import (
    PICKLE_SUFFIXES,
    expected_layout,
    normalize_name,
    num_aux_states,
)
from specgate.io.safetensors_io import TensorInfo, read_header

# Not loaded into a parameter: t2d is skipped, embed_tokens comes from the target.
_NOT_LOADED = frozenset({"t2d", "embed_tokens.weight"})


class DraftLoadError(Exception):
    """SGLang would stop loading the draft model; the text is the exception line it prints."""


def check_draft_folder(folder: Path, revision: str = "main",
                       target_hidden: int | None = None) -> tuple[str, ...]:
    """Raise DraftLoadError where SGLang stops while loading or warming up the draft model;
    otherwise the tensors it would need and not find (sorted), which leave the draft model
    unable to propose accepted tokens. target_hidden: the target's hidden_size, when known."""
    config = _config(folder, revision)
    tensors = _tensors(folder)
    if tensors is None:  # pickled weights only: SGLang loads them, the simulator does not read
        return ()
    try:
        layout = expected_layout(config, max_tensors=len(tensors))
    except CheckpointError:
        return ()  # config fields the simulator cannot size tensors from
    missing = []
    for name, want in layout.items():
        info = tensors.get(name)
        if info is None:
            # embed_tokens is required only when the target's is not shared (another width).
            if not want.optional and (name not in _NOT_LOADED or name == "embed_tokens.weight"):
                missing.append(name)
        elif name not in _NOT_LOADED and name != "d2t" and info.shape != want.shape:
            raise DraftLoadError(
                f"AssertionError: Attempted to load weight (torch.Size({list(info.shape)})) into "
                f"parameter (torch.Size({list(want.shape)})) [{info.name} in {info.file}]")
    fc = layout.get("fc.weight")
    if target_hidden is not None and fc is not None and len(fc.shape) == 2 and fc.shape[1]:
        per_aux = fc.shape[1] // max(1, num_aux_states(config))
        if per_aux != target_hidden:
            reads = fc.shape[1] // per_aux * target_hidden
            raise DraftLoadError(
                f"RuntimeError: mat1 and mat2 shapes cannot be multiplied (13x{reads} and "
                f"{fc.shape[1]}x{fc.shape[0]})")
    return tuple(sorted(missing))


def _config(folder: Path, revision: str) -> dict[str, object]:
    path = folder / "config.json"
    if not path.is_file():
        raise DraftLoadError(
            f"OSError: {folder} does not appear to have a file named config.json. Checkout "
            f"'https://huggingface.co/{folder}/tree/{revision}' for available files.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        raise DraftLoadError(
            f"OSError: It looks like the config file at '{path}' is not a valid JSON file."
        ) from None
    if not isinstance(data, dict):
        raise DraftLoadError(
            f"OSError: It looks like the config file at '{path}' is not a valid JSON file.")
    return data


def _tensors(folder: Path) -> dict[str, TensorInfo] | None:
    """Every tensor of the folder's safetensors files by its normalised name; None when the
    weights are pickled only."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        if any(p.name.endswith(PICKLE_SUFFIXES) for p in folder.iterdir()):
            return None
        raise DraftLoadError(f"RuntimeError: Cannot find any model weights with `{folder}`")
    tensors: dict[str, TensorInfo] = {}
    for file in files:
        try:
            header = read_header(file)
        except CheckpointError as exc:
            raise DraftLoadError(
                f"safetensors_rust.SafetensorError: Error while deserializing header: {exc}"
            ) from None
        for name, info in header.items():
            tensors[normalize_name(name)] = info
    return tensors
