"""The simulator's timing and acceptance model: pure functions shared by server and tests."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import random
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

# specgate_sim.json in the TARGET dir (all optional, milliseconds unless named _s):
#   decode_ms, prefill_base_ms, prefill_ms_per_token, verify_ms (whole verify cost) or
#   verify_base_ms + verify_ms_per_draft_token, draft_step_ms, start_delay_s,
#   health_generate_s, first_merge (decode steps merged into the first streamed message),
#   batch_ms_per_token, draft_batch_ms_per_token (what batching costs: see BATCHING below).
# specgate_sim.json in the DRAFT dir: acceptance = [a1, a2, ...] (conditional per depth) and
#   categories = {"name": {"keywords": [...], "multiplier": m}} (first keyword hit wins).
# Env overrides (win over files): SPECGATE_SIM_DECODE_MS, _PREFILL_BASE_MS,
#   _PREFILL_MS_PER_TOKEN, _VERIFY_MS, _VERIFY_MS_PER_DRAFT_TOKEN, _DRAFT_STEP_MS,
#   _START_DELAY_S, _HEALTH_GENERATE_S, _FIRST_MERGE, _BATCH_MS_PER_TOKEN,
#   _DRAFT_BATCH_MS_PER_TOKEN, SPECGATE_SIM_ACCEPTANCE="0.8,0.7".
SIM_FILE = "specgate_sim.json"

# Defaults are deliberately fast so the harness's own tests take seconds, and shaped like the
# Kimi story: a verify cycle costs ~1.6 target steps, so speculation pays only above AL ~1.6.
DEFAULT_DECODE_MS = 2.0
DEFAULT_PREFILL_BASE_MS = 1.0
DEFAULT_PREFILL_MS_PER_TOKEN = 0.01
DEFAULT_VERIFY_BASE_MS = 2.0
DEFAULT_VERIFY_MS_PER_DRAFT_TOKEN = 0.1
DEFAULT_DRAFT_STEP_MS = 0.3
# Real starts take 46-61 s (tiny model, one H200) and the harness reports progress first after
# 1 s: a default start must outlast that, or no test ever sees a progress report.
DEFAULT_START_DELAY_S = 1.6
# SGLang's /health_generate runs a one-token generation and polls for it once a second: 1.003 s
# on an idle H200.
DEFAULT_HEALTH_GENERATE_S = 1.0
# SGLang's tokenizer manager keeps only the newest of the outputs queued for a request
# (`out = state.out_list[-1]`), so the first streamed message can carry the prefill token plus
# the tokens of the next decode step(s). The simulator merges this many steps into it.
DEFAULT_FIRST_MERGE = 1
DEFAULT_ACCEPTANCE = (0.8, 0.7, 0.6, 0.5, 0.4)

# BATCHING. The server batches continuously, as SGLang's scheduler does: requests that arrive
# are prefilled together (one step, which holds up decoding), then join the running batch, and
# every step advances every running request at once: a decode step gives each one token, a
# speculative step runs num_steps draft forwards and one verify for all of them. A step's time
# grows with the tokens its forwards carry, linearly past those of one sequence:
#
#   decode step(b) = decode_ms + batch_ms_per_token × (b − 1)
#   verify(b)      = verify at one sequence + batch_ms_per_token × (b − 1) × num_draft_tokens
#   draft step(b)  = draft_step_ms + draft_batch_ms_per_token × (b − 1) × eagle_topk
#
# so a memory-bound decode step gets cheaper per sequence as b grows (its weights are read once
# for all), while verification multiplies every sequence's work by num_draft_tokens: the
# speed-up τ × decode step(b) / cycle(b) falls with b and crosses 1 where
# b = 1 + (τ·decode_ms − cycle(1)) / (num_draft_tokens·c + num_steps·topk·c_draft − τ·c)
# (crossover_batch). At b = 1 every figure is the unbatched one.
#
# The default slope is the shape SGLang's own published figures give for a dense target:
# EAGLE-3 on Llama-3.1-8B serves 2.36× the target alone at batch 1 (SGLang's docs, H100:
# 373.25 against 158.34 tok/s) and 1.38× at batch 64 (the EAGLE-3 paper, SGLang); with a
# (7, 1, 8) chain's accept length 3.9 and cycle 1.65 target steps (SpecForge's SpecBundle data),
# those two points give 0.36 % of a decode step per extra token (derived, not quoted, with the
# draft's own growth left out), i.e. a decode step 1.23 times longer at 64 sequences than at
# one. The draft's slope is taken at the same share of its own step. A mixture-of-experts
# target reads more experts as a forward carries more tokens, so its slope is far steeper; the
# demo profile's target sets one.
#
# Measured on an H200 (SGLang 0.5.17, Llama-3-8B shapes, Triton attention, chain of 3 steps and
# 4 draft tokens): the decode step grew 0.45 % of itself per extra sequence, within a quarter of
# this prior, but the verify cycle grew twice as fast as the prior makes it, so the default puts
# a drafter's crossover at a larger batch than a dense target shows; calibrate a deployment for
# its curve.
#
# Calibration: the figures a probe at several [bench] concurrency levels measures on real SGLang
# fit both slopes (calibrate.py: the baseline's per-request decode tok/s gives the decode step
# at each level, the speculative cycle time the verify-and-draft cost); write the fitted values
# into the target's specgate_sim.json, and the simulator reproduces that deployment's curve.
BATCH_SHARE_PER_TOKEN = 0.0036  # of one sequence's step, per extra token in the forward
DEFAULT_BATCH_MS_PER_TOKEN = BATCH_SHARE_PER_TOKEN * DEFAULT_DECODE_MS
DEFAULT_DRAFT_BATCH_MS_PER_TOKEN = BATCH_SHARE_PER_TOKEN * DEFAULT_DRAFT_STEP_MS

ENV_ACCEPTANCE = "SPECGATE_SIM_ACCEPTANCE"
ENV_TIMING = {
    "decode_ms": "SPECGATE_SIM_DECODE_MS",
    "prefill_base_ms": "SPECGATE_SIM_PREFILL_BASE_MS",
    "prefill_ms_per_token": "SPECGATE_SIM_PREFILL_MS_PER_TOKEN",
    "verify_ms": "SPECGATE_SIM_VERIFY_MS",
    "verify_ms_per_draft_token": "SPECGATE_SIM_VERIFY_MS_PER_DRAFT_TOKEN",
    "draft_step_ms": "SPECGATE_SIM_DRAFT_STEP_MS",
    "start_delay_s": "SPECGATE_SIM_START_DELAY_S",
    "health_generate_s": "SPECGATE_SIM_HEALTH_GENERATE_S",
    "first_merge": "SPECGATE_SIM_FIRST_MERGE",
    "batch_ms_per_token": "SPECGATE_SIM_BATCH_MS_PER_TOKEN",
    "draft_batch_ms_per_token": "SPECGATE_SIM_DRAFT_BATCH_MS_PER_TOKEN",
}

# SGLang's auto choice of (steps, topk, draft tokens) by target architecture (facts §1.3).
_LLAMA_LIKE = ("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1ModelForCausalLM")

_WORDS = (
    "the model drafts tokens and the target verifies them in one pass so that accepted "
    "prefixes cost a single step while rejected ones cost a little more than plain decoding "
    "speed depends on how often the draft agrees with the target and on the cycle time"
).split()
TOKEN_ID_BASE = 1000


@dataclasses.dataclass(frozen=True)
class Timing:
    """Per-target costs in milliseconds (verify cost = base + per draft token × draft tokens),
    at one sequence; the batch_* slopes say what each further token in a forward adds."""

    decode_ms: float = DEFAULT_DECODE_MS
    prefill_base_ms: float = DEFAULT_PREFILL_BASE_MS
    prefill_ms_per_token: float = DEFAULT_PREFILL_MS_PER_TOKEN
    verify_base_ms: float = DEFAULT_VERIFY_BASE_MS
    verify_ms_per_draft_token: float = DEFAULT_VERIFY_MS_PER_DRAFT_TOKEN
    draft_step_ms: float = DEFAULT_DRAFT_STEP_MS
    start_delay_s: float = DEFAULT_START_DELAY_S
    health_generate_s: float = DEFAULT_HEALTH_GENERATE_S
    first_merge: int = DEFAULT_FIRST_MERGE
    batch_ms_per_token: float = DEFAULT_BATCH_MS_PER_TOKEN
    draft_batch_ms_per_token: float = DEFAULT_DRAFT_BATCH_MS_PER_TOKEN


@dataclasses.dataclass(frozen=True)
class Category:
    """Prompts containing any keyword (case-insensitive) get acceptance × multiplier."""

    name: str
    keywords: tuple[str, ...]
    multiplier: float


@dataclasses.dataclass(frozen=True)
class Drafter:
    """Conditional acceptance per draft position: a_k = P(position k accepted | 1..k-1 were)."""

    acceptance: tuple[float, ...] = DEFAULT_ACCEPTANCE
    categories: tuple[Category, ...] = ()


@dataclasses.dataclass(frozen=True)
class SimParams:
    """Everything the model needs: timing, drafter, and the resolved speculative settings."""

    timing: Timing = Timing()
    drafter: Drafter = Drafter()
    speculative: bool = False
    num_steps: int = 3
    eagle_topk: int = 1
    num_draft_tokens: int = 4


@dataclasses.dataclass(frozen=True)
class Truth:
    """What a perfect measurement of the simulator would find with `batch` requests decoding
    together (per-request decode tok/s; 1: a single stream)."""

    baseline_tps: float
    cycle_ms: float
    tau: float
    spec_tps: float
    breakeven_accept_length: float
    speedup: float
    acceptance: tuple[float, ...]
    batch: int = 1

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class RequestPlan:
    """One request's deterministic outcome: tokens, how they arrive, and the spec counters."""

    prompt_tokens: int
    completion_tokens: int
    finish_reason: dict[str, Any]
    output_ids: tuple[int, ...]
    # Tokens released per event after the prefill token: one per decode step or verify cycle.
    tokens_per_event: tuple[int, ...]
    event_ms: float
    verify_ct: int
    num_correct_drafts: int
    histogram: tuple[int, ...]


