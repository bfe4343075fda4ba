"""The format's own oracle: specgate's header reader accepts exactly the safetensors files that the
safetensors library (the reader SGLang loads through) accepts, and reads the same tensors.

Headers and files are generated around the valid layout (offsets, gaps, overlaps, trailing bytes,
dtypes, shapes, metadata, names, number spellings, nesting, the length field), written to disk and
handed to both readers. SPECGATE_ORACLE_EXAMPLES sets how many (CI: 2000; `tox -e bench`: more).
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from safetensors import safe_open

from specgate.core.errors import CheckpointError
from specgate.io.safetensors_io import FORMAT_BITS, read_file_header

EXAMPLES = int(os.environ.get("SPECGATE_ORACLE_EXAMPLES", "2000"))
ORACLE = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

BAD_DTYPES = ["f32", "E8M0", "", "float32"]
BIG = [2**61, 2**62, 2**63, 2**64 - 1, 2**64, 2**32 + 1]


class Raw:
    """A JSON value spelled literally (a number form Python's json would not write)."""

    def __init__(self, text: str) -> None:
        self.text = text


def dump(value: Any) -> str:
    """JSON text of value, with Raw spellings, duplicate keys (lists of pairs) kept."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, Pairs):
        return "{" + ",".join(f"{json.dumps(k)}:{dump(v)}" for k, v in value.items) + "}"
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{dump(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(dump(v) for v in value) + "]"
    return json.dumps(value)


class Pairs:
    """A JSON object that may repeat keys."""

    def __init__(self, items: list[tuple[str, Any]]) -> None:
        self.items = items


def nbytes(dtype: str, shape: list[int]) -> int:
    count = 1
    for d in shape:
        count *= d
    return count * FORMAT_BITS.get(dtype, 8) // 8


odd_numbers = st.sampled_from([Raw("-0"), Raw("1.0"), Raw("1e0"), Raw("-1"), Raw("1e400"),
                               Raw("9" * 400), Raw("9" * 30), Raw("NaN"), Raw("true"),
                               Raw("null"), Raw('"3"')])
dims = st.one_of(st.integers(0, 5), st.integers(0, 5), st.sampled_from(BIG), odd_numbers)
names = st.one_of(st.sampled_from(["a", "b", "lm_head.weight", "__metadata__", "", "d2t"]),
                  st.text(max_size=6))
escapes = st.sampled_from([Raw('"\\ud800"'), Raw('"\\udc00x"'), Raw('"\\ud83d\\ude00"'),
                           Raw('"a\\/b"'), Raw('"\\u0000"')])


@st.composite
def safetensors_files(draw: st.DrawFn) -> tuple[bytes, str]:
    """(file bytes, what was done) around a valid layout."""
    n = draw(st.integers(0, 4))
    entries: list[tuple[str, Any]] = []
    offset = 0
    notes = []
    for i in range(n):
        name = draw(names) if draw(st.booleans()) else f"t{i}"
        dtype: Any = draw(st.sampled_from(list(FORMAT_BITS)) if draw(st.integers(0, 9))
                          else st.sampled_from([*BAD_DTYPES, Raw("1"), Raw("null")]))
        shape = draw(st.lists(st.integers(0, 4), max_size=3))
        if not draw(st.integers(0, 7)):
            shape = draw(st.lists(dims, max_size=3))
            notes.append("odd shape")
        size = nbytes(dtype, shape) if isinstance(dtype, str) and all(
            isinstance(d, int) for d in shape) and nbytes(dtype, shape) < 64 else 1
        begin, end = offset, offset + size
        twist = draw(st.integers(0, 12))
        if twist == 1:
            begin, end = begin + 1, end + 1
            notes.append("gap")
        elif twist == 2 and offset:
            begin, end = begin - 1, end - 1
            notes.append("overlap")
        elif twist == 3:
            end += draw(st.sampled_from([-1, 1, 2]))
            notes.append("wrong end")
        elif twist == 4:
            begin, end = end, begin
            notes.append("swapped")
        offset = max(offset, end)
        offsets: Any = [begin, end]
        if twist == 5:
            offsets = draw(st.sampled_from([[begin], [begin, end, end], [Raw("-0"), end],
                                            [begin, Raw(f"{end}.0")], None, Raw('"0"')]))
            notes.append("odd offsets")
        fields: list[tuple[str, Any]] = [("dtype", dtype), ("shape", shape),
                                         ("data_offsets", offsets)]
        if twist == 6:
            fields.pop(draw(st.integers(0, 2)))
            notes.append("missing field")
        if twist == 7:
            fields.append((draw(st.sampled_from(["x", "dtype", "shape", "extra"])),
                           draw(st.one_of(odd_numbers, escapes, st.integers(0, 3)))))
            notes.append("extra field")
        if twist == 8:
            depth = draw(st.sampled_from([3, 124, 125, 126, 127, 200]))
            fields.append(("nest", Raw("[" * depth + "]" * depth)))
            notes.append(f"nesting {depth}")
        draw(st.randoms()).shuffle(fields)
        entry: Any = Pairs(fields)
        if twist == 9:
            entry = draw(st.sampled_from([Raw("1"), Raw("[]"), Raw("null"), Raw('"x"')]))
            notes.append("entry not an object")
        entries.append((name, entry))
    meta_kind = draw(st.integers(0, 8))
    if meta_kind == 1:
        entries.append(("__metadata__", {"format": "pt", "k": draw(st.text(max_size=4))}))
    elif meta_kind == 2:
        entries.append(("__metadata__", Pairs([("a", draw(st.one_of(
            odd_numbers, escapes, st.integers(0, 2), st.just([]), st.just({})))), ("b", "c")])))
        notes.append("odd metadata value")
    elif meta_kind == 3:
        entries.append(("__metadata__", draw(st.sampled_from(
            [Raw("null"), Raw("[]"), Raw('"x"'), Raw("1"), Raw("{}")]))))
        notes.append("odd metadata")
    elif meta_kind == 4:
        entries += [("__metadata__", {}), ("__metadata__", {})]
        notes.append("metadata twice")
    elif meta_kind == 5:
        entries.append(("__metadata__", Pairs([("k", draw(escapes))])))
        notes.append("escaped metadata")
    draw(st.randoms()).shuffle(entries)
    text = dump(Pairs(entries))
    top = draw(st.integers(0, 15))
    if top == 1:
        text = draw(st.sampled_from(["[]", "null", '"x"', "1", "", "{", "{}x", "\ufeff{}"]))
        notes.append("odd top level")
    blob = text.encode("utf-8", "surrogatepass")
    if top == 2:
        blob = blob[:-1] + b"\xff" + blob[-1:]
        notes.append("not UTF-8")
    pad = draw(st.sampled_from([b"", b" " * (-len(blob) % 8), b"\t\n", b"\x00"]))
    blob = pad + blob if draw(st.integers(0, 5)) == 0 else blob + pad
    data = bytes(offset)
    tail = draw(st.integers(0, 8))
    if tail == 1:
        data += b"\x00" * draw(st.integers(1, 9))
        notes.append("trailing bytes")
    elif tail == 2 and data:
        data = data[:-draw(st.integers(1, len(data)))]
        notes.append("truncated data")
    length = len(blob)
    field = draw(st.integers(0, 12))
    if field == 1:
        length = draw(st.sampled_from([length - 1, length + 1, 100_000_001, 2**64 - 1, 0]))
        notes.append("wrong length field")
    body = struct.pack("<Q", max(0, length)) + blob + data
    if field == 2:
        body = body[:draw(st.integers(0, 8))]
        notes.append("shorter than 8 bytes")
    return body, ", ".join(notes) or "valid layout"


def library_view(path: Path) -> dict[str, tuple[str, tuple[int, ...]]] | str:
    """What safe_open makes of the file: the tensors, or the reason it refuses it."""
    try:
        with safe_open(str(path), framework="numpy") as f:
            out = {}
            for name in f.keys():
                part = f.get_slice(name)
                out[name] = (str(part.get_dtype()), tuple(part.get_shape()))
            f.metadata()
            return out
    except Exception as exc:  # any refusal is the library's verdict
        return f"{type(exc).__name__}: {exc}"


def specgate_view(path: Path) -> dict[str, tuple[str, tuple[int, ...]]] | str:
    try:
        header = read_file_header(path)
    except CheckpointError as exc:
        return f"CheckpointError: {exc}"
    return {name: (info.dtype, info.shape) for name, info in header.tensors.items()}


@ORACLE
@given(case=safetensors_files())
def test_specgate_agrees_with_the_safetensors_library(case: tuple[bytes, str],
                                                      tmp_path: Path) -> None:
    body, what = case
    path = tmp_path / "model.safetensors"
    path.write_bytes(body)
    theirs = library_view(path)
    ours = specgate_view(path)
    event("the library refuses" if isinstance(theirs, str) else "the library accepts")
    if isinstance(theirs, str) or isinstance(ours, str):
        assert isinstance(theirs, str) == isinstance(ours, str), (
            f"{what}: safetensors says {theirs!r}, specgate says {ours!r}; header "
            f"{body[8:300]!r}")
        if isinstance(ours, str):
            assert str(path) in ours, ours  # the message names the file
        return
    assert ours == theirs, what


def test_refusals_name_the_reason(tmp_path: Path) -> None:
    """Overlapping tensors, a stray data byte and non-string metadata: each refused with its own
    reason, as the library refuses them."""
    def write(header: dict[str, Any], data: bytes) -> Path:
        blob = json.dumps(header).encode()
        path = tmp_path / f"{len(list(tmp_path.iterdir()))}.safetensors"
        path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)
        return path

    u8 = {"dtype": "U8", "shape": [2]}
    cases = {
        "overlaps": ({"a": {**u8, "data_offsets": [0, 2]}, "b": {**u8, "data_offsets": [1, 3]}},
                     b"abc"),
        "stray byte": ({"a": {**u8, "data_offsets": [0, 2]}}, b"abc"),
        "only strings": ({"__metadata__": {"k": 1}, "a": {**u8, "data_offsets": [0, 2]}},
                         b"ab"),
    }
    for reason, (header, data) in cases.items():
        path = write(header, data)
        assert isinstance(library_view(path), str)
        with pytest.raises(CheckpointError, match=reason):
            read_file_header(path)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "model.safetensors"
    os.mkfifo(fifo)
    with pytest.raises(CheckpointError, match="FIFO"):
        read_file_header(fifo)
