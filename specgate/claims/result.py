"""Claim results: what one claim observed, what it expected, and what it concluded."""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Sequence
from typing import Any

from specgate.core.attachment import Attachment as Attachment


class Status(enum.StrEnum):
    PASSED = "passed"
    FAILED = "failed"  # the checkpoint or deployment does not meet the claim
    BROKEN = "broken"  # the harness could not evaluate it (bad input, server down)
    SKIPPED = "skipped"  # not applicable, with the reason


PHASE_TITLES = {
    "phase0": "Phase 0 — quick probe",
    "phase1": "Phase 1 — fine-tune",
    "phase2": "Phase 2 — data scale-up",
}

FAMILY_TITLES = {
    "config": "config",
    "weights": "weights",
    "vocab": "vocab",
    "env": "environment",
    "perf": "baseline",
    "spec": "speculative",
    "finetune": "fine-tune",
    "eval": "evaluation",
    "data": "data",
    "regress": "regression",
}


def family_of(claim_id: str) -> str:
    """The Allure feature of a claim id: its first dotted component, spelled for people."""
    head = claim_id.split(".", 1)[0]
    return FAMILY_TITLES.get(head, head)


# Machine-readable reasons (ClaimResult.reason): why a claim ended as it did. Each status has a
# default; a claim with more than one way to fail or pass names the way it took.
REASON_DEFAULTS = {
    Status.PASSED: "met",  # observed meets expected
    Status.FAILED: "not_met",  # observed misses expected
    Status.BROKEN: "unreadable_input",  # an input could not be read or parsed (message names it)
    Status.SKIPPED: "not_configured",  # an input the claim needs is not in the profile
}


@dataclasses.dataclass(frozen=True)
class ClaimResult:
    """The outcome of one claim, as it goes to the verdict and the report.

    observed, expected, unit, reason and details are the data; message renders them for people.
    Tests and scripts should read the data, not the wording.
    """

    id: str
    phase: str
    status: Status
    message: str
    observed: Any = None
    expected: Any = None
    unit: str | None = None
    details: dict[str, Any] = dataclasses.field(default_factory=dict)
    attachments: tuple[Attachment, ...] = ()
    reason: str = ""
    # Why the claim could not be evaluated when that reason is shared (a server that did not
    # start breaks every live claim): the whole text, log tail included, said once per run.
    cause: str = ""

    def __post_init__(self) -> None:
        if not self.reason:
            object.__setattr__(self, "reason", REASON_DEFAULTS[self.status])

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "phase": self.phase,
            "status": self.status.value,
            "observed": _jsonable(self.observed),
            "expected": _jsonable(self.expected),
            "unit": self.unit,
            "reason": self.reason,
            "message": self.message,
        }
        if self.details:
            out["details"] = _jsonable(self.details)
        if self.cause:
            out["cause"] = self.cause
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClaimResult:
        return cls(
            id=str(data["id"]),
            phase=str(data.get("phase", "phase0")),
            status=Status(data["status"]),
            message=str(data.get("message", "")),
            observed=data.get("observed"),
            expected=data.get("expected"),
            unit=data.get("unit"),
            details=dict(data.get("details") or {}),
            reason=str(data.get("reason") or ""),
            cause=str(data.get("cause") or ""),
        )


# Names a claim's details list at most (the first ones, beside how many there were): what a
# checkpoint holds per tensor must not grow the verdict, the report or junit.xml with it.
DETAILS_LISTED = 50


def listed(key: str, items: Sequence[Any]) -> dict[str, Any]:
    """details[key] as the first DETAILS_LISTED items, and key_count = how many there were."""
    return {key: list(items[:DETAILS_LISTED]), f"{key}_count": len(items)}


def passed(claim_id: str, phase: str, message: str, **kw: Any) -> ClaimResult:
    return ClaimResult(claim_id, phase, Status.PASSED, message, **kw)


def failed(claim_id: str, phase: str, message: str, **kw: Any) -> ClaimResult:
    return ClaimResult(claim_id, phase, Status.FAILED, message, **kw)


def broken(claim_id: str, phase: str, message: str, **kw: Any) -> ClaimResult:
    return ClaimResult(claim_id, phase, Status.BROKEN, message, **kw)


def skipped(claim_id: str, phase: str, message: str, **kw: Any) -> ClaimResult:
    return ClaimResult(claim_id, phase, Status.SKIPPED, message, **kw)


def judged(ok: bool, claim_id: str, phase: str, message: str, *, fail_reason: str = "",
           **kw: Any) -> ClaimResult:
    """passed when ok, else failed (with fail_reason, when given), same message and figures."""
    return ClaimResult(claim_id, phase, Status.PASSED if ok else Status.FAILED, message,
                       reason="" if ok else fail_reason, **kw)


def _jsonable(value: Any) -> Any:
    """Plain, strict JSON: numpy scalars and arrays, tuples and paths converted; NaN and
    infinities become null (strict parsers reject them, and a CI script reads this file)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    tolist = getattr(value, "tolist", None)  # numpy arrays and scalars
    if callable(tolist):
        try:
            return _jsonable(tolist())
        except (TypeError, ValueError):
            pass
    return str(value)