def auto_spec_settings(architectures: Sequence[str]) -> tuple[int, int, int]:
    """SGLang's (num_steps, eagle_topk, num_draft_tokens) when none of the three is given."""
    arch = architectures[0] if architectures else ""
    if arch in _LLAMA_LIKE:
        return (5, 4, 8)
    return (3, 1, 4)


def decode_step_ms(timing: Timing, batch: int = 1) -> float:
    """One decode step of `batch` sequences (see BATCHING)."""
    return timing.decode_ms + timing.batch_ms_per_token * max(0, batch - 1)


def cycle_ms(params: SimParams, batch: int = 1) -> float:
    """One speculative cycle of `batch` sequences: num_steps draft forwards plus one target
    verify (see BATCHING)."""
    t = params.timing
    extra = max(0, batch - 1)
    verify = (t.verify_base_ms + t.verify_ms_per_draft_token * params.num_draft_tokens
              + t.batch_ms_per_token * extra * params.num_draft_tokens)
    draft = t.draft_step_ms + t.draft_batch_ms_per_token * extra * params.eagle_topk
    return verify + draft * params.num_steps


def step_ms(params: SimParams, batch: int) -> float:
    """The time of one scheduler step with `batch` sequences running on this server."""
    return cycle_ms(params, batch) if params.speculative else decode_step_ms(params.timing, batch)


