"""What a model folder is, for the verdict: its shape (config.json) and digests of its files."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import struct
import threading
from pathlib import Path
from typing import Any

import blake3

from specgate.core import files
from specgate.io.health import data_ranges
from specgate.io.safetensors_io import MAX_HEADER_BYTES

# config.json fields that say what a model is; nested text_config (multimodal) is looked into.
SHAPE_FIELDS = (("layers", "num_hidden_layers"), ("hidden_size", "hidden_size"),
                ("vocab_size", "vocab_size"), ("draft_vocab_size", "draft_vocab_size"))


def identify(folder: Path | None, *, weight_bytes: bool = False) -> dict[str, Any] | None:
    """Architecture, layers, hidden size, vocabulary, and the sha256 of config.json and of the
    safetensors files' headers (names, dtypes, shapes, offsets: a 1 TB target costs a few
    reads). weight_bytes (a drafter's few GB): also the BLAKE3 digest of every byte of its
    weight files (weights_digest), so two drafters one byte apart differ. What cannot be read
    here says why, never raises."""
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
        if weight_bytes:
            try:
                digest = weights_digest(folder)
            except OSError as exc:
                found["weights_unreadable"] = f"{exc.filename or folder}: {_reason(exc)}"
            else:
                found["weights_blake3"] = digest.hex
                found["weight_bytes"] = digest.size
    return found


@dataclasses.dataclass(frozen=True)
class WeightsDigest:
    """The BLAKE3 of a folder's weight files: every file's name, size and bytes, in name order."""

    hex: str
    size: int  # bytes hashed


_STAT = tuple[str, int, int, int, int, int]  # path, device, inode, size, mtime and ctime in ns
_memo: dict[tuple[_STAT, ...], WeightsDigest] = {}
_memo_lock = threading.Lock()


def weights_digest(folder: Path) -> WeightsDigest:
    """Digest every *.safetensors file of folder: its data read in large blocks and hashed on
    every core (BLAKE3 runs at 8 GB/s a core with AVX-512), the holes of a sparse file hashed as
    the zeros they read as, without reading them. A folder whose files are unchanged since the
    last call in this process is not read again. Raises OSError naming the file it could not
    read."""
    weights = sorted(folder.glob("*.safetensors"))
    stats: list[_STAT] = []
    for path in weights:
        st = files.check_regular(path)
        stats.append((str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
                      st.st_ctime_ns))
    key = tuple(stats)
    with _memo_lock:
        known = _memo.get(key)
    if known is not None:
        return known
    whole = blake3.blake3()
    total = 0
    for path, (_p, _dev, _ino, size, _mtime, _ctime) in zip(weights, stats, strict=True):
        try:
            digest = _file_digest(path, size)
        except OSError as exc:
            exc.filename = exc.filename or str(path)
            raise
        whole.update(path.name.encode("utf-8", "surrogateescape") + b"\0"
                     + str(size).encode() + b"\0" + digest)
        total += size
    found = WeightsDigest(whole.hexdigest(), total)
    with _memo_lock:
        _memo[key] = found
    return found


_BLOCK = 16 << 20
_ZEROS = memoryview(bytes(_BLOCK))


def _file_digest(path: Path, size: int) -> bytes:
    """BLAKE3 of one file's bytes: data ranges read, holes fed as zeros."""
    one = blake3.blake3(max_threads=blake3.blake3.AUTO)
    buf = bytearray(_BLOCK)
    view = memoryview(buf)
    with files.open_regular(path) as fh:
        fd = fh.fileno()
        pos = 0
        for start, end in [*data_ranges(fd, 0, size), (size, size)]:
            while pos < start:  # a hole: zeros
                n = min(_BLOCK, start - pos)
                one.update(_ZEROS[:n])
                pos += n
            while pos < end:
                n = os.preadv(fd, [view[:min(_BLOCK, end - pos)]], pos)
                if n <= 0:
                    raise OSError(f"{path}: the file ended at byte {pos} of {size} while it "
                                  "was read")
                one.update(view[:n])
                pos += n
    return one.digest()


def drafter_digest(folder: Path | None) -> str | None:
    """A drafter as the history names it: the BLAKE3 of its weight files' bytes and of its
    config.json (a drafter is both); None where either cannot be read here."""
    if folder is None:
        return None
    try:
        if not any(folder.glob("*.safetensors")):
            return None
        config = files.read_bytes(folder / "config.json", limit=files.CONFIG_BYTES)
        return drafter_key(weights_digest(folder).hex, hashlib.sha256(config).hexdigest())
    except OSError:
        return None


def drafter_key(weights_blake3: str, config_sha256: str) -> str:
    """The history's name for a drafter from its identity's two digests."""
    return blake3.blake3(f"{weights_blake3}\0{config_sha256}".encode()).hexdigest()


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
