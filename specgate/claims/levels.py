"""The live claims at each [bench] concurrency level other than the gate's: `<id>@c<level>`.

The gate decides at its own level, where the claims keep their plain ids (`spec.speedup`); at
every other level the same claims are computed the same way (claims/perf.py, spec.py and
parity.py, on that level's measurements: the same prompts, sampling and statistics, the
baseline paired with the speculative server at the same concurrency, break-even from the cycle
time measured there) and reported under `perf.baseline_tps@c16`, `spec.accept_len@c16`,
`spec.breakeven@c16`, `spec.speedup@c16` and `spec.parity@c16`. They pass or fail on their own
figures but never gate: they carry no `gate` marker, and `perf.baseline_tps@c<level>` is
reported, not judged (baseline_tps_min is the gate's).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from specgate.claims import ids, live_run, parity, perf
from specgate.claims import spec as spec_claims
from specgate.claims.result import ClaimResult
from specgate.core.profile import Profile
from specgate.results.live import LiveResults

LEVEL_CLAIMS = tuple(c.id for c in ids.PER_LEVEL)
_CLAIMS: dict[str, Callable[[Profile, LiveResults], ClaimResult]] = {
    ids.BASELINE_TPS.id: lambda profile, live: perf.baseline_tps_claim(profile, live,
                                                                       thresholded=False),
    ids.ACCEPT_LEN.id: spec_claims.accept_len_claim,
    ids.BREAKEVEN.id: spec_claims.breakeven_claim,
    ids.SPEEDUP.id: spec_claims.speedup_claim,
    ids.PARITY.id: parity.parity_claim,
}
# A level's claims carry its figures; the servers' whole logs stay with the gate's claims.
_GATE_ONLY_ATTACHMENTS = " server log"


def level_id(claim_id: str, level: int) -> str:
    """The stable id of a claim at a concurrency level: spec.speedup@c16."""
    return ids.BY_ID[claim_id].at(level)


def other_levels(profile: Profile) -> list[int]:
    """The [bench] concurrency levels whose claims are reported beside the gate's."""
    gate = profile.gate_concurrency
    return [n for n in profile.bench.concurrency if n != gate]


def level_claim(claim_id: str, profile: Profile, live: LiveResults, level: int) -> ClaimResult:
    """One of LEVEL_CLAIMS at `level` requests in flight, under its `@c<level>` id."""
    if claim_id not in _CLAIMS:
        raise ValueError(f"no claim {claim_id!r} per concurrency level; one of "
                         f"{', '.join(LEVEL_CLAIMS)}")
    if level == profile.gate_concurrency:
        raise ValueError(f"{level} in flight is the gate's level: its claims are the plain "
                         f"{claim_id!r}")
    result = _CLAIMS[claim_id](profile, live.at(level))
    # set against the smallest level, which the level's own view does not hold
    note, unheld = live_run.not_held_at(live, level, live_run.claim_configs(claim_id))
    return dataclasses.replace(
        result, id=level_id(claim_id, level), message=result.message + note,
        details={**result.details, "concurrency": level,
                 "gate_concurrency": profile.gate_concurrency, "gating": False,
                 **({"not_held": unheld} if unheld else {})},
        attachments=tuple(a for a in result.attachments
                          if not a.name.endswith(_GATE_ONLY_ATTACHMENTS)))
