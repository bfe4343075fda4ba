"""The safetensors reader and sparse writer: round trips, cross-checks, and bad input."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specgate.core.errors import CheckpointError
from specgate.io.safetensors_io import (
    DTYPES,
    TensorSpec,
    dtype_code,
    read_array,
    read_file_header,
    read_header,
    write_sparse,
)

NUMPY_DTYPES = ["F64", "F32", "F16", "I64", "I32", "I16", "I8", "U8", "BOOL"]


@pytest.mark.parametrize("code", NUMPY_DTYPES)
def test_round_trip_each_dtype(tmp_path: Path, code: str) -> None:
    data = (np.arange(24) % 7).astype(DTYPES[code]).reshape(2, 3, 4)
    file = write_sparse(tmp_path / "x.safetensors", {"t": TensorSpec(code, (2, 3, 4), data=data)},
                        {"format": "pt"})
    header = read_file_header(file)
    assert header.metadata == {"format": "pt"}
    info = header.tensors["t"]
    assert (info.dtype, info.shape, info.nbytes) == (code, (2, 3, 4), data.nbytes)
    np.testing.assert_array_equal(read_array(file, info), data)


def test_bf16_is_widened_to_float32(tmp_path: Path) -> None:
    bits = np.array([0x3F80, 0xC000, 0x0000, 0x7F80], dtype=np.uint16)  # 1, -2, 0, inf
    file = write_sparse(tmp_path / "b.safetensors", {"b": TensorSpec("BF16", (4,), data=bits)})
    values = read_array(file, read_header(file)["b"])
    assert values.dtype == np.float32
    np.testing.assert_array_equal(values, [1.0, -2.0, 0.0, np.inf])


def test_reads_files_written_by_the_safetensors_library(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    tensors = {"w": torch.randn(5, 3).to(torch.bfloat16), "d2t": torch.arange(4),
               "t2d": torch.tensor([True, False, True])}
    save_file(tensors, str(tmp_path / "lib.safetensors"), metadata={"format": "pt"})
    header = read_header(tmp_path / "lib.safetensors")
    assert {n: (i.dtype, i.shape) for n, i in header.items()} == {
        "w": ("BF16", (5, 3)), "d2t": ("I64", (4,)), "t2d": ("BOOL", (3,))}
    w = read_array(tmp_path / "lib.safetensors", header["w"])
    np.testing.assert_array_equal(w, tensors["w"].float().numpy())


def test_the_safetensors_library_reads_our_files(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file

    bits = np.array([0x3F80, 0x4000], dtype=np.uint16)
    write_sparse(tmp_path / "ours.safetensors", {
        "hole": TensorSpec("BF16", (3, 5)),
        "b": TensorSpec("BF16", (2,), data=bits),
        "m": TensorSpec("F32", (4,), mark=True),
        "i": TensorSpec("I64", (3,), data=np.array([1, 2, 3])),
    })
    loaded = load_file(str(tmp_path / "ours.safetensors"))
    assert loaded["hole"].abs().sum().item() == 0
    assert loaded["b"].tolist() == [1.0, 2.0]
    assert loaded["m"].tolist() == [1.0, 0.0, 0.0, 0.0]
    assert loaded["i"].dtype == torch.int64


@given(shape=st.lists(st.integers(0, 5), min_size=0, max_size=3),
       code=st.sampled_from(["BF16", "F16", "F32", "I64", "BOOL", "U8"]))
@settings(max_examples=40, deadline=None)
def test_header_offsets_tile_the_data(tmp_path_factory: pytest.TempPathFactory,
                                      shape: list[int], code: str) -> None:
    file = tmp_path_factory.mktemp("h") / "x.safetensors"
    write_sparse(file, {"a": TensorSpec(code, tuple(shape)), "b": TensorSpec("F32", (3,))})
    header = read_file_header(file)
    a, b = header.tensors["a"], header.tensors["b"]
    assert a.start == header.data_start
    assert a.end == b.start
    assert b.end == header.file_size
    assert header.data_start % 8 == 0


def test_sparse_file_costs_no_disk_and_its_header_reads_fast(tmp_path: Path) -> None:
    file = write_sparse(tmp_path / "big.safetensors",
                        {"w": TensorSpec("BF16", (32768, 16384)), "m": TensorSpec("BF16", (8,),
                                                                                  mark=True)})
    st_ = file.stat()
    assert st_.st_size > 1 << 30
    assert st_.st_blocks * 512 < 1 << 20
    # CPU time of this process: the work done, which a busy machine does not stretch.
    started = time.process_time()
    assert read_header(file)["w"].nbytes == 32768 * 16384 * 2
    assert time.process_time() - started < 1.0


def test_dtype_code_accepts_torch_names() -> None:
    assert dtype_code("bfloat16") == "BF16"
    assert dtype_code("torch.int64") == "I64"
    assert dtype_code("BOOL") == "BOOL"
    with pytest.raises(ValueError, match="unknown dtype"):
        dtype_code("complex32")


def _good(tmp_path: Path) -> Path:
    return write_sparse(tmp_path / "good.safetensors",
                        {"w": TensorSpec("F32", (4,), data=np.ones(4, np.float32))})


def _with_header(tmp_path: Path, header: object, data: bytes = b"\0" * 16) -> Path:
    blob = json.dumps(header).encode()
    file = tmp_path / "bad.safetensors"
    file.write_bytes(struct.pack("<Q", len(blob)) + blob + data)
    return file


@pytest.mark.parametrize(("make", "match"), [
    (lambda p: (p / "bad.safetensors").write_bytes(b"\1\2\3") and p / "bad.safetensors",
     "too short"),
    (lambda p: (p / "bad.safetensors").write_bytes(struct.pack("<Q", 10**6) + b"{}")
     and p / "bad.safetensors", "header length"),
    (lambda p: (p / "bad.safetensors").write_bytes(struct.pack("<Q", 5) + b"{nope")
     and p / "bad.safetensors", "not valid JSON"),
    (lambda p: _with_header(p, [1, 2]), "expected an object"),
    (lambda p: _with_header(p, {"w": {"dtype": "F7", "shape": [2], "data_offsets": [0, 8]}}),
     "unknown dtype"),
    (lambda p: _with_header(p, {"w": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]}}),
     "truncated"),
    (lambda p: _with_header(p, {"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}}),
     "needs 12"),
    (lambda p: _with_header(p, {"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}),
     "shape"),
    (lambda p: _with_header(p, {"w": {"dtype": "F32", "shape": [1], "data_offsets": "x"}}),
     "data_offsets"),
], ids=["short", "length", "not-json", "not-object", "dtype", "outside", "size", "shape",
        "offsets"])
def test_bad_files_name_the_file(tmp_path: Path, make: object, match: str) -> None:
    file = make(tmp_path)  # type: ignore[operator]
    with pytest.raises(CheckpointError, match=match) as info:
        read_header(file)
    assert str(file) in str(info.value)


def test_cut_short_file_is_reported(tmp_path: Path) -> None:
    file = _good(tmp_path)
    data = file.read_bytes()
    file.write_bytes(data[:-4])
    with pytest.raises(CheckpointError, match="truncated"):
        read_header(file)


def test_write_rejects_data_of_the_wrong_size(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs 16"):
        write_sparse(tmp_path / "x.safetensors",
                     {"w": TensorSpec("F32", (4,), data=np.ones(3, np.float32))})


PLAIN = '{"__metadata__": {"format": "pt"}, "a.weight": {"dtype": "F32", "shape": [2, 3], ' \
        '"data_offsets": [0, 24]}, "b": {"dtype": "I64", "shape": [], "data_offsets": [24, 32]}}'


@pytest.mark.parametrize("text", [
    '{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, '
    '"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}',
    '{"a": {"dtype": "F32", "dtype": "F16", "shape": [1], "data_offsets": [0, 4]}}',
    '{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 18446744073709551616]}}',
    '{"a": {"dtype": "F32", "shape": [-0], "data_offsets": [0, 4]}}',
    '{"a": {"dtype": "F32", "shape": [1.0], "data_offsets": [0, 4]}}',
    '{"a": {"dtype": "F32", "shape": [1e0], "data_offsets": [0, 4]}}',
    '{"a": {"dtype": "F32", "shape": [NaN], "data_offsets": [0, 4]}}',
    '{"a": {"dtype": "F32", "shape": [true], "data_offsets": [0, 4]}}',
    '{"\\u0061": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, '
    '"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}',
    '{"a": {"dtype": "F32", "shape": [{"x": 1, "x": 2}], "data_offsets": [0, 4]}}',
    '{"a": [{"x": 1}, {"x": 2}]}',
], ids=["repeated-name", "repeated-field", "past-u64", "negative-zero", "fraction", "exponent",
        "constant", "literal", "escaped-repeat", "nested-repeat", "array-of-objects"])
def test_only_a_plain_header_skips_the_checked_parse(text: str) -> None:
    """The C scanner alone is used only where it reads what the checked parse reads: a repeated
    key, a number the checked parse keeps as text, an escape or a deeper object sends a header to
    the checked parse."""
    from specgate.io import safetensors_io as st

    assert st._plain_parse(text.encode(), text) is None
    plain = st._plain_parse(PLAIN.encode(), PLAIN)
    assert plain is not None
    assert plain == json.loads(PLAIN, object_pairs_hook=st._pairs, parse_int=st._int,
                               parse_float=st._float, parse_constant=st._constant)


def test_a_number_across_the_scans_pieces_is_seen_whole() -> None:
    """A 20-digit number that straddles two of the scan's pieces is still found."""
    from specgate.io import safetensors_io as st

    raw = b'{"a": [' + b"1" * 20 + b"]}"
    for chunk in range(2, len(raw)):
        assert st._plain_counts(raw, chunk=chunk) is None, chunk
    assert st._plain_counts(b'{"a": [' + b"1" * 19 + b"]}", chunk=9) == (1, 1)


