"""Drafter checkpoints on disk: config.json plus one or several safetensors files."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import threading
from collections.abc import Container, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from specgate.core import files
from specgate.core.errors import CheckpointError
from specgate.io.safetensors_io import (
    TensorInfo,
    TensorTables,
    read_array,
    read_header,
    shared_name,
)

INDEX_NAME = "model.safetensors.index.json"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")
# Not trained by the drafter: taken from the target (embeddings, the training-only verifier head)
# or built from data (the vocab maps).
FROZEN_TENSORS = frozenset({"embed_tokens.weight", "verifier_lm_head.weight", "d2t", "t2d"})

_LEGACY_RENAMES = (
    ("midlayer.", "layers.0."),
    ("aux_norm_low.", "fc_norm.0."),
    ("aux_norm_mid.", "fc_norm.1."),
    ("aux_norm_high.", "fc_norm.2."),
)
_LEGACY_PREFIXES = tuple(old for old, _ in _LEGACY_RENAMES)
_RENAMED_PREFIXES = ("model.", *_LEGACY_PREFIXES)  # the names normalize_name changes


@dataclasses.dataclass(frozen=True)
class Drafter:
    """An opened drafter: its folder, parsed config and every tensor with the file holding it."""

    path: Path
    config: dict[str, Any]
    tensors: Mapping[str, TensorInfo]
    files: tuple[Path, ...]

    def find(self, canonical: str) -> TensorInfo | None:
        """The tensor whose normalized name is `canonical`, whatever naming the file uses."""
        name = self.stored_name(canonical)
        return None if name is None else self.tensors[name]

    def stored_name(self, canonical: str) -> str | None:
        """The name the files store the tensor of normalized name `canonical` under."""
        if self._canonical is None:
            return canonical if canonical in self.tensors else None
        return self._canonical.get(canonical)

    def by_canonical(self) -> dict[str, TensorInfo]:
        return {canonical: self.tensors[name] for canonical, name in self._names().items()}

    def unexplained(self, known: Container[str]) -> list[str]:
        """The stored names, sorted, of the tensors whose normalized name is not in `known`."""
        if self._canonical is None:
            return sorted(itertools.filterfalse(known.__contains__, self.tensors))
        return sorted(name for canonical, name in self._canonical.items()
                      if canonical not in known)

    def _names(self) -> dict[str, str]:
        return dict(zip(self.tensors, self.tensors, strict=True)) if self._canonical is None else \
            self._canonical

    @functools.cached_property
    def _canonical(self) -> dict[str, str] | None:
        """Each normalized name with the name the files store it under; None where every name
        is already normalized (a header may hold 300,000 of them: no dict of them then)."""
        names = self.tensors
        if not any(map(str.startswith, names, itertools.repeat(_RENAMED_PREFIXES))):
            return None
        # Built once: find() per tensor would otherwise be quadratic in the tensor count.
        return {normalize_name(name): name for name in names}


class ExpectedTensor(NamedTuple):
    """A tensor the config implies: shape, dtype code (None: any float) and whether optional."""

    shape: tuple[int, ...]
    dtype: str | None
    optional: bool = False
    why: str = ""  # what a missing one costs, when the name alone does not say


def normalize_name(name: str) -> str:
    """One spelling for a tensor: no `model.` prefix, `layers.0.*` for legacy `midlayer.*`."""
    name = name.removeprefix("model.")
    if name.startswith(_LEGACY_PREFIXES):
        for old, new in _LEGACY_RENAMES:
            if name.startswith(old):
                return new + name[len(old):]
    return name


def read_config(path: Path | str) -> dict[str, Any]:
    """config.json of a model folder (or the file itself) as a dict."""
    path = Path(path)
    try:
        path.stat()
    except OSError as exc:
        raise CheckpointError(f"{path}: {exc.strerror or exc}; check the path in the profile "
                              "or on the command line") from None
    file = path / "config.json" if path.is_dir() else path
    if file is path and path.suffix != ".json":
        # e.g. model.safetensors given as the drafter: not "config.json is not valid JSON".
        raise CheckpointError(f"{path}: is a file, not a folder; give the model folder that "
                              "holds config.json and the *.safetensors weights")
    if not file.exists():
        if file is not path and is_empty(path):
            raise CheckpointError(empty_folder(path))
        raise CheckpointError(f"{path}: has no config.json; a drafter folder holds config.json "
                              "and its *.safetensors weights")
    try:
        config = files.read_json(file, limit=files.CONFIG_BYTES)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{file}: not valid JSON ({exc}); fix or re-download it") from None
    except files.JsonTooDeep as exc:
        raise CheckpointError(f"{file}: {exc}; fix or "
                              "re-download it") from None
    except ValueError as exc:  # an integer longer than Python's 4300-digit limit
        raise CheckpointError(f"{file}: holds a number specgate will not read ({exc}); fix or "
                              "re-download it") from None
    except OSError as exc:
        raise CheckpointError(f"{file}: cannot be read: {exc.strerror or exc}") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{file}: holds JSON {type(config).__name__}, expected an object")
    return config


def empty_folder(folder: Path) -> str:
    """What an empty model folder is said to be, by every reader of it (one cause, one
    wording)."""
    return (f"{folder}: the folder is empty; expected config.json and *.safetensors weights "
            "(was the download or export finished?)")


def is_empty(folder: Path) -> bool:
    """A folder that exists and holds nothing."""
    try:
        return next(folder.iterdir(), None) is None
    except OSError:
        return False


def load_target_config(path: Path | str) -> dict[str, Any]:
    """The target's language-model config (multimodal configs keep it under text_config)."""
    config = read_config(path)
    text = config.get("text_config")
    if "hidden_size" not in config and isinstance(text, dict):
        return text
    return config


