"""The simulator's shared state: counters and the JSON bodies of its info endpoints."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from specgate.core.simulated import SGLANG_VERSION as SGLANG_VERSION
from specgate.testing.simulator import logits, model
from specgate.testing.simulator.args import Resolved
from specgate.testing.simulator.engine import Engine
from specgate.testing.simulator.faults import Faults

# The version whose wire format was recorded on an H200 (tests/data/real-sglang-0.5.17/).

# The GPU memory (GB) free when the simulated server starts (memory_usage.startup_available).
STARTUP_AVAILABLE_GB = 79.10


def log(message: str, *, stream: Any = None) -> None:
    """One SGLang-style log line on stderr (SGLang logs through logging to stderr)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{stamp}] {message}", file=stream or sys.stderr, flush=True)


@dataclasses.dataclass
class Counters:
    """Lifetime figures behind /server_info's internal_states and /metrics."""

    requests: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    decode_iterations: int = 0
    spec_accept_tokens: int = 0
    spec_forward_ct: int = 0
    # SGLang folds lifetime totals into the reported average only every decode_log_interval
    # decode iterations, so the reported value lags; keep that behaviour.
    reported_accept_length: float | None = None
    last_gen_throughput: float = 0.0
    last_accept_length: float | None = None


class SimState:
    """Everything the request handlers share."""

    def __init__(self, resolved: Resolved, faults: Faults, argv: Sequence[str], *,
                 launch_speed: float = 1.0) -> None:
        self.resolved = resolved
        self.launch_speed = launch_speed  # this launch's speed factor (its params include it)
        self.params = resolved.params
        self.args = resolved.args
        self.faults = faults
        self.argv = list(argv)
        self.started = time.time()
        self.began = time.perf_counter()
        # /server_info's startup_time: this launch's start durations, set once it is ready.
        self.startup_time: dict[str, Any] = {}
        self.ready = threading.Event()
        self.hung = threading.Event()
        self.lock = threading.Lock()
        self.generate_count = 0
        self.running = 0
        self.cache: set[str] = set()
        self.counters = Counters()
        self.on_die: Callable[[], None] = lambda: os._exit(1)
        self.truth_path = os.environ.get(model.ENV_TRUTH) or None
        self.truth_lock = threading.Lock()
        # Open client connections (socket -> busy serving a request), closed by the server at
        # shutdown as uvicorn does: the server's side of each then sits in TIME_WAIT.
        self.connections: dict[Any, bool] = {}
        # What the answers are computed with: the target folder and the dtype settings.
        self.target = logits.Target.of(model.read_config(self.args.get("model_path")),
                                       self.args)
        self.prefill_kind: logits.Forward = ("prefill-eagle" if resolved.params.speculative
                                             else "prefill")
        cap = self.args.get("max_running_requests")
        self.engine = Engine(self.params, self.hung,
                             cap if isinstance(cap, int) and cap > 0 else None)

    @property
    def speculative(self) -> bool:
        return self.params.speculative

    # -- bookkeeping ----------------------------------------------------------------------

    def admit_generate(self) -> tuple[str, int]:
        """Count a POST /generate and say which fault, if any, takes it (die, hang, or ok), and
        its number (1 for the first)."""
        with self.lock:
            self.generate_count += 1
            count = self.generate_count
        if self.faults.die_after is not None and count > self.faults.die_after:
            return "die", count
        if self.faults.hang_after is not None and count > self.faults.hang_after:
            return "hang", count
        return "ok", count

    def log_truth(self, record: model.RequestTruth) -> None:
        """Append one JSON line to the truth file named by SPECGATE_SIM_TRUTH, if any."""
        if not self.truth_path:
            return
        line = json.dumps(record.to_json(), separators=(",", ":")) + "\n"
        with self.truth_lock, open(self.truth_path, "a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()

    def cached_tokens(self, key: str, prompt_tokens: int) -> int:
        if self.args.get("disable_radix_cache"):
            return 0
        with self.lock:
            seen = key in self.cache
            self.cache.add(key)
        return prompt_tokens - 1 if seen else 0

    def record(self, plan: model.RequestPlan, decode_s: float) -> None:
        interval = max(1, int(self.args.get("decode_log_interval") or 40))
        c = self.counters
        with self.lock:
            c.requests += 1
            c.prompt_tokens += plan.prompt_tokens
            c.generation_tokens += plan.completion_tokens
            for released in plan.tokens_per_event:
                c.decode_iterations += 1
                if self.speculative:
                    c.spec_accept_tokens += released
                    c.spec_forward_ct += 1
                if c.decode_iterations % interval == 0 and c.spec_forward_ct:
                    c.reported_accept_length = c.spec_accept_tokens / c.spec_forward_ct
            if decode_s > 0 and plan.completion_tokens > 1:
                c.last_gen_throughput = (plan.completion_tokens - 1) / decode_s
            if plan.verify_ct:
                c.last_accept_length = (plan.completion_tokens - 1) / plan.verify_ct

    # -- JSON bodies ----------------------------------------------------------------------

    def server_info(self) -> dict[str, Any]:
        internal: dict[str, Any] = {
            "last_gen_throughput": round(self.counters.last_gen_throughput, 2),
            "memory_usage": {"weight": 0.0, "kvcache": 0.0, "token_capacity": 0,
                             "startup_available": STARTUP_AVAILABLE_GB},
        }
        if self.speculative and self.counters.reported_accept_length is not None:
            internal["avg_spec_accept_length"] = self.counters.reported_accept_length
        launch = shlex.join([sys.executable, "-m", "specgate.testing.simulator", *self.argv])
        return {
            **self.args,
            "launch_command": launch,
            "internal_states": [internal],
            "version": SGLANG_VERSION,
            "startup_time": self.startup_time,
            "simulated": True,
            "simulator": {
                "params": dataclasses.asdict(self.params),
                "truth": model.truth(self.params).to_json() if self.speculative else None,
                "baseline_tps": 1000.0 / self.params.timing.decode_ms,
                "launch_speed": self.launch_speed,
            },
        }

    def model_info(self) -> dict[str, Any]:
        return {
            "model_path": self.args["model_path"],
            "served_model_name": self.args["served_model_name"],
            "tokenizer_path": self.args["tokenizer_path"],
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "load_format": self.args.get("load_format", "auto"),
            "reasoning_parser": self.args.get("reasoning_parser"),
            "tool_call_parser": self.args.get("tool_call_parser"),
            "disaggregation_mode": "null",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": model.read_config(self.args["model_path"]).get("model_type", "llama"),
            "architectures": list(self.resolved.architectures),
        }

    def models_list(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": self.args["served_model_name"],
                    "object": "model",
                    "created": int(self.started),
                    "owned_by": "sglang",
                    "root": self.args["model_path"],
                    "max_model_len": self.resolved.context_length,
                }
            ],
        }

    def metrics_text(self) -> str:
        c = self.counters
        name = self.args["served_model_name"]
        labels = f'{{model_name="{name}"}}'
        lines = [
            f"sglang:prompt_tokens_total{labels} {float(c.prompt_tokens)}",
            f"sglang:generation_tokens_total{labels} {float(c.generation_tokens)}",
            f"sglang:num_requests_total{labels} {float(c.requests)}",
            f"sglang:gen_throughput{labels} {c.last_gen_throughput}",
            f"sglang:num_running_reqs{labels} {float(self.running)}",
            f"sglang:num_queue_reqs{labels} 0.0",
        ]
        if self.speculative:
            lines += [
                f"sglang:spec_accept_length{labels} {c.last_accept_length or 0.0}",
                f"sglang:spec_num_steps{labels} {float(self.params.num_steps)}",
                f"sglang:spec_num_draft_tokens{labels} {float(self.params.num_draft_tokens)}",
                f"sglang:spec_verify_calls_total{labels} {float(c.spec_forward_ct)}",
            ]
        return "\n".join(lines) + "\n"


