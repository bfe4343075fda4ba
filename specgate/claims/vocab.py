"""Phase 0 vocab claims: vocab.invariants, vocab.d2t_match, vocab.t2d_match."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from specgate.claims import ids, inputs
from specgate.claims import result as claims
from specgate.claims.result import Attachment, ClaimResult
from specgate.core.errors import CheckpointError
from specgate.core.profile import Profile
from specgate.io.checkpoint import Drafter, open_drafter
from specgate.io.vocab_maps import (
    MapComparison,
    VocabMap,
    check_invariants,
    compare,
    load_map,
    map_of,
    required_count,
)

PHASE = "phase0"

def invariants_claim(profile: Profile) -> ClaimResult:
    cid = ids.VOCAB_INVARIANTS.id
    loaded = inputs.prepare(profile, cid, PHASE, ["drafter"], _read_drafter_map)
    if isinstance(loaded, ClaimResult):
        return loaded
    folder, vmap, (vd, v) = loaded
    problems = check_invariants(vmap, vd, v)
    if problems:
        implied = (f" ({' and '.join(vmap.implied)} absent: the identity map of a "
                   "full-vocabulary drafter stands in)" if vmap.implied else "")
        return claims.failed(cid, PHASE, f"{folder}: vocab map breaks {len(problems)} "
                             f"invariant(s){implied}: " + "; ".join(problems.values()),
                             observed=len(problems), expected=0, unit="problems",
                             reason=next(iter(problems)),
                             details={"problems": list(problems.values()),
                                      "codes": list(problems), "implied": list(vmap.implied)})
    if vmap.implied:
        stored = "stored d2t " if "d2t" not in vmap.implied else ""
        return claims.passed(cid, PHASE, f"{folder}: full-vocabulary drafter (draft_vocab_size = "
                             f"vocab_size = {v}) without {' and '.join(vmap.implied)}, which "
                             f"SGLang then treats as the identity map; {stored}consistent with it",
                             observed=0, expected=0, unit="problems", reason="identity_implied",
                             details={"implied": list(vmap.implied)})
    return claims.passed(cid, PHASE, f"{folder}: d2t ({vmap.draft_vocab_size} draft ids) and t2d "
                         f"agree and map into the {v}-token vocabulary in order",
                         observed=0, expected=0, unit="problems")


def _read_drafter_map(folder: Path) -> tuple[Path, VocabMap, tuple[int | None, int | None]]:
    drafter = open_drafter(folder)
    return folder, map_of(drafter), _sizes(drafter)


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
    loaded = inputs.prepare(profile, cid, PHASE, ["drafter", "reference"],
                            lambda a, b: (a, b, load_map(a), load_map(b)))
    if isinstance(loaded, ClaimResult):
        return loaded
    folder, reference, mine, ref = loaded
    for vmap, where in ((mine, folder), (ref, reference)):
        if vmap.d2t.ndim != 1:
            return claims.broken(cid, PHASE, f"{where}: d2t has shape {list(vmap.d2t.shape)}, "
                                 "expected one dimension; it cannot be compared (see "
                                 "vocab.invariants)", reason="bad_shape")
    return mine, ref, folder, reference


def _on_comparison(profile: Profile, cid: str,
                   judge: Callable[[Profile, str, MapComparison, Path], ClaimResult]
                   ) -> ClaimResult:
    """judge(profile, cid, the drafter's map against the reference's, the reference's path);
    the claim's broken result when the two maps cannot be read or compared."""
    pair = _pair(profile, cid)
    if isinstance(pair, ClaimResult):
        return pair
    mine, ref, _, reference = pair
    return judge(profile, cid, compare(mine, ref), reference)


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
    return _on_comparison(profile, ids.D2T_MATCH.id, _d2t_match)


def _d2t_match(profile: Profile, cid: str, cmp: MapComparison, reference: Path) -> ClaimResult:
    # Judged against the reference's size: a map of 0 or 1 entries cannot match 512 positions.
    need = required_count(profile.thresholds.d2t_match_min, cmp.reference_draft_vocab_size)
    n, total = cmp.d2t_positional_matches, cmp.reference_draft_vocab_size
    text = (f"d2t: {n} of {total} draft positions ({_pct(n, total)}) map to the same target "
            f"token as the reference {reference} (counted over the reference's map)")
    if cmp.draft_vocab_size != cmp.reference_draft_vocab_size:
        text += (f" (draft vocab sizes differ: {cmp.draft_vocab_size} vs "
                 f"{cmp.reference_draft_vocab_size}; the first {cmp.compared_positions} compared)")
    why = "shifted_map" if cmp.looks_shifted else "different_selection"
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
                         unit="positions", details=_details(cmp), attachments=_attachment(cmp),
                         fail_reason=why)


def t2d_match_claim(profile: Profile) -> ClaimResult:
    return _on_comparison(profile, ids.T2D_MATCH.id, _t2d_match)


def _t2d_match(profile: Profile, cid: str, cmp: MapComparison, reference: Path) -> ClaimResult:
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