_cache: dict[Path, tuple[tuple[Any, ...], Drafter]] = {}
_cache_lock = threading.Lock()


def open_drafter(path: Path | str) -> Drafter:
    """Open a drafter folder; cached until any of its files changes."""
    try:
        folder = Path(path).expanduser().resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop (RuntimeError before Python 3.13)
        raise CheckpointError(f"{path}: cannot be resolved ({exc}); the drafter path is a "
                              "symlink loop or unreadable") from None
    signature = _signature(folder)
    with _cache_lock:
        hit = _cache.get(folder)
        if hit is not None and hit[0] == signature:
            return hit[1]
    drafter = _open(folder)
    with _cache_lock:
        _cache[folder] = (signature, drafter)
    return drafter


def _signature(folder: Path) -> tuple[Any, ...]:
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return ()
    out = []
    for entry in entries:
        try:
            st = entry.stat()
        except OSError:
            continue
        out.append((entry.name, st.st_mtime_ns, st.st_size))
    return tuple(out)


def _open(folder: Path) -> Drafter:
    if not folder.exists():
        raise CheckpointError(f"{folder}: drafter folder not found; check [drafter] path or "
                              "--drafter")
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: is a file, not a folder; a drafter is a folder with "
                              "config.json and *.safetensors")
    try:
        names = sorted(p.name for p in folder.iterdir())
    except OSError as exc:
        raise CheckpointError(f"{folder}: the drafter folder cannot be listed "
                              f"({exc.strerror or exc}); check its permissions") from None
    if not names:
        raise CheckpointError(empty_folder(folder))
    config = read_config(folder)
    files = _weight_files(folder, names)
    tensors: Mapping[str, TensorInfo]
    if (folder / INDEX_NAME).exists():
        weight_map = _weight_map(folder / INDEX_NAME)
        headers = {f: read_header(folder / f) for f in sorted(set(weight_map.values()))}
        indexed: dict[str, TensorInfo] = {}
        for name, shard in weight_map.items():
            info = headers[shard].get(name)
            if info is None:
                raise CheckpointError(f"{folder / INDEX_NAME}: maps tensor {name!r} to {shard}, "
                                      "but that shard has no such tensor; the index and shards "
                                      "come from different exports")
            indexed[name] = info
        tensors = indexed
    else:
        tensors = _merged(folder, [(file, read_header(file)) for file in files])
    return Drafter(folder, config, tensors, tuple(files))


def _merged(folder: Path,
            headers: list[tuple[Path, Mapping[str, TensorInfo]]]) -> Mapping[str, TensorInfo]:
    """The tensors of every file, refusing a name that two files hold."""
    if len(headers) == 1:
        return headers[0][1]
    parts = [tensors for _, tensors in headers]
    if shared_name(parts):
        seen: dict[str, Path] = {}
        for file, tensors in headers:
            for name in tensors:
                if name in seen:
                    raise CheckpointError(f"{folder}: tensor {name!r} appears in both "
                                          f"{seen[name].name} and {file.name}")
                seen[name] = file
    return TensorTables(parts)