def crossover_batch(params: SimParams, prompt: str = "") -> float | None:
    """The batch size at which the speed-up falls to 1 (a real number: the steps are linear in
    the batch); None when it does not cross 1 going up from one sequence (it pays at every
    batch, or at none)."""
    t = params.timing
    tau = tau_of(effective_acceptance(params, prompt))
    gain = tau * t.decode_ms - cycle_ms(params)  # the speed-up's margin at one sequence
    slope = (params.num_draft_tokens * t.batch_ms_per_token
             + params.num_steps * params.eagle_topk * t.draft_batch_ms_per_token
             - tau * t.batch_ms_per_token)
    if gain <= 0 or slope <= 0:
        return None
    return 1.0 + gain / slope


def effective_acceptance(params: SimParams, prompt: str = "") -> tuple[float, ...]:
    """Conditional acceptance per reachable depth, after category and tree (topk) adjustments.

    Chain (topk 1): depth k uses a_k (the last a repeats when the list is shorter than
    num_steps). Tree (topk > 1), an approximation: each depth offers topk independent candidates,
    so a_k becomes 1 - (1 - a_k)^topk, and depth is capped at min(num_steps, num_draft_tokens - 1)
    because the tree cannot be deeper than the nodes it keeps.
    """
    base = params.drafter.acceptance or DEFAULT_ACCEPTANCE
    multiplier = category_multiplier(params.drafter, prompt)
    depth = params.num_steps
    if params.eagle_topk > 1:
        depth = min(depth, params.num_draft_tokens - 1)
    rates = []
    for k in range(depth):
        a = min(1.0, max(0.0, base[min(k, len(base) - 1)] * multiplier))
        if params.eagle_topk > 1:
            a = 1.0 - (1.0 - a) ** params.eagle_topk
        rates.append(a)
    return tuple(rates)


