"""The simulator's HTTP server: SGLang 0.5.23's endpoints and JSON, timed by the model."""

from __future__ import annotations

import dataclasses
import hmac
import json
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from specgate.testing.simulator import model
from specgate.testing.simulator.inputs import Job, RequestError, parse_generate
from specgate.testing.simulator.state import SimState, log, meta_info

OPEN_PREFIXES = ("/health", "/ready", "/metrics")
# A stream this many events long is cut by drop_stream.
_DROP_AFTER_EVENTS = 3


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
        jobs, batch = parse_generate(body)
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

    def _plan(self, job: Job) -> tuple[model.RequestPlan, int, float]:
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

    def _run(self, job: Job, t0: float) -> tuple[_Done, float]:
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
            "meta_info": meta_info(self.state, done.rid, plan, plan.completion_tokens, done.cached,
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

    def _stream(self, job: Job, t0: float) -> None:
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
                "meta_info": meta_info(state, done.rid, plan, count, done.cached, finished=finished,
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
