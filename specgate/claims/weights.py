"""The offline weight claims: layout against the config, shape parity, and health."""

from __future__ import annotations

import dataclasses
from typing import Any

from specgate.claims import ids, inputs
from specgate.claims import result as claims
from specgate.claims.result import ClaimResult
from specgate.core.errors import CheckpointError
from specgate.core.profile import Profile
from specgate.io import health
from specgate.io.checkpoint import Drafter, expected_layout, is_trainable, open_drafter
from specgate.io.safetensors_io import FLOAT_DTYPES

PHASE = "phase0"
LISTED = 12  # problems named in a message; the rest go to details


def _drafter(profile: Profile, cid: str) -> Drafter | ClaimResult:
    return inputs.prepare(profile, cid, PHASE, ["drafter"], open_drafter)


def _listing(problems: list[str]) -> str:
    shown = "; ".join(problems[:LISTED])
    more = len(problems) - LISTED
    return shown + (f"; and {more} more (see details)" if more > 0 else "")


def layout_problems(drafter: Drafter) -> tuple[list[str], list[str]]:
    """Mismatches against the config's implied layout, and tensors the config does not explain."""
    layout = expected_layout(drafter.config, max_tensors=len(drafter.tensors))
    problems = []
    for name, want in layout.items():
        stored = drafter.stored_name(name)
        if stored is None:
            if not want.optional:
                problems.append(f"{name} missing (expected {list(want.shape)})"
                                + (f": {want.why}" if want.why else ""))
            continue
        info = drafter.tensors[stored]
        if info.shape != want.shape:
            problems.append(f"{info.name} has shape {list(info.shape)}, config implies "
                            f"{list(want.shape)}")
        if want.dtype is None and info.dtype not in FLOAT_DTYPES:
            problems.append(f"{info.name} has dtype {info.dtype}, expected a float type")
        elif want.dtype is not None and info.dtype != want.dtype:
            problems.append(f"{info.name} has dtype {info.dtype}, expected {want.dtype}")
    unexpected = drafter.unexplained(layout)
    return problems, unexpected


def layout_claim(profile: Profile) -> ClaimResult:
    cid = ids.WEIGHTS_LAYOUT.id
    drafter = _drafter(profile, cid)
    if isinstance(drafter, ClaimResult):
        return drafter
    try:
        problems, unexpected = layout_problems(drafter)
    except CheckpointError as exc:
        return claims.broken(cid, PHASE, f"{drafter.path / 'config.json'}: {exc}")
    details: dict[str, Any] = {**claims.listed("problems", problems),
                               **claims.listed("unexpected", unexpected)}
    note = ""
    if unexpected:
        # SGLang's loader silently ignores names it does not know, so say which ones it will skip.
        note = (f" {len(unexpected)} tensor(s) the config does not explain, which SGLang ignores: "
                f"{', '.join(unexpected[:LISTED])}")
    if problems:
        return claims.failed(cid, PHASE, f"{drafter.path}: {len(problems)} tensor(s) do not match "
                             f"what config.json implies: {_listing(problems)}.{note}",
                             observed=len(problems), expected=0, unit="mismatches",
                             details=details)
    return claims.passed(cid, PHASE, f"{drafter.path}: all {len(drafter.tensors)} tensors have the "
                         f"shapes and dtypes config.json implies.{note}",
                         observed=0, expected=0, unit="mismatches", details=details)


@dataclasses.dataclass(frozen=True)
class TensorParity:
    """How one drafter's tensors (the source) land in another (the target), by normalized name
    (midlayer.* ≡ layers.0.*), shape and dtype; frozen tensors are set aside."""

    matched: tuple[str, ...]
    frozen: tuple[str, ...]  # in the source, not trainable (embed_tokens, d2t, t2d, …)
    missing: tuple[str, ...]  # trainable in the source, no place in the target
    mismatched: tuple[tuple[str, str, str], ...]  # (name, source shape/dtype, target's)
    extra: tuple[str, ...]  # trainable in the target, absent from the source