def category_multiplier(drafter: Drafter, prompt: str) -> float:
    lowered = prompt.lower()
    for category in drafter.categories:
        if any(word.lower() in lowered for word in category.keywords):
            return category.multiplier
    return 1.0


def tau_of(rates: Sequence[float]) -> float:
    """Expected tokens per verify cycle: 1 + Σ_k Π_{i≤k} a_i (the bonus token plus drafts)."""
    total, reach = 1.0, 1.0
    for a in rates:
        reach *= a
        total += reach
    return total


def truth(params: SimParams, prompt: str = "", batch: int = 1) -> Truth:
    """Exact model figures; `prompt` selects a category's multiplier when categories are set;
    `batch` sequences decode together on both servers."""
    baseline_tps = 1000.0 / decode_step_ms(params.timing, batch)
    cycle = cycle_ms(params, batch)
    rates = effective_acceptance(params, prompt)
    tau = tau_of(rates)
    spec_tps = 1000.0 * tau / cycle
    return Truth(
        baseline_tps=baseline_tps,
        cycle_ms=cycle,
        tau=tau,
        spec_tps=spec_tps,
        breakeven_accept_length=cycle * baseline_tps / 1000.0,
        speedup=spec_tps / baseline_tps,
        acceptance=rates,
        batch=batch,
    )


def count_prompt_tokens(prompt: str | Sequence[int]) -> int:
    if isinstance(prompt, str):
        return max(1, len(re.findall(r"\w+|[^\w\s]", prompt)))
    return max(1, len(prompt))


def prompt_key(prompt: str | Sequence[int]) -> str:
    return prompt if isinstance(prompt, str) else " ".join(str(i) for i in prompt)


