"""A small, validating reader and a sparse writer of the safetensors file format."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import itertools
import json
import math
import operator
import os
import re
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specgate.core import files
from specgate.core.errors import CheckpointError

# The safetensors library's own limits (SGLang loads through it): a header of at most 10^8 bytes,
# sizes that fit an unsigned 64-bit integer, and JSON nested at most 127 containers deep
# (serde_json's recursion limit). Headers of real checkpoints are a few hundred KB.
MAX_HEADER_BYTES = 100_000_000
U64_MAX = 2**64 - 1
MAX_JSON_DEPTH = 127
# Every dtype code the library knows, by its size in bits (the sub-byte ones pack elements).
FORMAT_BITS: dict[str, int] = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8,
    "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16,
    "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64,
    "U64": 64,
}
_TENSOR_FIELDS = ("dtype", "shape", "data_offsets")
_SURROGATE = re.compile("[\ud800-\udfff]")

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
    tensors: Mapping[str, TensorInfo]
    metadata: dict[str, str]
    data_start: int
    file_size: int


# Lookups of a table's tensors by a scan of its names before it builds a dict of their
# positions: the claims look up a few dozen names, a comparison of two drafters every one.
_SCANS_BEFORE_INDEX = 64


class TensorTable(Mapping[str, TensorInfo]):
    """The tensors of one file's header as columns (names, dtypes, shapes, byte ranges): a
    TensorInfo is made when one is asked for, so a header of 300,000 entries costs no object
    per tensor beyond its name and shape. The columns are tuples of strings and integers, which
    the cycle collector stops tracking once it has seen them, and arrays: it has nothing to
    walk in them after that."""

    __slots__ = ("_begins", "_data_start", "_dtypes", "_ends", "_index", "_members", "_names",
                 "_path", "_scans", "_shapes")

    def __init__(self, path: Path, data_start: int, names: tuple[str, ...],
                 dtypes: tuple[str, ...], shapes: tuple[tuple[int, ...], ...],
                 begins: np.ndarray[Any, np.dtype[np.uint64]],
                 ends: np.ndarray[Any, np.dtype[np.uint64]]) -> None:
        self._path, self._data_start = path, data_start
        self._names, self._dtypes, self._shapes = names, dtypes, shapes
        self._begins, self._ends = begins, ends  # offsets in the data section
        # Built when first needed: a set of the names answers `in`; the first few lookups
        # find their position by a scan, the later ones through a dict of positions.
        self._members: frozenset[str] | None = None
        self._index: dict[str, int] | None = None
        self._scans = 0

    def __getitem__(self, name: str) -> TensorInfo:
        i = self._position(name)
        return TensorInfo(name, self._dtypes[i], self._shapes[i],
                          self._data_start + int(self._begins[i]),
                          self._data_start + int(self._ends[i]), self._path)

    def __contains__(self, name: object) -> bool:
        if self._index is not None:
            return name in self._index
        if self._members is None:
            self._members = frozenset(self._names)
        return name in self._members

    def _position(self, name: str) -> int:
        if self._index is None:
            if self._scans < _SCANS_BEFORE_INDEX:
                if name not in self:
                    raise KeyError(name)
                self._scans += 1
                return self._names.index(name)
            self._index = dict(zip(self._names, range(len(self._names)), strict=True))
            self._members = None
        return self._index[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return f"TensorTable({str(self._path)!r}, {len(self)} tensors)"

    def filled(self) -> list[str]:
        """The names of the tensors that hold at least one byte, in the header's order."""
        names = self._names
        return [names[i] for i in np.flatnonzero(self._ends > self._begins).tolist()]


class TensorTables(Mapping[str, TensorInfo]):
    """The tensors of several files as one mapping, in the files' order, each name looked up
    in each file in turn, the smallest first: no index of its own over what may be 300,000
    names, and a large file is asked only about names the others lack. Built only from files no
    two of which hold the same name (shared_name finds one)."""

    __slots__ = ("_lookup", "_parts")

    def __init__(self, parts: Sequence[Mapping[str, TensorInfo]]) -> None:
        self._parts = tuple(parts)
        self._lookup = tuple(sorted(self._parts, key=len))

    def __getitem__(self, name: str) -> TensorInfo:
        for part in self._lookup:
            if name in part:
                return part[name]
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:
        return any(name in part for part in self._lookup)

    def __iter__(self) -> Iterator[str]:
        return itertools.chain.from_iterable(self._parts)

    def __len__(self) -> int:
        return sum(map(len, self._parts))

    def filled(self) -> list[str]:
        return [name for part in self._parts for name in filled_names(part)]


