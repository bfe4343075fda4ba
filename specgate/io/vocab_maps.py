"""Draft↔target vocabulary maps (d2t, t2d): reading, construction, invariants, comparison.

No claims here (they are in specgate.claims.vocab): `specgate generate` and `remap-vocab` use
this module without pulling in the profile or pydantic.
"""

from __future__ import annotations

import dataclasses
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specgate.core import files
from specgate.core.errors import CheckpointError
from specgate.io.checkpoint import Drafter, open_drafter
from specgate.io.safetensors_io import read_array, read_header

MISMATCH_ROWS = 50


@dataclasses.dataclass(frozen=True, eq=False)
class VocabMap:
    """d2t (target id = draft id + d2t[draft id]) and t2d (target ids in the draft vocab)."""

    d2t: np.ndarray[Any, Any]
    t2d: np.ndarray[Any, Any] | None
    source: str = ""
    # Tensors the checkpoint omits and the identity map stands in for (full-vocabulary drafters).
    implied: tuple[str, ...] = ()

    @classmethod
    def from_token_ids(cls, ids: Sequence[int] | np.ndarray[Any, Any],
                       vocab_size: int) -> VocabMap:
        """SpecForge's construction: sorted selected target ids, d2t = ids − arange."""
        used = np.unique(np.asarray(ids, dtype=np.int64))
        if used.size and (used[0] < 0 or used[-1] >= vocab_size):
            raise ValueError(f"token ids must lie in [0, {vocab_size}); "
                             f"found {used[0]}..{used[-1]}")
        t2d = np.zeros(vocab_size, dtype=bool)
        t2d[used] = True
        return cls(used - np.arange(used.size, dtype=np.int64), t2d)

    @property
    def draft_vocab_size(self) -> int:
        return int(self.d2t.shape[0]) if self.d2t.ndim else 0

    def target_ids(self) -> np.ndarray[Any, Any]:
        """The target token id of every draft position."""
        return self.d2t.astype(np.int64) + np.arange(self.d2t.shape[0], dtype=np.int64)


@dataclasses.dataclass(frozen=True)
class MapComparison:
    """How a drafter's map agrees with a reference map, position by position and as sets."""

    draft_vocab_size: int
    reference_draft_vocab_size: int
    compared_positions: int
    d2t_positional_matches: int
    shared_tokens: int
    first_mismatch: int | None
    longest_matching_prefix: int
    mismatches: tuple[tuple[int, int, int], ...]  # (position, drafter id, reference id), first few

    @property
    def positional_fraction(self) -> float:
        if not self.compared_positions:
            return 0.0
        return self.d2t_positional_matches / self.compared_positions

    @property
    def looks_shifted(self) -> bool:
        """Nearly the same tokens but at other positions: rows of lm_head score other tokens."""
        smaller = min(self.draft_vocab_size, self.reference_draft_vocab_size)
        return (smaller > 0 and self.shared_tokens >= 0.9 * smaller
                and self.d2t_positional_matches < 0.5 * self.compared_positions)

    def table_csv(self) -> str:
        out = io.StringIO()
        out.write("metric,value\n")
        for key in ("draft_vocab_size", "reference_draft_vocab_size", "compared_positions",
                    "d2t_positional_matches", "shared_tokens", "first_mismatch",
                    "longest_matching_prefix"):
            value = getattr(self, key)
            out.write(f"{key},{'' if value is None else value}\n")
        out.write(f"looks_shifted,{self.looks_shifted}\n\n")
        out.write("position,drafter_target_id,reference_target_id\n")
        for pos, mine, ref in self.mismatches:
            out.write(f"{pos},{mine},{ref}\n")
        return out.getvalue()


def required_count(fraction: float, n: int) -> int:
    """The least whole count that is at least fraction × n.

    Rounding to 9 places first drops binary noise: 0.543 × 24000 is 13032.000000000002, whose
    plain ceiling would demand 13033.
    """
    return math.ceil(round(fraction * n, 9))