def _unit(key: str, salt: str) -> float:
    digest = hashlib.blake2b(f"{salt}\0{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def output_length(key: str, max_new_tokens: int, *, ignore_eos: bool = False) -> int:
    """Deterministic length in [50 %, 100 %] of max_new_tokens; ~1 prompt in 6 hits the cap."""
    if max_new_tokens <= 1 or ignore_eos:
        return max(0, max_new_tokens)
    fraction = 0.5 + 0.6 * _unit(key, "length")
    return max(1, min(max_new_tokens, math.ceil(fraction * max_new_tokens)))


def plan_request(
    params: SimParams,
    prompt: str | Sequence[int],
    max_new_tokens: int,
    *,
    eos_token_id: int = 2,
    ignore_eos: bool = False,
    text_seed: str | None = None,
    answer: Callable[[int], tuple[int, ...]] | None = None,
) -> RequestPlan:
    """The whole request, decided up front so the server only has to keep the deadlines.

    Acceptance uses per-depth error diffusion instead of Bernoulli draws: each depth k keeps an
    accumulator e_k that starts at a per-request phase u_k in [0, 1); whenever a cycle reaches
    depth k it adds a_k, accepts if e_k ≥ 1 (then subtracts 1) and otherwise stops the cycle.
    Accepts at depth k then equal floor(u_k + a_k × reaches) — off from the mean by less than one
    per request and unbiased over the phase — so tau is matched within a few tenths of a percent
    over a few hundred cycles, while the pattern still varies from cycle to cycle.

    answer(n): the answer's first n token ids (the server's target, logits.py); without it, a
    text drawn from the prompt alone.
    """
    key = prompt_key(prompt)
    natural = output_length(key, max_new_tokens, ignore_eos=ignore_eos)
    rng = random.Random(text_seed if text_seed is not None else key)
    # Drawn up to the cap so every length is a prefix of the same text.
    all_ids = [TOKEN_ID_BASE + rng.randrange(len(_WORDS)) for _ in range(max(0, max_new_tokens))]
    per_event: list[int] = [1] * max(0, natural - 1)
    histogram: list[int] = []
    correct = 0
    if params.speculative and natural > 1:
        per_event, histogram, correct = _spec_cycles(
            params, key, prompt if isinstance(prompt, str) else "", natural - 1,
            max_new_tokens - 1,
        )
    length = min(natural, 1) + sum(per_event)
    if length < max_new_tokens:
        finish: dict[str, Any] = {"type": "stop", "matched": eos_token_id}
    else:
        finish = {"type": "length", "length": max_new_tokens}
    return RequestPlan(
        prompt_tokens=count_prompt_tokens(prompt),
        completion_tokens=length,
        finish_reason=finish,
        output_ids=answer(length) if answer is not None and text_seed is None
        else tuple(all_ids[:length]),
        tokens_per_event=tuple(per_event),
        event_ms=cycle_ms(params) if params.speculative else params.timing.decode_ms,
        verify_ct=len(per_event) if params.speculative else 0,
        num_correct_drafts=correct,
        histogram=tuple(histogram),
    )


def _spec_cycles(
    params: SimParams, key: str, text: str, wanted: int, budget: int
) -> tuple[list[int], list[int], int]:
    """Verify cycles until `wanted` decode tokens are out, never past `budget` (the cap).

    The answer is the target's whatever the drafts: a natural stop ends the answer at the EOS
    even when the cycle that reached it accepted drafts beyond it (SGLang drops them), so both
    servers' answers to a prompt have one length.
    """
    rates = effective_acceptance(params, text)
    errors = [_unit(key, f"phase{k}") for k in range(len(rates))]
    histogram = [0] * (len(rates) + 1)
    per_cycle: list[int] = []
    correct, released_total = 0, 0
    while released_total < wanted:
        accepted = 0
        for k, a in enumerate(rates):
            errors[k] += a
            if errors[k] < 1.0:
                break
            errors[k] -= 1.0
            accepted += 1
        released = min(accepted + 1, budget - released_total, wanted - released_total)
        per_cycle.append(released)
        correct += released - 1
        histogram[released - 1] += 1
        released_total += released
    return per_cycle, histogram, correct


def expected_totals(
    params: SimParams, prompts: Sequence[str | Sequence[int]], max_new_tokens: int
) -> tuple[int, int]:
    """(Σ completion_tokens, Σ spec_verify_ct) the simulator will report for greedy requests."""
    plans = [plan_request(params, prompt, max_new_tokens) for prompt in prompts]
    return sum(p.completion_tokens for p in plans), sum(p.verify_ct for p in plans)


def message_events(plan: RequestPlan, first_merge: int) -> list[tuple[int, int]]:
    """Each streamed message as (the event it waits for, cumulative completion tokens).

    Event 0 is the prefill's token, event k the k-th decode step or verify cycle; the rules are
    message_schedule's, in events rather than milliseconds (the batching scheduler decides when
    each event happens).
    """
    released = min(1, plan.completion_tokens)
    events = [(0, released)]
    for index, tokens in enumerate(plan.tokens_per_event, 1):
        released += tokens
        events.append((index, released))
    return events[min(max(0, first_merge), len(events) - 1):]


def message_schedule(plan: RequestPlan, first_merge: int) -> list[tuple[float, int]]:
    """Each streamed message as (ms after the prefill token, cumulative completion tokens).

    Without merging the prefill token goes out alone and every decode step or verify cycle adds
    one message. SGLang's tokenizer manager answers a request with the newest of its queued
    outputs only, so when the first output waits behind the response start, the next step's
    output overtakes it: the first `first_merge` steps are folded into the first message, which
    then leaves when the last of them is done. A request shorter than that is one message.
    """
    released = min(1, plan.completion_tokens)
    steps = [(0.0, released)]
    for index, tokens in enumerate(plan.tokens_per_event, 1):
        released += tokens
        steps.append((index * plan.event_ms, released))
    return steps[min(max(0, first_merge), len(steps) - 1):]


# --- launch to launch ----------------------------------------------------------------------

# Real SGLang started again runs at another speed (the baseline of one target on one H200:
# 667 to 868 tok/s over five starts). With SPECGATE_SIM_LAUNCH_SPREAD = σ each launch draws a
# speed factor exp(N(0, σ²)) that divides every per-step cost (decode, prefill, verify, draft
# step); SPECGATE_SIM_LAUNCH_SEED makes the draws repeatable (with a truth log, the k-th
# launch logged in it draws from the seed and k, so every launch differs; without one, from the
# seed and the server's role). Unset or 0: every launch runs at speed 1.
ENV_LAUNCH_SPREAD = "SPECGATE_SIM_LAUNCH_SPREAD"
ENV_LAUNCH_SEED = "SPECGATE_SIM_LAUNCH_SEED"


def launch_spread(env: Mapping[str, str]) -> float:
    text = env.get(ENV_LAUNCH_SPREAD, "").strip()
    if not text:
        return 0.0
    try:
        spread = float(text)
    except ValueError:
        spread = math.nan
    if not math.isfinite(spread) or spread < 0:
        raise ValueError(f"{ENV_LAUNCH_SPREAD} must be a number >= 0 (the standard deviation of "
                         f"ln speed between launches), found {text!r}")
    return spread


def launch_speed(spread: float, seed: str | None) -> float:
    """One launch's speed factor, exp(N(0, spread²)); from the seed text when given."""
    if spread <= 0:
        return 1.0
    rng = random.Random(seed) if seed is not None else random.Random()
    return math.exp(rng.gauss(0.0, spread))


def at_speed(params: SimParams, speed: float) -> SimParams:
    """The parameters of a launch running `speed` times as fast: every per-step cost divided by
    it (start-up and the health check are not decode work and stay)."""
    if speed == 1.0:
        return params
    t = params.timing
    return dataclasses.replace(params, timing=dataclasses.replace(
        t, decode_ms=t.decode_ms / speed, prefill_base_ms=t.prefill_base_ms / speed,
        prefill_ms_per_token=t.prefill_ms_per_token / speed,
        verify_base_ms=t.verify_base_ms / speed,
        verify_ms_per_draft_token=t.verify_ms_per_draft_token / speed,
        draft_step_ms=t.draft_step_ms / speed,
        batch_ms_per_token=t.batch_ms_per_token / speed,
        draft_batch_ms_per_token=t.draft_batch_ms_per_token / speed))


@dataclasses.dataclass(frozen=True)
class LaunchTruth:
    """One launch as the truth log records it: its number in the log, role and speed factor."""

    launch: int
    role: str  # baseline | speculative
    speed: float
    spread: float
    seed: str | None
    pid: int
    # time.monotonic() when the launch began, and when it answered ready (its "ready" record).
    t_started: float = 0.0
    t_ready: float | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# --- the truth log ------------------------------------------------------------------------

ENV_TRUTH = "SPECGATE_SIM_TRUTH"


@dataclasses.dataclass(frozen=True)
class RequestTruth:
    """One /generate request as the simulator served it, timed on its own clock.

    Times are time.monotonic() seconds in the simulator process (CLOCK_MONOTONIC, the clock the
    harness's time.monotonic() and time.perf_counter() read on Linux), taken just before the
    message's bytes were written. In buffer_proxy mode t_first_sent/t_final_sent are when the
    server produced the messages and t_delivered when the proxy let them all go. t_first_due and
    t_final_due are when the scheduler's step that released the message ended (the timing model
    kept exactly); a message goes out then or, on a busy machine, later.
    """

    rid: str
    stream: bool
    outcome: str  # finished | stalled | dropped
    fault: str
    t_received: float
    t_first_sent: float | None
    t_final_sent: float | None
    t_delivered: float | None
    prompt_tokens: int
    completion_tokens: int
    first_message_tokens: int
    messages: int
    verify_ct: int
    accepted_drafts: int
    finish_reason: str | None
    # Sequences in the running batch, averaged over this request's decode steps (the scheduler's
    # batch, not the client's count); None when it had none.
    batch: float | None = None
    t_first_due: float | None = None
    t_final_due: float | None = None

    @property
    def decode_tokens(self) -> int:
        return self.completion_tokens - self.first_message_tokens

    @property
    def decode_s(self) -> float | None:
        if self.t_first_sent is None or self.t_final_sent is None:
            return None
        return self.t_final_sent - self.t_first_sent

    @property
    def decode_tps(self) -> float | None:
        """Tokens after the first message over the time from the first to the final message."""
        seconds = self.decode_s
        if seconds is None or seconds <= 0 or self.decode_tokens <= 0:
            return None
        return self.decode_tokens / seconds

    @property
    def due_decode_s(self) -> float | None:
        """The decode window the scheduler kept: from the first message's step to the final's."""
        if self.t_first_due is None or self.t_final_due is None:
            return None
        return self.t_final_due - self.t_first_due

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "decode_tokens": self.decode_tokens,
                "decode_tps": self.decode_tps}


