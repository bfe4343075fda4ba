"""Both servers resident at once, measured in turn: each prompt goes to one server, then to the
other, one request at a time, so the two share the GPU's state while neither measures under the
other's load."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from specgate.measure.passes import Progress, repeated, sample_of
from specgate.results.bench import (
    Measurement,
    RequestSample,
    Sampling,
    build_measurement,
)
from specgate.results.prompts import PromptSet
from specgate.serving.client import SGLangClient

# keep_going over the pair so far: a reason for another pass, or None to stop.
PairRule = Callable[[Measurement, Measurement], str | None]


def measure(baseline: SGLangClient, speculative: SGLangClient, sampling: Sampling,
            prompts: PromptSet, *, keep_going: PairRule | None = None,
            progress: Progress | None = None, simulated: bool = False,
            server_specs: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
            ) -> tuple[Measurement, Measurement]:
    """Warm up both, then passes in which every prompt is sent to both servers in turn.

    Which server goes first alternates from prompt to prompt and from pass to pass, so neither
    always follows the other's request. Both caches are flushed before each pass. More passes
    follow (up to max_repeats) while keep_going gives a reason.
    """
    if not prompts.texts:
        raise ValueError("no prompts to measure")
    clients = {"baseline": baseline, "speculative": speculative}
    params = sampling.params
    for i in range(sampling.warmup):
        for client in clients.values():
            client.generate(prompts.texts[i % len(prompts.texts)], params, stream=True)
    samples: dict[str, list[RequestSample]] = {"baseline": [], "speculative": []}

    def one_pass(repeat: int) -> None:
        for client in clients.values():
            client.flush_cache()
        for i, (prompt, text) in enumerate(prompts.sent()):
            order = ("baseline", "speculative") if (i + repeat) % 2 else (
                "speculative", "baseline")
            for config in order:
                gen = clients[config].generate(text, params, stream=True)
                samples[config].append(sample_of(gen, prompt, repeat))
        if progress is not None:
            progress(f"interleaved repeat {repeat}: {len(prompts.texts)} prompts on both servers")

    def reason() -> str | None:
        assert keep_going is not None
        base, spec = (_built(c, clients[c], sampling, prompts, samples[c], "")
                      for c in ("baseline", "speculative"))
        return keep_going(base, spec)

    stop_reason = repeated(sampling, one_pass, None if keep_going is None else reason,
                           "interleaved repeats", "interleaved", progress)
    return (_built("baseline", baseline, sampling, prompts, samples["baseline"], stop_reason,
                   simulated, server_specs[0]),
            _built("speculative", speculative, sampling, prompts, samples["speculative"],
                   stop_reason, simulated, server_specs[1]))


def _built(config: str, client: SGLangClient, sampling: Sampling, prompts: PromptSet,
           samples: list[RequestSample], stop_reason: str, simulated: bool = False,
           server_spec: dict[str, Any] | None = None) -> Measurement:
    return build_measurement(config=config, url=client.base_url, template=prompts.template,
                             sampling=sampling, samples=samples, stop_reason=stop_reason,
                             simulated=simulated, server_spec=server_spec)
