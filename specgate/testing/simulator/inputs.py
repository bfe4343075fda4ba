"""Reading a POST /generate body the way SGLang validates it."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from specgate.testing.simulator import model

_DEFAULT_MAX_NEW_TOKENS = 128


class RequestError(Exception):
    """A request SGLang would refuse, with its status code."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclasses.dataclass(frozen=True)
class Job:
    prompt: str | list[int]
    max_new_tokens: int
    ignore_eos: bool
    text_seed: str | None
    stream: bool
    # SGLang's logprob request fields (top level of the body)
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    return_text_in_logprobs: bool = False


def parse_generate(body: Any) -> tuple[list[Job], bool]:
    """Requests in a /generate body, and whether the body was a batch (list input)."""
    if not isinstance(body, dict):
        raise RequestError(400, "The request body must be a JSON object.")
    text: Any = body.get("text")
    ids: Any = body.get("input_ids")
    if text is None and ids is None:
        if body.get("input_embeds") is not None:
            raise RequestError(400, "input_embeds are not supported by the simulator.")
        raise RequestError(400, "Either text, input_ids or input_embeds should be provided.")
    if text is not None and ids is not None:
        raise RequestError(400, "Either text or input_ids should be provided, not both.")
    batch = isinstance(text, list) or (isinstance(ids, list) and bool(ids)
                                       and isinstance(ids[0], list))
    prompts: list[str | list[int]]
    if text is not None:
        prompts = list(text) if isinstance(text, list) else [text]
        if not all(isinstance(p, str) for p in prompts):
            raise RequestError(400, "text must be a string or a list of strings.")
    else:
        prompts = list(ids) if batch else [ids]
        if not all(isinstance(p, list) and all(isinstance(t, int) for t in p) for p in prompts):
            raise RequestError(400, "input_ids must be a list of ints or a list of lists of ints.")
    sampling = body.get("sampling_params") or {}
    samplings = sampling if isinstance(sampling, list) else [sampling] * len(prompts)
    if len(samplings) != len(prompts) or not all(isinstance(s, dict) for s in samplings):
        raise RequestError(400, "sampling_params must be an object or one object per prompt.")
    stream = bool(body.get("stream", False))
    if stream and batch:
        raise RequestError(400, "The simulator streams single requests only.")
    jobs = []
    for i, (prompt, params) in enumerate(zip(prompts, samplings, strict=True)):
        jobs.append(dataclasses.replace(_job(prompt, params, stream),
                                        **_logprob_fields(body, i, len(prompts))))
    return jobs, batch


def _logprob_fields(body: dict[str, Any], index: int, count: int) -> dict[str, Any]:
    """The logprob fields of request `index` of `count` (SGLang takes each as one value for
    every request of the body, or a list of one per request)."""
    picked: dict[str, Any] = {}
    for name, default in (("return_logprob", False), ("logprob_start_len", -1),
                          ("top_logprobs_num", 0), ("return_text_in_logprobs", False)):
        value = body.get(name, default)
        if isinstance(value, list):
            if len(value) != count:
                raise RequestError(400, f"{name} has {len(value)} values for {count} requests.")
            value = value[index]
        picked[name] = value
    start, top = picked["logprob_start_len"], picked["top_logprobs_num"]
    if not isinstance(start, int) or isinstance(start, bool) or start < -1:
        raise RequestError(400, f"logprob_start_len must be an int >= -1, got {start!r}.")
    if not isinstance(top, int) or isinstance(top, bool) or top < 0:
        raise RequestError(400, f"top_logprobs_num must be a non-negative int, got {top!r}.")
    return {"return_logprob": bool(picked["return_logprob"]), "logprob_start_len": start,
            "top_logprobs_num": top,
            "return_text_in_logprobs": bool(picked["return_text_in_logprobs"])}


def _job(prompt: str | list[int], params: dict[str, Any], stream: bool) -> Job:
    max_new = params.get("max_new_tokens", _DEFAULT_MAX_NEW_TOKENS)
    min_new = params.get("min_new_tokens", 0)
    temperature = params.get("temperature", 1.0)
    if not isinstance(max_new, int) or max_new < 0:
        raise RequestError(400, f"max_new_tokens must be a non-negative int, got {max_new!r}.")
    if not isinstance(min_new, int) or not 0 <= min_new <= max_new:
        raise RequestError(
            400, f"min_new_tokens must be in [0, max_new_tokens], got {min_new!r}."
        )
    if not isinstance(temperature, int | float) or temperature < 0:
        raise RequestError(400, f"temperature must be non-negative, got {temperature!r}.")
    greedy = temperature == 0 or params.get("top_k") == 1
    seed = params.get("sampling_seed")
    if greedy:
        text_seed = None
    elif seed is not None:
        text_seed = f"{model.prompt_key(prompt)}\0{seed}"
    else:
        text_seed = uuid.uuid4().hex
    return Job(
        prompt=prompt,
        max_new_tokens=max_new,
        ignore_eos=bool(params.get("ignore_eos", False)),
        text_seed=text_seed,
        stream=stream,
    )
