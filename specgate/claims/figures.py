"""The run's key figures with their intervals, read from the claims that measured them."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

from specgate.claims import ids
from specgate.claims.result import ClaimResult

# (key in verdict.json "figures", the claim that measures it, how people name it, unit, digits)
_FIGURES: tuple[tuple[str, str, str, str, int], ...] = (
    ("baseline_tps", ids.BASELINE_TPS.id, "baseline", "tok/s", 1),
    ("accept_len", ids.ACCEPT_LEN.id, "accept length", "tokens/verify", 3),
    ("breakeven", ids.BREAKEVEN.id, "break-even", "tokens/verify", 3),
    ("speedup", ids.SPEEDUP.id, "speed-up", "x", 3),
)
# Acceptance per draft position k, from spec.accept_len's details["accept_pos"]: figures
# "accept_pos1", "accept_pos2", … (the share of verify passes that accepted draft k).
POSITION_PREFIX = "accept_pos"
POSITION_CLAIM = ids.ACCEPT_LEN.id


@dataclasses.dataclass(frozen=True)
class Figure:
    """One key figure: its value and, when the run had the repeats for one, its interval."""

    key: str
    label: str
    claim: str
    value: float
    unit: str
    digits: int
    ci_low: float | None = None
    ci_high: float | None = None
    confidence: float | None = None

    def text(self) -> str:
        """`820.1 tok/s, 98.33 % CI [817.5, 822.7]` (the unit x written as ×)."""
        value = f"{self.value:.{self.digits}f}"
        value += "×" if self.unit == "x" else f" {self.unit}" if self.unit else ""
        if self.ci_low is None or self.ci_high is None:
            return value + " (no interval)"
        pct = f"{self.confidence * 100:.4g} % " if self.confidence else ""
        return (f"{value}, {pct}CI [{self.ci_low:.{self.digits}f}, "
                f"{self.ci_high:.{self.digits}f}]")

    def short_text(self) -> str:
        """`817.4 tok/s [810.4, 822.7]`: the value and its interval, for narrow places."""
        unit = {"tok/s": " tok/s", "x": "×"}.get(self.unit, "")
        value = f"{self.value:.{self.digits}f}{unit}"
        if self.ci_low is None or self.ci_high is None:
            return value
        return f"{value} [{self.ci_low:.{self.digits}f}, {self.ci_high:.{self.digits}f}]"

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "claim": self.claim, "value": self.value,
                "unit": self.unit, "ci_low": self.ci_low, "ci_high": self.ci_high,
                "confidence": self.confidence, "text": self.text()}

    @property
    def position(self) -> int | None:
        """The draft position of an acceptance-per-position figure, else None."""
        return position_of(self.key)

    @classmethod
    def from_json(cls, key: str, data: Mapping[str, Any]) -> Figure:
        digits = next((d for k, _c, _l, _u, d in _FIGURES if k == key), 3)
        return cls(key=key, label=str(data.get("label", key)), claim=str(data.get("claim", "")),
                   value=float(data["value"]), unit=str(data.get("unit", "")), digits=digits,
                   ci_low=_number(data.get("ci_low")), ci_high=_number(data.get("ci_high")),
                   confidence=_number(data.get("confidence")))


def key_figures(claims: Iterable[ClaimResult]) -> list[Figure]:
    """Baseline tok/s, accept length, break-even and speed-up, each where its claim measured it
    (whatever the claim concluded), in that order; then the acceptance at each draft
    position."""
    by_id = {c.id: c for c in claims}
    found = []
    for key, claim_id, label, unit, digits in _FIGURES:
        result = by_id.get(claim_id)
        measured = _measured(key, result.details) if result is not None else None
        if measured is not None:
            value, low, high, confidence = measured
            found.append(Figure(key, label, claim_id, value, unit, digits, low, high, confidence))
    accept = by_id.get(POSITION_CLAIM)
    for k, summary in enumerate(position_summaries(accept.details) if accept else [], 1):
        share = _number(summary.get("mean"))
        if share is not None:
            found.append(Figure(f"{POSITION_PREFIX}{k}", position_label(k), POSITION_CLAIM,
                                share, "", 3, _number(summary.get("ci_low")),
                                _number(summary.get("ci_high")),
                                _number(summary.get("confidence"))))
    return found


def position_summaries(details: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The per-position acceptance summaries a spec.accept_len claim recorded, position 1 first."""
    raw = details.get("accept_pos")
    if not isinstance(raw, list):
        return []
    return [item for item in raw if isinstance(item, Mapping)]


def position_label(k: int) -> str:
    return f"accepted at draft {k}"


def position_of(key: str) -> int | None:
    tail = key.removeprefix(POSITION_PREFIX)
    return int(tail) if key.startswith(POSITION_PREFIX) and tail.isdigit() and int(tail) > 0 \
        else None


