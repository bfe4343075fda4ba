"""A benchmark's figures: per-request samples, their rates and intervals over prompts, and the
speed-up of one server over another (measure/passes.py takes the samples)."""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import math
from collections.abc import Sequence
from typing import Any, Literal

from specgate.core.profile import BenchSection
from specgate.results.prompts import ChatTemplate
from specgate.results.stats import Summary, jackknife

Config = Literal["baseline", "speculative"]

# Metrics, with their units. Each is a ratio of totals over requests; its interval is the
# jackknife over prompts (the same prompts run on both servers, so prompts are the unit).
METRICS: dict[str, str] = {
    "tps": "tok/s",  # Σ tokens after the first message / Σ seconds after the first message
    "accept_len": "tokens/verify",  # Σ completion_tokens / Σ spec_verify_ct
    "tau_decode": "tokens/verify",  # Σ (completion_tokens − 1) / Σ spec_verify_ct
    "cycle_ms": "ms",  # tau_decode / tps: the time one verify cycle takes
    "ttft_ms": "ms",
    # The server's output with N in flight (Little's law): N × Σ completion_tokens / Σ request
    # seconds, prefill and waiting included. Per request at N = 1.
    "total_tps": "tok/s",
}
# A stream whose messages arrive this close together came through something that buffered it:
# a real decode step takes milliseconds (4.4 ms for a tiny model on an H200, 12 ms for Kimi-K2.5).
BURST_GAP_S = 0.00025


@dataclasses.dataclass(frozen=True)
class Sampling:
    """How each prompt is sampled and how many passes are made: [bench]'s figures, resolved."""

    max_new_tokens: int = 256
    temperature: float = 0.0
    warmup: int = 2
    repeats: int = 3
    max_repeats: int = 6
    confidence: float = 0.95
    request_timeout_s: float = 600.0

    @classmethod
    def of(cls, section: BenchSection) -> Sampling:
        return cls(max_new_tokens=section.max_new_tokens, temperature=section.temperature,
                   warmup=section.warmup, repeats=section.repeats,
                   max_repeats=section.max_repeats, confidence=section.confidence,
                   request_timeout_s=section.request_timeout_s)

    @property
    def params(self) -> dict[str, Any]:
        """SGLang's sampling_params. No ignore_eos: requests stop naturally, as users' requests
        do; max_new_tokens only caps them."""
        return {"max_new_tokens": self.max_new_tokens, "temperature": self.temperature}


@dataclasses.dataclass(frozen=True)
class RequestSample:
    """One measured request: what the server reported and what the client timed."""

    repeat: int
    prompt_id: str
    category: str
    prompt_tokens: int
    completion_tokens: int
    spec_verify_ct: int | None
    ttft_s: float
    e2e_s: float
    server_e2e_s: float | None
    finish_reason: str
    chunks: int
    # spec_correct_drafts_histogram: how many verify passes accepted 0, 1, 2, … drafts.
    drafts_histogram: tuple[int, ...] | None = None
    first_tokens: int = 1  # completion_tokens of the first streamed message
    median_gap_s: float | None = None  # median time between messages after the first
    # the answer's token ids as the server streamed them (SGLang's output_ids); empty when the
    # server sent none or they do not add up to completion_tokens
    output_ids: tuple[int, ...] = ()
    request_id: str = ""  # SGLang's meta_info.id
    stream: int = 0  # the client stream (connection) that ran it, from 0
    # Requests in flight over its decode window, time-weighted, and the seconds of that window
    # with fewer than the level's count in flight (measure/load.py).
    in_flight: float = 1.0
    short_s: float = 0.0

    @property
    def decode_tokens(self) -> int:
        """Tokens that arrived after the first message: the ones decode_s times."""
        return max(self.completion_tokens - self.first_tokens, 0)

    @property
    def decode_s(self) -> float:
        return max(self.e2e_s - self.ttft_s, 0.0)

    @property
    def verify_ct(self) -> int | None:
        """Verify passes; 0 for a request that ended at its first token (SGLang then sends no
        spec fields), None when a longer answer lacks them (speculation not active)."""
        if self.spec_verify_ct is not None:
            return self.spec_verify_ct
        return 0 if self.completion_tokens <= 1 else None

    @property
    def burst(self) -> bool:
        """Its messages arrived all at once, as through a buffering proxy (not as decoded)."""
        return (self.chunks >= 3 and self.median_gap_s is not None
                and self.median_gap_s < BURST_GAP_S and self.decode_s < 0.1 * self.e2e_s)


