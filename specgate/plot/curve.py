"""The speed-up against concurrency, with intervals and the crossover marked."""

from __future__ import annotations

from specgate.core.attachment import Attachment
from specgate.plot.figures import BASELINE_COLOR, FAIL_COLOR, PASS_COLOR, SPEC_COLOR, figure, png
from specgate.results.curve import Curve


def chart(c: Curve, *, simulated: bool = False) -> bytes:
    """Decode and total speed-up per level (log2 axis), the line at 1, the crossover."""
    fig, ax = figure(7.5, 4.6)
    measured = [p for p in c.points if p.decode is not None]
    levels = [p.level for p in c.points]
    for series, label, color, marker, nudge in (
            ("decode", "decode tok/s per request (judged)", SPEC_COLOR, "o", 0.97),
            ("total", "total tok/s (prefill included)", BASELINE_COLOR, "s", 1.03)):
        xs, ys, lo, hi = [], [], [], []
        for p in measured:
            s = p.decode if series == "decode" else p.total
            if s is None:
                continue
            xs.append(p.level * nudge)
            ys.append(s.mean)
            lo.append(s.mean - s.ci_low if s.has_interval else 0.0)
            hi.append(s.ci_high - s.mean if s.has_interval else 0.0)
        if xs:
            ax.errorbar(xs, ys, yerr=[lo, hi], fmt=marker + "-", color=color, capsize=4,
                        markersize=6, linewidth=1.2, label=label, zorder=4)
    for p in c.points:
        if p.decode is None:
            ax.annotate("not measured", (p.level, 1.0), xytext=(0, 12),
                        textcoords="offset points", ha="center", fontsize=8, color=FAIL_COLOR)
    ax.axhline(1.0, color="black", linewidth=1, linestyle="--", label="break-even (1×)")
    x = c.crossover
    if x.stops_at is not None:
        ax.axvspan(x.stops_at, max(levels) * 1.5, color=FAIL_COLOR, alpha=0.06, zorder=0,
                   label=f"stops paying by {x.stops_at} in flight")
    if x.estimate is not None:
        ax.axvline(x.estimate, color=FAIL_COLOR, linestyle=":", linewidth=1.4,
                   label=f"crossover ≈ {x.estimate:.1f} in flight")
    if x.pays_up_to is not None:
        ax.axvline(x.pays_up_to, color=PASS_COLOR, linestyle=":", linewidth=1,
                   label=f"pays up to {x.pays_up_to} in flight")
    gate = next((p for p in measured if p.level == c.gate_level), None)
    if gate is not None and gate.decode is not None:
        ax.scatter([gate.level * 0.97], [gate.decode.mean], s=180, facecolors="none",
                   edgecolors="black", linewidths=1.5, zorder=5, label="the gate's level")
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [str(n) for n in levels])
    ax.set_xlim(min(levels) / 1.5, max(levels) * 1.5)
    ax.set_xlabel("requests in flight ([bench] concurrency)")
    ax.set_ylabel("speculative ÷ baseline (paired by prompt)")
    ax.set_title("Speed-up against concurrency" + (" (simulated server)" if simulated else ""))
    ax.legend(fontsize=8, loc="best")
    return png(fig)


def attachment(c: Curve, *, simulated: bool = False) -> Attachment:
    return Attachment("speed-up against concurrency", chart(c, simulated=simulated), "png")
