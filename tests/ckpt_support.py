"""Tiny drafters, profiles, and tensor surgery for the checkpoint tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from specgate.core.profile import Profile, parse_profile
from specgate.io.safetensors_io import DTYPES, TensorSpec, read_header, write_sparse
from specgate.io.vocab_maps import VocabMap
from specgate.testing.generate import tiny, write_drafter


def tiny_drafter(folder: Path, changes: dict[str, TensorSpec | None] | None = None,
                 **kw: Any) -> Path:
    """A healthy tiny drafter (random weights, real d2t/t2d); with `changes`, some of its tensors
    then replaced (spec) or removed (None)."""
    kw.setdefault("fill", "random")
    out = write_drafter(folder, tiny(), **kw)
    if changes is not None:
        rewrite(out / "model.safetensors", changes)
    return out


def make_profile(drafter: Path | None = None, reference: Path | None = None,
                 target: Path | None = None, expect: dict[str, Any] | None = None,
                 sections: dict[str, dict[str, Any]] | None = None, **thresholds: Any) -> Profile:
    """A profile of these paths and thresholds; `sections` adds others ({"data": {"path": ...}}),
    each value written as text."""
    raw: dict[str, Any] = {"name": "test", "drafter": {}, "target": {}}
    for name, fields in (sections or {}).items():
        raw[name] = {k: str(v) for k, v in fields.items()}
    if drafter is not None:
        raw["drafter"]["path"] = str(drafter)
    if reference is not None:
        raw["drafter"]["reference"] = str(reference)
    if expect:
        raw["drafter"]["expect"] = expect
    if target is not None:
        raw["target"]["path"] = str(target)
    if thresholds:
        raw["thresholds"] = thresholds
    return parse_profile(raw)


def write_map(path: Path, ids: np.ndarray[Any, Any], vocab_size: int) -> Path:
    """A vocabulary map file (d2t, t2d) for a draft vocabulary of these target token ids."""
    vmap = VocabMap.from_token_ids(ids, vocab_size)
    assert vmap.t2d is not None
    write_sparse(path, {"d2t": TensorSpec("I64", vmap.d2t.shape, data=vmap.d2t),
                        "t2d": TensorSpec("BOOL", vmap.t2d.shape, data=vmap.t2d)})
    return path


def rewrite(file: Path, changes: dict[str, TensorSpec | None]) -> None:
    """Rewrite a small safetensors file with some tensors replaced (spec) or removed (None)."""
    specs: dict[str, TensorSpec] = {}
    for name, info in read_header(file).items():
        raw = np.fromfile(file, dtype=DTYPES[info.dtype], count=info.numel, offset=info.start)
        specs[name] = TensorSpec(info.dtype, info.shape, data=raw.reshape(info.shape))
    for name, spec in changes.items():
        if spec is None:
            specs.pop(name, None)
        else:
            specs[name] = spec
    write_sparse(file, specs)