def shared_name(parts: Sequence[Mapping[str, TensorInfo]]) -> bool:
    """Whether two of the mappings hold the same name: the names of all but the largest are
    gathered, and the largest is asked about each of them."""
    if len(parts) < 2:
        return False
    largest = max(range(len(parts)), key=lambda k: len(parts[k]))
    seen: set[str] = set()
    for k, part in enumerate(parts):
        if k != largest:
            if not seen.isdisjoint(part):
                return True
            seen.update(part)
    return any(name in parts[largest] for name in seen)


def filled_names(tensors: Mapping[str, TensorInfo]) -> list[str]:
    """The names of the tensors that hold at least one byte (an empty one has nothing to read),
    from the columns where the mapping has them."""
    if isinstance(tensors, (TensorTable, TensorTables)):
        return tensors.filled()
    return [name for name, info in tensors.items() if info.end > info.start]


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
    """Parse and validate a safetensors header without touching the tensor data.

    Refuses exactly what the safetensors library refuses (tests/io/test_safetensors_oracle.py
    compares the two on generated files): SGLang loads through it, so a file it rejects must fail
    here, naming the file and the reason.
    """
    path = Path(path)
    try:
        with files.open_regular(path) as f:
            file_size = os.fstat(f.fileno()).st_size
            if file_size < 8:
                raise CheckpointError(
                    f"{path}: {file_size} bytes, too short for a safetensors file (the 8-byte "
                    "header length alone is missing); the download or copy was probably cut "
                    "short: fetch the file again")
            (header_len,) = struct.unpack("<Q", f.read(8))
            if header_len > MAX_HEADER_BYTES:
                raise CheckpointError(
                    f"{path}: header length field says {header_len} bytes, over the format's "
                    f"limit of {MAX_HEADER_BYTES}; the file is corrupt or not safetensors")
            if header_len > file_size - 8:
                raise CheckpointError(
                    f"{path}: header length field says {header_len} bytes but the file has only "
                    f"{file_size - 8} after it; the file is truncated or not safetensors: fetch "
                    "it again")
            raw = f.read(header_len)
    except files.UnreadableFile as exc:
        raise CheckpointError(f"{path}: {exc}; a safetensors file must be a plain file"
                              ) from None
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    with cyclic_gc_paused():
        return _header_of(path, raw, 8 + header_len, file_size)


@contextlib.contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Python's cycle collector held off while a header becomes objects: they hold no cycles
    (reference counting frees them), and on a header of 300,000 entries the collector spent
    more time walking the growing graph than the parse itself took."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _header_of(path: Path, raw: bytes, data_start: int, file_size: int) -> SafetensorsHeader:
    data_size = file_size - data_start
    scanned = _scanned_table(path, raw, data_start, data_size)
    if scanned is not None:
        return SafetensorsHeader(path, scanned, {}, data_start, file_size)
    header = _parse_header_json(path, raw)
    metadata_raw = header.pop("__metadata__", None)
    if metadata_raw is None:
        metadata_raw = {}
    if not isinstance(metadata_raw, dict):
        raise CheckpointError(f"{path}: __metadata__ is {_json_kind(metadata_raw)}, "
                              "expected an object of strings")
    bad = [k for k, v in metadata_raw.items() if not isinstance(v, str)]
    if bad:
        raise CheckpointError(f"{path}: __metadata__ value of {bad[0]!r} is "
                              f"{_json_kind(metadata_raw[bad[0]])}; the format allows only strings")
    metadata = dict(metadata_raw)
    for name, entry in header.shadowed if isinstance(header, _Dup) else ():
        _tensor_info(path, name, entry, data_start)  # a repeated name: each entry must parse
    table = _table_of(path, header, data_start, data_size)
    if table is not None:
        return SafetensorsHeader(path, table, metadata, data_start, file_size)
    # Something is unusual or wrong: entry by entry, saying which entry and why.
    tensors = {name: _tensor_info(path, name, entry, data_start)
               for name, entry in header.items()}
    _check_coverage(path, tensors, data_start, data_size)
    return SafetensorsHeader(path, tensors, metadata, data_start, file_size)