def check_invariants(vmap: VocabMap, draft_vocab_size: int | None,
                     vocab_size: int | None) -> dict[str, str]:
    """Every way the map breaks the vocab.invariants claim: problem code → one sentence (empty:
    sound). Codes: d2t_dtype, d2t_shape, t2d_missing, t2d_dtype, t2d_shape, not_increasing,
    out_of_range, t2d_disagrees."""
    problems: dict[str, str] = {}
    d2t, t2d = vmap.d2t, vmap.t2d
    vd = draft_vocab_size if draft_vocab_size is not None else vmap.draft_vocab_size
    if d2t.dtype != np.int64:
        problems["d2t_dtype"] = (
            f"d2t has dtype {d2t.dtype}, expected int64: a float or narrower type "
            "corrupts the offsets; rebuild the map with torch.int64")
    if d2t.ndim != 1 or d2t.shape[0] != vd:
        problems["d2t_shape"] = (
            f"d2t has shape {list(d2t.shape)}, expected [{vd}] (draft_vocab_size)")
    if t2d is None:
        problems["t2d_missing"] = (
            "t2d is missing; SpecForge training slices target logits with it "
            "(serving ignores it): store the bool mask of length vocab_size")
    else:
        if t2d.dtype != np.bool_:
            problems["t2d_dtype"] = (f"t2d has dtype {t2d.dtype}, expected bool")
        if vocab_size is not None and (t2d.ndim != 1 or t2d.shape[0] != vocab_size):
            problems["t2d_shape"] = (f"t2d has shape {list(t2d.shape)}, expected [{vocab_size}] "
                                     "(vocab_size)")
    if d2t.ndim != 1 or (not np.issubdtype(d2t.dtype, np.integer) and not _integral(d2t)):
        return problems
    ids = vmap.target_ids()
    if ids.size > 1:
        steps = np.diff(ids)
        bad = np.flatnonzero(steps <= 0)
        if bad.size:
            i = int(bad[0]) + 1
            problems["not_increasing"] = (
                f"d2t+arange is not strictly increasing at {bad.size} position(s), "
                f"first at draft id {i} (target id {ids[i]} after {ids[i - 1]}): "
                "the selected target ids must be sorted and distinct")
    limit = vocab_size if vocab_size is not None else (t2d.shape[0] if t2d is not None else None)
    if ids.size:
        outside = np.flatnonzero((ids < 0) | (ids >= limit if limit is not None else False))
        if outside.size:
            i = int(outside[0])
            problems["out_of_range"] = (
                f"{outside.size} draft id(s) map outside the vocabulary [0, {limit}), "
                f"first draft id {i} → target id {ids[i]}")
    if t2d is not None and t2d.ndim == 1:
        set_ids = np.flatnonzero(t2d.astype(bool))
        in_range = ids[(ids >= 0) & (ids < t2d.shape[0])]
        if set_ids.size != ids.size or not np.array_equal(set_ids, np.sort(in_range)):
            only_t2d = np.setdiff1d(set_ids, ids).size
            only_d2t = np.setdiff1d(ids, set_ids).size
            problems["t2d_disagrees"] = (
                f"t2d and d2t disagree: t2d marks {set_ids.size} target ids, d2t "
                f"maps to {ids.size}; {only_t2d} marked in t2d only, {only_d2t} "
                "reached by d2t only: both must come from the same token selection")
    return problems


def _integral(a: np.ndarray[Any, Any]) -> bool:
    return bool(np.issubdtype(a.dtype, np.floating) and np.all(np.isfinite(a))
                and np.all(a == np.round(a)))


def shared_count(ids_a: np.ndarray[Any, Any], ids_b: np.ndarray[Any, Any]) -> int:
    """How many distinct ids two arrays share: a bitmap over the id range (a vocab is at most a
    few hundred thousand ids: 0.1 ms, against 10 ms for sorting both in np.intersect1d)."""
    if ids_a.size == 0 or ids_b.size == 0:
        return 0
    lo = int(min(ids_a.min(), ids_b.min()))
    hi = int(max(ids_a.max(), ids_b.max()))
    if hi - lo > 1 << 26:
        return int(np.intersect1d(ids_a, ids_b).size)
    in_a = np.zeros(hi - lo + 1, dtype=bool)
    in_a[ids_a - lo] = True
    in_b = np.zeros(hi - lo + 1, dtype=bool)
    in_b[ids_b - lo] = True
    return int(np.count_nonzero(in_a & in_b))


def compare(a: VocabMap, b: VocabMap) -> MapComparison:
    """Compare a drafter's map `a` with a reference map `b`."""
    ids_a, ids_b = a.target_ids(), b.target_ids()
    n = min(ids_a.size, ids_b.size)
    same = ids_a[:n] == ids_b[:n]
    diff = np.flatnonzero(~same)
    first = int(diff[0]) if diff.size else None
    rows = tuple((int(p), int(ids_a[p]), int(ids_b[p])) for p in diff[:MISMATCH_ROWS])
    return MapComparison(
        draft_vocab_size=int(ids_a.size),
        reference_draft_vocab_size=int(ids_b.size),
        compared_positions=int(n),
        d2t_positional_matches=int(same.sum()),
        shared_tokens=shared_count(ids_a, ids_b),
        first_mismatch=first,
        longest_matching_prefix=n if first is None else first,
        mismatches=rows,
    )


def load_map(path: Path | str) -> VocabMap:
    """d2t/t2d from a drafter folder, a .safetensors file, or a SpecForge .pt dict."""
    path = Path(path)
    if path.is_dir():
        return map_of(open_drafter(path))
    if not path.exists():
        raise CheckpointError(f"{path}: vocab map not found; give a drafter folder, a "
                              ".safetensors file or a SpecForge .pt file holding d2t and t2d")
    if path.suffix == ".safetensors":
        tensors = read_header(path)
        d2t = tensors.get("d2t")
        if d2t is None:
            raise CheckpointError(f"{path}: has no tensor 'd2t' (found: "
                                  f"{', '.join(sorted(tensors)[:8])})")
        t2d = tensors.get("t2d")
        return VocabMap(read_array(path, d2t), read_array(path, t2d) if t2d else None, str(path))
    if path.suffix in (".pt", ".pth"):
        return _load_torch_map(path)
    raise CheckpointError(f"{path}: unknown vocab map format {path.suffix!r}; expected a drafter "
                          "folder, .safetensors or .pt")


