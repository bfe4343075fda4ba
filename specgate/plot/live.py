"""The charts attached to the live claims, drawn from measurements (plots.py draws, this picks)."""

from __future__ import annotations

from collections.abc import Sequence

from specgate.core.attachment import Attachment
from specgate.plot import figures as plots
from specgate.results.bench import Measurement, RequestSample


def _ci(m: Measurement, name: str) -> tuple[float, float] | None:
    s = m.stat(name)
    if s is None or not s.has_interval:
        return None
    return (s.ci_low, s.ci_high)


def tps_repeats(baseline: Measurement | None, spec: Measurement | None) -> Attachment:
    """tok/s per repeat with each side's interval."""
    shown = spec or baseline
    png = plots.tps_repeats(
        [p.tps for p in baseline.passes] if baseline else [],
        [p.tps for p in spec.passes] if spec else [],
        _ci(baseline, "tps") if baseline else None,
        _ci(spec, "tps") if spec else None,
        in_flight=shown.concurrency if shown is not None else 1,
    )
    return Attachment("tok/s per repeat (baseline vs speculative)", png, "png")


def per_prompt(spec: Measurement) -> Attachment | None:
    """Accept length of each prompt over all repeats, coloured by category."""
    totals: dict[str, list[int]] = {}
    cats: dict[str, str] = {}
    for s in spec.samples:
        if not s.spec_verify_ct:
            continue
        acc = totals.setdefault(s.prompt_id, [0, 0])
        acc[0] += s.completion_tokens
        acc[1] += s.spec_verify_ct
        cats[s.prompt_id] = s.category
    if not totals:
        return None
    ids = list(totals)
    values = [totals[i][0] / totals[i][1] for i in ids]
    png = plots.accept_per_prompt(values, ids, [cats[i] for i in ids])
    return Attachment("accept length per prompt", png, "png")


def per_category(spec: Measurement) -> Attachment | None:
    if not spec.per_category_accept_len:
        return None
    png = plots.accept_per_category(dict(spec.per_category_accept_len))
    return Attachment("accept length per category", png, "png")


def conditional_rates(samples: Sequence[RequestSample]) -> list[float] | None:
    """Per-position conditional acceptance a_k = P(≥ k drafts accepted | ≥ k−1 were).

    From SGLang's spec_correct_drafts_histogram (verify passes that accepted 0, 1, 2, … drafts);
    None when the server does not report it.
    """
    hists = [s.drafts_histogram for s in samples if s.drafts_histogram]
    if not hists:
        return None
    width = max(len(h) for h in hists)
    counts = [sum(h[j] for h in hists if j < len(h)) for j in range(width)]
    at_least = [sum(counts[j:]) for j in range(width)]
    rates = []
    for k in range(1, width):
        if at_least[k - 1] == 0:
            break
        rates.append(at_least[k] / at_least[k - 1])
    return rates or None


def per_position(spec: Measurement) -> Attachment | None:
    rates = conditional_rates(spec.samples)
    if rates is None:
        return None
    return Attachment("conditional acceptance per draft position",
                      plots.per_position_acceptance(rates), "png")


def breakeven(cycle_ms: float, baseline_tps: float, spec: Measurement,
              targets: Sequence[float]) -> Attachment:
    tps = spec.stat("tps")
    png = plots.breakeven_chart(cycle_ms, baseline_tps, spec.stats["accept_len"].mean,
                                tps.mean if tps else None, list(targets))
    return Attachment("break-even chart", png, "png")


def present(*items: Attachment | None) -> tuple[Attachment, ...]:
    return tuple(i for i in items if i is not None)