def _weight_files(folder: Path, names: list[str]) -> list[Path]:
    safetensors = [folder / n for n in names if n.endswith(".safetensors")]
    if safetensors:
        return safetensors
    pickled = [n for n in names if n.endswith(PICKLE_SUFFIXES)]
    if pickled:
        raise CheckpointError(
            f"{folder}: weights only in pickle format ({', '.join(pickled)}); specgate never "
            "unpickles checkpoints (it can run code). Convert them to safetensors (e.g. "
            "safetensors.torch.save_file(torch.load(p, weights_only=True), 'model.safetensors'))")
    raise CheckpointError(f"{folder}: no *.safetensors file (found: {', '.join(names)}); export "
                          "the drafter in SGLang format (config.json + model.safetensors)")


def shard_files(folder: Path) -> list[Path]:
    """The safetensors files of a checkpoint folder: the shards its index names (checked as
    _weight_map checks them), else every *.safetensors file in it."""
    index = folder / INDEX_NAME
    if index.is_file():
        return [folder / s for s in sorted(set(_weight_map(index).values()))]
    return sorted(folder.glob("*.safetensors"))


def _weight_map(index: Path) -> dict[str, str]:
    try:
        doc = files.read_json(index, limit=files.INDEX_BYTES)
    except OSError as exc:
        raise CheckpointError(f"{index}: cannot be read: {exc.strerror or exc}") from None
    except ValueError as exc:  # not UTF-8, not JSON, nested too deeply, an overlong number
        raise CheckpointError(f"{index}: not valid JSON ({exc})") from None
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index}: has no weight_map object naming each tensor's shard")
    bad = sorted({repr(s) for s in weight_map.values()
                  if not isinstance(s, str) or not s or Path(s).name != s or s in (".", "..")})
    if bad:
        # Shards are files beside the index; a path would read outside the checkpoint.
        raise CheckpointError(f"{index}: weight_map values must be shard file names in "
                              f"{index.parent}, found {', '.join(bad[:5])}; fix the index")
    missing = sorted({s for s in weight_map.values() if not (index.parent / str(s)).is_file()})
    if missing:
        raise CheckpointError(f"{index}: names shard(s) {', '.join(missing)} that are not in "
                              f"{index.parent}; copy the missing shards or fix the index")
    return {str(k): str(v) for k, v in weight_map.items()}


def read_tensor(drafter: Drafter, name: str) -> np.ndarray[Any, Any]:
    """One tensor by its stored or normalized name."""
    info = drafter.tensors.get(name) or drafter.find(normalize_name(name))
    if info is None:
        raise CheckpointError(f"{drafter.path}: has no tensor {name!r}")
    return read_array(info.file, info)


def head_dim(config: dict[str, Any]) -> int:
    value = config.get("head_dim")
    if isinstance(value, int) and value > 0:
        return value
    return int(config["hidden_size"]) // int(config["num_attention_heads"])


def aux_layer_ids(config: dict[str, Any]) -> list[int] | None:
    """eagle_config.eagle_aux_hidden_state_layer_ids, checked to be integers (a CheckpointError
    naming the key otherwise; the caller adds the file)."""
    eagle = config.get("eagle_config")
    if isinstance(eagle, dict):
        ids = eagle.get("eagle_aux_hidden_state_layer_ids")
        if isinstance(ids, list):
            bad = [i for i in ids if isinstance(i, bool) or not isinstance(i, int)]
            if bad:
                raise CheckpointError(
                    f"eagle_config.eagle_aux_hidden_state_layer_ids is {_short(ids)}: "
                    f"{_short(bad[0])} is not an integer layer id; list the target layers whose "
                    "hidden states the drafter reads, e.g. [1, 29, 57]")
            return list(ids)
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def num_aux_states(config: dict[str, Any]) -> int:
    """SGLang's rule: num_aux_hidden_states, else the number of aux layer ids, else 3."""
    if isinstance(config.get("num_aux_hidden_states"), int):
        return int(config["num_aux_hidden_states"])
    ids = aux_layer_ids(config)
    return len(ids) if ids else 3


