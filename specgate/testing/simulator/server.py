"""The simulator's HTTP server: SGLang's endpoints and wire format (0.5.17 as recorded), timed
by the model."""

from __future__ import annotations

import contextlib
import dataclasses
import hmac
import io
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

from specgate.testing.simulator import logits, model
from specgate.testing.simulator.engine import Seq
from specgate.testing.simulator.inputs import Job, RequestError, parse_generate
from specgate.testing.simulator.state import SimState, log, meta_info

OPEN_PREFIXES = ("/health", "/ready", "/metrics")
# A stream this many events long is cut by drop_stream; stall_mid_stream stops after as many.
_DROP_AFTER_EVENTS = 3
_STALL_AFTER_EVENTS = 3
# How long a SIGTERM waits for running requests before closing every connection.
DRAIN_S = 3.0


def _dumps(payload: Any) -> str:
    """SGLang's (orjson's) compact JSON."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


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
        with self.state.lock:
            self.state.connections[self.request] = False

    def finish(self) -> None:
        with self.state.lock:
            self.state.connections.pop(self.request, None)
        with contextlib.suppress(OSError):
            super().finish()

    def send_response(self, code: int, message: str | None = None) -> None:
        """uvicorn's status line and first headers, lower-case as it writes them."""
        self.send_response_only(code, message)
        self.send_header("date", self.date_time_string())
        self.send_header("server", "uvicorn")

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
        self.send_header("content-length", str(len(body)))
        self.send_header("content-type", content_type)
        self.send_header("vary", "Origin")
        self.end_headers()
        self.wfile.write(body)
        self._access_log(status)

    def _json(self, status: int, payload: Any) -> None:
        self._send(status, _dumps(payload).encode())

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
        self._busy(True)
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
        finally:
            self._busy(False)

    def _busy(self, busy: bool) -> None:
        with self.state.lock:
            if self.request in self.state.connections:
                self.state.connections[self.request] = busy

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
        """/health and /health_generate share SGLang's handler: 503 while starting, then a
        one-token generation whose output it polls for once a second (1.003 s on an H200)."""
        state = self.state
        if not state.ready.is_set():
            self._send(503, b"")
            return
        time.sleep(state.params.timing.health_generate_s)
        self._send(503 if state.hung.is_set() else 200, b"")

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
        t0 = self._t_received = time.monotonic()
        state = self.state
        body = self._body()
        verdict, self._number = state.admit_generate()
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
                results = [self._run(job, len(jobs)) for job in jobs]
                if "stall_mid_stream" in state.faults:
                    self._stall(results, stream=False)
                due = [state.engine.wait(done.seq, len(done.plan.tokens_per_event))
                       for done in results]
                e2e = time.monotonic() - t0
                payload = [self._finish(done, e2e) for done in results]
                self._release()
                sent = time.monotonic()
                for done, ready in zip(results, due, strict=True):
                    self._truth(done, stream=False, outcome="finished", first=sent,
                                final=sent, delivered=sent,
                                first_tokens=done.plan.completion_tokens, messages=1,
                                first_due=ready, final_due=ready)
                self._respond_json(payload if batch else payload[0])
        finally:
            self._release()

    def _stall(self, dones: list[_Done], *, stream: bool, first: float | None = None,
               first_tokens: int = 0, messages: int = 0,
               first_due: float | None = None) -> None:
        """Stop for good with the socket open, as behind a hung collective."""
        for done in dones:
            self._truth(done, stream=stream, outcome="stalled",
                        first=first, final=None, delivered=None, first_tokens=first_tokens,
                        messages=messages, first_due=first_due)
        self.state.hung.set()
        log("Scheduler watchdog: no progress in the decode loop (simulated fault "
            "stall_mid_stream)")
        threading.Event().wait()

    def _stall_one(self, done: _Done, *, first: float | None, first_tokens: int,
                   messages: int, first_due: float | None) -> None:
        """Stop this request's stream for good with its socket open; the server carries on
        (the request leaves the batch and stops counting as running)."""
        self._truth(done, stream=True, outcome="stalled", first=first, final=None,
                    delivered=None, first_tokens=first_tokens, messages=messages,
                    first_due=first_due)
        self.state.engine.abort(done.seq)
        self._release()
        log(f"Request {done.rid} stopped streaming (simulated fault stall_request)")
        threading.Event().wait()

    def _truth(self, done: _Done, *, stream: bool, outcome: str, first: float | None,
               final: float | None, delivered: float | None, first_tokens: int,
               messages: int, first_due: float | None = None,
               final_due: float | None = None) -> None:
        plan = done.plan
        self.state.log_truth(model.RequestTruth(
            rid=done.rid,
            stream=stream,
            outcome=outcome,
            fault=",".join(sorted(self.state.faults.flags)),
            t_received=self._t_received,
            t_first_sent=first,
            t_final_sent=final,
            t_delivered=delivered,
            t_first_due=first_due,
            t_final_due=final_due,
            prompt_tokens=plan.prompt_tokens,
            completion_tokens=plan.completion_tokens,
            first_message_tokens=first_tokens,
            messages=messages,
            verify_ct=plan.verify_ct,
            accepted_drafts=plan.num_correct_drafts,
            finish_reason=plan.finish_reason["type"] if outcome == "finished" else None,
            batch=(sum(done.seq.batches) / len(done.seq.batches)) if done.seq.batches else None,
        ))

    def _release(self) -> None:
        """The request stops counting as running before its last bytes go out, as in SGLang."""
        if getattr(self, "_counted", False):
            self._counted = False
            with self.state.lock:
                self.state.running -= 1

    # -- generation -----------------------------------------------------------------------

    def _run(self, job: Job, batch: int = 1) -> _Done:
        """Plan the request and hand it to the scheduler (engine.py), which prefills it with
        whatever else arrived and decodes it in the running batch. batch: the requests of one
        /generate body."""
        state = self.state
        prompt_ids = (tuple(job.prompt) if isinstance(job.prompt, list)
                      else logits.tokenize(job.prompt))
        forward: logits.Forward = "verify" if state.speculative else (
            "decode-batch" if batch > 1 or state.engine.running else "decode")

        def answer(length: int) -> tuple[int, ...]:
            return logits.answer(state.target, prompt_ids, length, forward,
                                 first=state.prefill_kind)

        plan = model.plan_request(
            state.params,
            job.prompt,
            job.max_new_tokens,
            eos_token_id=state.resolved.eos_token_id,
            ignore_eos=job.ignore_eos,
            text_seed=job.text_seed,
            answer=answer,
        )
        cached = state.cached_tokens(model.prompt_key(job.prompt), plan.prompt_tokens)
        log(f"Prefill batch, #new-seq: 1, #new-token: {plan.prompt_tokens - cached}, "
            f"#cached-token: {cached}, token usage: 0.00, "
            f"#running-req: {len(state.engine.running)}, #queue-req: 0")
        seq = state.engine.submit(plan, plan.prompt_tokens - cached)
        return _Done(uuid.uuid4().hex, plan, cached, seq, job, prompt_ids, forward)

    def _finish(self, done: _Done, e2e: float) -> dict[str, Any]:
        self._log_decode(done)
        plan = done.plan
        meta = meta_info(self.state, done.rid, plan, plan.completion_tokens, done.cached,
                         finished=True, e2e_s=e2e)
        meta.update(self._logprobs(done))
        meta["response_sent_to_client_ts"] = time.time()
        return {
            "text": model.detokenize(plan.output_ids),
            "output_ids": list(plan.output_ids),
            "meta_info": meta,
        }

    def _logprobs(self, done: _Done) -> dict[str, Any]:
        """SGLang's logprob fields of meta_info, as the request asked: the prompt's tokens from
        logprob_start_len (each scored by a prefill, the first one unscored), the answer's each
        by the forward that chose it, with the top_logprobs_num best at every position."""
        job = done.job
        if not job.return_logprob:
            return {}
        state = self.state
        ids = [*done.prompt_ids, *done.plan.output_ids]
        prompt_len = len(done.prompt_ids)
        if job.logprob_start_len >= prompt_len:
            raise RequestError(400, f"logprob_start_len ({job.logprob_start_len}) is not smaller "
                                    f"than the input's length ({prompt_len}).")
        start = prompt_len if job.logprob_start_len < 0 else job.logprob_start_len
        k = job.top_logprobs_num

        def text(token: int) -> str | None:
            return model.detokenize([token]) if job.return_text_in_logprobs and \
                logits.ANSWER_TOKEN_BASE <= token < logits.ANSWER_TOKEN_BASE + \
                logits.ANSWER_TOKENS else (str(token) if job.return_text_in_logprobs else None)

        token_lps: list[list[Any]] = []
        tops: list[Any] = []
        for i, scores in enumerate([None, *logits.walk(state.target, ids)][:len(ids)]):
            if i < start:
                continue
            forward = (state.prefill_kind if i <= prompt_len else done.forward)
            if scores is None or i == start < prompt_len:
                # SGLang gives the input token at logprob_start_len no logprob, whatever it is
                # (it scores the tokens after it).
                token_lps.append([None, ids[i], text(ids[i])])
                tops.append(None)
                continue
            token_lps.append([logits.logprob_of(scores, state.target, forward, ids[i]), ids[i],
                              text(ids[i])])
            tops.append([[lp, t, text(t)] for lp, t in logits.top(scores, state.target,
                                                                   forward, k)])
        split = max(prompt_len - start, 0)
        out: dict[str, Any] = {"input_token_logprobs": token_lps[:split],
                               "output_token_logprobs": token_lps[split:]}
        if k:
            out["input_top_logprobs"] = tops[:split]
            out["output_top_logprobs"] = tops[split:]
        return out

    def _log_decode(self, done: _Done) -> None:
        plan = done.plan
        decode_s = done.seq.events[-1] - done.seq.events[0]
        self.state.record(plan, decode_s)
        throughput = (plan.completion_tokens - 1) / decode_s if decode_s > 0 else 0.0
        spec = ""
        if plan.verify_ct:
            proposed = plan.verify_ct * (self.state.params.num_draft_tokens - 1)
            spec = (f"accept len: {(plan.completion_tokens - 1) / plan.verify_ct:.2f}, "
                    f"accept rate: {plan.num_correct_drafts / proposed:.2f}, ")
        running = done.seq.batches[-1] if done.seq.batches else 1
        log(f"Decode batch, #running-req: {running}, "
            f"#token: {plan.prompt_tokens + plan.completion_tokens}"
            f", token usage: 0.00, {spec}cuda graph: True, gen throughput (token/s): "
            f"{throughput:.2f}, #queue-req: 0")

    def _respond_json(self, payload: Any) -> None:
        body = _dumps(payload).encode()
        faults = self.state.faults
        if "malformed_json" in faults:
            body = body.replace(b'"meta_info":{', b"'meta_info':{", 1).replace(b"}", b"", 1)
        if "truncated_json" in faults:
            body = body[: len(body) // 2]
        if "drop_stream" in faults:
            # Promise the whole body, send half, and hang up.
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.send_header("content-type", "application/json")
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
        done = self._run(job)
        try:
            self._stream_messages(done, t0)
        finally:
            # A stream that ended early (cut, stalled, or its client gone) leaves the batch.
            state.engine.abort(done.seq)

    def _stream_messages(self, done: _Done, t0: float) -> None:
        state = self.state
        plan = done.plan
        faults = state.faults
        dropped = "drop_stream" in faults or faults.drop_request == self._number
        stalled = faults.stall_request == self._number
        wire = self.wfile
        held = io.BytesIO()
        if "buffer_proxy" in faults:
            self.wfile = held  # the proxy holds it all until the end
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("vary", "Origin")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._access_log(200)
        schedule = model.message_events(plan, state.params.timing.first_merge)
        first: float | None = None
        first_due: float | None = None
        first_tokens = 0
        final = due = 0.0
        for index, (event, count) in enumerate(schedule):
            due = state.engine.wait(done.seq, event)
            finished = index == len(schedule) - 1
            if dropped and index == min(_DROP_AFTER_EVENTS, len(schedule) - 1):
                self._truth(done, stream=True, outcome="dropped", first=first, final=None,
                            delivered=None, first_tokens=first_tokens, messages=index,
                            first_due=first_due)
                self.close_connection = True
                return  # connection closes without the terminating chunk
            if stalled and index == min(_STALL_AFTER_EVENTS, len(schedule) - 1):
                self._stall_one(done, first=first, first_tokens=first_tokens, messages=index,
                                first_due=first_due)
            if "stall_mid_stream" in faults and index == min(_STALL_AFTER_EVENTS,
                                                             len(schedule) - 1):
                self._stall([done], stream=True, first=first, first_tokens=first_tokens,
                            messages=index, first_due=first_due)
            if finished:
                self._log_decode(done)
                self._release()
            ids = plan.output_ids[:count]
            meta = meta_info(state, done.rid, plan, count, done.cached, finished=finished,
                             e2e_s=time.monotonic() - t0)
            if index == 0:
                meta["response_sent_to_client_ts"] = time.time()
            if finished:
                meta.update(self._logprobs(done))
            data = _dumps({"text": model.detokenize(ids), "output_ids": list(ids),
                           "meta_info": meta})
            if finished and "truncated_json" in faults:
                data = data[: len(data) // 2]
            elif "malformed_json" in faults:
                data = data.replace('"text":', "'text':", 1)
            now = time.monotonic()
            if index == 0:
                first, first_tokens, first_due = now, count, due
            final = now
            self._chunk(f"data: {data}\n\n".encode())
        delivered = final
        if self.wfile is not wire:
            delivered = time.monotonic()
        self._truth(done, stream=True, outcome="finished", first=first, final=final,
                    delivered=delivered, first_tokens=first_tokens, messages=len(schedule),
                    first_due=first_due, final_due=due)
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        if self.wfile is not wire:
            self.wfile = wire
            wire.write(held.getvalue())
        self.wfile.flush()


@dataclasses.dataclass(frozen=True)
class _Done:
    rid: str
    plan: model.RequestPlan
    cached: int
    seq: Seq
    job: Job
    prompt_ids: tuple[int, ...]
    forward: logits.Forward


class SimHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def make_server(state: SimState, host: str, port: int) -> SimHTTPServer:
    handler = type("BoundHandler", (Handler,), {"state": state})
    return SimHTTPServer((host, port), handler)


def close_connections(state: SimState, drain_s: float = DRAIN_S) -> int:
    """Let running requests finish (up to drain_s), then close every client connection from the
    server's side, as uvicorn does at shutdown; returns the requests still running."""
    deadline = time.monotonic() + drain_s
    while state.running and time.monotonic() < deadline:
        time.sleep(0.02)
    with state.lock:
        connections = list(state.connections)
    for conn in connections:
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_RDWR)  # our FIN first: TIME_WAIT lands on the server
    return state.running