def map_of(drafter: Drafter) -> VocabMap:
    """The drafter's map; a full-vocabulary drafter may omit d2t and t2d (the identity map).

    SGLang and weights.layout treat both as optional when draft_vocab_size == vocab_size, so an
    absent one is filled in as the identity (d2t all zeros, t2d all true) rather than reported
    missing; vocab.invariants then still checks whatever the checkpoint does store.
    """
    d2t_info, t2d_info = drafter.find("d2t"), drafter.find("t2d")
    t2d = read_array(t2d_info.file, t2d_info) if t2d_info else None
    vocab = drafter.config.get("vocab_size")
    vd = drafter.config.get("draft_vocab_size") or vocab
    full: int | None = (vocab if isinstance(vocab, int) and not isinstance(vocab, bool)
                        and vocab > 0 and vd == vocab else None)
    if full is not None and (d2t_info is None or t2d is None):
        _check_implied_size(drafter, full)
    implied = t2d is None and full is not None
    if full is not None and t2d is None:
        t2d = np.ones(full, dtype=bool)
    if d2t_info is None:
        if full is not None:
            return VocabMap(np.zeros(full, np.int64), t2d, str(drafter.path),
                            implied=("d2t", "t2d") if implied else ("d2t",))
        raise CheckpointError(f"{drafter.path}: has no d2t tensor but draft_vocab_size {vd} < "
                              f"vocab_size {vocab}; SGLang would treat draft ids as target ids. "
                              "Export d2t/t2d with the drafter")
    return VocabMap(read_array(d2t_info.file, d2t_info), t2d, str(drafter.path),
                    implied=("t2d",) if implied else ())


# Token ids are int32 in SGLang (and in the tokenizers' vocabularies): no vocab is larger.
MAX_VOCAB = 2**31 - 1
# Without a tensor to confirm the size, the identity map is built up to this many entries
# (the largest real vocabularies are a few hundred thousand tokens).
MAX_UNCONFIRMED_VOCAB = 2**24


def _check_implied_size(drafter: Drafter, vocab: int) -> None:
    """Refuse to build an identity map the checkpoint cannot back: a vocab beyond int32, one
    that disagrees with the rows of lm_head or embed_tokens, or, with neither tensor, one beyond
    MAX_UNCONFIRMED_VOCAB (so a number in config.json cannot make specgate allocate gigabytes)."""
    where = f"{drafter.path / 'config.json'}: vocab_size = draft_vocab_size = {vocab}"
    if vocab > MAX_VOCAB:
        raise CheckpointError(f"{where}, beyond the int32 token ids SGLang uses (at most "
                              f"{MAX_VOCAB}); fix vocab_size in config.json")
    for name in ("lm_head.weight", "embed_tokens.weight"):
        info = drafter.find(name)
        if info is not None and info.shape:
            if info.shape[0] != vocab:
                raise CheckpointError(
                    f"{where}, but {info.name} has {info.shape[0]} rows (shape "
                    f"{list(info.shape)}); the identity map stands in only for a drafter whose "
                    "head covers the whole vocabulary: fix config.json or export d2t/t2d")
            return
    if vocab > MAX_UNCONFIRMED_VOCAB:
        raise CheckpointError(f"{where} with no d2t/t2d and no lm_head or embed_tokens to "
                              f"confirm it; specgate builds an implied identity map only up to "
                              f"{MAX_UNCONFIRMED_VOCAB} entries: export d2t/t2d or fix "
                              "vocab_size")


def _load_torch_map(path: Path) -> VocabMap:
    try:
        import torch
    except ImportError:
        raise CheckpointError(f"{path}: reading a .pt map needs torch (pip install torch, or "
                              "store d2t/t2d in a .safetensors file)") from None
    try:
        with files.open_regular(path, limit=files.MAP_BYTES) as fh:
            obj = torch.load(fh, map_location="cpu", weights_only=True)
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    except Exception as exc:  # torch raises many kinds for corrupt or unsafe pickles
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CheckpointError(f"{path}: cannot be read as a weights-only torch file: "
                              f"{first_line}") from None
    if not isinstance(obj, dict) or "d2t" not in obj:
        keys = ", ".join(map(str, obj)) if isinstance(obj, dict) else type(obj).__name__
        raise CheckpointError(f"{path}: expected a dict with 'd2t' and 't2d', found {keys}")
    t2d = obj.get("t2d")
    return VocabMap(_numpy(obj["d2t"]), _numpy(t2d) if t2d is not None else None, str(path))


def _numpy(value: Any) -> np.ndarray[Any, Any]:
    """A tensor (bf16 widened: numpy has no bf16) or list as a numpy array, dtype kept."""
    if hasattr(value, "numpy"):
        if str(getattr(value, "dtype", "")) == "torch.bfloat16":
            value = value.float()
        return np.asarray(value.detach().cpu().numpy())
    return np.asarray(value)