def expected_layout(config: dict[str, Any],
                    max_tensors: int | None = None) -> dict[str, ExpectedTensor]:
    """The tensors (normalized names) an EAGLE-3 drafter with this config must carry.

    max_tensors (the checkpoint's tensor count) bounds the work: a config implying more
    tensors than the files hold is refused before they are listed, so the time does not grow
    with a number in config.json.
    """
    try:
        h = int(config["hidden_size"])
        heads = int(config["num_attention_heads"])
        kv = int(config.get("num_key_value_heads") or heads)
        inter = int(config["intermediate_size"])
        vocab = int(config["vocab_size"])
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise CheckpointError(f"config.json lacks or garbles field {exc}; an EAGLE-3 drafter "
                              "config needs hidden_size, num_attention_heads, intermediate_size "
                              "and vocab_size") from None
    if heads <= 0 and not (isinstance(config.get("head_dim"), int) and config["head_dim"] > 0):
        raise CheckpointError(f"config.json: num_attention_heads is {heads} and there is no "
                              "head_dim; the head size cannot be derived")
    d = head_dim(config)
    th = int(config.get("target_hidden_size") or h)
    draft_vocab = config.get("draft_vocab_size")
    vd = int(draft_vocab) if draft_vocab else vocab
    n_aux = num_aux_states(config)
    layout = {
        "fc.weight": ExpectedTensor((h, n_aux * th), None),
        "layers.0.self_attn.q_proj.weight": ExpectedTensor((heads * d, 2 * h), None),
        "layers.0.self_attn.k_proj.weight": ExpectedTensor((kv * d, 2 * h), None),
        "layers.0.self_attn.v_proj.weight": ExpectedTensor((kv * d, 2 * h), None),
        "layers.0.self_attn.o_proj.weight": ExpectedTensor((h, heads * d), None),
        "layers.0.mlp.gate_proj.weight": ExpectedTensor((inter, h), None),
        "layers.0.mlp.up_proj.weight": ExpectedTensor((inter, h), None),
        "layers.0.mlp.down_proj.weight": ExpectedTensor((h, inter), None),
        "layers.0.input_layernorm.weight": ExpectedTensor((h,), None),
        "layers.0.hidden_norm.weight": ExpectedTensor((h,), None),
        "layers.0.post_attention_layernorm.weight": ExpectedTensor((h,), None),
        "norm.weight": ExpectedTensor((h,), None),
        # Without draft_vocab_size or with tied embeddings SGLang takes lm_head from elsewhere.
        "lm_head.weight": ExpectedTensor(
            (vd, h), None, optional=not draft_vocab or bool(config.get("tie_word_embeddings"))),
        # A full-vocabulary drafter needs no map (d2t would be all zeros).
        "d2t": ExpectedTensor((vd,), "I64", optional=vd == vocab),
        "t2d": ExpectedTensor((vocab,), "BOOL", optional=vd == vocab),
        # Frozen and replaced by the target's embedding at load time, which SGLang does only
        # when the drafter is as wide as the target (LlamaForCausalLMEagle3.set_embed).
        "embed_tokens.weight": ExpectedTensor(
            (vocab, h), None, optional=th == h,
            why="" if th == h else (
                f"SGLang gives a drafter the target's embedding only when hidden_size equals "
                f"target_hidden_size ({h} ≠ {th}); without an embed_tokens of its own this "
                "drafter drafts from an embedding that nothing loads")),
    }
    if config.get("attention_bias"):
        layout["layers.0.self_attn.q_proj.bias"] = ExpectedTensor((heads * d,), None)
        layout["layers.0.self_attn.k_proj.bias"] = ExpectedTensor((kv * d,), None)
        layout["layers.0.self_attn.v_proj.bias"] = ExpectedTensor((kv * d,), None)
    if config.get("fc_norm") or config.get("use_aux_norm"):
        if max_tensors is not None and n_aux > max_tensors:
            raise CheckpointError(
                f"config.json: {n_aux} aux hidden states with fc_norm imply {n_aux} fc_norm "
                f"tensors, more than the {max_tensors} tensors in the checkpoint; fix "
                "num_aux_hidden_states or eagle_aux_hidden_state_layer_ids")
        for i in range(n_aux):
            layout[f"fc_norm.{i}.weight"] = ExpectedTensor((th,), None)
    return layout


def is_trainable(canonical: str) -> bool:
    """Not a frozen tensor: embed_tokens comes from the target, d2t/t2d are maps, and a
    verifier_lm_head (some exports carry the target's head) is never trained."""
    return canonical not in FROZEN_TENSORS and not canonical.startswith("verifier_lm_head.")