def test_a_header_read_as_columns_gives_what_each_entry_says(tmp_path: Path) -> None:
    """Every tensor, looked up before and after the table has built its index of positions, is
    the entry the header wrote; a name the header lacks is not there."""
    from specgate.io import safetensors_io

    count = 3 * safetensors_io._SCANS_BEFORE_INDEX
    specs = {f"w{i}": TensorSpec("F16" if i % 2 else "I32", (i % 3 + 1, 2)) for i in range(count)}
    file = write_sparse(tmp_path / "many.safetensors", specs)
    header = read_file_header(file)
    assert isinstance(header.tensors, safetensors_io.TensorTable)
    raw = json.loads(file.read_bytes()[8:8 + struct.unpack("<Q", file.read_bytes()[:8])[0]])
    for name in reversed(list(specs)):  # past the scans, then through the index
        info = header.tensors[name]
        begin, end = raw[name]["data_offsets"]
        assert (info.name, info.dtype, info.shape, info.file) == (
            name, raw[name]["dtype"], tuple(raw[name]["shape"]), file)
        assert (info.start, info.end) == (header.data_start + begin, header.data_start + end)
        assert name in header.tensors
    assert "w" not in header.tensors
    with pytest.raises(KeyError):
        header.tensors["w"]
    assert list(header.tensors) == list(specs)
    assert len(header.tensors) == count
    assert safetensors_io.filled_names(header.tensors) == list(specs)