@dataclasses.dataclass(frozen=True)
class PassResult:
    """One repeat: a pass over every prompt after a cache flush, reduced to rates."""

    repeat: int
    requests: int
    completion_tokens: int
    decode_tokens: int
    decode_s: float
    verify_ct: int | None  # None when any request lacked spec_verify_ct
    ttft_s: float  # mean

    @property
    def tps(self) -> float:
        return self.decode_tokens / self.decode_s if self.decode_s > 0 else math.nan

    @property
    def accept_len(self) -> float | None:
        return self.completion_tokens / self.verify_ct if self.verify_ct else None

    @property
    def tau_decode(self) -> float | None:
        return (self.completion_tokens - self.requests) / self.verify_ct if self.verify_ct else None

    @property
    def cycle_ms(self) -> float | None:
        tau, tps = self.tau_decode, self.tps
        return 1000.0 * tau / tps if tau is not None and tps > 0 else None

    def metric(self, name: str) -> float | None:
        if name == "ttft_ms":
            return 1000.0 * self.ttft_s
        value: float | None = getattr(self, name)
        return value

    @classmethod
    def of(cls, repeat: int, samples: Sequence[RequestSample]) -> PassResult:
        t = Totals.of(samples)
        return cls(repeat=repeat, requests=t.requests, completion_tokens=t.completion_tokens,
                   decode_tokens=t.decode_tokens, decode_s=t.decode_s, verify_ct=t.verify_ct,
                   ttft_s=t.ttft_s / max(t.requests, 1))


@dataclasses.dataclass(frozen=True)
class Totals:
    """Sums over some requests (one prompt's, or a pass's): what every metric is a ratio of."""

    requests: int
    completion_tokens: int
    decode_tokens: int  # after the first message
    decode_s: float
    verify_ct: int | None  # None when any request lacked spec fields it should have had
    ttft_s: float  # sum
    e2e_s: float = 0.0  # sum

    @classmethod
    def of(cls, samples: Sequence[RequestSample]) -> Totals:
        return _pooled([cls(1, s.completion_tokens, s.decode_tokens, s.decode_s, s.verify_ct,
                            s.ttft_s, s.e2e_s) for s in samples])


def _pooled(units: Sequence[Totals]) -> Totals:
    verifies = [u.verify_ct for u in units]
    return Totals(requests=sum(u.requests for u in units),
                  completion_tokens=sum(u.completion_tokens for u in units),
                  decode_tokens=sum(u.decode_tokens for u in units),
                  decode_s=math.fsum(u.decode_s for u in units),
                  verify_ct=None if any(v is None for v in verifies)
                  else sum(v or 0 for v in verifies),
                  ttft_s=math.fsum(u.ttft_s for u in units),
                  e2e_s=math.fsum(u.e2e_s for u in units))


def _tps(t: Totals) -> float:
    """Decode tok/s; undefined (nan) when no token arrived after a first message to time."""
    return t.decode_tokens / t.decode_s if t.decode_s > 0 and t.decode_tokens > 0 else math.nan


def _per_verify(tokens: int, t: Totals) -> float:
    return tokens / t.verify_ct if t.verify_ct else math.nan


def _output_rate(t: Totals) -> float:
    """Completion tokens per request-second, prefill and waiting included."""
    return t.completion_tokens / t.e2e_s if t.e2e_s > 0 and t.completion_tokens > 0 \
        else math.nan


def _rate(metric: str, t: Totals) -> float:
    """The per-request rate a speed-up compares: decode tok/s, or output tok/s (total)."""
    return _output_rate(t) if metric == "total_tps" else _tps(t)


def metric_of(name: str, units: Sequence[Totals], concurrency: int = 1) -> float:
    """One metric over pooled units (see METRICS); nan where it is undefined."""
    t = _pooled(units)
    if name == "tps":
        return _tps(t)
    if name == "total_tps":
        return concurrency * _output_rate(t)
    if name == "accept_len":
        return _per_verify(t.completion_tokens, t)
    if name == "tau_decode":
        return _per_verify(t.completion_tokens - t.requests, t)
    if name == "cycle_ms":
        tps = _tps(t)
        return 1000.0 * _per_verify(t.completion_tokens - t.requests, t) / tps if tps > 0 \
            else math.nan
    if name == "ttft_ms":
        return 1000.0 * t.ttft_s / t.requests if t.requests else math.nan
    raise KeyError(name)