def figures_of(doc: Mapping[str, Any]) -> list[Figure]:
    """The figures a verdict document carries (its "figures" object), in their order."""
    raw = doc.get("figures")
    if not isinstance(raw, Mapping):
        return []
    out = []
    for key, _claim, _label, _unit, _digits in _FIGURES:
        data = raw.get(key)
        if isinstance(data, Mapping) and _number(data.get("value")) is not None:
            out.append(Figure.from_json(key, data))
    positions = sorted((k, str(key)) for key in raw if (k := position_of(str(key))) is not None)
    for _k, key in positions:
        data = raw.get(key)
        if isinstance(data, Mapping) and _number(data.get("value")) is not None:
            out.append(Figure.from_json(key, data))
    return out


def _measured(key: str, details: Mapping[str, Any]
              ) -> tuple[float, float | None, float | None, float | None] | None:
    """(value, ci_low, ci_high, confidence) from a claim's details, None when not measured."""
    if key == "breakeven":
        value = _number(details.get("breakeven"))
        if value is None:
            return None
        ci = details.get("breakeven_ci") or [None, None]
        low, high = (_number(ci[0]), _number(ci[1])) if len(ci) == 2 else (None, None)
        return value, low, high, _number(details.get("confidence"))
    summary = details.get({"baseline_tps": "tps"}.get(key, key))
    if not isinstance(summary, Mapping):
        return None
    value = _number(summary.get("mean"))
    if value is None:
        return None
    return (value, _number(summary.get("ci_low")), _number(summary.get("ci_high")),
            _number(summary.get("confidence")))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


# The claims that carry the latency table (results/latency.py), in the order they are read:
# spec.speedup's has both servers and their ratios, perf.baseline_tps's the baseline alone.
LATENCY_CLAIMS = (ids.SPEEDUP.id, ids.BASELINE_TPS.id)


def latency_of(claims: Iterable[ClaimResult]) -> dict[str, Any] | None:
    """TTFT and TPOT per server at the gate's concurrency, with their speculative ÷ baseline
    ratios, from the first claim of LATENCY_CLAIMS that measured them (None: no claim did)."""
    by_id = {c.id: c for c in claims}
    for claim_id in LATENCY_CLAIMS:
        result = by_id.get(claim_id)
        table = result.details.get("latency") if result is not None else None
        if isinstance(table, Mapping) and table.get("servers"):
            return {"claim": claim_id, **table}
    return None


LATENCY_LABELS = {"ttft_ms": "TTFT", "tpot_ms": "TPOT"}
LATENCY_SHOWN = ("p50", "p90", "p99")


def latency_lines(table: Any) -> list[tuple[str, str]]:
    """A verdict's latency table as the closing block, the summary and the report show it:
    (`TTFT p50/p90/p99`, `baseline 10.2/12.0/15.1 ms · speculative 11.0/13.2/16.0 ms ·
    ×1.08/1.10/1.06`) for each metric a server measured."""
    if not isinstance(table, Mapping) or not isinstance(table.get("servers"), Mapping):
        return []
    servers, ratios = table["servers"], table.get("ratio")
    found = []
    for metric, label in LATENCY_LABELS.items():
        parts = []
        for config in ("baseline", "speculative"):
            server = servers.get(config)
            stats = server.get(metric) if isinstance(server, Mapping) else None
            values = _shown(stats)
            if values is not None:
                parts.append(f"{config} " + "/".join(map(_ms, values)) + " ms")
        ratio = _shown(ratios.get(metric) if isinstance(ratios, Mapping) else None)
        if parts and ratio is not None:
            parts.append("×" + "/".join(f"{r:.2f}" for r in ratio))
        if parts:
            found.append((f"{label} {'/'.join(LATENCY_SHOWN)}", " · ".join(parts)))
    return found


def _shown(stats: Any) -> list[float] | None:
    if not isinstance(stats, Mapping):
        return None
    values = [_number(stats.get(k)) for k in LATENCY_SHOWN]
    return [v for v in values if v is not None] if None not in values else None


def _ms(value: float) -> str:
    """Milliseconds to three significant figures, or to the millisecond from 100 ms (0.812,
    12.3, 154)."""
    digits = 0 if value >= 100 else 1 if value >= 10 else 2 if value >= 1 else 3
    return f"{value:.{digits}f}"


def decidable_of(claims: Iterable[ClaimResult]) -> dict[str, Any] | None:
    """What the probe could decide (results/decidable.py), from spec.speedup's details; None
    where no speed-up was measured with an interval. The claim is the one key_figures reads the
    speed-up from (the last of that id), so the two always speak of the same measurement."""
    result = {c.id: c for c in claims}.get(ids.SPEEDUP.id)
    found = result.details.get("decidable") if result is not None else None
    return dict(found) if isinstance(found, Mapping) else None


DECIDABLE_LABEL = "decidable"


def decidable_line(found: Any) -> tuple[str, str] | None:
    """(label, text) of what the probe could decide, as the closing block and the report show
    it, from verdict.json's "decidable"."""
    if not isinstance(found, Mapping) or not found.get("text"):
        return None
    return DECIDABLE_LABEL, str(found["text"])