# -- the scan of a usual header -----------------------------------------------------------------

def _scan_and_parse(text: str, data_size: int) -> tuple[object, object]:
    """The header read by the scan and by the JSON parse, each None where it gives no table."""
    from specgate.io import safetensors_io as sio

    raw, path = text.encode("utf-8"), Path("h.safetensors")
    scanned = sio._scanned_table(path, raw, 8 + len(raw), data_size)
    header = sio._parse_header_json(path, raw) if raw.strip() else None
    parsed = (sio._table_of(path, header, 8 + len(raw), data_size)
              if isinstance(header, dict) and "__metadata__" not in header else None)

    def columns(table: object) -> object:
        if table is None:
            return None
        assert isinstance(table, sio.TensorTable)
        return (table._names, table._dtypes, table._shapes, table._begins.tolist(),
                table._ends.tolist())
    return columns(scanned), columns(parsed)


def _entry(name: str, shape: str = "[2, 3]", begin: int = 0, end: int = 24,
           dtype: str = "F32") -> str:
    return f'"{name}": {{"dtype": "{dtype}", "shape": {shape}, "data_offsets": [{begin}, {end}]}}'


def test_the_scan_reads_a_usual_header_as_the_json_parse_does() -> None:
    text = "{" + ", ".join([_entry("a"), _entry("b", "[]", 24, 26, "BF16"),
                            _entry("é.w", "[0]", 26, 26), _entry("c", "[1,\n 2]", 26, 30,
                                                                 "I16")]) + "}\n  "
    scanned, parsed = _scan_and_parse(text, 30)
    assert scanned is not None
    assert scanned == parsed


