"""What a model folder is, for the verdict: its shape (config.json) and digests of its files."""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path
from typing import Any

from specgate.core import files
from specgate.io.safetensors_io import MAX_HEADER_BYTES

# config.json fields that say what a model is; nested text_config (multimodal) is looked into.
SHAPE_FIELDS = (("layers", "num_hidden_layers"), ("hidden_size", "hidden_size"),
                ("vocab_size", "vocab_size"), ("draft_vocab_size", "draft_vocab_size"))


def identify(folder: Path | None) -> dict[str, Any] | None:
    """Architecture, layers, hidden size, vocabulary, and the sha256 of config.json and of the
    safetensors files' headers (names, dtypes, shapes, offsets: not the weights themselves, so
    a 1 TB checkpoint costs a few reads). What cannot be read here says why, never raises."""
    if folder is None:
        return None
    found: dict[str, Any] = {"path": str(folder)}
    config_path = folder / "config.json"
    try:
        raw = files.read_bytes(config_path, limit=files.CONFIG_BYTES)
        config = files.loads_json(raw)
    except (OSError, ValueError) as exc:
        found["unreadable"] = f"{config_path}: {_reason(exc)}"
        return found
    found["config_sha256"] = hashlib.sha256(raw).hexdigest()
    if isinstance(config, dict):
        archs = config.get("architectures")
        found["architecture"] = (", ".join(str(a) for a in archs) if isinstance(archs, list)
                                 else None)
        inner = config.get("text_config")
        for key, field in SHAPE_FIELDS:
            value = config.get(field)
            if value is None and isinstance(inner, dict):
                value = inner.get(field)
            if isinstance(value, int) and not isinstance(value, bool):
                found[key] = value
    headers = hashlib.sha256()
    weights = sorted(folder.glob("*.safetensors"))
    for path in weights:
        try:
            headers.update(path.name.encode("utf-8", "surrogateescape") + b"\0")
            headers.update(_header_bytes(path))
        except (OSError, ValueError) as exc:
            found["weights_unreadable"] = f"{path}: {_reason(exc)}"
            break
    found["weight_files"] = len(weights)
    if weights and "weights_unreadable" not in found:
        found["weights_header_sha256"] = headers.hexdigest()
    return found


def _header_bytes(path: Path) -> bytes:
    with files.open_regular(path) as fh:
        prefix = fh.read(8)
        if len(prefix) < 8:
            raise ValueError("shorter than a safetensors header")
        (length,) = struct.unpack("<Q", prefix)
        if length > MAX_HEADER_BYTES:
            raise ValueError(f"header of {length} bytes is larger than {MAX_HEADER_BYTES}")
        body = fh.read(length)
        if len(body) < length:
            raise ValueError("header cut short")
        return prefix + body


def _reason(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError):
        return "not found"
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    return str(exc) or type(exc).__name__
