"""remap-vocab: move a drafter's lm_head rows to another vocab map's positions (no torch).

Row i of lm_head scores draft id i, i.e. target token d2t[i] + i. A drafter fine-tuned on data
with another map must have each token's row at that token's new position, else every row scores
the wrong token and training starts worse than random. Rows of tokens the old map lacks start as
the mean of the old rows (`fill="mean"`): such a token's logit is then the average logit of the
old vocabulary for every hidden state, so it is never the favourite at the start yet is not
pushed out either; a zero row would give it a constant logit 0, whose rank depends on where the
init's logits happen to be centred. `fill="zeros"` is there for those who want it.
Every other tensor is copied byte for byte, streamed, so memory stays bounded at any size.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from specgate.core import files
from specgate.core.errors import CheckpointError
from specgate.io.checkpoint import INDEX_NAME, open_drafter
from specgate.io.dump import bf16_bits
from specgate.io.safetensors_io import (
    DTYPES,
    TensorInfo,
    TensorSpec,
    read_file_header,
    write_sparse,
)
from specgate.io.vocab_maps import VocabMap, load_map, map_of

FILLS = ("mean", "zeros")
COPY_CHUNK_BYTES = 16 * 1024 * 1024
ROWS_PER_CHUNK = 1024


@dataclasses.dataclass(frozen=True)
class RemapResult:
    """What remap_vocab wrote."""

    out_dir: Path
    draft_vocab_size: int
    carried_rows: int  # rows moved from the old lm_head
    filled_rows: int  # rows of tokens the old map lacks
    fill: str
    files: tuple[Path, ...]

    def summary(self) -> str:
        return (f"{self.out_dir}: lm_head rows follow the new map; {self.carried_rows} of "
                f"{self.draft_vocab_size} rows carried over from the old drafter, "
                f"{self.filled_rows} started as {self.fill} rows (tokens the old map lacked)")


def row_sources(old: VocabMap, new: VocabMap) -> np.ndarray[Any, Any]:
    """For each new draft position, the old position of the same target token, or -1."""
    old_ids, new_ids = old.target_ids(), new.target_ids()
    order = np.argsort(old_ids, kind="stable")
    sorted_ids = old_ids[order]
    at = np.searchsorted(sorted_ids, new_ids).clip(max=max(len(sorted_ids) - 1, 0))
    found = sorted_ids[at] == new_ids if len(sorted_ids) else np.zeros(len(new_ids), bool)
    return np.where(found, order[at], -1).astype(np.int64)


def remap_vocab(old_dir: Path | str, map_path: Path | str, out_dir: Path | str, *,
                fill: str = "mean") -> RemapResult:
    """Write a copy of the drafter at old_dir whose lm_head rows and d2t/t2d follow map_path."""
    if fill not in FILLS:
        raise ValueError(f"fill must be one of {FILLS}, got {fill!r}")
    drafter = open_drafter(old_dir)
    out = Path(out_dir).expanduser().resolve()
    if out == drafter.path:
        raise CheckpointError(f"{out}: the output folder is the input drafter; give another --out")
    if out.exists() and any(out.iterdir()):
        raise CheckpointError(f"{out}: the output folder is not empty; give a new or empty --out")
    vocab_size = int(drafter.config["vocab_size"])
    old_map, new_map = map_of(drafter), load_map(map_path)
    new_ids = new_map.target_ids()
    if new_ids.size and (new_ids.min() < 0 or new_ids.max() >= vocab_size
                         or np.any(np.diff(new_ids) <= 0)):
        raise CheckpointError(f"{map_path}: d2t+arange must be strictly increasing target ids "
                              f"below vocab_size {vocab_size}; check the map (vocab.invariants)")
    t2d = np.zeros(vocab_size, dtype=bool)
    t2d[new_ids] = True
    head = drafter.find("lm_head.weight")
    if head is None:
        raise CheckpointError(f"{drafter.path}: has no lm_head.weight (tied or taken from the "
                              "target); there are no rows to remap")
    sources = row_sources(old_map, new_map)
    vd = int(new_ids.size)
    out.mkdir(parents=True, exist_ok=True)
    d2t_info, t2d_info = drafter.find("d2t"), drafter.find("t2d")
    written = []
    for file in sorted({i.file for i in drafter.tensors.values()}):
        header = read_file_header(file)
        specs: dict[str, TensorSpec] = {}
        for name, info in sorted(header.tensors.items(), key=lambda kv: kv[1].start):
            if info == head:
                specs[name] = TensorSpec(info.dtype, (vd, info.shape[1]),
                                         chunks=_rows(info, sources, fill))
            elif info == d2t_info:
                specs[name] = TensorSpec("I64", (vd,), data=new_ids - np.arange(vd))
            elif info == t2d_info:
                specs[name] = TensorSpec("BOOL", (vocab_size,), data=t2d)
            else:
                specs[name] = TensorSpec(info.dtype, info.shape, chunks=_copy(info))
        if file == head.file:
            if d2t_info is None:
                specs["d2t"] = TensorSpec("I64", (vd,), data=new_ids - np.arange(vd))
            if t2d_info is None:
                specs["t2d"] = TensorSpec("BOOL", (vocab_size,), data=t2d)
        written.append(write_sparse(out / file.name, specs, header.metadata or None))
    _write_index(drafter.path, out, head.file.name, added=[
        n for n, i in (("d2t", d2t_info), ("t2d", t2d_info)) if i is None])
    config = dict(drafter.config)
    config["draft_vocab_size"] = vd
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    carried = int((sources >= 0).sum())
    return RemapResult(out, vd, carried, vd - carried, fill, tuple(written))


def _copy(info: TensorInfo) -> Any:
    def chunks() -> Iterator[bytes]:
        with files.open_regular(info.file) as f:
            f.seek(info.start)
            left = info.nbytes
            while left:
                piece = f.read(min(COPY_CHUNK_BYTES, left))
                if not piece:
                    raise CheckpointError(f"{info.file}: tensor {info.name!r} is cut short")
                left -= len(piece)
                yield piece
    return chunks


def _rows(info: TensorInfo, sources: np.ndarray[Any, Any], fill: str) -> Any:
    def chunks() -> Iterator[bytes]:
        old = np.memmap(info.file, dtype=DTYPES[info.dtype], mode="r", offset=info.start,
                        shape=info.shape)
        filler = _fill_row(old, info.dtype, fill)
        for lo in range(0, len(sources), ROWS_PER_CHUNK):
            src = sources[lo:lo + ROWS_PER_CHUNK]
            block = np.empty((len(src), info.shape[1]), dtype=old.dtype)
            have = src >= 0
            block[have] = old[src[have]]
            block[~have] = filler
            yield block.tobytes()
    return chunks


def _fill_row(old: np.ndarray[Any, Any], dtype: str, fill: str) -> np.ndarray[Any, Any]:
    if fill == "zeros" or old.shape[0] == 0:
        return np.zeros(old.shape[1], dtype=old.dtype)
    total = np.zeros(old.shape[1], dtype=np.float64)
    for lo in range(0, old.shape[0], ROWS_PER_CHUNK):
        block = np.asarray(old[lo:lo + ROWS_PER_CHUNK])
        if dtype == "BF16":
            block = (block.astype(np.uint32) << 16).view(np.float32)
        total += block.astype(np.float64).sum(axis=0)
    mean = (total / old.shape[0]).astype(np.float32)
    return bf16_bits(mean) if dtype == "BF16" else mean.astype(old.dtype)


def _write_index(src: Path, out: Path, head_file: str, added: list[str]) -> None:
    index = src / INDEX_NAME
    if not index.exists():
        return
    try:
        doc = files.read_json(index, limit=files.INDEX_BYTES)
    except OSError as exc:
        raise CheckpointError(f"{index}: cannot be read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise CheckpointError(f"{index}: not valid JSON ({exc})") from None
    for name in added:
        doc["weight_map"][name] = head_file
    total = sum(i.nbytes for f in set(doc["weight_map"].values())
                for i in read_file_header(out / f).tensors.values())
    doc.setdefault("metadata", {})["total_size"] = total
    (out / INDEX_NAME).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
