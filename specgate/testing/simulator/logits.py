"""The simulated target's next-token scores: which tokens it answers, and the logprobs it reports.

Real SGLang in bf16 answers greedily with the target's best token, but the best two are
sometimes so close that the kernels of one forward (a decode of one sequence, a batch, a prefill,
a speculative verify) and another round them differently: the speculative server then answers
another token at that position, and from there another text. Real SGLang 0.5.17 serving
SmolLM2-135M did so on 32 of 42 prompts, every one at a near-tie of the target's own logits
(benchmarks/results/2026-12-07-smollm2-135m-instruct-parity/cpu: the target's logits computed
on a CPU at each place the committed answers part).

The simulator keeps that shape. At each position the target has a few candidate tokens with
clean logprobs, drawn from a hash of the whole context (so the text after a divergence is
another text): most positions have a clear winner, a few a near-tie. Each kind of forward adds
its own small rounding noise to every candidate; a server running another dtype or a quantized
target adds a fixed perturbation of its own on top; another target folder is another model.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import statistics
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

# Answer tokens are the ids the simulator's detokenizer knows (model.TOKEN_ID_BASE onwards).
ANSWER_TOKEN_BASE = 1000
ANSWER_TOKENS = 50  # the size of model._WORDS
# Prompt words get ids far from the answer tokens.
PROMPT_TOKEN_BASE = 10_000
PROMPT_TOKENS = 1_000_000
CANDIDATES = 8
# A logprob for a token that is not among the candidates (a prompt word scored as next token).
FAR_LOGPROB = -14.0

# Rounding noise of one forward kind (standard deviation, nats): about what bf16 leaves between
# a decode and a prefill of the same text.
ROUNDING_SD = 0.02
# The gap between the best two tokens is exponential with this mean (nats): measured along
# SmolLM2-135M's own answers (7,530 positions, fp32), 3 % of gaps are under 0.1 nats, 9 % under
# 0.3, 24 % under 1, and the median is 2.7.
MEAN_GAP = 4.0
# The fixed perturbation a server adds when it computes in another dtype or quantizes the
# target (standard deviation per candidate, nats).
PERTURBATION_SD: dict[str, float] = {"dtype": 0.08, "quantization": 0.5, "kv_cache_dtype": 0.05}
# Past this clean gap no noise can reorder the best two (noise is drawn only below it).
_SAFE_GAP = 8.0 * (ROUNDING_SD + max(PERTURBATION_SD.values()))

# The speculative server's target prefill also keeps the hidden states the drafter reads: a
# forward of its own kind ("prefill-eagle"), which real SGLang rounds otherwise than the
# baseline's prefill (both first-token divergences measured were there).
Forward = Literal["decode", "decode-batch", "prefill", "prefill-eagle", "verify"]
_NORMAL = statistics.NormalDist()
_WORD = re.compile(r"\w+|[^\w\s]")


@dataclasses.dataclass(frozen=True)
class Target:
    """What a server computes with: the target folder's identity and the settings that change
    its numbers (a perturbation name, empty for the folder's own dtype unquantized)."""

    seed: bytes
    perturbation: str = ""
    perturbation_sd: float = 0.0

    @classmethod
    def of(cls, config: Mapping[str, Any], args: Mapping[str, Any]) -> Target:
        """From the target's config.json and the server's resolved arguments."""
        seed = hashlib.blake2b(json.dumps(dict(config), sort_keys=True, default=str).encode(),
                               digest_size=16).digest()
        own = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
        parts: list[str] = []
        sd = 0.0
        dtype = str(args.get("dtype") or "auto")
        if dtype not in ("auto", own) and not {dtype, own} <= {"bfloat16", "bf16"}:
            parts.append(f"dtype={dtype}")
            sd = max(sd, PERTURBATION_SD["dtype"])
        if args.get("quantization"):
            parts.append(f"quantization={args['quantization']}")
            sd = max(sd, PERTURBATION_SD["quantization"])
        kv = str(args.get("kv_cache_dtype") or "auto")
        if kv not in ("auto", own):
            parts.append(f"kv_cache_dtype={kv}")
            sd = max(sd, PERTURBATION_SD["kv_cache_dtype"])
        return cls(seed, ",".join(parts), sd)


@dataclasses.dataclass(frozen=True)
class Scores:
    """The target's candidates at one position, best first by their clean logprobs."""

    tokens: tuple[int, ...]
    clean: tuple[float, ...]
    key: bytes

    def logprobs(self, target: Target, forward: Forward) -> tuple[float, ...]:
        """The logprobs one kind of forward reports on this server."""
        if self.clean[0] - self.clean[1] > _SAFE_GAP:
            return self.clean
        noise = _normals(self.key + forward.encode(), len(self.tokens))
        values = [c + ROUNDING_SD * n for c, n in zip(self.clean, noise, strict=True)]
        if target.perturbation:
            shift = _normals(self.key + b"|" + target.perturbation.encode(), len(self.tokens))
            values = [v + target.perturbation_sd * s for v, s in zip(values, shift, strict=True)]
        return tuple(values)

    def best(self, target: Target, forward: Forward) -> int:
        values = self.logprobs(target, forward)
        return self.tokens[max(range(len(values)), key=values.__getitem__)]


def tokenize(text: str) -> tuple[int, ...]:
    """The simulator's tokenizer: one id per word or punctuation mark (as many as
    model.count_prompt_tokens counts)."""
    return tuple(PROMPT_TOKEN_BASE + int.from_bytes(
        hashlib.blake2b(word.encode(), digest_size=4).digest(), "big") % PROMPT_TOKENS
        for word in _WORD.findall(text)) or (PROMPT_TOKEN_BASE,)


def walk(target: Target, ids: Sequence[int]) -> Iterator[Scores]:
    """The scores at every position after the first: the distribution of ids[i] given ids[:i],
    for i = 1 … len(ids) (the last one is the next token's)."""
    state = target.seed
    for token in ids:
        state = _advance(state, token)
        yield _scores(state)


def answer(target: Target, prompt: Sequence[int], length: int, forward: Forward,
           first: Forward = "prefill") -> tuple[int, ...]:
    """A greedy answer of `length` tokens: the first from the prompt's prefill, the rest from
    `forward` (a decode, a batch of decodes or a speculative verify)."""
    out: list[int] = []
    state = target.seed
    for token in prompt:
        state = _advance(state, token)
    for i in range(length):
        scores = _scores(state)
        token = scores.best(target, first if i == 0 else forward)
        out.append(token)
        state = _advance(state, token)
    return tuple(out)


def _advance(state: bytes, token: int) -> bytes:
    return hashlib.blake2b(state + token.to_bytes(8, "big", signed=True), digest_size=32).digest()


def _scores(state: bytes) -> Scores:
    digest = hashlib.blake2b(state + b"scores", digest_size=64).digest()
    tokens: list[int] = []
    for byte in digest[:24]:
        token = ANSWER_TOKEN_BASE + byte % ANSWER_TOKENS
        if token not in tokens:
            tokens.append(token)
        if len(tokens) == CANDIDATES:
            break
    u = [int.from_bytes(digest[24 + 2 * i:26 + 2 * i], "big") / 65536.0 for i in range(16)]
    top = -(0.05 + 1.5 * u[0])
    first_gap = -MEAN_GAP * math.log1p(-u[1])
    clean = [top, top - first_gap]
    for i in range(2, len(tokens)):
        clean.append(clean[-1] - (0.2 + 1.2 * u[2 + i]))
    return Scores(tuple(tokens), tuple(clean), state)


def _normals(key: bytes, n: int) -> list[float]:
    digest = hashlib.blake2b(key, digest_size=2 * n).digest()
    return [_NORMAL.inv_cdf((int.from_bytes(digest[2 * i:2 * i + 2], "big") + 0.5) / 65536.0)
            for i in range(n)]


def logprob_of(scores: Scores, target: Target, forward: Forward, token: int) -> float:
    """The logprob a forward reports for `token` at this position (FAR_LOGPROB off the list)."""
    values = scores.logprobs(target, forward)
    for candidate, value in zip(scores.tokens, values, strict=True):
        if candidate == token:
            return value
    return FAR_LOGPROB


def top(scores: Scores, target: Target, forward: Forward, k: int) -> list[tuple[float, int]]:
    """The k best (logprob, token) a forward reports here, best first."""
    values = scores.logprobs(target, forward)
    ranked = sorted(zip(values, scores.tokens, strict=True), key=lambda p: (-p[0], p[1]))
    return ranked[:k]
