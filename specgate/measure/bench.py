"""Single-stream benchmark passes against one server: per-request samples and per-repeat rates."""

from __future__ import annotations

import csv
import dataclasses
import io
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

from specgate.core.profile import BenchSection
from specgate.measure.prompts import ChatTemplate, Prompt
from specgate.measure.stats import Summary, summarize
from specgate.serving.client import SGLangClient

Config = Literal["baseline", "speculative"]
Progress = Callable[[str], None]

# Metrics summarized over repeats, with their units.
METRICS: dict[str, str] = {
    "tps": "tok/s",  # decode tokens / decode seconds, per pass
    "accept_len": "tokens/verify",  # Σ completion_tokens / Σ spec_verify_ct
    "tau_decode": "tokens/verify",  # Σ (completion_tokens − 1) / Σ spec_verify_ct
    "cycle_ms": "ms",  # decode seconds / Σ spec_verify_ct
    "ttft_ms": "ms",
}


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

    @property
    def decode_tokens(self) -> int:
        return max(self.completion_tokens - 1, 0)

    @property
    def decode_s(self) -> float:
        return max(self.e2e_s - self.ttft_s, 0.0)


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
        return self.decode_tokens / self.verify_ct if self.verify_ct else None

    @property
    def cycle_ms(self) -> float | None:
        return 1000.0 * self.decode_s / self.verify_ct if self.verify_ct else None

    def metric(self, name: str) -> float | None:
        if name == "ttft_ms":
            return 1000.0 * self.ttft_s
        value: float | None = getattr(self, name)
        return value

    @classmethod
    def of(cls, repeat: int, samples: Sequence[RequestSample]) -> PassResult:
        verifies = [s.spec_verify_ct for s in samples]
        verify_ct = None if any(v is None for v in verifies) else sum(v or 0 for v in verifies)
        return cls(
            repeat=repeat,
            requests=len(samples),
            completion_tokens=sum(s.completion_tokens for s in samples),
            decode_tokens=sum(s.decode_tokens for s in samples),
            decode_s=math.fsum(s.decode_s for s in samples),
            verify_ct=verify_ct,
            ttft_s=math.fsum(s.ttft_s for s in samples) / max(len(samples), 1),
        )


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
    spec_fields_missing: int  # measured requests without spec_verify_ct
    stop_reason: str
    simulated: bool = False
    server_spec: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def repeats(self) -> int:
        return len(self.passes)

    def stat(self, name: str) -> Summary | None:
        return self.stats.get(name)

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["stats"] = {k: v.to_json() for k, v in self.stats.items()}
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Measurement:
        fields = dict(data)
        fields["samples"] = tuple(
            RequestSample(**{**s, "drafts_histogram": tuple(s["drafts_histogram"])
                             if s.get("drafts_histogram") else None})
            for s in data["samples"])
        fields["passes"] = tuple(PassResult(**p) for p in data["passes"])
        fields["stats"] = {k: Summary.from_json(v) for k, v in data["stats"].items()}
        return cls(**fields)

    def samples_csv(self) -> str:
        buf = io.StringIO()
        names = [f.name for f in dataclasses.fields(RequestSample)]
        writer = csv.writer(buf)
        writer.writerow(["config", *names, "decode_tok_s"])
        for s in self.samples:
            rate = s.decode_tokens / s.decode_s if s.decode_s > 0 else ""
            writer.writerow([self.config, *(getattr(s, n) for n in names), rate])
        return buf.getvalue()

    def stats_table(self) -> str:
        per_pass = len(self.samples) // max(self.repeats, 1)
        lines = [f"{self.config}: {self.repeats} repeats × {per_pass} prompts, template "
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
        return "\n".join(lines)


def sampling_params(bench: BenchSection) -> dict[str, Any]:
    # No ignore_eos: requests stop naturally, as users' requests do; max_new_tokens only caps.
    return {"max_new_tokens": bench.max_new_tokens, "temperature": bench.temperature}


def run_pass(client: SGLangClient, prompts: Sequence[Prompt], template: ChatTemplate,
             params: dict[str, Any], repeat: int,
             progress: Progress | None = None) -> list[RequestSample]:
    """Flush the prefix cache, then send every prompt once, one at a time."""
    client.flush_cache()
    samples = []
    for i, prompt in enumerate(prompts, 1):
        gen = client.generate(template.render(prompt.text), params, stream=True)
        samples.append(RequestSample(
            repeat=repeat, prompt_id=prompt.id, category=prompt.category,
            prompt_tokens=gen.prompt_tokens, completion_tokens=gen.completion_tokens,
            spec_verify_ct=gen.spec_verify_ct, ttft_s=gen.ttft_s, e2e_s=gen.e2e_s,
            server_e2e_s=gen.server_e2e_s, finish_reason=gen.finish_reason, chunks=gen.chunks,
            drafts_histogram=_histogram(gen.meta_info.get("spec_correct_drafts_histogram"))))
        if progress is not None and (i == len(prompts) or i % 10 == 0):
            progress(f"repeat {repeat}: {i}/{len(prompts)} requests")
    return samples


def _histogram(value: Any) -> tuple[int, ...] | None:
    if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
        return None
    return tuple(value)


def judged_confidence(bench: BenchSection) -> float:
    """The confidence each interval is computed at, so the whole sequential run keeps its level.

    Repeats continue past `repeats` while an interval straddles a threshold, and every look is
    a chance to stop on a lucky interval (optional stopping: with the true mean at the
    threshold, 3 to 6 repeats judged at a plain 95 % pass 6.3 % of the time instead of 2.5 %).
    Splitting the error over the possible looks (Bonferroni) keeps the overall error at most
    1 − confidence.
    """
    looks = max(1, max(bench.max_repeats, bench.repeats) - bench.repeats + 1)
    return 1.0 - (1.0 - bench.confidence) / looks


def build_measurement(*, config: str, url: str, template: ChatTemplate, bench: BenchSection,
                      samples: Sequence[RequestSample], stop_reason: str = "",
                      simulated: bool = False,
                      server_spec: dict[str, Any] | None = None) -> Measurement:
    """Reduce samples to per-pass rates and summarize each metric over passes."""
    repeats = sorted({s.repeat for s in samples})
    passes = tuple(PassResult.of(r, [s for s in samples if s.repeat == r]) for r in repeats)
    stats: dict[str, Summary] = {}
    for name in METRICS:
        values = [p.metric(name) for p in passes]
        if values and all(v is not None and math.isfinite(v) for v in values):
            stats[name] = summarize([float(v) for v in values if v is not None],
                                    judged_confidence(bench))
    per_category: dict[str, float] = {}
    for category in sorted({s.category for s in samples}):
        chosen = [s for s in samples if s.category == category]
        verify = [s.spec_verify_ct for s in chosen]
        if verify and all(v for v in verify):
            per_category[category] = (sum(s.completion_tokens for s in chosen)
                                      / sum(v or 0 for v in verify))
    return Measurement(
        config=config, url=url, template=template.name, template_source=template.source,
        temperature=bench.temperature, max_new_tokens=bench.max_new_tokens, warmup=bench.warmup,
        confidence=judged_confidence(bench), samples=tuple(samples), passes=passes, stats=stats,
        per_category_accept_len=per_category,
        spec_fields_missing=sum(1 for s in samples if s.spec_verify_ct is None),
        stop_reason=stop_reason, simulated=simulated, server_spec=dict(server_spec or {}))


def measure(client: SGLangClient, bench: BenchSection, *, config: Config,
            prompts: Sequence[Prompt], template: ChatTemplate,
            keep_going: Callable[[Measurement], str | None] | None = None,
            progress: Progress | None = None, simulated: bool = False,
            server_spec: dict[str, Any] | None = None) -> Measurement:
    """Warm up, then `repeats` passes, then more (up to max_repeats) while keep_going says why.

    keep_going gets the measurement so far and returns a reason to continue (e.g. "the accept
    length interval straddles 2.46") or None to stop.
    """
    if not prompts:
        raise ValueError("no prompts to measure")
    params = sampling_params(bench)
    for i in range(bench.warmup):
        prompt = prompts[i % len(prompts)]
        client.generate(template.render(prompt.text), params, stream=True)
    if progress is not None and bench.warmup:
        progress(f"{config}: {bench.warmup} warmup requests done (excluded)")
    samples: list[RequestSample] = []
    max_repeats = max(bench.max_repeats, bench.repeats)
    stop_reason = f"{bench.repeats} repeats as configured"
    repeat = 0
    while True:
        repeat += 1
        samples.extend(run_pass(client, prompts, template, params, repeat, progress))
        if repeat < bench.repeats:
            continue
        if keep_going is None:
            break
        current = build_measurement(config=config, url=client.base_url, template=template,
                                    bench=bench, samples=samples)
        reason = keep_going(current)
        if reason is None:
            if repeat > bench.repeats:
                stop_reason = f"{repeat} repeats: the interval cleared the threshold"
            break
        if repeat >= max_repeats:
            stop_reason = f"{repeat} repeats (max_repeats) and still {reason}"
            break
        if progress is not None:
            progress(f"{config}: another repeat because {reason}")
    return build_measurement(config=config, url=client.base_url, template=template, bench=bench,
                             samples=samples, stop_reason=stop_reason, simulated=simulated,
                             server_spec=server_spec)


def straddles(summary: Summary | None, threshold: float | None, what: str) -> str | None:
    """A keep_going reason when the interval contains the threshold, else None."""
    if summary is None or threshold is None or not summary.has_interval:
        return None
    if summary.compare(threshold) == "inconclusive":
        return (f"the {what} interval [{summary.ci_low:.3f}, {summary.ci_high:.3f}] "
                f"straddles {threshold:.3f}")
    return None
