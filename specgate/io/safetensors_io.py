"""A small, validating reader and a sparse writer of the safetensors file format."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import struct
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from specgate.core.errors import CheckpointError

# Headers of real checkpoints are a few hundred KB; anything far larger is a corrupt length field.
MAX_HEADER_BYTES = 100 * 1024 * 1024

# Storage dtype of each safetensors dtype code. BF16 and FP8 have no numpy dtype: their raw bits
# are read as unsigned integers of the same width.
DTYPES: dict[str, np.dtype[Any]] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
    "F8_E4M3": np.dtype("u1"),
    "F8_E5M2": np.dtype("u1"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"),
    "U32": np.dtype("<u4"),
    "U16": np.dtype("<u2"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
FLOAT_DTYPES = frozenset({"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"})

# torch / config.json spellings of the same dtypes.
TORCH_NAMES = {
    "float64": "F64", "float32": "F32", "float": "F32", "float16": "F16", "half": "F16",
    "bfloat16": "BF16", "int64": "I64", "long": "I64", "int32": "I32", "int": "I32",
    "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL",
    "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2",
}


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lives: its file, dtype code, shape and absolute byte range."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int
    file: Path

    @property
    def nbytes(self) -> int:
        return self.end - self.start

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclasses.dataclass(frozen=True)
class SafetensorsHeader:
    """The parsed header of one file: its tensors, free-form metadata and data offset."""

    path: Path
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str]
    data_start: int
    file_size: int


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """A tensor to write: dtype code, shape, and where its bytes come from.

    Without `data` or `chunks` the tensor is left as a hole (reads as zeros, costs no disk);
    `mark` writes its first element as one (a hole otherwise) so it is not all zero.
    """

    dtype: str
    shape: tuple[int, ...]
    data: np.ndarray[Any, Any] | None = None
    chunks: Callable[[], Iterable[bytes]] | None = None
    mark: bool = False

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * itemsize(self.dtype)


def itemsize(dtype: str) -> int:
    return DTYPES[dtype].itemsize


def dtype_code(name: str) -> str:
    """The safetensors code for a safetensors, torch or config.json dtype name."""
    if name in DTYPES:
        return name
    bare = name.removeprefix("torch.")
    if bare in TORCH_NAMES:
        return TORCH_NAMES[bare]
    raise ValueError(f"unknown dtype {name!r}; expected one of {', '.join(DTYPES)} or a torch name")


def read_file_header(path: Path | str) -> SafetensorsHeader:
    """Parse and validate a safetensors header without touching the tensor data."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            file_size = os.fstat(f.fileno()).st_size
            if file_size < 8:
                raise CheckpointError(
                    f"{path}: {file_size} bytes, too short for a safetensors file (the 8-byte "
                    "header length alone is missing); the download or copy was probably cut "
                    "short: fetch the file again")
            (header_len,) = struct.unpack("<Q", f.read(8))
            if header_len > file_size - 8 or header_len > MAX_HEADER_BYTES:
                raise CheckpointError(
                    f"{path}: header length field says {header_len} bytes but the file has only "
                    f"{file_size - 8} after it; the file is truncated or not safetensors: fetch "
                    "it again")
            raw = f.read(header_len)
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(
            f"{path}: the {header_len}-byte header is not valid JSON ({exc}); the file is "
            "corrupt or not safetensors") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: the header is JSON {type(header).__name__}, expected an "
                              "object mapping tensor names to dtype/shape/data_offsets")
    data_start = 8 + header_len
    data_size = file_size - data_start
    metadata_raw = header.pop("__metadata__", None) or {}
    if not isinstance(metadata_raw, dict):
        raise CheckpointError(f"{path}: __metadata__ is {type(metadata_raw).__name__}, "
                              "expected an object of strings")
    metadata = {str(k): str(v) for k, v in metadata_raw.items()}
    tensors = {name: _tensor_info(path, name, entry, data_start, data_size)
               for name, entry in header.items()}
    return SafetensorsHeader(path, tensors, metadata, data_start, file_size)


def read_header(path: Path | str) -> dict[str, TensorInfo]:
    """The tensors of a safetensors file by name (metadata: read_file_header(path).metadata)."""
    return read_file_header(path).tensors


