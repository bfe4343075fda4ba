"""The tune's figure: tok/s against draft steps, predicted and measured, with the baseline."""

from __future__ import annotations

import math

from specgate.plot.figures import BASELINE_COLOR, PASS_COLOR, SPEC_COLOR, figure, png
from specgate.results.tune import TuneResult


def plot(result: TuneResult) -> bytes:
    """tok/s against steps: predicted (line), measured (points with intervals), the baseline."""
    fig, ax = figure(7.5, 4.4)
    xs = [c.steps for c in result.candidates]
    preds = [result.predictions[c.key].tps if c.key in result.predictions else math.nan
             for c in result.candidates]
    ax.plot(xs, preds, color=SPEC_COLOR, linestyle="--", marker="o", markersize=4,
            alpha=0.6, label="predicted (chain model × cycle fit)")
    for tr in result.trials:
        s = tr.measurement.stat("tps") if tr.measurement else None
        if s is None:
            continue
        color = PASS_COLOR if tr.status == "best" else SPEC_COLOR
        lo = s.mean - s.ci_low if s.has_interval else 0.0
        hi = s.ci_high - s.mean if s.has_interval else 0.0
        ax.errorbar([tr.candidate.steps], [s.mean], yerr=[[lo], [hi]], fmt="s", color=color,
                    capsize=4, markersize=7, zorder=4)
        ax.annotate(f"#{tr.launch} {tr.status}", (tr.candidate.steps, s.mean),
                    textcoords="offset points", xytext=(6, 6), fontsize=8, color=color)
    base = result.baseline.measurement if result.baseline else None
    bs = base.stat("tps") if base else None
    if bs is not None:
        ax.axhline(bs.mean, color=BASELINE_COLOR, linestyle=":", label=f"baseline "
                   f"{bs.mean:.1f} tok/s")
    ax.scatter([], [], marker="s", color=SPEC_COLOR, label="measured (interval)")
    ax.set_xlabel("--speculative-num-steps (topk 1, steps + 1 draft tokens)")
    ax.set_ylabel("decode tok/s, single stream" if result.gate_level == 1
                  else f"decode tok/s per request, {result.gate_level} in flight")
    ax.set_xticks(xs)
    ax.set_title(f"specgate tune: {result.profile}" + (" (simulated)" if result.simulated
                                                       else ""))
    ax.legend(fontsize=8, loc="best")
    return png(fig)
