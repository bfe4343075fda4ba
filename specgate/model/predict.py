"""Accept length predicted from per-position acceptance, for chain (topk = 1) speculation.

A chain of `steps` draft tokens is verified left to right; the target keeps the longest correct
prefix and adds one token of its own (the bonus). With p_j the probability that draft position j
is correct given positions 1..j-1 were (the conditional acceptance `specgate eval` reports per
step), the expected number of tokens one verify pass yields is

    tau(steps) = 1 + sum_{k=1..steps} prod_{j<=k} p_j

SGLang reports per request `spec_accept_length = completion_tokens / spec_verify_ct`; the first
completion token comes from prefill, not from a verify pass, so over n tokens that figure is about
tau · n / (n − 1) (`request_accept_length`). Pooled over requests (Σ completion / Σ verify, what
specgate measures), n is the mean completion count: Σ(n_i − 1) / tau verify passes for Σ n_i
tokens gives tau · n̄ / (n̄ − 1) exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np


def accept_length(conditional: Sequence[float], steps: int) -> float:
    """tau for a chain of `steps` draft tokens from conditional acceptance p_1..p_steps."""
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    p = np.asarray(conditional, dtype=np.float64)
    if p.ndim != 1:
        raise ValueError("conditional acceptance must be a 1-D sequence")
    if steps > p.size:
        raise ValueError(f"{steps} draft steps need conditional acceptance for {steps} "
                         f"positions; only {p.size} given (evaluate with --steps {steps})")
    if p.size and (not np.all(np.isfinite(p)) or p.min() < 0.0 or p.max() > 1.0):
        raise ValueError(f"conditional acceptance must lie in [0, 1], got {p.tolist()}")
    return float(1.0 + np.cumprod(p[:steps]).sum())


def accept_lengths(conditional: Sequence[float], steps: Iterable[int]) -> dict[int, float]:
    """tau for several chain depths (each at most len(conditional))."""
    return {s: accept_length(conditional, s) for s in steps}


def conditional_from_chain(chain_accept: Sequence[float]) -> list[float]:
    """p_j from P(positions 1..j all correct), as an evaluation's chain histogram gives them."""
    c = np.asarray(chain_accept, dtype=np.float64)
    if c.size and (c.min() < 0.0 or c.max() > 1.0 or np.any(np.diff(c) > 1e-12)):
        raise ValueError(f"chain acceptance must be non-increasing in [0, 1], got {c.tolist()}")
    prev = np.concatenate([[1.0], c[:-1]])
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(prev > 0, c / np.where(prev > 0, prev, 1.0), 0.0)
    return [float(x) for x in out]


def request_accept_length(tau: float, completion_tokens: float) -> float:
    """SGLang's per-request figure completion_tokens / verify passes, for a per-verify tau.

    completion_tokens may be a mean over requests (see the module's docstring).
    """
    if tau < 1.0:
        raise ValueError(f"an accept length counts the bonus token, so it is >= 1; got {tau}")
    if not completion_tokens > 1.0:
        raise ValueError("a request of at most 1 token has no verify pass "
                         f"(completion tokens {completion_tokens})")
    return tau * completion_tokens / (completion_tokens - 1)