def meta_info(
    state: SimState,
    rid: str,
    plan: model.RequestPlan,
    completion: int,
    cached: int,
    *,
    finished: bool,
    e2e_s: float,
) -> dict[str, Any]:
    """meta_info in SGLang 0.5.17's key order (the server appends response_sent_to_client_ts)."""
    meta: dict[str, Any] = {
        "id": rid,
        "finish_reason": plan.finish_reason if finished else None,
        "prompt_tokens": plan.prompt_tokens,
        "weight_version": "default",
        "num_retractions": 0,
        "reasoning_tokens": 0,
        "completion_tokens": completion,
        "cached_tokens": cached,
        "cached_tokens_details": {"device": cached, "host": 0} if cached else None,
        "dp_rank": None,
    }
    if not finished:
        return meta
    meta["e2e_latency"] = e2e_s
    # SGLang adds the spec fields only when spec_verify_ct > 0: never to a request that ended at
    # its first token, speculative server or not.
    if state.speculative and plan.verify_ct > 0 and "no_spec_fields" not in state.faults:
        proposed = plan.verify_ct * (state.params.num_draft_tokens - 1)
        histogram = list(plan.histogram)
        while len(histogram) > 1 and histogram[-1] == 0:
            histogram.pop()  # SGLang's histogram ends at the most drafts any step accepted
        meta.update(
            spec_accept_rate=plan.num_correct_drafts / proposed if proposed else 0.0,
            spec_accept_length=plan.completion_tokens / plan.verify_ct,
            spec_num_correct_drafts=plan.num_correct_drafts,
            spec_num_proposed_drafts=proposed,
            spec_verify_ct=plan.verify_ct,
            # 0.5.17's backward-compatible aliases (gone in 0.5.23)
            spec_accepted_drafts=plan.num_correct_drafts,
            spec_proposed_drafts=proposed,
            spec_correct_drafts_histogram=histogram,
            spec_accept_histogram=list(histogram),
        )
    return meta
