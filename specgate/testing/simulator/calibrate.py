"""The simulator's batching fitted to a live session measured at several concurrency levels.

A probe with `[bench] concurrency = [1, 4, 16]` measures, at each level N, the baseline's
per-request decode tok/s (each decode step gives every running request one token, so the step
takes 1000 / tok/s ms) and the speculative cycle time. model.py's BATCHING makes both straight
lines in N − 1:

    decode step(N) = decode_ms + batch_ms_per_token × (N − 1)
    cycle(N)       = cycle(1) + (num_draft_tokens × batch_ms_per_token
                                 + num_steps × topk × draft_batch_ms_per_token) × (N − 1)

so least squares over the levels gives the decode step, the batch slope, and from the cycle's
slope what is left for the draft. A server runs at most its max_running_requests at once (SGLang
sets 48 for speculative decoding unless --max-running-requests is given; /server_info reports
it): above that the rest wait in its queue, so each server's batch is taken as min(N, its cap),
and such a level is left out of the fit unless --fit-levels names it, as is a level at which a
server did not run the requests held in flight at once (results/held.py).
Below the cap the fit takes N (the requests the client held in flight) as the batch: the
server's batch is a little smaller in a closed loop (a request leaves it between its last token
and its successor's prefill), so the slopes are the effective ones that reproduce the measured
curve in specgate's closed loop. The verify and draft costs at one
sequence cannot be told apart from one chain's cycle; the draft step keeps the value given (the
simulator's default, or the target's specgate_sim.json) and the verify takes the rest.

    specgate calibrate-simulator REPORTS/live/results.json [--fit-levels 1,4,16]
        [--baseline-max-running N] [--speculative-max-running N]

prints the keys to put in the target's specgate_sim.json, and how well the lines fit. With
--fit-levels the lines are fitted to those levels alone and the others are held out: at every
level the decode speed-up the fitted timing predicts (the level's measured tokens per verify ×
fitted step ÷ fitted cycle) is set against the measured one, so the fit is judged where it was
not fitted.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from specgate.results import bench, held
from specgate.results.live import LiveResults
from specgate.testing.simulator import model


@dataclasses.dataclass(frozen=True)
class Fit:
    """The fitted timing (specgate_sim.json keys) and the points it was fitted to."""

    timing: dict[str, float]
    # per level: measured and fitted step, cycle and decode speed-up, and whether it was held out
    points: tuple[dict[str, float | bool | None], ...]
    num_steps: int
    eagle_topk: int
    num_draft_tokens: int
    fit_levels: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"specgate_sim.json": self.timing, "fit_levels": list(self.fit_levels),
                "levels": list(self.points),
                "chain": {"num_steps": self.num_steps, "eagle_topk": self.eagle_topk,
                          "num_draft_tokens": self.num_draft_tokens}}

    @property
    def worst_held_out_error(self) -> float | None:
        """The largest |predicted ÷ measured − 1| of the decode speed-up at a held-out level."""
        errors = [abs(float(e)) for p in self.points if p.get("held_out")
                  for e in [p.get("speedup_error")] if isinstance(e, float)]
        return max(errors) if errors else None


def _line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(intercept, slope) by least squares; a flat line through one point."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return my, 0.0
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return my - slope * mx, slope


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


def fit(live: LiveResults, *, draft_step_ms: float = model.DEFAULT_DRAFT_STEP_MS,
        fit_levels: Sequence[int] | None = None, baseline_max_running: int | None = None,
        speculative_max_running: int | None = None) -> Fit:
    """The batching that reproduces the session's per-level figures (see the module), fitted to
    `fit_levels` (default: every level measured on both servers at which neither queues nor
    left the requests held in flight waiting, results/held.py). Each
    server's batch at N in flight is min(N, its max_running_requests): the value given here,
    else the one its /server_info reported, else N. A level where a server queues is left out
    of the default fit: on real SGLang its figures are not those of a steady batch at the cap
    (requests wait before their first token, and the batch the server runs varies)."""
    base_cap = baseline_max_running or live.baseline.max_running
    spec_cap = speculative_max_running or live.speculative.max_running

    def batch(n: int, cap: int | None) -> int:
        return n if cap is None else min(n, cap)

    info = live.speculative.server_info
    steps = int(info.get("speculative_num_steps") or 0)
    topk = int(info.get("speculative_eagle_topk") or 1)
    draft_tokens = int(info.get("speculative_num_draft_tokens") or steps + 1)
    if steps < 1:
        raise ValueError("the speculative server's /server_info gives no speculative_num_steps")
    levels: list[int] = []
    steps_ms: list[float] = []
    cycles_ms: list[float] = []
    taus: list[float] = []
    speedups: list[float] = []
    for level in live.levels:
        view = live.at(level)
        base, spec = view.baseline.measurement, view.speculative.measurement
        tps = base.stat("tps") if base else None
        cycle = spec.stat("cycle_ms") if spec else None
        per_verify = spec.stat("tau_decode") if spec else None
        if base is None or spec is None or tps is None or cycle is None or tps.mean <= 0:
            continue
        levels.append(level)
        steps_ms.append(1000.0 / tps.mean)
        cycles_ms.append(cycle.mean)
        taus.append(per_verify.mean if per_verify is not None else math.nan)
        speedups.append(bench.speedup(spec, base).mean)

    def queued(n: int) -> bool:
        return batch(n, base_cap) < n or batch(n, spec_cap) < n

    def unheld(n: int) -> bool:
        return held.not_held(live.baseline, n) is not None \
            or held.not_held(live.speculative, n) is not None

    left_out = {n: "a server queues" if queued(n) else "a server did not run them at once"
                for n in levels if queued(n) or unheld(n)}
    chosen = (sorted(set(fit_levels)) if fit_levels is not None
              else [n for n in levels if n not in left_out])
    missing = [n for n in chosen if n not in levels]
    if missing:
        raise ValueError(f"--fit-levels {missing}: not measured on both servers in these "
                         f"results (measured: {levels or 'none'})")
    if len(chosen) < 2:
        why = ("" if fit_levels is not None or not left_out else
               " where both servers ran the requests held in flight (left out: "
               + ", ".join(f"{n} ({reason})" for n, reason in left_out.items())
               + "; name levels with --fit-levels to fit them anyway)")
        raise ValueError(f"batching needs both servers measured at two levels or more{why}; "
                         f"these results have {chosen or 'none'}")
    at = [levels.index(n) for n in chosen]
    decode_ms, per_token = _line([float(batch(n, base_cap) - 1) for n in chosen],
                                 [steps_ms[i] for i in at])
    cycle1, cycle_slope = _line([float(batch(n, spec_cap) - 1) for n in chosen],
                                [cycles_ms[i] for i in at])
    per_token = max(per_token, 0.0)
    draft_batch = max((cycle_slope - draft_tokens * per_token) / (steps * topk), 0.0)
    timing = {"decode_ms": round(decode_ms, 4),
              "verify_ms": round(max(cycle1 - steps * draft_step_ms, 0.0), 4),
              "draft_step_ms": draft_step_ms,
              "batch_ms_per_token": round(per_token, 5),
              "draft_batch_ms_per_token": round(draft_batch, 5)}
    params = model.SimParams(timing=model.timing_from(timing, {}), speculative=True,
                             num_steps=steps, eagle_topk=topk, num_draft_tokens=draft_tokens)
    points: list[dict[str, float | bool | None]] = []
    for n, d, c, tau, measured in zip(levels, steps_ms, cycles_ms, taus, speedups, strict=True):
        b_base, b_spec = batch(n, base_cap), batch(n, spec_cap)
        step_fit = model.decode_step_ms(params.timing, b_base)
        cycle_fit = model.cycle_ms(params, b_spec)
        predicted = tau * step_fit / cycle_fit if cycle_fit > 0 else math.nan
        error = predicted / measured - 1.0 if measured > 0 else math.nan
        points.append({"concurrency": n, "held_out": n not in chosen,
                       "baseline_batch": b_base, "speculative_batch": b_spec,
                       "queued": queued(n), "not_held": unheld(n),
                       "decode_step_ms": round(d, 4), "fitted_decode_step_ms": round(step_fit, 4),
                       "cycle_ms": round(c, 4), "fitted_cycle_ms": round(cycle_fit, 4),
                       "speedup": _round(measured), "fitted_speedup": _round(predicted),
                       "speedup_error": _round(error)})
    return Fit(timing, tuple(points), steps, topk, draft_tokens, tuple(chosen))


def fitted_params(found: Fit, acceptance: Sequence[float]) -> model.SimParams:
    """SimParams with the fitted timing and a drafter's acceptance, for model.truth."""
    return model.SimParams(timing=model.timing_from(found.timing, {}),
                           drafter=model.Drafter(acceptance=tuple(acceptance)),
                           speculative=True, num_steps=found.num_steps,
                           eagle_topk=found.eagle_topk, num_draft_tokens=found.num_draft_tokens)
