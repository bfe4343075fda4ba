"""The simulator's model answering in-process: what a client would time against a simulator
launch, without a server, a socket or a clock, so many launches can be measured in seconds."""

from __future__ import annotations

import math
import random
from typing import Any

from specgate.serving.client import Generation, SGLangClient
from specgate.testing.simulator import model


class OfflineClient(SGLangClient):
    """A client whose server is one simulator launch, answered from model.plan_request and
    model.message_schedule as the simulator's HTTP server would stream it.

    `params` are the launch's (model.at_speed for its speed factor); `noise` is a per-request
    log-normal factor on the decode time (the request-to-request spread of a real server),
    drawn from `seed`. The prefix cache and /flush_cache behave as the simulator's.
    """

    def __init__(self, params: model.SimParams, *, noise: float = 0.0, seed: str = "",
                 eos_token_id: int = 2) -> None:
        super().__init__("http://simulator.offline")
        self.params = params
        self.noise = noise
        self.eos_token_id = eos_token_id
        self._rng = random.Random(seed)
        self._cache: set[str] = set()

    def flush_cache(self, *, attempts: int = 10, wait_s: float = 0.5) -> None:
        self._cache.clear()

    def server_info(self) -> dict[str, Any]:
        return {"simulated": True, "version": model.__name__}

    def generate(self, text: str, sampling_params: dict[str, Any], *,
                 stream: bool = True) -> Generation:
        max_new = int(sampling_params.get("max_new_tokens", 128))
        plan = model.plan_request(self.params, text, max_new, eos_token_id=self.eos_token_id)
        cached = plan.prompt_tokens - 1 if text in self._cache else 0
        self._cache.add(text)
        prefill_s = model.prefill_ms(self.params.timing, plan.prompt_tokens - cached) / 1000.0
        factor = math.exp(self._rng.gauss(0.0, self.noise)) if self.noise > 0 else 1.0
        schedule = model.message_schedule(plan, self.params.timing.first_merge)
        first_offset = schedule[0][0]
        arrivals = tuple(prefill_s + (first_offset + (offset - first_offset) * factor) / 1000.0
                         for offset, _ in schedule)
        meta: dict[str, Any] = {
            "prompt_tokens": plan.prompt_tokens, "completion_tokens": plan.completion_tokens,
            "cached_tokens": cached, "finish_reason": plan.finish_reason,
            "e2e_latency": arrivals[-1]}
        if self.params.speculative and plan.verify_ct > 0:
            meta["spec_verify_ct"] = plan.verify_ct
            meta["spec_correct_drafts_histogram"] = list(plan.histogram)
        return Generation(model.detokenize(plan.output_ids), meta, arrivals[0], arrivals[-1],
                          len(schedule), first_tokens=schedule[0][1], arrivals_s=arrivals,
                          output_ids=plan.output_ids)
