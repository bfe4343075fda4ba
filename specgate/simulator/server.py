"""The simulator's HTTP server: SGLang 0.5.23's endpoints and JSON, timed by the model."""

from __future__ import annotations

import dataclasses
import hmac
import json
import os
import shlex
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from specgate.simulator import model
from specgate.simulator.args import Resolved
from specgate.simulator.faults import Faults

SGLANG_VERSION = "0.5.23"
OPEN_PREFIXES = ("/health", "/ready", "/metrics")
_DEFAULT_MAX_NEW_TOKENS = 128
# A stream this many events long is cut by drop_stream.
_DROP_AFTER_EVENTS = 3


def log(message: str, *, stream: Any = None) -> None:
    """One SGLang-style log line on stderr (SGLang logs through logging to stderr)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{stamp}] {message}", file=stream or sys.stderr, flush=True)


class RequestError(Exception):
    """A request SGLang would refuse, with its status code."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


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

    def __init__(self, resolved: Resolved, faults: Faults, argv: Sequence[str]) -> None:
        self.resolved = resolved
        self.params = resolved.params
        self.args = resolved.args
        self.faults = faults
        self.argv = list(argv)
        self.started = time.time()
        self.ready = threading.Event()
        self.hung = threading.Event()
        self.lock = threading.Lock()
        self.generate_count = 0
        self.running = 0
        self.cache: set[str] = set()
        self.counters = Counters()
        self.on_die: Callable[[], None] = lambda: os._exit(1)

    @property
    def speculative(self) -> bool:
        return self.params.speculative

    # -- bookkeeping ----------------------------------------------------------------------

    def admit_generate(self) -> str:
        """Count a POST /generate and say which fault, if any, takes it: die, hang, or ok."""
        with self.lock:
            self.generate_count += 1
            count = self.generate_count
        if self.faults.die_after is not None and count > self.faults.die_after:
            return "die"
        if self.faults.hang_after is not None and count > self.faults.hang_after:
            return "hang"
        return "ok"

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
            "memory_usage": {"weight": 0.0, "kvcache": 0.0, "token_capacity": 0},
        }
        if self.speculative and self.counters.reported_accept_length is not None:
            internal["avg_spec_accept_length"] = self.counters.reported_accept_length
        launch = shlex.join([sys.executable, "-m", "specgate.simulator", *self.argv])
        return {
            **self.args,
            "launch_command": launch,
            "internal_states": [internal],
            "version": SGLANG_VERSION,
            "startup_time": self.started,
            "simulated": True,
            "simulator": {
                "params": dataclasses.asdict(self.params),
                "truth": model.truth(self.params).to_json() if self.speculative else None,
                "baseline_tps": 1000.0 / self.params.timing.decode_ms,
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


def _meta(
    state: SimState,
    rid: str,
    plan: model.RequestPlan,
    completion: int,
    cached: int,
    *,
    finished: bool,
    e2e_s: float,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "id": rid,
        "finish_reason": plan.finish_reason if finished else None,
        "prompt_tokens": plan.prompt_tokens,
        "weight_version": "default",
        "num_retractions": 0,
        "reasoning_tokens": 0,
        "completion_tokens": completion,
        "cached_tokens": cached,
    }
    if not finished:
        return meta
    meta["e2e_latency"] = e2e_s
    if state.speculative and plan.verify_ct > 0 and "no_spec_fields" not in state.faults:
        proposed = plan.verify_ct * (state.params.num_draft_tokens - 1)
        meta.update(
            spec_verify_ct=plan.verify_ct,
            spec_accept_length=plan.completion_tokens / plan.verify_ct,
            spec_accept_rate=plan.num_correct_drafts / proposed if proposed else 0.0,
            spec_num_correct_drafts=plan.num_correct_drafts,
            spec_num_proposed_drafts=proposed,
            spec_correct_drafts_histogram=list(plan.histogram),
        )
    return meta


@dataclasses.dataclass(frozen=True)
class _Job:
    prompt: str | list[int]
    max_new_tokens: int
    ignore_eos: bool
    text_seed: str | None
    stream: bool


def _jobs(body: Any) -> tuple[list[_Job], bool]:
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
    for prompt, params in zip(prompts, samplings, strict=True):
        jobs.append(_job(prompt, params, stream))
    return jobs, batch


def _job(prompt: str | list[int], params: dict[str, Any], stream: bool) -> _Job:
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
    return _Job(
        prompt=prompt,
        max_new_tokens=max_new,
        ignore_eos=bool(params.get("ignore_eos", False)),
        text_seed=text_seed,
        stream=stream,
    )


class Handler(BaseHTTPRequestHandler):
    """One HTTP request against the shared SimState."""

    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    state: SimState  # set on the subclass made by make_server

    # -- plumbing -------------------------------------------------------------------------

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes; without this, Nagle plus the client's
        # delayed ACK adds ~40 ms to every keep-alive request (uvicorn sets it too).
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _access_log(self, status: int) -> None:
        path = self.path
        print(
            f'INFO:     {self.client_address[0]}:{self.client_address[1]} - "{self.command} '
            f'{path} HTTP/1.1" {status}',
            file=sys.stdout,
            flush=True,
        )

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self._access_log(status)

    def _json(self, status: int, payload: Any) -> None:
        self._send(status, json.dumps(payload).encode())

    def _error(self, status: int, message: str) -> None:
        self._json(status, {"error": {"message": message, "code": status}})

    def _authorised(self, path: str) -> bool:
        if path.startswith(OPEN_PREFIXES) or self.command == "OPTIONS":
            return True
        args = self.state.args
        key, admin = args.get("api_key"), args.get("admin_api_key")
        admin_optional = path in ("/flush_cache",)
        if admin_optional and admin:
            wanted: str | None = admin
        else:
            wanted = key
        if not wanted:
            return True
        header = self.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(token.strip(), wanted):
            return True
        self._json(401, {"error": "Unauthorized"})
        return False

    def _body(self) -> Any:
        raw = self._raw
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except json.JSONDecodeError as exc:
            raise RequestError(400, f"Invalid JSON body: {exc}") from exc

    # -- routing --------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._route()

    def do_POST(self) -> None:
        self._route()

    def do_PUT(self) -> None:
        self._route()

    def _route(self) -> None:
        path = urlsplit(self.path).path
        # Read the body even when refusing the request, or it would poison a keep-alive connection.
        length = int(self.headers.get("Content-Length") or 0)
        self._raw = self.rfile.read(length) if length > 0 else b""
        try:
            if not self._authorised(path):
                return
            handler = self._routes().get((self.command, path))
            if handler is None:
                if any(p == path for (_, p) in self._routes()):
                    self._json(405, {"detail": "Method Not Allowed"})
                else:
                    self._json(404, {"detail": "Not Found"})
                return
            handler()
        except RequestError as exc:
            self._error(exc.status, str(exc))
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _routes(self) -> dict[tuple[str, str], Callable[[], None]]:
        state = self.state
        routes: dict[tuple[str, str], Callable[[], None]] = {
            ("GET", "/health"): self._health,
            ("GET", "/health_generate"): self._health,
            ("GET", "/ready"): self._health,
            ("GET", "/server_info"): lambda: self._json(200, state.server_info()),
            ("GET", "/get_server_info"): self._get_server_info,
            ("GET", "/model_info"): lambda: self._json(200, state.model_info()),
            ("GET", "/get_model_info"): lambda: self._json(200, state.model_info()),
            ("GET", "/v1/models"): lambda: self._json(200, state.models_list()),
            ("GET", "/flush_cache"): self._flush_cache,
            ("POST", "/flush_cache"): self._flush_cache,
            ("POST", "/generate"): self._generate,
            ("PUT", "/generate"): self._generate,
        }
        if state.args.get("enable_metrics"):
            routes["GET", "/metrics"] = lambda: self._send(
                200, state.metrics_text().encode(), "text/plain; version=0.0.4; charset=utf-8"
            )
        return routes

    # -- endpoints ------------------------------------------------------------------------

    def _health(self) -> None:
        ok = self.state.ready.is_set() and not self.state.hung.is_set()
        self._send(200 if ok else 503, b"")

    def _get_server_info(self) -> None:
        log("Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
            "Please use '/server_info' instead.")
        self._json(200, self.state.server_info())

    def _flush_cache(self) -> None:
        state = self.state
        if state.running:
            self._send(400, b"Cache not flushed. Please check for running requests.\n",
                       "text/plain")
            return
        with state.lock:
            state.cache.clear()
        log("Cache flushed successfully!")
        self._send(
            200,
            b"Cache flushed.\nPlease check backend logs for more details. (When there are "
            b"running or waiting requests, the operation will not be performed.)\n",
            "text/plain",
        )

    def _generate(self) -> None:
        t0 = time.monotonic()
        state = self.state
        body = self._body()
        verdict = state.admit_generate()
        if verdict == "die":
            log("Scheduler hit an exception: RuntimeError: CUDA error: an illegal memory access "
                "was encountered (simulated fault die_after)")
            state.on_die()
            return
        if verdict == "hang":
            state.hung.set()
            log("Scheduler watchdog: no progress (simulated fault hang_after)")
            threading.Event().wait()
            return
        if "http500" in state.faults:
            raise RequestError(500, "Internal server error (simulated fault http500).")
        if "http503" in state.faults:
            raise RequestError(503, "Service unavailable (simulated fault http503).")
        if not state.ready.is_set():
            raise RequestError(503, "The server is not ready yet.")
        jobs, batch = _jobs(body)
        with state.lock:
            state.running += 1
        self._counted = True
        try:
            if jobs[0].stream:
                self._stream(jobs[0], t0)
            else:
                results = [self._run(job, t0) for job in jobs]
                deadline = max(r[1] for r in results)
                _sleep_until(deadline)
                e2e = time.monotonic() - t0
                payload = [self._finish(r[0], e2e) for r in results]
                self._release()
                self._respond_json(payload if batch else payload[0])
        finally:
            self._release()

    def _release(self) -> None:
        """The request stops counting as running before its last bytes go out, as in SGLang."""
        if getattr(self, "_counted", False):
            self._counted = False
            with self.state.lock:
                self.state.running -= 1

    # -- generation -----------------------------------------------------------------------

    def _plan(self, job: _Job) -> tuple[model.RequestPlan, int, float]:
        state = self.state
        plan = model.plan_request(
            state.params,
            job.prompt,
            job.max_new_tokens,
            eos_token_id=state.resolved.eos_token_id,
            ignore_eos=job.ignore_eos,
            text_seed=job.text_seed,
        )
        cached = state.cached_tokens(model.prompt_key(job.prompt), plan.prompt_tokens)
        prefill = model.prefill_ms(state.params.timing, plan.prompt_tokens - cached)
        log(f"Prefill batch, #new-seq: 1, #new-token: {plan.prompt_tokens - cached}, "
            f"#cached-token: {cached}, token usage: 0.00, #running-req: 0, #queue-req: 0")
        return plan, cached, prefill

    def _run(self, job: _Job, t0: float) -> tuple[_Done, float]:
        plan, cached, prefill = self._plan(job)
        first = t0 + prefill / 1000.0
        end = first + len(plan.tokens_per_event) * plan.event_ms / 1000.0
        return _Done(uuid.uuid4().hex, plan, cached, first, end), end

    def _finish(self, done: _Done, e2e: float) -> dict[str, Any]:
        self._log_decode(done)
        plan = done.plan
        return {
            "text": model.detokenize(plan.output_ids),
            "output_ids": list(plan.output_ids),
            "meta_info": _meta(self.state, done.rid, plan, plan.completion_tokens, done.cached,
                               finished=True, e2e_s=e2e),
        }

    def _log_decode(self, done: _Done) -> None:
        plan = done.plan
        decode_s = done.end - done.first
        self.state.record(plan, decode_s)
        throughput = (plan.completion_tokens - 1) / decode_s if decode_s > 0 else 0.0
        spec = ""
        if plan.verify_ct:
            proposed = plan.verify_ct * (self.state.params.num_draft_tokens - 1)
            spec = (f"accept len: {(plan.completion_tokens - 1) / plan.verify_ct:.2f}, "
                    f"accept rate: {plan.num_correct_drafts / proposed:.2f}, ")
        log(f"Decode batch, #running-req: 1, #token: {plan.prompt_tokens + plan.completion_tokens}"
            f", token usage: 0.00, {spec}cuda graph: True, gen throughput (token/s): "
            f"{throughput:.2f}, #queue-req: 0")

    def _respond_json(self, payload: Any) -> None:
        body = json.dumps(payload).encode()
        faults = self.state.faults
        if "malformed_json" in faults:
            body = body.replace(b'"meta_info": {', b"'meta_info': {", 1).replace(b"}", b"", 1)
        if "truncated_json" in faults:
            body = body[: len(body) // 2]
        if "drop_stream" in faults:
            # Promise the whole body, send half, and hang up.
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            self._access_log(200)
            return
        self._send(200, body)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _stream(self, job: _Job, t0: float) -> None:
        state = self.state
        done, _ = self._run(job, t0)
        plan = done.plan
        faults = state.faults
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._access_log(200)
        released = min(1, plan.completion_tokens)
        deadlines = [done.first]
        counts = [released]
        for n in plan.tokens_per_event:
            released += n
            counts.append(released)
            deadlines.append(deadlines[-1] + plan.event_ms / 1000.0)
        for index, (deadline, count) in enumerate(zip(deadlines, counts, strict=True)):
            _sleep_until(deadline)
            finished = index == len(counts) - 1
            if "drop_stream" in faults and index == min(_DROP_AFTER_EVENTS, len(counts) - 1):
                self.close_connection = True
                return  # connection closes without the terminating chunk
            if finished:
                self._log_decode(done)
                self._release()
            ids = plan.output_ids[:count]
            event = {
                "text": model.detokenize(ids),
                "output_ids": list(ids),
                "meta_info": _meta(state, done.rid, plan, count, done.cached, finished=finished,
                                   e2e_s=time.monotonic() - t0),
            }
            data = json.dumps(event)
            if finished and "truncated_json" in faults:
                data = data[: len(data) // 2]
            elif "malformed_json" in faults:
                data = data.replace('"text": ', "'text': ", 1)
            self._chunk(f"data: {data}\n\n".encode())
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


@dataclasses.dataclass(frozen=True)
class _Done:
    rid: str
    plan: model.RequestPlan
    cached: int
    first: float
    end: float


def _sleep_until(deadline: float) -> None:
    """Absolute deadlines so sleep overshoot never accumulates across steps."""
    remaining = deadline - time.monotonic()
    if remaining > 0:
        time.sleep(remaining)


class SimHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def make_server(state: SimState, host: str, port: int) -> SimHTTPServer:
    handler = type("BoundHandler", (Handler,), {"state": state})
    return SimHTTPServer((host, port), handler)