def read_truth(path: str | os.PathLike[str]) -> list[RequestTruth]:
    """The request records of a truth file (JSON lines), oldest first; derived keys are
    recomputed; the launch and ready records (read_launches) are left out."""
    names = {field.name for field in dataclasses.fields(RequestTruth)}
    records = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            data = json.loads(line)
            if "launch" not in data and "ready" not in data:
                records.append(RequestTruth(**{k: v for k, v in data.items() if k in names}))
    return records


def read_launches(path: str | os.PathLike[str]) -> list[LaunchTruth]:
    """The launch records of a truth file, in launch order, each with when it got ready."""
    out: list[LaunchTruth] = []
    ready: dict[int, float] = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            data = json.loads(line)
            if "launch" in data:
                out.append(LaunchTruth(**data))
            elif "ready" in data:
                ready[int(data["ready"])] = float(data["t"])
    return [dataclasses.replace(x, t_ready=ready.get(x.launch)) for x in out]


def accept_length_of(records: Sequence[RequestTruth]) -> float | None:
    """Σ completion_tokens / Σ spec_verify_ct over finished requests (None without verifies)."""
    done = [r for r in records if r.outcome == "finished"]
    verify = sum(r.verify_ct for r in done)
    return sum(r.completion_tokens for r in done) / verify if verify else None


