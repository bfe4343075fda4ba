"""Latency per request as `python -m sglang.bench_serving` reports it: time to first token (TTFT)
and time per output token (TPOT), their mean and percentiles over the measured requests, per
server, and the speculative server's over the baseline's.

TTFT is the client's time from sending a request to its first streamed message. TPOT is
(end-to-end − TTFT) / (output tokens − 1), for requests with more than one output token, as
bench_serving defines it. Percentiles are numpy's (linear between the two nearest requests), as
bench_serving computes them; they are over every measured request of every repeat, with no
interval.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from specgate.results.bench import RequestSample

PERCENTILES = (50, 90, 99)
# The statistics of each metric, in the order a table shows them.
STATS = ("mean", *(f"p{p}" for p in PERCENTILES))
METRICS = ("ttft_ms", "tpot_ms")
DEFINITION = ("TTFT: request sent to first streamed message; TPOT: (end-to-end − TTFT) / "
              "(output tokens − 1) for requests with more than one output token, as "
              "sglang.bench_serving; mean and percentiles (numpy, linear) over every measured "
              "request, milliseconds")


def ttft_ms(sample: RequestSample) -> float:
    return 1000.0 * sample.ttft_s


def tpot_ms(sample: RequestSample) -> float | None:
    """bench_serving's time per output token; None for a one-token answer."""
    if sample.completion_tokens <= 1:
        return None
    return 1000.0 * (sample.e2e_s - sample.ttft_s) / (sample.completion_tokens - 1)


def describe(values: Sequence[float]) -> dict[str, float] | None:
    """Mean and percentiles of values; None when there are none."""
    if not values:
        return None
    arr = np.asarray(values, dtype=float)
    out = {"mean": float(arr.mean())}
    for p, value in zip(PERCENTILES, np.percentile(arr, PERCENTILES), strict=True):
        out[f"p{p}"] = float(value)
    return out


@dataclasses.dataclass(frozen=True)
class ServerLatency:
    """One server's TTFT and TPOT over its measured requests."""

    requests: int
    ttft_ms: dict[str, float] | None
    tpot_requests: int
    tpot_ms: dict[str, float] | None

    @classmethod
    def of(cls, samples: Sequence[RequestSample]) -> ServerLatency:
        tpots = [t for s in samples if (t := tpot_ms(s)) is not None]
        return cls(requests=len(samples), ttft_ms=describe([ttft_ms(s) for s in samples]),
                   tpot_requests=len(tpots), tpot_ms=describe(tpots))

    def metric(self, name: str) -> dict[str, float] | None:
        value: dict[str, float] | None = getattr(self, name)
        return value

    def to_json(self) -> dict[str, Any]:
        return {"requests": self.requests, "ttft_ms": self.ttft_ms,
                "tpot_requests": self.tpot_requests, "tpot_ms": self.tpot_ms}


def ratios(spec: ServerLatency, base: ServerLatency) -> dict[str, dict[str, float]]:
    """The speculative server's statistic over the baseline's, for each metric both measured
    (below 1: the speculative server is quicker there)."""
    out: dict[str, dict[str, float]] = {}
    for name in METRICS:
        a, b = spec.metric(name), base.metric(name)
        if a is None or b is None:
            continue
        out[name] = {k: a[k] / b[k] for k in STATS if b[k] > 0}
    return out


def table(spec: Sequence[RequestSample] | None, base: Sequence[RequestSample] | None,
          concurrency: int) -> dict[str, Any]:
    """The latency table a verdict carries: each server's, and their ratios."""
    servers: dict[str, Any] = {}
    measured: dict[str, ServerLatency] = {}
    for config, samples in (("baseline", base), ("speculative", spec)):
        if samples:
            measured[config] = ServerLatency.of(samples)
            servers[config] = measured[config].to_json()
    out: dict[str, Any] = {"concurrency": concurrency, "definition": DEFINITION,
                           "servers": servers}
    if "baseline" in measured and "speculative" in measured:
        out["ratio"] = ratios(measured["speculative"], measured["baseline"])
    return out