def _tensor_info(path: Path, name: str, entry: Any, data_start: int,
                 data_size: int) -> TensorInfo:
    if not isinstance(entry, dict):
        raise CheckpointError(f"{path}: header entry {name!r} is not an object")
    dtype = entry.get("dtype")
    if dtype not in DTYPES:
        raise CheckpointError(f"{path}: tensor {name!r} has unknown dtype {dtype!r}; expected "
                              f"one of {', '.join(DTYPES)}")
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise CheckpointError(f"{path}: tensor {name!r} has shape {shape!r}, expected a list of "
                              "non-negative integers")
    offsets = entry.get("data_offsets")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(o, int) for o in offsets)):
        raise CheckpointError(f"{path}: tensor {name!r} has data_offsets {offsets!r}, expected "
                              "[begin, end]")
    begin, end = offsets
    if not 0 <= begin <= end <= data_size:
        raise CheckpointError(
            f"{path}: tensor {name!r} claims bytes {begin}..{end} of the data but the data "
            f"section has {data_size} bytes; the file is truncated: fetch it again")
    want = math.prod(shape) * DTYPES[dtype].itemsize
    if end - begin != want:
        raise CheckpointError(
            f"{path}: tensor {name!r} occupies {end - begin} bytes but shape {shape} of {dtype} "
            f"needs {want}; the header is corrupt")
    return TensorInfo(name, dtype, tuple(shape), data_start + begin, data_start + end, path)


def read_array(path: Path | str, info: TensorInfo) -> np.ndarray[Any, Any]:
    """One tensor as a numpy array (BF16 widened to float32; FP8 as raw uint8 bits)."""
    raw = np.fromfile(path, dtype=DTYPES[info.dtype], count=info.numel, offset=info.start)
    if raw.size != info.numel:
        raise CheckpointError(f"{path}: tensor {info.name!r} is cut short ({raw.size} of "
                              f"{info.numel} elements); fetch the file again")
    if info.dtype == "BF16":
        raw = (raw.astype(np.uint32) << 16).view(np.float32)
    return raw.reshape(info.shape)


def write_sparse(path: Path | str, tensors: Mapping[str, TensorSpec],
                 metadata: Mapping[str, str] | None = None) -> Path:
    """Write a safetensors file; tensors without bytes stay holes, so big files cost little disk."""
    path = Path(path)
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    offset = 0
    layout: list[tuple[str, TensorSpec, int]] = []
    for name, spec in tensors.items():
        code = dtype_code(spec.dtype)
        spec = dataclasses.replace(spec, dtype=code)
        header[name] = {"dtype": code, "shape": list(spec.shape),
                        "data_offsets": [offset, offset + spec.nbytes]}
        layout.append((name, spec, offset))
        offset += spec.nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the format pads the header so the data is 8-byte aligned
    data_start = 8 + len(blob)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for name, spec, rel in layout:
            f.seek(data_start + rel)
            _write_tensor(f, name, spec)
        f.truncate(data_start + offset)
    return path


def _write_tensor(f: Any, name: str, spec: TensorSpec) -> None:
    if spec.data is not None:
        array = np.ascontiguousarray(spec.data, dtype=DTYPES[spec.dtype])
        if array.nbytes != spec.nbytes:
            raise ValueError(f"{name}: data has {array.nbytes} bytes, shape {spec.shape} of "
                             f"{spec.dtype} needs {spec.nbytes}")
        f.write(array.tobytes())
    elif spec.chunks is not None:
        written = 0
        for chunk in spec.chunks():
            if _all_zero(chunk):
                # Leave a hole: it reads as zeros, and a copied sparse file stays sparse.
                f.seek(len(chunk), os.SEEK_CUR)
            else:
                f.write(chunk)
            written += len(chunk)
        if written != spec.nbytes:
            raise ValueError(f"{name}: chunks gave {written} bytes, expected {spec.nbytes}")
    elif spec.mark and spec.nbytes:
        f.write(_one(spec.dtype))


_ZEROS = bytes(16 * 1024 * 1024)


def _all_zero(chunk: bytes) -> bool:
    size = len(chunk)
    if size <= len(_ZEROS):
        return chunk == _ZEROS[:size]
    return chunk.count(0) == size


def _one(dtype: str) -> bytes:
    """The bytes of the value 1 in a dtype (FP8 codes chosen by their bit layouts)."""
    special = {"BF16": b"\x80\x3f", "F8_E4M3": b"\x38", "F8_E5M2": b"\x3c"}
    if dtype in special:
        return special[dtype]
    return np.ones(1, dtype=DTYPES[dtype]).tobytes()