_DTYPE = operator.itemgetter("dtype")
_DTYPE_CODES = {code: code for code in FORMAT_BITS}
_SHAPE = operator.itemgetter("shape")
_OFFSETS = operator.itemgetter("data_offsets")


def _table_of(path: Path, header: dict[str, Any], data_start: int,
              data_size: int) -> TensorTable | None:
    """The header as columns when every entry is the usual one and the tensors tile the data
    section exactly, checked a column at a time (in C where it can be: a header may hold
    300,000 entries); None for anything else, which _tensor_info and _check_coverage then
    refuse entry by entry with the reason.

    The usual entry: a plain object (no repeated key) with a known dtype, a shape of integers
    and two integer offsets; the parse leaves every integer in 0..2**64 - 1. The rules
    _check_coverage states hold over the whole column: ordered by (begin, end), each range
    starts where the one before ended, none ends before it begins, each is exactly its shape's
    size in its dtype, and the last ends where the data does.
    """
    entries = list(header.values())
    count = len(entries)
    if not count or set(map(type, entries)) != {dict}:
        return None
    try:
        dtypes = list(map(_DTYPE, entries))
        shapes = list(map(_SHAPE, entries))
        offsets = list(map(_OFFSETS, entries))
    except (KeyError, TypeError):  # a field missing, a dtype that is a list or an object
        return None
    if (set(map(type, shapes)) != {list} or set(map(type, offsets)) != {list}
            or set(map(len, offsets)) != {2}
            or set(map(type, itertools.chain.from_iterable(offsets))) != _INT_ONLY
            or not set(map(type, itertools.chain.from_iterable(shapes))) <= _INT_ONLY):
        return None
    ranges = np.fromiter(itertools.chain.from_iterable(offsets), dtype=np.uint64,
                         count=2 * count).reshape(count, 2)
    return _table_from(path, data_start, data_size, tuple(header), dtypes, shapes,
                       ranges[:, 0], ranges[:, 1])


def _table_from(path: Path, data_start: int, data_size: int, names: tuple[str, ...],
                dtypes: list[Any], shapes: list[list[int]],
                begins: np.ndarray[Any, np.dtype[np.uint64]],
                ends: np.ndarray[Any, np.dtype[np.uint64]]) -> TensorTable | None:
    """The columns of _table_of, each entry already a dtype, a list of integer dimensions and
    its two offsets, checked as _table_of says."""
    if set(map(type, dtypes)) != {str} or not set(dtypes) <= FORMAT_BITS.keys():
        return None
    numels = list(map(math.prod, shapes))
    sizes = list(map(operator.mul, numels, map(FORMAT_BITS.__getitem__, dtypes)))
    if max(sizes) > U64_MAX:
        return None
    if 0 in numels and max(map(len, shapes)) > 2:
        # A zero after two or more dimensions: their product alone may pass 64 bits.
        zero = [shape for shape, numel in zip(shapes, numels, strict=True) if not numel]
        if any(map(_prefix_overflows, zero)):
            return None
    bits = np.array(sizes, dtype=np.uint64)
    if (bits & np.uint64(7)).any():
        return None
    order = np.lexsort((ends, begins))
    begin, end = begins[order], ends[order]
    if not ((end >= begin).all() and begin[0] == 0 and (begin[1:] == end[:-1]).all()
            and ((end - begin) == (bits >> np.uint64(3))[order]).all()
            and int(end[-1]) == data_size):
        return None
    # One object for each distinct dtype and shape, however many tensors share it.
    shaped = list(map(tuple, shapes))
    distinct: dict[tuple[int, ...], tuple[int, ...]] = {}
    codes = tuple(map(_DTYPE_CODES.__getitem__, dtypes))
    return TensorTable(path, data_start, names, codes,
                       tuple(map(distinct.setdefault, shaped, shaped)), begins, ends)


