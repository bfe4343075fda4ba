"""Draft↔target vocabulary maps (d2t, t2d): construction, invariants, comparison, claims."""

from __future__ import annotations

import dataclasses
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specgate.claims import result as claims
from specgate.claims.result import Attachment, ClaimResult
from specgate.core.errors import CheckpointError
from specgate.core.profile import Profile
from specgate.io.checkpoint import Drafter, open_drafter
from specgate.io.safetensors_io import read_array, read_header

PHASE = "phase0"
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
                     vocab_size: int | None) -> list[str]:
    """Every way the map breaks SPEC's vocab.invariants, one sentence each (empty: sound)."""
    problems: list[str] = []
    d2t, t2d = vmap.d2t, vmap.t2d
    vd = draft_vocab_size if draft_vocab_size is not None else vmap.draft_vocab_size
    if d2t.dtype != np.int64:
        problems.append(f"d2t has dtype {d2t.dtype}, expected int64: a float or narrower type "
                        "corrupts the offsets; rebuild the map with torch.int64")
    if d2t.ndim != 1 or d2t.shape[0] != vd:
        problems.append(f"d2t has shape {list(d2t.shape)}, expected [{vd}] (draft_vocab_size)")
    if t2d is None:
        problems.append("t2d is missing; SpecForge training slices target logits with it "
                        "(serving ignores it): store the bool mask of length vocab_size")
    else:
        if t2d.dtype != np.bool_:
            problems.append(f"t2d has dtype {t2d.dtype}, expected bool")
        if vocab_size is not None and (t2d.ndim != 1 or t2d.shape[0] != vocab_size):
            problems.append(f"t2d has shape {list(t2d.shape)}, expected [{vocab_size}] "
                            "(vocab_size)")
    if d2t.ndim != 1 or (not np.issubdtype(d2t.dtype, np.integer) and not _integral(d2t)):
        return problems
    ids = vmap.target_ids()
    if ids.size > 1:
        steps = np.diff(ids)
        bad = np.flatnonzero(steps <= 0)
        if bad.size:
            i = int(bad[0]) + 1
            problems.append(f"d2t+arange is not strictly increasing at {bad.size} position(s), "
                            f"first at draft id {i} (target id {ids[i]} after {ids[i - 1]}): "
                            "the selected target ids must be sorted and distinct")
    limit = vocab_size if vocab_size is not None else (t2d.shape[0] if t2d is not None else None)
    if ids.size:
        outside = np.flatnonzero((ids < 0) | (ids >= limit if limit is not None else False))
        if outside.size:
            i = int(outside[0])
            problems.append(f"{outside.size} draft id(s) map outside the vocabulary [0, {limit}), "
                            f"first draft id {i} → target id {ids[i]}")
    if t2d is not None and t2d.ndim == 1:
        set_ids = np.flatnonzero(t2d.astype(bool))
        in_range = ids[(ids >= 0) & (ids < t2d.shape[0])]
        if set_ids.size != ids.size or not np.array_equal(set_ids, np.sort(in_range)):
            only_t2d = np.setdiff1d(set_ids, ids).size
            only_d2t = np.setdiff1d(ids, set_ids).size
            problems.append(f"t2d and d2t disagree: t2d marks {set_ids.size} target ids, d2t "
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
    if not path.is_file():
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


def _load_torch_map(path: Path) -> VocabMap:
    try:
        import torch
    except ImportError:
        raise CheckpointError(f"{path}: reading a .pt map needs torch (pip install torch, or "
                              "store d2t/t2d in a .safetensors file)") from None
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
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


# --- claims -------------------------------------------------------------------------------

def invariants_claim(profile: Profile) -> ClaimResult:
    cid = "vocab.invariants"
    folder = profile.resolve(profile.drafter.path)
    if folder is None:
        return claims.skipped(cid, PHASE, "no drafter given ([drafter] path or --drafter)")
    try:
        drafter = open_drafter(folder)
        vmap = map_of(drafter)
        vd, v = _sizes(drafter)
    except CheckpointError as exc:
        return claims.broken(cid, PHASE, str(exc))
    problems = check_invariants(vmap, vd, v)
    if problems:
        implied = (f" ({' and '.join(vmap.implied)} absent: the identity map of a "
                   "full-vocabulary drafter stands in)" if vmap.implied else "")
        return claims.failed(cid, PHASE, f"{folder}: vocab map breaks {len(problems)} "
                             f"invariant(s){implied}: " + "; ".join(problems),
                             observed=len(problems), expected=0, unit="problems",
                             details={"problems": problems})
    if vmap.implied:
        stored = "stored d2t " if "d2t" not in vmap.implied else ""
        return claims.passed(cid, PHASE, f"{folder}: full-vocabulary drafter (draft_vocab_size = "
                             f"vocab_size = {v}) without {' and '.join(vmap.implied)}, which "
                             f"SGLang then treats as the identity map; {stored}consistent with it",
                             observed=0, expected=0, unit="problems",
                             details={"implied": list(vmap.implied)})
    return claims.passed(cid, PHASE, f"{folder}: d2t ({vmap.draft_vocab_size} draft ids) and t2d "
                         f"agree and map into the {v}-token vocabulary in order",
                         observed=0, expected=0, unit="problems")


def _sizes(drafter: Drafter) -> tuple[int | None, int | None]:
    v = _size_field(drafter, "vocab_size")
    vd = _size_field(drafter, "draft_vocab_size") or v
    return vd, v


def _size_field(drafter: Drafter, key: str) -> int | None:
    value = drafter.config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CheckpointError(f"{drafter.path}/config.json: {key} is {value!r}; expected a "
                              "positive integer (the vocabulary size); fix config.json")
    return value


def _pair(profile: Profile, cid: str) -> tuple[VocabMap, VocabMap, Path, Path] | ClaimResult:
    folder = profile.resolve(profile.drafter.path)
    reference = profile.resolve(profile.drafter.reference)
    if folder is None:
        return claims.skipped(cid, PHASE, "no drafter given ([drafter] path or --drafter)")
    if reference is None:
        return claims.skipped(cid, PHASE, "no reference drafter given ([drafter] reference or "
                              "--reference-drafter)")
    try:
        mine, ref = load_map(folder), load_map(reference)
    except CheckpointError as exc:
        return claims.broken(cid, PHASE, str(exc))
    for vmap, where in ((mine, folder), (ref, reference)):
        if vmap.d2t.ndim != 1:
            return claims.broken(cid, PHASE, f"{where}: d2t has shape {list(vmap.d2t.shape)}, "
                                 "expected one dimension; it cannot be compared (see "
                                 "vocab.invariants)")
    return mine, ref, folder, reference


def _attachment(cmp: MapComparison) -> tuple[Attachment, ...]:
    return (Attachment("vocab comparison", cmp.table_csv(), "csv"),)


def _details(cmp: MapComparison) -> dict[str, Any]:
    return {"draft_vocab_size": cmp.draft_vocab_size,
            "reference_draft_vocab_size": cmp.reference_draft_vocab_size,
            "d2t_positional_matches": cmp.d2t_positional_matches,
            "shared_tokens": cmp.shared_tokens, "first_mismatch": cmp.first_mismatch,
            "longest_matching_prefix": cmp.longest_matching_prefix,
            "looks_shifted": cmp.looks_shifted}


def d2t_match_claim(profile: Profile) -> ClaimResult:
    cid = "vocab.d2t_match"
    pair = _pair(profile, cid)
    if isinstance(pair, ClaimResult):
        return pair
    mine, ref, _, reference = pair
    cmp = compare(mine, ref)
    # Judged against the reference's size: a map of 0 or 1 entries cannot match 512 positions.
    need = required_count(profile.thresholds.d2t_match_min, cmp.reference_draft_vocab_size)
    n, total = cmp.d2t_positional_matches, cmp.reference_draft_vocab_size
    text = (f"d2t: {n} of {total} draft positions ({_pct(n, total)}) map to the same target "
            f"token as the reference {reference} (counted over the reference's map)")
    if cmp.draft_vocab_size != cmp.reference_draft_vocab_size:
        text += (f" (draft vocab sizes differ: {cmp.draft_vocab_size} vs "
                 f"{cmp.reference_draft_vocab_size}; the first {cmp.compared_positions} compared)")
    if n >= need:
        text += f"; need ≥ {need} (d2t_match_min {profile.thresholds.d2t_match_min})"
    elif cmp.looks_shifted:
        text += (f", while the two draft vocabularies share {cmp.shared_tokens} tokens: the maps "
                 f"are shifted after position {cmp.longest_matching_prefix}, so lm_head rows of "
                 "one drafter score other tokens in the other; remap lm_head rows to the new map "
                 "or rebuild the map before fine-tuning")
    else:
        text += (f"; the vocabularies share only {cmp.shared_tokens} tokens: the drafters were "
                 "built from different token selections, so lm_head rows are not "
                 "interchangeable; rebuild the map from this target's data")
    return claims.judged(n >= need, cid, PHASE, text, observed=n, expected=f">= {need}",
                         unit="positions", details=_details(cmp), attachments=_attachment(cmp))


def t2d_match_claim(profile: Profile) -> ClaimResult:
    cid = "vocab.t2d_match"
    pair = _pair(profile, cid)
    if isinstance(pair, ClaimResult):
        return pair
    mine, ref, _, reference = pair
    cmp = compare(mine, ref)
    fraction = profile.thresholds.t2d_match_min
    if fraction is None:
        fraction = profile.thresholds.d2t_match_min
    need = required_count(fraction, cmp.reference_draft_vocab_size)  # the reference's size
    n = cmp.shared_tokens
    text = (f"t2d: the drafter's {cmp.draft_vocab_size} draft tokens and the reference's "
            f"{cmp.reference_draft_vocab_size} ({reference}) share {n} target tokens "
            f"({_pct(n, cmp.reference_draft_vocab_size)} of the reference's); need ≥ {need}")
    if n < need:
        text += (": the drafters speak different draft vocabularies, so a fine-tune from the "
                 "reference starts with lm_head rows for tokens it will never propose")
    return claims.judged(n >= need, cid, PHASE, text, observed=n, expected=f">= {need}",
                         unit="tokens", details=_details(cmp), attachments=_attachment(cmp))


def _pct(n: int, total: int) -> str:
    return f"{100.0 * n / total:.1f} %" if total else "n/a"
