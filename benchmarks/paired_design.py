"""Paired per-prompt intervals against intervals over whole passes: requests to a decision.

    python -m benchmarks.paired_design [--trials N]

The speed-up claim is decided when its interval leaves the threshold (1.0): with sequential
repeats (2, then up to 6 while it straddles), at the gate's confidence split over the looks.
Two designs judge the same simulated requests:

- passes: one tok/s per pass and server, a t interval over passes, and the ratio of the two
  means with a delta-method interval and Welch degrees of freedom (the usual unpaired design);
- paired: specgate's `bench.speedup`, a jackknife over prompts of the ratio of totals, pairing
  each prompt's speculative and baseline requests.

The request model is fitted to the real SGLang 0.5.17 run committed under
benchmarks/results/2026-11-30-h200-tiny-llama-4l-eager/ (prompt-to-prompt spread of decode
tok/s and the request-to-request noise of one prompt), so the comparison uses spreads a real
server showed.
Reported: mean requests to a decision at a true speed-up of 1.15, and how often each design
wrongly passes (interval wholly above 1) when the true speed-up is 1.0.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import sys
from pathlib import Path
from typing import Any

from benchmarks.common import trials_main
from specgate.results import bench, stats
from specgate.results.prompts import template_named

ROOT = Path(__file__).resolve().parents[1]

# The launch-mode run's live/results.json: every request of both servers.
RUN = (ROOT / "benchmarks/results/2026-11-30-h200-tiny-llama-4l-eager"
       / "suite-launch-attach-faults/live/a_launch.json")
PROMPTS, REPEATS, MAX_REPEATS = 14, 2, 6
TEMPLATE = template_named("plain", "bench")


def fitted_spreads() -> dict[str, float]:
    """Prompt spread and request noise (log sd) of decode tok/s on real SGLang's baseline."""
    default = {"prompt_sd": 0.10, "request_sd": 0.05, "source": "defaults"}
    try:
        doc = json.loads(RUN.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return default
    if not doc:
        return default
    by: dict[str, list[float]] = {}
    for s in doc["baseline"]["measurement"]["samples"]:
        decode_s = s["e2e_s"] - s["ttft_s"]
        tokens = s["completion_tokens"] - s.get("first_tokens", 1)
        if decode_s > 0 and tokens > 0:
            by.setdefault(s["prompt_id"], []).append(math.log(tokens / decode_s))
    means = [statistics.fmean(v) for v in by.values()]
    within = [x - statistics.fmean(v) for v in by.values() if len(v) > 1 for x in v]
    return {"prompt_sd": statistics.stdev(means),
            "request_sd": math.sqrt(2) * statistics.pstdev(within) if within else 0.05,
            "source": str(RUN.relative_to(ROOT))}


def _sample(repeat: int, prompt: int, tokens: int, rate: float) -> bench.RequestSample:
    return bench.RequestSample(repeat, f"p{prompt}", "c", 10, tokens + 1, None, 0.02,
                               0.02 + tokens / rate, None, "length", tokens + 1)


def _passes_ratio(spec: list[bench.RequestSample], base: list[bench.RequestSample],
                  confidence: float) -> stats.Summary:
    """The unpaired design: per-pass tok/s, Welch delta-method ratio of the means."""
    def per_pass(samples: list[bench.RequestSample]) -> stats.Summary:
        repeats = sorted({s.repeat for s in samples})
        rates = [bench.metric_of("tps", [bench.Totals.of([s for s in samples
                                                            if s.repeat == r])])
                 for r in repeats]
        return stats.summarize(rates, confidence)

    a, b = per_pass(spec), per_pass(base)
    ratio = a.mean / b.mean
    va, vb = (a.std / a.mean) ** 2 / a.n, (b.std / b.mean) ** 2 / b.n
    rel = va + vb
    df = math.inf if rel == 0 else rel**2 / (va**2 / (a.n - 1) + vb**2 / (b.n - 1))
    half = stats.t_quantile(0.5 + confidence / 2, df) * abs(ratio) * math.sqrt(rel)
    return stats.Summary(a.n, ratio, math.nan, math.nan, ratio - half, ratio + half,
                         confidence, df)


def trial(rng: random.Random, speedup: float, spreads: dict[str, float]) -> dict[str, Any]:
    confidence = bench.judged_confidence(bench.Sampling(repeats=REPEATS, max_repeats=MAX_REPEATS))
    rates = [250.0 * math.exp(rng.gauss(0, spreads["prompt_sd"])) for _ in range(PROMPTS)]
    tokens = [rng.randint(24, 64) for _ in range(PROMPTS)]
    noise = spreads["request_sd"]
    spec: list[bench.RequestSample] = []
    base: list[bench.RequestSample] = []
    out: dict[str, Any] = {}
    for repeat in range(1, MAX_REPEATS + 1):
        for i in range(PROMPTS):
            base.append(_sample(repeat, i, tokens[i], rates[i] * math.exp(rng.gauss(0, noise))))
            spec.append(_sample(repeat, i, tokens[i],
                                rates[i] * speedup * math.exp(rng.gauss(0, noise))))
        if repeat < REPEATS:
            continue
        m_spec = bench.build_measurement(config="speculative", url="x", template=TEMPLATE,
                                         sampling=bench.Sampling(repeats=REPEATS,
                                                            max_repeats=MAX_REPEATS),
                                         samples=spec)
        m_base = bench.build_measurement(config="baseline", url="x", template=TEMPLATE,
                                         sampling=bench.Sampling(repeats=REPEATS,
                                                            max_repeats=MAX_REPEATS),
                                         samples=base)
        judged = {"paired": bench.speedup(m_spec, m_base),
                  "passes": _passes_ratio(spec, base, confidence)}
        for design, summary in judged.items():
            verdict = summary.compare(1.0)
            if design not in out and (verdict in ("above", "below") or repeat == MAX_REPEATS):
                out[design] = {"requests": 2 * repeat * PROMPTS, "verdict": verdict}
        if len(out) == 2:
            break
    return out


def run(trials: int = 400, seed: int = 10) -> dict[str, Any]:
    spreads = fitted_spreads()
    rng = random.Random(seed)
    result: dict[str, Any] = {"spreads": spreads, "trials": trials}
    for label, speedup in (("true speed-up 1.15", 1.15), ("true speed-up 1.00", 1.0)):
        runs = [trial(rng, speedup, spreads) for _ in range(trials)]
        for design in ("passes", "paired"):
            requests = [r[design]["requests"] for r in runs]
            verdicts = [r[design]["verdict"] for r in runs]
            result[f"{label} / {design}"] = {
                "mean_requests": statistics.fmean(requests),
                "decided": sum(v in ("above", "below") for v in verdicts) / trials,
                "passed": sum(v == "above" for v in verdicts) / trials}
    return result


def rows(result: dict[str, Any]) -> list[list[str]]:
    out = []
    for label, target in (("true speed-up 1.15", "fewer requests to decide"),
                          ("true speed-up 1.00", "false passes ≤ 2.5 %")):
        p, q = result[f"{label} / paired"], result[f"{label} / passes"]
        out.append([f"8 paired design, {label}",
                    f"{p['mean_requests']:.0f} requests, passed {p['passed']:.1%}",
                    f"per-pass: {q['mean_requests']:.0f} requests, passed {q['passed']:.1%}",
                    f"×{p['mean_requests'] / q['mean_requests']:.2f} requests", target])
    return out


def main() -> int:
    return trials_main(run, rows, lambda result: result["spreads"])


if __name__ == "__main__":
    sys.exit(main())