def per_prompt(samples: Sequence[RequestSample]) -> dict[str, Totals]:
    """Each prompt's totals over all its repeats, in first-seen order."""
    by_prompt: dict[str, list[RequestSample]] = {}
    for s in samples:
        by_prompt.setdefault(s.prompt_id, []).append(s)
    return {pid: Totals.of(chosen) for pid, chosen in by_prompt.items()}


@dataclasses.dataclass(frozen=True)
class Measurement:
    """Everything measured on one server configuration, with its statistics."""

    config: str
    url: str
    template: str
    template_source: str
    temperature: float
    max_new_tokens: int
    warmup: int
    confidence: float
    samples: tuple[RequestSample, ...]
    passes: tuple[PassResult, ...]
    stats: dict[str, Summary]
    per_category_accept_len: dict[str, float]
    spec_fields_missing: int  # measured requests without spec_verify_ct that should have it
    stop_reason: str
    simulated: bool = False
    server_spec: dict[str, Any] = dataclasses.field(default_factory=dict)
    template_digest: str = ""
    concurrency: int = 1  # requests in flight at once
    fillers: int = 0  # unmeasured requests that held `concurrency` at both ends (load.py)

    @property
    def repeats(self) -> int:
        return len(self.passes)

    @property
    def held(self) -> float:
        """The share of the measured decode time with `concurrency` requests in flight."""
        decode = math.fsum(s.decode_s for s in self.samples)
        short = math.fsum(min(s.short_s, s.decode_s) for s in self.samples)
        return 1.0 - short / decode if decode > 0 else 1.0

    def load_text(self) -> str:
        """How the load was held, in a sentence ("" for one stream)."""
        if self.concurrency == 1:
            return ""
        decode = math.fsum(s.decode_s for s in self.samples)
        mean = (math.fsum(s.in_flight * s.decode_s for s in self.samples) / decode
                if decode > 0 else float(self.concurrency))
        return (f"{self.concurrency} in flight (one connection per stream): {mean:.2f} on "
                f"average over the measured decode time, {self.concurrency} for "
                f"{self.held:.2%} of it; {self.fillers} unmeasured filler requests held the "
                "load at the opening and the tail")

    def stat(self, name: str) -> Summary | None:
        return self.stats.get(name)

    @property
    def bursts(self) -> int:
        """Requests whose stream arrived all at once (see RequestSample.burst)."""
        return sum(1 for s in self.samples if s.burst)

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["stats"] = {k: v.to_json() for k, v in self.stats.items()}
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Measurement:
        fields = dict(data)
        fields["samples"] = tuple(
            RequestSample(**{**s, "drafts_histogram": tuple(s["drafts_histogram"])
                             if s.get("drafts_histogram") else None,
                             "output_ids": tuple(s.get("output_ids") or ())})
            for s in data["samples"])
        fields["passes"] = tuple(PassResult(**p) for p in data["passes"])
        fields["stats"] = {k: Summary.from_json(v) for k, v in data["stats"].items()}
        return cls(**fields)

    def samples_csv(self) -> str:
        buf = io.StringIO()
        # the answers' token ids stay in results.json: one CSV cell per answer would be unreadable
        names = [f.name for f in dataclasses.fields(RequestSample) if f.name != "output_ids"]
        writer = csv.writer(buf)
        writer.writerow(["config", *names, "decode_tok_s"])
        for s in self.samples:
            rate = s.decode_tokens / s.decode_s if s.decode_s > 0 else ""
            writer.writerow([self.config, *(getattr(s, n) for n in names), rate])
        return buf.getvalue()

    def stats_table(self) -> str:
        per_pass = len(self.samples) // max(self.repeats, 1)
        lines = [f"{self.config}: {self.repeats} repeats × {per_pass} prompts at "
                 f"{self.concurrency} in flight (intervals: jackknife over prompts), template "
                 f"{self.template} ({self.template_source}), "
                 f"temperature {self.temperature}, max_new_tokens {self.max_new_tokens}",
                 f"{'metric':<12}{'n':>4}{'mean':>12}{'std':>10}{'CV %':>8}"
                 f"{'CI low':>12}{'CI high':>12}  unit"]
        for name, summary in self.stats.items():
            lines.append(f"{name:<12}{summary.n:>4}{summary.mean:>12.4f}{summary.std:>10.4f}"
                         f"{summary.cv * 100:>8.2f}{summary.ci_low:>12.4f}"
                         f"{summary.ci_high:>12.4f}  {METRICS.get(name, '')}")
        if self.per_category_accept_len:
            lines.append("accept length per category: " + ", ".join(
                f"{c} {v:.3f}" for c, v in sorted(self.per_category_accept_len.items())))
        lines.append(f"stopped: {self.stop_reason}")
        if self.load_text():
            lines.append(f"load: {self.load_text()}")
        return "\n".join(lines)