# One tensor entry as writers lay it out, keys in the format's order, in JSON's own grammar: a
# name without quote, backslash or control character, integers without sign, fraction, exponent
# or leading zero and of at most 19 digits (below 2**64), JSON's four white-space characters.
# Any other character is caught alone by the last group, so one scan both reads the entries and
# finds whatever is not one.
_WS = r"[ \t\n\r]*"
_UINT = r"(?:0|[1-9][0-9]{0,18})"
_ENTRIES = re.compile(
    _WS + r"([{,])" + _WS + r'"([^"\\\x00-\x1f]*)"' + _WS + ":" + _WS
    + r"\{" + _WS + r'"dtype"' + _WS + ":" + _WS + r'"([A-Z0-9_]*)"' + _WS + "," + _WS
    + r'"shape"' + _WS + ":" + _WS + r"\[((?:" + _WS + _UINT + _WS
    + r"(?:," + _WS + _UINT + _WS + r")*)?)\]" + _WS + "," + _WS
    + r'"data_offsets"' + _WS + ":" + _WS + r"\[" + _WS + "(" + _UINT + ")" + _WS + ","
    + _WS + "(" + _UINT + ")" + _WS + r"\]" + _WS + r"\}" + r"|(.)", re.DOTALL)
_JSON_WS = " \t\n\r"


def _scanned_table(path: Path, raw: bytes, data_start: int,
                   data_size: int) -> TensorTable | None:
    """The header as columns read straight from its text, when all of it is one object of the
    usual entries (_ENTRIES, one after another, nothing else: no __metadata__) with distinct
    names that tile the data section; None for anything else, which the JSON parse then reads.
    What it accepts, the JSON parse and _table_of would read to the same table; it builds no
    object for an entry, which on a header of 300,000 entries is most of the time."""
    try:
        text = raw.decode("utf-8").rstrip(_JSON_WS)
    except UnicodeDecodeError:
        return None
    if not text.endswith("}"):
        return None
    found = _ENTRIES.findall(text, 0, len(text) - 1)
    if not found:
        return None
    opens, names, dtypes, shapes, begins, ends, other = zip(*found, strict=True)
    if (any(other) or opens[0] != "{" or "{" in opens[1:] or len(set(names)) != len(names)
            or "__metadata__" in names):
        return None
    parsed = {shape: [int(d) for d in shape.split(",")] if shape.strip(_JSON_WS) else []
              for shape in set(shapes)}
    count = len(names)
    return _table_from(path, data_start, data_size, names, list(dtypes),
                       list(map(parsed.__getitem__, shapes)),
                       np.fromiter(map(int, begins), dtype=np.uint64, count=count),
                       np.fromiter(map(int, ends), dtype=np.uint64, count=count))


def _prefix_overflows(shape: list[int]) -> bool:
    count = 1
    for dim in shape:
        count *= dim
        if count > U64_MAX:
            return True
    return False


class _Dup(dict[str, Any]):
    """A JSON object that repeated a key: the last value kept, as the library keeps it, and the
    values it replaced (the library still reads each of them as a tensor entry)."""

    dups: frozenset[str] = frozenset()
    shadowed: tuple[tuple[str, Any], ...] = ()


class _Bad(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class _NotSize:
    """A JSON number the library reads as a float: never a size or an offset."""

    text: str

    def __repr__(self) -> str:
        return self.text


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) == len(pairs):
        return out
    last = {key: i for i, (key, _) in enumerate(pairs)}
    dup = _Dup(out)
    dup.shadowed = tuple(pair for i, pair in enumerate(pairs) if last[pair[0]] != i)
    dup.dups = frozenset(key for key, _ in dup.shadowed)
    return dup


def _int(text: str) -> int | _NotSize:
    if text.startswith("-") or len(text) > 20:
        if len(text) > 20 and math.isinf(float(text)):
            raise _Bad(f"a {len(text.lstrip('-'))}-digit integer is out of range")
        return _NotSize(text)
    value = int(text)
    return value if value <= U64_MAX else _NotSize(text)


def _float(text: str) -> _NotSize:
    if math.isinf(float(text)):
        raise _Bad(f"the number {text[:40]} is out of range")
    return _NotSize(text)