def tensor_parity(source: Drafter, target: Drafter) -> TensorParity:
    """Match every trainable tensor of source with its twin in target (one check for
    weights.shape_parity and finetune.init_parity)."""
    mine = target.by_canonical()
    theirs = source.by_canonical()
    matched, frozen, missing, mismatched = [], [], [], []
    for name, info in sorted(theirs.items()):
        if not is_trainable(name):
            frozen.append(name)
            continue
        twin = mine.get(name)
        if twin is None:
            missing.append(name)
        elif twin.shape != info.shape or twin.dtype != info.dtype:
            mismatched.append((name, f"{list(info.shape)} {info.dtype}",
                               f"{list(twin.shape)} {twin.dtype}"))
        else:
            matched.append(name)
    extra = tuple(n for n in sorted(mine) if n not in theirs and is_trainable(n))
    return TensorParity(tuple(matched), tuple(frozen), tuple(missing), tuple(mismatched), extra)


def parity_problems(drafter: Drafter, reference: Drafter) -> list[str]:
    """Every trainable reference tensor without a same-shape, same-dtype twin in the drafter."""
    parity = tensor_parity(reference, drafter)
    refs = reference.by_canonical()
    problems = {n: f"{refs[n].name} {list(refs[n].shape)} {refs[n].dtype} has no twin in the "
                   "drafter" for n in parity.missing}
    problems.update({name: f"{name}: drafter {theirs} vs reference {ref}"
                     for name, ref, theirs in parity.mismatched})
    return [problems[n] for n in sorted(problems)]


def shape_parity_claim(profile: Profile) -> ClaimResult:
    cid = ids.SHAPE_PARITY.id
    pair = inputs.prepare(profile, cid, PHASE, ["drafter", "reference"],
                          lambda a, b: (open_drafter(a), open_drafter(b)))
    if isinstance(pair, ClaimResult):
        return pair
    drafter, reference = pair
    reference_path = reference.path
    problems = parity_problems(drafter, reference)
    compared = sum(1 for n in reference.by_canonical() if is_trainable(n))
    details = {**claims.listed("problems", problems), "compared": compared}
    if problems:
        return claims.failed(cid, PHASE, f"{len(problems)} of {compared} trainable tensors of "
                             f"{reference_path} have no same-shape, same-dtype twin in "
                             f"{drafter.path}: {_listing(problems)}; a fine-tune cannot start "
                             "from the reference's weights", observed=len(problems), expected=0,
                             unit="mismatches", details=details)
    return claims.passed(cid, PHASE, f"all {compared} trainable tensors of {reference_path} have "
                         f"a same-shape, same-dtype twin in {drafter.path}",
                         observed=0, expected=0, unit="mismatches", details=details)


def health_claim(profile: Profile, *, workers: int | None = None) -> ClaimResult:
    cid = ids.WEIGHTS_HEALTH.id
    drafter = _drafter(profile, cid)
    if isinstance(drafter, ClaimResult):
        return drafter
    try:
        report = health.scan(drafter, workers=workers or health.default_workers())
    except OSError as exc:
        return claims.broken(cid, PHASE, f"{drafter.path}: reading the weights failed: {exc}")
    problems = [f"{t.name} has {t.nonfinite} NaN/Inf value(s)" for t in report.nonfinite]
    nonfinite = {t.name: t.nonfinite for t in report.nonfinite[:claims.DETAILS_LISTED]}
    all_zero = [t.name for t in report.all_zero]
    problems += [f"{t.name} is all zeros (never trained, or saved before the weights were "
                 "materialised)" for t in report.all_zero]
    details: dict[str, Any] = {**claims.listed("problems", problems), "nonfinite": nonfinite,
                               "nonfinite_count": len(report.nonfinite),
                               **claims.listed("all_zero", all_zero),
                               "bytes_scanned": report.bytes_scanned,
                               "bytes_in_holes": report.bytes_in_holes,
                               "seconds": round(report.seconds, 3)}
    scanned = (f"{report.count} tensors, "
               f"{_size(report.bytes_scanned + report.bytes_in_holes)} in {report.seconds:.2f} s")
    if problems:
        return claims.failed(cid, PHASE, f"{drafter.path}: {_listing(problems)} ({scanned}); "
                             "re-export the drafter from a good training checkpoint",
                             observed=len(problems), expected=0, unit="bad tensors",
                             details=details)
    return claims.passed(cid, PHASE, f"{drafter.path}: no NaN/Inf and no all-zero trainable "
                         f"tensor ({scanned})", observed=0, expected=0, unit="bad tensors",
                         details=details)


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} bytes"