def judged_confidence(sampling: Sampling) -> float:
    """The confidence each interval is computed at, so the whole sequential run keeps its level.

    Repeats continue past `repeats` while an interval straddles a threshold, and every look is
    a chance to stop on a lucky interval (optional stopping: with the true mean at the
    threshold, 3 to 6 repeats judged at a plain 95 % pass 6.3 % of the time instead of 2.5 %).
    Splitting the error over the possible looks (Bonferroni) keeps the overall error at most
    1 − confidence.
    """
    looks = max(1, max(sampling.max_repeats, sampling.repeats) - sampling.repeats + 1)
    return 1.0 - (1.0 - sampling.confidence) / looks


def _summaries(samples: Sequence[RequestSample], confidence: float,
               concurrency: int = 1) -> dict[str, Summary]:
    units = list(per_prompt(samples).values())
    stats: dict[str, Summary] = {}
    for name in METRICS:
        summary = jackknife(units, functools.partial(metric_of, name, concurrency=concurrency),
                            confidence)
        if math.isfinite(summary.mean):
            stats[name] = summary
    return stats


def restated(m: Measurement, sampling: Sampling) -> Measurement:
    """A stored measurement's statistics recomputed at this run's [bench] confidence (a reused
    baseline is judged at the level of the run that reuses it)."""
    confidence = judged_confidence(sampling)
    return dataclasses.replace(m, confidence=confidence,
                               stats=_summaries(m.samples, confidence, m.concurrency))


def build_measurement(*, config: str, url: str, template: ChatTemplate, sampling: Sampling,
                      samples: Sequence[RequestSample], stop_reason: str = "",
                      simulated: bool = False,
                      server_spec: dict[str, Any] | None = None, concurrency: int = 1,
                      fillers: int = 0) -> Measurement:
    """Reduce samples to per-pass rates and summarize each metric over passes."""
    repeats = sorted({s.repeat for s in samples})
    passes = tuple(PassResult.of(r, [s for s in samples if s.repeat == r]) for r in repeats)
    stats = _summaries(samples, judged_confidence(sampling), concurrency)
    per_category: dict[str, float] = {}
    for category in sorted({s.category for s in samples}):
        value = metric_of("accept_len", [Totals.of([s for s in samples
                                                    if s.category == category])])
        if math.isfinite(value):
            per_category[category] = value
    return Measurement(
        config=config, url=url, template=template.name, template_source=template.source,
        template_digest=template.digest,
        temperature=sampling.temperature, max_new_tokens=sampling.max_new_tokens,
        warmup=sampling.warmup, confidence=judged_confidence(sampling), samples=tuple(samples),
        passes=passes, stats=stats,
        per_category_accept_len=per_category,
        spec_fields_missing=sum(1 for s in samples if s.verify_ct is None),
        stop_reason=stop_reason, simulated=simulated, server_spec=dict(server_spec or {}),
        concurrency=concurrency, fillers=fillers)


def draft_positions(m: Measurement) -> int:
    """The draft positions a verify pass can accept: the server's --speculative-num-steps, else
    the widest histogram's (SGLang trims each after its last non-zero count)."""
    steps = m.server_spec.get("speculative_num_steps")
    if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0:
        return steps
    return max((len(s.drafts_histogram) - 1 for s in m.samples if s.drafts_histogram),
               default=0)