def _constant(text: str) -> Any:
    raise _Bad(f"{text} is not JSON")


# Outside strings, a plain header holds only these bytes: containers, separators, digits and
# white space (no sign, fraction, exponent, literal or constant).
_PLAIN_BYTES = np.zeros(256, dtype=bool)
_PLAIN_BYTES[np.frombuffer(b"{}[]:,0123456789 \t\n\r", dtype=np.uint8)] = True
# An integer of 20 digits may pass 2**64 - 1; one of 19 never does.
_LONG_DIGITS = 20


def _plain_counts(raw: bytes, chunk: int = 1 << 20) -> tuple[int, int] | None:
    """For JSON without escapes (every quote delimits a string): the objects and the keys it
    writes (an opening brace, a colon outside strings), when every byte outside strings is a
    container, separator, digit or white space and no number runs to 20 digits; else None.
    In 1 MiB pieces, whose working arrays stay in cache."""
    objects = keys = inside = 0
    tail = np.zeros(0, dtype=bool)  # the last digits of the piece before, for a run across
    for at in range(0, len(raw), chunk):
        b = np.frombuffer(raw, dtype=np.uint8, count=min(chunk, len(raw) - at), offset=at)
        quote = b == 0x22
        parity = np.cumsum(quote, dtype=np.int32)
        parity += inside
        outside = ((parity & 1) == 0) & ~quote
        if not _PLAIN_BYTES[b[outside]].all():
            return None
        objects += int(np.count_nonzero(outside & (b == 0x7B)))
        keys += int(np.count_nonzero(outside & (b == 0x3A)))
        digits = np.concatenate((tail, outside & (b >= 0x30) & (b <= 0x39)))
        if digits.size >= _LONG_DIGITS:
            run = np.concatenate((np.zeros(1, dtype=np.int32), np.cumsum(digits, dtype=np.int32)))
            if (run[_LONG_DIGITS:] - run[:-_LONG_DIGITS] == _LONG_DIGITS).any():
                return None
        tail = digits[-(_LONG_DIGITS - 1):]
        inside = int(parity[-1]) & 1
    return objects, keys


def _plain_parse(raw: bytes, text: str) -> dict[str, Any] | None:
    """The header parsed by the C scanner alone, when that gives exactly what the checked parse
    (_pairs, _int, _float, _constant) would; else None.

    That holds for JSON without escapes whose bytes outside strings are containers, separators,
    digits and white space with no number of 20 digits (every integer then lies below 2**64 and
    none is negative or a float), whose values at the top are all objects that hold no object
    themselves, and whose keys are all distinct: the keys written number as many as the parsed
    objects hold (a repeated key would leave one fewer).
    """
    if b"\\" in raw:
        return None
    counts = _plain_counts(raw)
    if counts is None:
        return None
    try:
        header = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if type(header) is not dict:
        return None
    values = header.values()
    if not set(map(type, values)) <= {dict}:
        return None
    objects, keys = counts
    if objects != 1 + len(header) or keys != len(header) + sum(map(len, values)):
        return None
    return header


def _parse_header_json(path: Path, raw: bytes) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
        plain = _plain_parse(raw, text)
        header = plain if plain is not None else json.loads(
            text, object_pairs_hook=_pairs, parse_int=_int, parse_float=_float,
            parse_constant=_constant)
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"{path}: the {len(raw)}-byte header is not UTF-8 ({exc.reason} "
                              f"at byte {exc.start}); the file is corrupt or not safetensors"
                              ) from None
    except (_Bad, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: the {len(raw)}-byte header is not valid JSON ({exc}); "
                              "the file is corrupt or not safetensors") from None
    except RecursionError:
        header = None  # nested far deeper than the limit below
    problem = _json_problem(header, raw)
    if problem:
        raise CheckpointError(f"{path}: the header {problem}; the file is corrupt or not "
                              "safetensors")
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: the header is JSON {_json_kind(header)}, expected an "
                              "object mapping tensor names to dtype/shape/data_offsets")
    if isinstance(header, _Dup) and "__metadata__" in header.dups:
        raise CheckpointError(f"{path}: the header has __metadata__ twice")
    return header


