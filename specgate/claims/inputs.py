"""The one preamble of an offline claim: resolve the profile paths it needs, skip when one is not
configured, load them, and turn an unreadable input into a broken result naming the file."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from specgate.claims import result as claims
from specgate.claims.result import ClaimResult
from specgate.core.errors import CheckpointError, DataError
from specgate.core.profile import Profile

T = TypeVar("T")

# input name → (its path as this machine reads it, the skip reason when the profile gives none)
INPUTS: dict[str, tuple[Callable[[Profile], Path | None], str]] = {
    "drafter": (lambda p: p.drafter_path, "no drafter given ([drafter] path or --drafter)"),
    "reference": (lambda p: p.reference_path, "no reference drafter given ([drafter] "
                  "reference or --reference-drafter)"),
    "target": (lambda p: p.target_path, "no target model given ([target] path or "
               "--target-model)"),
    "init": (lambda p: p.resolve(p.finetune.init), "no [finetune] init checkpoint in the "
             "profile"),
    "vocab_map": (lambda p: p.resolve(p.finetune.vocab_map), "no [finetune] vocab_map (the "
                  "training data's map)"),
    "log": (lambda p: p.resolve(p.finetune.log), "no [finetune] log (the fine-tune's metrics "
            "log)"),
    "reference_log": (lambda p: p.resolve(p.finetune.reference_log), "no [finetune] "
                      "reference_log (a from-scratch run)"),
    "hidden_states": (lambda p: p.resolve(p.finetune.hidden_states), "no [finetune] "
                      "hidden_states dump in the profile"),
    "data": (lambda p: p.resolve(p.data.path), "no [data] path (the hidden-state dataset) in "
             "the profile"),
}
READ_ERRORS: tuple[type[Exception], ...] = (CheckpointError, DataError)


def paths(profile: Profile, cid: str, phase: str, *names: str) -> list[Path] | ClaimResult:
    """The resolved paths of the named inputs, or skipped (reason not_configured) naming the
    first one the profile does not give."""
    out: list[Path] = []
    for name in names:
        path_of, missing = INPUTS[name]
        path = path_of(profile)
        if path is None:
            return claims.skipped(cid, phase, missing, details={"missing_input": name})
        out.append(path)
    return out


def load(cid: str, phase: str, loader: Callable[[], T]) -> T | ClaimResult:
    """loader(), or broken (reason unreadable_input) carrying the error's message, which names
    the file. The message is also the result's cause: every claim that reads the same
    unreadable input breaks for it, and the verdict says it once, with the claims it broke."""
    try:
        return loader()
    except READ_ERRORS as exc:
        return claims.broken(cid, phase, str(exc), cause=str(exc))


def prepare(profile: Profile, cid: str, phase: str, names: Sequence[str],
            loader: Callable[..., T]) -> T | ClaimResult:
    """paths() then load(): loader gets the resolved paths in the order of names."""
    found = paths(profile, cid, phase, *names)
    if isinstance(found, ClaimResult):
        return found
    return load(cid, phase, lambda: loader(*found))
