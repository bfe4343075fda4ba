"""Whether a server ran the requests the client held in flight at once.

A batch decodes each request no faster than a smaller batch does: its step carries more
tokens. So when a clear share of a level's requests decoded clearly faster than the fastest
request the same server decoded at its smallest measured level, the server did not run the
requests held in flight at once (they waited before their first token and then ran in smaller
batches), and that level's decode figures are not those of its batch. Seen on real SGLang
0.5.17: an 8B-shaped baseline at 64 in flight, half of whose requests decoded at 1.8 to 2.1
times its fastest single stream, while another launch of the same server ran all 64.

Noise does not trip it: a request counts only above FASTER_BY times the fastest alone (the
measured requests of one level of a steady server lie within a few percent of each other), and
a level only with at least MIN_SHARE of its requests and MIN_REQUESTS of them so. Requests whose
messages arrived all at once (a buffering proxy, RequestSample.burst) are left out: their decode
window is not the server's.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from specgate.results.bench import Measurement
from specgate.results.live import ConfigRun

FASTER_BY = 1.2
MIN_SHARE = 0.1
MIN_REQUESTS = 2


@dataclasses.dataclass(frozen=True)
class NotHeld:
    """One server at one level: how many of its requests decoded faster than alone."""

    config: str
    level: int
    alone_level: int  # the smallest level the server was measured at
    faster: int  # requests above FASTER_BY × the fastest alone
    requests: int
    fastest_tps: float
    alone_fastest_tps: float
    ttft_ms: float | None  # the level's mean time to first token, and alone
    alone_ttft_ms: float | None

    def to_json(self) -> dict[str, Any]:
        return {"faster": self.faster, "requests": self.requests,
                "fastest_tps": round(self.fastest_tps, 2),
                "alone_level": self.alone_level,
                "alone_fastest_tps": round(self.alone_fastest_tps, 2),
                "ttft_ms": None if self.ttft_ms is None else round(self.ttft_ms, 1),
                "alone_ttft_ms": None if self.alone_ttft_ms is None
                else round(self.alone_ttft_ms, 1)}


def decode_rates(m: Measurement | None) -> list[float]:
    """Each measured request's decode tok/s (tokens after its first message over the seconds
    after it), bursts left out."""
    if m is None:
        return []
    return [r.decode_tokens / r.decode_s for r in m.samples
            if r.decode_s > 0 and r.decode_tokens > 0 and not r.burst]


def measured_levels(run: ConfigRun) -> list[int]:
    """The levels this server was measured at, ascending."""
    found = set(run.levels)
    if run.measurement is not None:
        found.add(run.gate_level)
    return sorted(found)


def not_held(run: ConfigRun, level: int) -> NotHeld | None:
    """The server at `level` set against its smallest measured level (see the module); None
    when it ran the requests as held, or there is nothing to set it against."""
    levels = measured_levels(run)
    if not levels or level <= levels[0] or level not in levels:
        return None
    here, first = run.at(level).measurement, run.at(levels[0]).measurement
    rates, alone = decode_rates(here), decode_rates(first)
    if not rates or not alone:
        return None
    top = max(alone)
    faster = [r for r in rates if r > FASTER_BY * top]
    if len(faster) < max(MIN_REQUESTS, MIN_SHARE * len(rates)):
        return None
    ttft = here.stat("ttft_ms") if here is not None else None
    ttft1 = first.stat("ttft_ms") if first is not None else None
    return NotHeld(run.config, level, levels[0], len(faster), len(rates), max(rates), top,
                   ttft.mean if ttft is not None else None,
                   ttft1.mean if ttft1 is not None else None)