def _json_problem(doc: Any, raw: bytes | None = None) -> str | None:
    """Nesting deeper than the library reads, or a lone UTF-16 surrogate it refuses.

    Without a backslash in raw there is no escape, so no surrogate (the UTF-8 decode refuses
    encoded ones) and every quote delimits a string: the depth is then counted on the bytes
    (_bracket_depth), linear and in C, instead of visiting 900,000 containers for 300,000
    tensors.
    """
    if doc is None:
        return f"nests JSON deeper than {MAX_JSON_DEPTH} levels"
    if raw is not None and b"\\" not in raw:
        if _bracket_depth(raw) > MAX_JSON_DEPTH:
            return f"nests JSON deeper than {MAX_JSON_DEPTH} levels"
        return None
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                return f"holds a lone UTF-16 surrogate in {value.encode('utf-8', 'replace')!r}"
            continue
        if not isinstance(value, (dict, list)):
            continue
        if depth > MAX_JSON_DEPTH:
            return f"nests JSON deeper than {MAX_JSON_DEPTH} levels"
        if isinstance(value, dict):
            pairs = itertools.chain(value.items(), value.shadowed if isinstance(value, _Dup)
                                    else ())
            for key, item in pairs:
                stack.append((key, depth))
                stack.append((item, depth + 1))
        else:
            stack.extend((item, depth + 1) for item in value)
    return None


def _bracket_depth(raw: bytes, chunk: int = 1 << 20) -> int:
    """The deepest container nesting of valid JSON without escapes: brackets outside strings,
    where a string is whatever lies between a pair of quotes. In 1 MiB pieces, whose working
    arrays stay in cache (int32 holds a piece's running counts)."""
    deepest, depth, inside = 0, 0, 0
    for at in range(0, len(raw), chunk):
        b = np.frombuffer(raw, dtype=np.uint8, count=min(chunk, len(raw) - at), offset=at)
        quotes = np.cumsum(b == 0x22, dtype=np.int32)
        quotes += inside
        outside = (quotes & 1) == 0
        step = ((b == 0x5B) | (b == 0x7B)).view(np.int8) - ((b == 0x5D) | (b == 0x7D)).view(
            np.int8)
        step *= outside
        running = np.cumsum(step, dtype=np.int32)
        running += depth
        if running.size:
            deepest = max(deepest, int(running.max()))
            depth, inside = int(running[-1]), int(quotes[-1]) & 1
    return deepest


def _json_kind(value: Any) -> str:
    if isinstance(value, _NotSize):
        return f"the number {value.text[:40]}"
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            type(None): "null", int: "an integer"}.get(type(value), type(value).__name__)


def read_header(path: Path | str) -> Mapping[str, TensorInfo]:
    """The tensors of a safetensors file by name (metadata: read_file_header(path).metadata)."""
    return read_file_header(path).tensors


_INT_ONLY = frozenset({int})


def _tensor_info(path: Path, name: str, entry: Any, data_start: int) -> TensorInfo:
    # The usual entry, checked in few steps (a header may hold 300,000 of them): a plain object
    # with a known dtype, a list of integers and two integer offsets. Anything else, checked
    # again below, is refused with what is wrong. type() is int, not isinstance: a bool is no
    # size.
    if type(entry) is dict:
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if (type(dtype) is str and dtype in FORMAT_BITS and type(shape) is list
                and set(map(type, shape)) <= _INT_ONLY and type(offsets) is list
                and len(offsets) == 2 and type(offsets[0]) is int and type(offsets[1]) is int):
            return TensorInfo(name, dtype, tuple(shape), data_start + offsets[0],
                              data_start + offsets[1], path)
    return _checked_tensor_info(path, name, entry, data_start)


