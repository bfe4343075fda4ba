"""PNG charts for the report: throughput repeats, accept lengths, break-even, per-position rates."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

BASELINE_COLOR = "#64748b"
SPEC_COLOR = "#2563eb"
PASS_COLOR = "#16a34a"
FAIL_COLOR = "#dc2626"
TARGET_COLOR = "#d97706"
_DPI = 110


def tps_repeats(
    baseline: Sequence[float],
    speculative: Sequence[float],
    baseline_ci: tuple[float, float] | None,
    spec_ci: tuple[float, float] | None,
    in_flight: int = 1,
) -> bytes:
    """tok/s of each repeat, baseline beside speculative, with each side's mean and CI;
    per request with `in_flight` requests in flight."""
    fig, ax = figure(7.0, 4.2)
    sides = [("baseline", list(baseline), baseline_ci, BASELINE_COLOR),
             ("speculative", list(speculative), spec_ci, SPEC_COLOR)]
    for x, (label, values, ci, color) in enumerate(sides):
        if values:
            offsets = _spread(len(values))
            ax.scatter([x + o for o in offsets], values, color=color, alpha=0.75, s=36,
                       zorder=3, label=f"{label}: {len(values)} repeats")
            mean = sum(values) / len(values)
            ax.hlines(mean, x - 0.3, x + 0.3, color=color, linewidth=2.5, zorder=4)
            ax.annotate(f"{mean:.1f}", (x + 0.32, mean), va="center", fontsize=9, color=color)
        if ci is not None:
            low, high = ci
            ax.add_patch(_rect(x - 0.3, low, 0.6, high - low, color))
    ax.set_xticks([0, 1], ["baseline", "speculative"])
    ax.set_xlim(-0.7, 1.9)
    ax.set_ylabel("decode throughput (tok/s, single stream)" if in_flight == 1
                  else f"decode throughput per request (tok/s, {in_flight} in flight)")
    title = "Throughput per repeat"
    means = [sum(v) / len(v) if v else None for _, v, _, _ in sides]
    if means[0] and means[1]:
        title += f" — speedup {means[1] / means[0]:.2f}×"
    ax.set_title(title)
    ax.set_ylim(bottom=0)
    if baseline or speculative:
        ax.legend(loc="lower right", fontsize=8, title="bar: mean, band: CI", title_fontsize=8)
    return png(fig)


def accept_per_prompt(
    values: Sequence[float], labels: Sequence[str], categories: Sequence[str]
) -> bytes:
    """Accept length of each prompt, coloured by prompt category, sorted within a category."""
    if not len(values) == len(labels) == len(categories):
        raise ValueError(
            f"accept_per_prompt: {len(values)} values, {len(labels)} labels and "
            f"{len(categories)} categories; give one of each per prompt"
        )
    names = list(dict.fromkeys(categories))
    rows = sorted(zip(categories, values, labels, strict=True),
                  key=lambda r: (names.index(r[0]), -r[1]))
    colors = _palette(len(names))
    show_labels = len(rows) <= 60
    height = min(max(2.6, (0.22 if show_labels else 0.09) * len(rows) + 1.2), 20.0)
    fig, ax = figure(7.5, height)
    y = list(range(len(rows)))[::-1]
    ax.barh(y, [r[1] for r in rows], color=[colors[names.index(r[0])] for r in rows])
    ax.margins(y=0.01)
    ax.set_yticks(y, [_short(r[2]) for r in rows] if show_labels else [""] * len(rows),
                  fontsize=7 if len(rows) > 25 else 8)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Any] = [Patch(color=c, label=n) for n, c in zip(names, colors, strict=True)]
    if values:
        mean = sum(values) / len(values)
        ax.axvline(mean, color="black", linestyle="--", linewidth=1)
        handles.append(Line2D([], [], color="black", linestyle="--", label=f"mean {mean:.2f}"))
    ax.set_xlabel("accept length (tokens per verify step)")
    ax.set_title(f"Accept length per prompt ({len(rows)} prompts)")
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              title="category", title_fontsize=8)
    return png(fig)


def accept_per_category(cat_to_value: dict[str, float]) -> bytes:
    """Mean accept length per prompt category, highest first."""
    items = sorted(cat_to_value.items(), key=lambda kv: -kv[1])
    fig, ax = figure(7.0, max(2.4, 0.45 * len(items) + 1.2))
    y = list(range(len(items)))[::-1]
    ax.barh(y, [v for _, v in items], color=_palette(len(items)))
    ax.set_yticks(y, [_short(k) for k, _ in items])
    for yy, (_, v) in zip(y, items, strict=True):
        ax.annotate(f"{v:.2f}", (v, yy), xytext=(4, 0), textcoords="offset points",
                    va="center", fontsize=9)
    if items:
        ax.set_xlim(0, max(v for _, v in items) * 1.15 or 1.0)
    ax.set_xlabel("accept length (tokens per verify step)")
    ax.set_title("Accept length per prompt category")
    return png(fig)


def breakeven_chart(
    cycle_ms: float,
    baseline_tps: float,
    measured_accept: float,
    measured_tps: float | None,
    targets: Sequence[float],
) -> bytes:
    """tok/s against accept length: tps = tau / cycle, baseline, break-even, measurement, targets.

    A speculative step emits tau tokens per verify cycle, so tok/s = tau / cycle; it beats the
    baseline only right of break-even tau* = cycle × baseline tok/s.
    """
    if cycle_ms <= 0:
        raise ValueError(f"breakeven_chart: cycle_ms must be > 0, got {cycle_ms}")
    cycle_s = cycle_ms / 1000.0
    breakeven = cycle_s * baseline_tps
    top_tau = max(1.0 + 1.0, measured_accept, breakeven, *(t * cycle_s for t in targets)) * 1.2
    top_tau = math.ceil(top_tau * 2) / 2
    fig, ax = figure(7.5, 4.8)
    taus = [1.0 + i * (top_tau - 1.0) / 200 for i in range(201)]
    ax.plot(taus, [t / cycle_s for t in taus], color=SPEC_COLOR, linewidth=2,
            label=f"speculative: tok/s = τ / {cycle_ms:g} ms")
    ax.axhline(baseline_tps, color=BASELINE_COLOR, linewidth=1.5,
               label=f"baseline {baseline_tps:.1f} tok/s")
    ax.fill_between([1.0, breakeven], 0, baseline_tps * 10, color=FAIL_COLOR, alpha=0.06,
                    zorder=0)
    ax.axvline(breakeven, color=FAIL_COLOR, linestyle=":", linewidth=1.2)
    ax.scatter([breakeven], [baseline_tps], color=FAIL_COLOR, zorder=5, s=50,
               label=f"break-even τ* = {breakeven:.2f}")
    for target in targets:
        ax.axhline(target, color=TARGET_COLOR, linestyle="--", linewidth=1)
        ax.annotate(f"target {target:g} tok/s (τ = {target * cycle_s:.2f})",
                    (1.02, target), xytext=(0, 3), textcoords="offset points",
                    fontsize=8, color=TARGET_COLOR)
    ok = measured_accept >= breakeven
    point_tps = measured_tps if measured_tps is not None else measured_accept / cycle_s
    kind = "measured" if measured_tps is not None else "predicted"
    ax.scatter([measured_accept], [point_tps], marker="D", s=70, zorder=6,
               color=PASS_COLOR if ok else FAIL_COLOR,
               label=f"{kind}: τ = {measured_accept:.2f}, {point_tps:.1f} tok/s")
    ax.set_xlim(1.0, top_tau)
    ax.set_ylim(0, max([top_tau / cycle_s, baseline_tps, *targets]) * 1.08)
    ax.set_xlabel("accept length τ (tokens per verify step)")
    ax.set_ylabel("decode throughput (tok/s)")
    verdict = "above" if ok else "below"
    ax.set_title(f"Break-even: accept length {measured_accept:.2f} is {verdict} "
                 f"{breakeven:.2f}")
    ax.legend(fontsize=8, loc="lower right")
    return png(fig)


def per_position_acceptance(rates: Sequence[float]) -> bytes:
    """Acceptance rate at each draft position (1 = first drafted token)."""
    fig, ax = figure(6.5, 3.8)
    x = list(range(1, len(rates) + 1))
    ax.bar(x, [r * 100 for r in rates], color=SPEC_COLOR, width=0.6)
    for xx, r in zip(x, rates, strict=True):
        ax.annotate(f"{r * 100:.0f}%", (xx, r * 100), xytext=(0, 3), textcoords="offset points",
                    ha="center", fontsize=9)
    ax.set_xticks(x)
    ax.set_ylim(0, 110)
    ax.set_xlabel("draft position")
    ax.set_ylabel("accepted (%)")
    ax.set_title("Acceptance rate per draft position")
    return png(fig)


def figure(width: float, height: float) -> tuple[Figure, Axes]:
    import matplotlib

    matplotlib.use("Agg", force=True)  # no display on servers and CI
    from matplotlib.figure import Figure

    # A bare Figure (not pyplot) is never registered globally, so nothing leaks between calls.
    fig = Figure(figsize=(width, height), dpi=_DPI, layout="constrained")
    ax = fig.add_subplot()
    ax.grid(True, axis="both", alpha=0.25)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return fig, ax


def png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI)
    return buf.getvalue()


def _rect(x: float, y: float, w: float, h: float, color: str) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), w, h, color=color, alpha=0.15, zorder=1, linewidth=0)


def _spread(n: int) -> list[float]:
    if n == 1:
        return [0.0]
    return [-0.18 + 0.36 * i / (n - 1) for i in range(n)]


def _palette(n: int) -> list[str]:
    base = ["#2563eb", "#16a34a", "#d97706", "#9333ea", "#dc2626", "#0891b2", "#65a30d",
            "#db2777", "#475569", "#ca8a04"]
    return [base[i % len(base)] for i in range(n)]


def _short(text: str, limit: int = 28) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