_B = _entry("b", begin=24, end=48)


@pytest.mark.parametrize("text", [
    "{" + _entry("a") + ", " + _entry("a", begin=24, end=48) + "}",  # a name twice
    "{" + _entry("a") + "}{" + _B + "}",
    "{" + _entry("a") + " " + _B + "}",  # no comma
    "{" + _entry("a") + " x, " + _B + "}",  # a stray character between entries
    "{" + _entry("a") + "}, " + _B + "}",
    "," + _entry("a") + ", " + _B + "}",
    "{" + _entry("a", "[02, 3]") + ", " + _B + "}",  # a leading zero: not JSON
    "{" + _entry("a", "[2, -3]") + ", " + _B + "}",
    "{" + _entry("a", "[2, 3.0]") + ", " + _B + "}",
    "{" + _entry("a\u0001") + ", " + _B + "}",  # a control character in a name
    "{" + _entry("a") + ", " + _B + "} x",
    "{" + _entry("a") + ", " + _B + "}\x0b",  # not JSON white space
    '{"__metadata__": {"format": "pt"}, ' + _entry("a") + ", " + _B + "}",
    "{" + _entry("__metadata__") + ", " + _B + "}",  # metadata is strings, never a tensor
    '{"a": {"shape": [2, 3], "dtype": "F32", "data_offsets": [0, 24]}, ' + _B + "}",
    "{}",
    "",
])
def test_the_scan_leaves_anything_else_to_the_json_parse(text: str) -> None:
    from specgate.io import safetensors_io as sio

    raw = text.encode("utf-8")
    assert sio._scanned_table(Path("h.safetensors"), raw, 8 + len(raw), 48) is None


def test_the_refused_cases_differ_from_a_scanned_header_in_that_alone() -> None:
    """The two entries of the cases above, written plainly, tile 48 bytes and are scanned."""
    scanned, parsed = _scan_and_parse("{" + _entry("a") + ", " + _B + "}", 48)
    assert scanned is not None
    assert scanned == parsed


def test_a_twenty_digit_offset_is_left_to_the_json_parse() -> None:
    from specgate.io import safetensors_io as sio

    raw = ("{" + _entry("a", "[0]", 10**19, 10**19) + ", " + _entry("b", "[6]", 0, 24)
           + "}").encode()
    assert sio._scanned_table(Path("h.safetensors"), raw, 8 + len(raw), 24) is None


@pytest.mark.parametrize("size", [23, 25])
def test_the_scan_takes_only_entries_that_tile_the_data(size: int) -> None:
    scanned, parsed = _scan_and_parse("{" + _entry("a") + "}", size)
    assert scanned is None
    assert parsed is None


@pytest.mark.parametrize("dtype", ['["F32"]', '{"x": 1}', "7"])
def test_a_dtype_that_is_not_a_string_is_refused_naming_the_tensor(tmp_path: Path,
                                                                   dtype: str) -> None:
    from specgate.io import safetensors_io as sio

    header = ('{"a": {"dtype": ' + dtype + ', "shape": [2, 3], "data_offsets": [0, 24]}}'
              ).encode()
    path = tmp_path / "d.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(24))
    with pytest.raises(CheckpointError, match=r"d\.safetensors.*'a'"):
        sio.read_file_header(path)


def test_a_tensor_named_metadata_is_refused_as_the_library_refuses_it(tmp_path: Path) -> None:
    from specgate.io import safetensors_io as sio

    header = (b'{"__metadata__": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}}'
              )
    path = tmp_path / "m.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(24))
    with pytest.raises(CheckpointError, match=r"__metadata__"):
        sio.read_file_header(path)