def _checked_tensor_info(path: Path, name: str, entry: Any, data_start: int) -> TensorInfo:
    if not isinstance(entry, dict):
        raise CheckpointError(f"{path}: header entry {name!r} is {_json_kind(entry)}, not an "
                              "object with dtype, shape and data_offsets")
    if isinstance(entry, _Dup):
        twice = sorted(entry.dups.intersection(_TENSOR_FIELDS))
        if twice:
            raise CheckpointError(f"{path}: tensor {name!r} gives {twice[0]} twice")
    missing = [f for f in _TENSOR_FIELDS if f not in entry]
    if missing:
        raise CheckpointError(f"{path}: tensor {name!r} has no {missing[0]}")
    dtype = entry["dtype"]
    if not isinstance(dtype, str) or dtype not in FORMAT_BITS:
        raise CheckpointError(f"{path}: tensor {name!r} has unknown dtype {dtype!r}; expected "
                              f"one of {', '.join(FORMAT_BITS)}")
    shape = entry["shape"]
    if type(shape) is not list or not all(type(d) is int for d in shape):
        raise CheckpointError(f"{path}: tensor {name!r} has shape {shape!r}, expected a list of "
                              "non-negative integers")
    offsets = entry["data_offsets"]
    if (type(offsets) is not list or len(offsets) != 2
            or type(offsets[0]) is not int or type(offsets[1]) is not int):
        raise CheckpointError(f"{path}: tensor {name!r} has data_offsets {offsets!r}, expected "
                              "[begin, end] (non-negative integers)")
    begin, end = offsets
    return TensorInfo(name, dtype, tuple(shape), data_start + begin, data_start + end, path)


def _check_coverage(path: Path, tensors: dict[str, TensorInfo], data_start: int,
                    data_size: int) -> None:
    """The library's rules: tensors, ordered by offsets, tile the data section exactly, with no
    gap, overlap or stray byte after the last, and each range is exactly its shape's size."""
    at = 0
    for info in sorted(tensors.values(), key=lambda i: (i.start, i.end)):
        begin, end = info.start - data_start, info.end - data_start
        if begin != at or end < begin:
            where = ("overlaps the tensor before it" if begin < at else
                     f"leaves bytes {at}..{begin} unused" if end >= begin else "ends before it "
                     "begins")
            raise CheckpointError(
                f"{path}: tensor {info.name!r} at bytes {begin}..{end} of the data {where}; the "
                "safetensors library refuses such a file (SGLang cannot load it)")
        at = end
        want = _tensor_bytes(path, info)
        if end - begin != want:
            raise CheckpointError(
                f"{path}: tensor {info.name!r} occupies {end - begin} bytes but shape "
                f"{list(info.shape)} of {info.dtype} needs {want}; the header is corrupt")
    if at != data_size:
        if at > data_size:
            raise CheckpointError(
                f"{path}: the tensors claim {at} bytes of data but the data section has "
                f"{data_size}; the file is truncated: fetch it again")
        raise CheckpointError(
            f"{path}: {data_size - at} stray byte(s) after the last tensor (data ends at {at} "
            f"of {data_size}); the safetensors library refuses such a file")


def _tensor_bytes(path: Path, info: TensorInfo) -> int:
    """Bytes of a shape of a dtype, overflowing where the library's 64-bit arithmetic does."""
    count = 1
    for dim in info.shape:
        count *= dim
        if count > U64_MAX:
            raise CheckpointError(f"{path}: tensor {info.name!r} has shape {list(info.shape)}, "
                                  "whose size overflows 64 bits; the header is corrupt")
    bits = count * FORMAT_BITS[info.dtype]
    if bits > U64_MAX:
        raise CheckpointError(f"{path}: tensor {info.name!r} has shape {list(info.shape)}, "
                              "whose size overflows 64 bits; the header is corrupt")
    if bits % 8:
        raise CheckpointError(f"{path}: tensor {info.name!r} of {info.dtype} with shape "
                              f"{list(info.shape)} does not end on a byte boundary")
    return bits // 8


def read_array(path: Path | str, info: TensorInfo) -> np.ndarray[Any, Any]:
    """One tensor as a numpy array (BF16 widened to float32; FP8 as raw uint8 bits)."""
    if info.dtype not in DTYPES:
        raise CheckpointError(f"{path}: tensor {info.name!r} has dtype {info.dtype}, which "
                              "specgate cannot read as numbers")
    try:
        with files.open_regular(path) as fh:
            raw = np.fromfile(fh, dtype=DTYPES[info.dtype], count=info.numel, offset=info.start)
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot be read: {exc.strerror or exc}") from None
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