def decode_tps_of(records: Sequence[RequestTruth]) -> float | None:
    """Σ decode tokens / Σ decode seconds over finished streamed requests that have both."""
    usable = [r for r in records if r.outcome == "finished" and r.decode_tps is not None]
    seconds = sum(r.decode_s or 0.0 for r in usable)
    return sum(r.decode_tokens for r in usable) / seconds if seconds > 0 else None


def due_decode_tps_of(records: Sequence[RequestTruth]) -> float | None:
    """decode_tps_of on the scheduler's schedule (t_*_due): the timing model's own rate, which
    a busy machine does not move."""
    usable = [r for r in records if r.outcome == "finished" and r.decode_tokens > 0
              and (r.due_decode_s or 0.0) > 0]
    seconds = math.fsum(r.due_decode_s or 0.0 for r in usable)
    return sum(r.decode_tokens for r in usable) / seconds if seconds > 0 else None


def detokenize(output_ids: Sequence[int]) -> str:
    return "".join(" " + _WORDS[(i - TOKEN_ID_BASE) % len(_WORDS)] for i in output_ids)


def prefill_ms(timing: Timing, uncached_tokens: int) -> float:
    return timing.prefill_base_ms + timing.prefill_ms_per_token * max(0, uncached_tokens)


# --- reading parameters -------------------------------------------------------------------


def read_sim_file(model_dir: str | os.PathLike[str] | None) -> dict[str, Any]:
    """`specgate_sim.json` of a model directory, {} when there is none."""
    if model_dir is None:
        return {}
    path = Path(model_dir) / SIM_FILE
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read simulator parameters ({exc})") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, found {type(data).__name__}")
    return data


