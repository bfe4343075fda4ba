"""The simulator's batching fitted to a live session measured at several concurrency levels.

A probe with `[bench] concurrency = [1, 4, 16]` measures, at each level N, the baseline's
per-request decode tok/s (each decode step gives every running request one token, so the step
takes 1000 / tok/s ms) and the speculative cycle time. model.py's BATCHING makes both straight
lines in N − 1:

    decode step(N) = decode_ms + batch_ms_per_token × (N − 1)
    cycle(N)       = cycle(1) + (num_draft_tokens × batch_ms_per_token
                                 + num_steps × topk × draft_batch_ms_per_token) × (N − 1)

so least squares over the levels gives the decode step, the batch slope, and from the cycle's
slope what is left for the draft. The fit takes N (the requests the client held in flight) as
the batch: the server's batch is a little smaller in a closed loop (a request leaves it between
its last token and its successor's prefill), so the slopes are the effective ones that
reproduce the measured curve in specgate's closed loop. The verify and draft costs at one
sequence cannot be told apart from one chain's cycle; the draft step keeps the value given (the
simulator's default, or the target's specgate_sim.json) and the verify takes the rest.

    specgate calibrate-simulator REPORTS/live/results.json

prints the keys to put in the target's specgate_sim.json, and how well the lines fit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from specgate.measure.results import LiveResults
from specgate.testing.simulator import model


@dataclasses.dataclass(frozen=True)
class Fit:
    """The fitted timing (specgate_sim.json keys) and the points it was fitted to."""

    timing: dict[str, float]
    points: tuple[dict[str, float], ...]  # per level: measured and fitted step and cycle
    num_steps: int
    eagle_topk: int
    num_draft_tokens: int

    def to_json(self) -> dict[str, Any]:
        return {"specgate_sim.json": self.timing, "levels": list(self.points),
                "chain": {"num_steps": self.num_steps, "eagle_topk": self.eagle_topk,
                          "num_draft_tokens": self.num_draft_tokens}}


def _line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(intercept, slope) by least squares; a flat line through one point."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return my, 0.0
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return my - slope * mx, slope


def fit(live: LiveResults, *, draft_step_ms: float = model.DEFAULT_DRAFT_STEP_MS) -> Fit:
    """The batching that reproduces the session's per-level figures (see the module)."""
    info = live.speculative.server_info
    steps = int(info.get("speculative_num_steps") or 0)
    topk = int(info.get("speculative_eagle_topk") or 1)
    draft_tokens = int(info.get("speculative_num_draft_tokens") or steps + 1)
    if steps < 1:
        raise ValueError("the speculative server's /server_info gives no speculative_num_steps")
    levels, steps_ms, cycles_ms = [], [], []
    for level in live.levels:
        view = live.at(level)
        base, spec = view.baseline.measurement, view.speculative.measurement
        tps = base.stat("tps") if base else None
        cycle = spec.stat("cycle_ms") if spec else None
        if tps is None or cycle is None or tps.mean <= 0:
            continue
        levels.append(level)
        steps_ms.append(1000.0 / tps.mean)
        cycles_ms.append(cycle.mean)
    if len(levels) < 2:
        raise ValueError(f"batching needs both servers measured at two levels or more; this "
                         f"session has {levels or 'none'}")
    xs = [float(n - 1) for n in levels]
    decode_ms, batch = _line(xs, steps_ms)
    cycle1, cycle_slope = _line(xs, cycles_ms)
    batch = max(batch, 0.0)
    draft_batch = max((cycle_slope - draft_tokens * batch) / (steps * topk), 0.0)
    timing = {"decode_ms": round(decode_ms, 4),
              "verify_ms": round(max(cycle1 - steps * draft_step_ms, 0.0), 4),
              "draft_step_ms": draft_step_ms,
              "batch_ms_per_token": round(batch, 5),
              "draft_batch_ms_per_token": round(draft_batch, 5)}
    params = model.SimParams(timing=model.timing_from(timing, {}), speculative=True,
                             num_steps=steps, eagle_topk=topk, num_draft_tokens=draft_tokens)
    points = tuple({"concurrency": n, "decode_step_ms": round(d, 4),
                    "fitted_decode_step_ms": round(model.decode_step_ms(params.timing, n), 4),
                    "cycle_ms": round(c, 4),
                    "fitted_cycle_ms": round(model.cycle_ms(params, n), 4)}
                   for n, d, c in zip(levels, steps_ms, cycles_ms, strict=True))
    return Fit(timing, points, steps, topk, draft_tokens)


def fitted_params(found: Fit, acceptance: Sequence[float]) -> model.SimParams:
    """SimParams with the fitted timing and a drafter's acceptance, for model.truth."""
    return model.SimParams(timing=model.timing_from(found.timing, {}),
                           drafter=model.Drafter(acceptance=tuple(acceptance)),
                           speculative=True, num_steps=found.num_steps,
                           eagle_topk=found.eagle_topk, num_draft_tokens=found.num_draft_tokens)
