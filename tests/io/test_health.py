"""The health scan: NaN/Inf and zero detection per dtype, chunking, holes and workers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ckpt_support import tiny_drafter
from hypothesis import given, settings
from hypothesis import strategies as st

from specgate.io.checkpoint import open_drafter
from specgate.io.health import scan, scan_tensor
from specgate.io.safetensors_io import DTYPES, TensorSpec, read_header, write_sparse

SPECIALS = {  # (a finite non-zero value, NaN, +Inf, -0.0) as raw bits per dtype
    "BF16": (np.uint16, 0x3F80, 0x7FC1, 0x7F80, 0x8000),
    "F16": (np.uint16, 0x3C00, 0x7E00, 0x7C00, 0x8000),
    "F32": (np.uint32, 0x3F800000, 0x7FC00000, 0x7F800000, 0x80000000),
    "F64": (np.uint64, 0x3FF0000000000000, 0x7FF8000000000000, 0x7FF0000000000000,
            0x8000000000000000),
}


@given(code=st.sampled_from(sorted(SPECIALS)), n=st.integers(1, 3000), data=st.data())
@settings(max_examples=60, deadline=None)
def test_nonfinite_count_is_exact_across_chunks(tmp_path_factory: pytest.TempPathFactory,
                                                code: str, n: int, data: st.DataObject) -> None:
    view, one, nan, inf, _ = SPECIALS[code]
    bits = np.full(n, one, dtype=view)
    bad = data.draw(st.sets(st.integers(0, n - 1), max_size=5))
    for k, pos in enumerate(sorted(bad)):
        bits[pos] = (nan, inf)[k % 2] | (0 if k % 3 else int(np.iinfo(view).max ^ (
            np.iinfo(view).max >> 1)))  # some negative
    file = tmp_path_factory.mktemp("h") / "x.safetensors"
    write_sparse(file, {"w": TensorSpec(code, (n,), data=bits.view(DTYPES[code]))})
    chunk = data.draw(st.sampled_from([8, 64, 4096, 1 << 20]))
    found, _ = scan_tensor(read_header(file)["w"], chunk_bytes=chunk)
    assert found.nonfinite == len(bad)
    assert not found.all_zero


@pytest.mark.parametrize("code", sorted(SPECIALS))
def test_negative_zero_counts_as_zero(tmp_path: Path, code: str) -> None:
    view, *_, negzero = SPECIALS[code]
    bits = np.array([0, negzero, 0, negzero], dtype=view)
    file = write_sparse(tmp_path / "z.safetensors",
                        {"w": TensorSpec(code, (4,), data=bits.view(DTYPES[code]))})
    found, _ = scan_tensor(read_header(file)["w"])
    assert found.all_zero
    assert found.checked_zero
    assert found.nonfinite == 0


def test_frozen_tensors_are_not_zero_checked(tmp_path: Path) -> None:
    file = write_sparse(tmp_path / "f.safetensors", {
        "embed_tokens.weight": TensorSpec("BF16", (4, 4)), "d2t": TensorSpec("I64", (4,)),
        "model.layers.0.mlp.up_proj.weight": TensorSpec("BF16", (4, 4))})
    results = {n: scan_tensor(i)[0] for n, i in read_header(file).items()}
    assert not results["embed_tokens.weight"].checked_zero
    assert not results["d2t"].checked_zero
    assert results["model.layers.0.mlp.up_proj.weight"].all_zero


def test_holes_are_skipped_but_data_after_them_is_seen(tmp_path: Path) -> None:
    n = 4 << 20  # 8 MiB of bf16, a hole but for the last element
    bits = np.zeros(n, np.uint16)
    bits[-1] = 0x7FC0
    file = write_sparse(tmp_path / "h.safetensors", {"w": TensorSpec("BF16", (n,))})
    info = read_header(file)["w"]
    with open(file, "r+b") as f:
        f.seek(info.end - 2)
        f.write(bits[-1:].tobytes())
    skipped, holes = scan_tensor(info)
    full, no_holes = scan_tensor(info, skip_holes=False)
    assert skipped == full
    assert skipped.nonfinite == 1
    assert no_holes == 0
    assert holes > info.nbytes // 2


def test_two_workers_agree_with_one(tmp_path: Path) -> None:
    drafter = open_drafter(tiny_drafter(tmp_path / "d", shards=2))
    one = scan(drafter, workers=1, chunk_bytes=256)
    two = scan(drafter, workers=2, chunk_bytes=256)
    assert one.tensors == two.tensors
    assert one.ok
    total = sum(i.nbytes for i in drafter.tensors.values())
    assert one.bytes_scanned + one.bytes_in_holes == total


def test_split_pieces_find_a_nan_at_the_end_of_a_tensor(tmp_path: Path) -> None:
    folder = tiny_drafter(tmp_path / "d")
    drafter = open_drafter(folder)
    info = drafter.tensors["lm_head.weight"]
    with open(info.file, "r+b") as f:
        f.seek(info.end - 2)
        f.write(np.array([0x7FC0], np.uint16).tobytes())
    report = scan(open_drafter(folder), workers=2, chunk_bytes=64)
    found = {t.name: t for t in report.tensors}
    assert found["lm_head.weight"].nonfinite == 1
    assert len(report.tensors) == len(drafter.tensors)
    assert not report.ok