def position_acceptance(m: Measurement) -> tuple[Summary, ...]:
    """Per draft position k (1, 2, …): the share of verify passes that accepted at least k
    drafts, i.e. in which draft k was accepted (vLLM's acceptance per position), from SGLang's
    spec_correct_drafts_histogram. Pooled over requests, with the jackknife over prompts at the
    measurement's confidence; empty when the server sent no histograms."""
    positions = draft_positions(m)
    by_prompt: dict[str, list[int]] = {}
    for s in m.samples:
        if not s.drafts_histogram:
            continue
        counts = by_prompt.setdefault(s.prompt_id, [0] * (positions + 1))
        for j, count in enumerate(s.drafts_histogram[: positions + 1]):
            counts[j] += count
    units = list(by_prompt.values())
    if not units or positions < 1:
        return ()

    def share(k: int, chosen: Sequence[list[int]]) -> float:
        passes = sum(sum(c) for c in chosen)
        return sum(sum(c[k:]) for c in chosen) / passes if passes else math.nan

    return tuple(jackknife(units, functools.partial(share, k), m.confidence)
                 for k in range(1, positions + 1))


@dataclasses.dataclass(frozen=True)
class PromptSpeedup:
    """One prompt's speculative ÷ baseline decode tok/s (its repeats pooled on each side)."""

    prompt_id: str
    category: str
    speedup: float
    accept_len: float | None  # the speculative side's completion tokens per verify pass

    def to_json(self) -> dict[str, object]:
        return {"prompt_id": self.prompt_id, "category": self.category,
                "speedup": round(self.speedup, 4),
                "accept_len": None if self.accept_len is None else round(self.accept_len, 3)}


def speedup_by_prompt(spec: Measurement, base: Measurement) -> list[PromptSpeedup]:
    """Each prompt both servers measured, slowest first (prompts with no decode time left out).

    The paired interval of speedup() is wide when prompts disagree; this is the list that
    shows which ones do (a drafter blind to some prompts' text runs them at ~1/cycle-ratio).
    """
    categories = {s.prompt_id: s.category for s in spec.samples}
    spec_units, base_units = per_prompt(spec.samples), per_prompt(base.samples)
    rows = []
    for pid, unit in spec_units.items():
        if pid not in base_units:
            continue
        num, den = _tps(unit), _tps(base_units[pid])
        if not (math.isfinite(num) and math.isfinite(den)) or den <= 0:
            continue
        tau = _per_verify(unit.completion_tokens, unit)
        rows.append(PromptSpeedup(pid, categories[pid], num / den,
                                  tau if math.isfinite(tau) else None))
    return sorted(rows, key=lambda r: (r.speedup, r.prompt_id))


def straddles(summary: Summary | None, threshold: float | None, what: str) -> str | None:
    """A keep_going reason when the interval contains the threshold, else None."""
    if summary is None or threshold is None or not summary.has_interval:
        return None
    if summary.compare(threshold) == "inconclusive":
        return (f"the {what} interval [{summary.ci_low:.3f}, {summary.ci_high:.3f}] "
                f"straddles {threshold:.3f}")
    return None


def speedup(spec: Measurement, base: Measurement, metric: str = "tps") -> Summary:
    """Speculative ÷ baseline decode tok/s over the prompts both measured, paired by prompt.

    One statistic decides both spec.speedup and spec.breakeven: decode tok/s = τ / cycle time,
    so τ ≥ cycle × baseline tok/s exactly when this ratio is ≥ 1. Pairing by prompt takes the
    prompts' own spread (long and short answers, easy and hard text) out of the interval.
    metric "total_tps" gives the same ratio of output tok/s (prefill and waiting included): at
    one concurrency on both sides, the ratio of the servers' total output.
    """
    if metric not in ("tps", "total_tps"):
        raise ValueError(f"a speed-up compares tps or total_tps, not {metric!r}")
    spec_units, base_units = per_prompt(spec.samples), per_prompt(base.samples)
    pairs = [(spec_units[p], base_units[p]) for p in spec_units if p in base_units]

    def ratio(chosen: Sequence[tuple[Totals, Totals]]) -> float:
        den = _rate(metric, _pooled([b for _, b in chosen]))
        return _rate(metric, _pooled([a for a, _ in chosen])) / den if den else math.nan

    # Each side judged at its own level (more looks, a stricter one): the ratio takes the
    # stricter, so it keeps the error bound of the side that looked most.
    return jackknife(pairs, ratio, max(spec.confidence, base.confidence))