def read_config(model_dir: str | os.PathLike[str] | None) -> dict[str, Any]:
    """A model directory's config.json, {} when absent or unreadable."""
    if model_dir is None:
        return {}
    path = Path(model_dir) / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def parse_acceptance(text: str) -> tuple[float, ...]:
    problem = ValueError(f"acceptance must be comma-separated numbers in [0, 1], found {text!r}")
    try:
        rates = tuple(float(part) for part in text.replace(" ", "").split(",") if part)
    except ValueError:
        raise problem from None
    if not rates or any(not 0.0 <= a <= 1.0 for a in rates):
        raise problem
    return rates


def timing_from(sim: Mapping[str, Any], env: Mapping[str, str]) -> Timing:
    """Timing from a target's specgate_sim.json, then SPECGATE_SIM_* env overrides.

    `verify_ms` (file or SPECGATE_SIM_VERIFY_MS) is the whole verify cost: it sets the base and
    zeroes the per-draft-token part unless that is given too.
    """
    values: dict[str, float] = {}
    for source in (sim, {name: env[var] for name, var in ENV_TIMING.items() if env.get(var)}):
        if "verify_ms" in source:
            values["verify_base_ms"] = float(source["verify_ms"])
            values["verify_ms_per_draft_token"] = 0.0
        for field in dataclasses.fields(Timing):
            if field.name in source:
                values[field.name] = float(source[field.name])
    merge = values.pop("first_merge", DEFAULT_FIRST_MERGE)
    if merge < 0 or merge != int(merge):
        raise ValueError(f"first_merge must be a whole number >= 0, found {merge!r}")
    return Timing(**values, first_merge=int(merge))


def drafter_from(sim: Mapping[str, Any], env: Mapping[str, str]) -> Drafter:
    acceptance: tuple[float, ...] = DEFAULT_ACCEPTANCE
    if "acceptance" in sim:
        raw = sim["acceptance"]
        acceptance = parse_acceptance(",".join(str(a) for a in raw) if isinstance(raw, list)
                                      else str(raw))
    if env.get(ENV_ACCEPTANCE):
        acceptance = parse_acceptance(env[ENV_ACCEPTANCE])
    categories = tuple(
        Category(
            name=str(name),
            keywords=tuple(str(k) for k in spec.get("keywords", [name])),
            multiplier=float(spec.get("multiplier", 1.0)),
        )
        for name, spec in dict(sim.get("categories", {})).items()
    )
    return Drafter(acceptance=acceptance, categories=categories)


def load_params(
    target_path: str | os.PathLike[str] | None,
    draft_path: str | os.PathLike[str] | None = None,
    *,
    speculative: bool | None = None,
    num_steps: int | None = None,
    eagle_topk: int | None = None,
    num_draft_tokens: int | None = None,
    env: Mapping[str, str] | None = None,
) -> SimParams:
    """Parameters as the simulator resolves them: files, then env overrides, then SGLang's rules."""
    env = os.environ if env is None else env
    timing = timing_from(read_sim_file(target_path), env)
    drafter = drafter_from(read_sim_file(draft_path), env)
    if num_steps is None:
        architectures = read_config(target_path).get("architectures") or []
        num_steps, eagle_topk, num_draft_tokens = auto_spec_settings(architectures)
    eagle_topk = 1 if eagle_topk is None else eagle_topk
    if eagle_topk == 1 or num_draft_tokens is None:
        num_draft_tokens = num_steps + 1
    return SimParams(
        timing=timing,
        drafter=drafter,
        speculative=bool(draft_path) if speculative is None else speculative,
        num_steps=num_steps,
        eagle_topk=eagle_topk,
        num_draft_tokens=num_draft_tokens,
    )


def truth_for_profile(profile: Any, env: Mapping[str, str] | None = None) -> Truth:
    """Truth for a specgate Profile run on the simulator (its [server] env overrides apply)."""
    merged = dict(os.environ if env is None else env)
    merged.update(profile.server.env)
    target = profile.target_path
    draft = profile.drafter_path
    spec = profile.speculative
    params = load_params(
        target,
        draft,
        speculative=True,
        num_steps=spec.num_steps,
        eagle_topk=spec.eagle_topk,
        num_draft_tokens=spec.num_draft_tokens,
        env=merged,
    )
    return truth(params)
