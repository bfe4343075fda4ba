"""Benchmark passes against one server at one concurrency: warm-up, then passes over every
prompt, each streamed answer kept as a measured request (results/bench.py)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from specgate.measure import load
from specgate.results.bench import (
    Config,
    Measurement,
    RequestSample,
    Sampling,
    build_measurement,
)
from specgate.results.prompts import Prompt, PromptSet
from specgate.serving.client import Generation, SGLangClient

Progress = Callable[[str], None]


def run_pass(client: SGLangClient, prompts: PromptSet, params: dict[str, Any], repeat: int,
             progress: Progress | None = None, concurrency: int = 1) -> tuple[
                 list[RequestSample], int]:
    """Flush the prefix cache, then send every prompt once: one at a time, or with exactly
    `concurrency` in flight (load.closed_loop). Returns the samples and the filler requests
    that held the load at both ends."""
    client.flush_cache()
    if concurrency > 1:
        def say(message: str) -> None:
            if progress is not None:
                progress(f"repeat {repeat}: {message}")

        loop = load.closed_loop(client, prompts.texts, params, concurrency,
                                labels=[p.id for p in prompts.prompts], progress=say)
        return [sample_of(s.generation, prompts.prompts[s.index], repeat, stream=s.stream,
                          in_flight=s.in_flight, short_s=s.short_s)
                for s in loop.served], loop.fillers
    samples = []
    for i, (prompt, text) in enumerate(prompts.sent(), 1):
        sample = sample_of(client.generate(text, params, stream=True), prompt, repeat)
        if sample.burst:
            # A client or server that was not scheduled for a moment reads a whole stream at
            # once too; a buffering proxy does it every time. Sent once more, a stall does not
            # repeat, and the claim judges the second reading.
            sample = sample_of(client.generate(text, params, stream=True), prompt, repeat)
        samples.append(sample)
        if progress is not None and (i == len(prompts.texts) or i % 10 == 0):
            progress(f"repeat {repeat}: {i}/{len(prompts.texts)} requests")
    return samples, 0


def sample_of(gen: Generation, prompt: Prompt, repeat: int, *, stream: int = 0,
              in_flight: float = 1.0, short_s: float = 0.0) -> RequestSample:
    """One streamed answer as a measured request (stream, in_flight and short_s: how it ran
    among others in flight, measure/load.py)."""
    request_id = gen.meta_info.get("id")
    return RequestSample(
        repeat=repeat, prompt_id=prompt.id, category=prompt.category,
        prompt_tokens=gen.prompt_tokens, completion_tokens=gen.completion_tokens,
        spec_verify_ct=gen.spec_verify_ct, ttft_s=gen.ttft_s, e2e_s=gen.e2e_s,
        server_e2e_s=gen.server_e2e_s, finish_reason=gen.finish_reason, chunks=gen.chunks,
        drafts_histogram=_histogram(gen.meta_info.get("spec_correct_drafts_histogram")),
        first_tokens=gen.first_tokens, median_gap_s=_median_gap(gen.arrivals_s),
        output_ids=gen.output_ids, request_id=request_id if isinstance(request_id, str) else "",
        stream=stream, in_flight=in_flight, short_s=short_s)


def _median_gap(arrivals: Sequence[float]) -> float | None:
    gaps = sorted(b - a for a, b in itertools.pairwise(arrivals))
    return gaps[len(gaps) // 2] if gaps else None


def _histogram(value: Any) -> tuple[int, ...] | None:
    if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
        return None
    return tuple(value)



def repeated(sampling: Sampling, one_pass: Callable[[int], None],
             reason: Callable[[], str | None] | None, passes: str, where: str,
             progress: Progress | None) -> str:
    """Passes 1, 2, ...: sampling.repeats of them, then more while reason() gives one, up to
    max_repeats (never fewer than repeats). Returns why they stopped, counted in `passes`
    ("repeats"); `where` heads the progress line of each pass added."""
    max_repeats = max(sampling.max_repeats, sampling.repeats)
    as_configured = f"{sampling.repeats} {passes} as configured"
    repeat = 0
    while True:
        repeat += 1
        one_pass(repeat)
        if repeat < sampling.repeats:
            continue
        if reason is None:
            return as_configured
        why = reason()
        if why is None:
            return (f"{repeat} {passes}: the interval cleared the threshold"
                    if repeat > sampling.repeats else as_configured)
        if repeat >= max_repeats:
            return f"{repeat} {passes} (max_repeats) and still {why}"
        if progress is not None:
            progress(f"{where}: another repeat because {why}")


def measure(client: SGLangClient, sampling: Sampling, prompts: PromptSet, *, config: Config,
            keep_going: Callable[[Measurement], str | None] | None = None,
            progress: Progress | None = None, simulated: bool = False,
            server_spec: dict[str, Any] | None = None, concurrency: int = 1) -> Measurement:
    """Warm up, then `repeats` passes, then more (up to max_repeats) while keep_going says why.

    keep_going gets the measurement so far and returns a reason to continue (e.g. "the accept
    length interval straddles 2.46") or None to stop. With concurrency N > 1 each stream sends
    `warmup` requests first, and every pass holds N requests in flight (load.closed_loop).
    """
    if not prompts.texts:
        raise ValueError("no prompts to measure")
    params = sampling.params
    where = config if concurrency == 1 else f"{config} at {concurrency} in flight"
    warmups = [prompts.texts[i % len(prompts.texts)] for i in range(sampling.warmup * concurrency)]
    if concurrency > 1 and warmups:
        load.closed_loop(client, warmups, params, concurrency, hold=False)
    else:
        for text in warmups:
            client.generate(text, params, stream=True)
    if progress is not None and warmups:
        progress(f"{where}: {len(warmups)} warmup requests done (excluded)")
    samples: list[RequestSample] = []
    fillers = 0

    def one_pass(repeat: int) -> None:
        nonlocal fillers
        found, held = run_pass(client, prompts, params, repeat, progress, concurrency)
        samples.extend(found)
        fillers += held

    def reason() -> str | None:
        assert keep_going is not None
        return keep_going(build_measurement(config=config, url=client.base_url,
                                            template=prompts.template, sampling=sampling,
                                            samples=samples, concurrency=concurrency))

    stop_reason = repeated(sampling, one_pass, None if keep_going is None else reason,
                           "repeats", where, progress)
    return build_measurement(config=config, url=client.base_url, template=prompts.template,
                             sampling=sampling, samples=samples, stop_reason=stop_reason,
                             simulated=simulated, server_spec=server_spec,
                             concurrency=concurrency, fillers=fillers)
