"""A small HTTP client for SGLang's native API: /generate (streamed), /server_info, /flush_cache."""

from __future__ import annotations

import dataclasses
import json
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import requests
from urllib3.exceptions import HTTPError, NameResolutionError, ReadTimeoutError

from specgate.core.errors import ServerError

CONNECT_TIMEOUT_S = 10.0


class Unreachable(ServerError):
    """No connection to the server: `why` says what happened (refused, timed out, DNS, …)."""

    def __init__(self, message: str, why: str) -> None:
        super().__init__(message)
        self.why = why


class NoAnswer(ServerError):
    """The server took the request and sent no answer in time: `why` says how long it waited."""

    def __init__(self, message: str, why: str) -> None:
        super().__init__(message)
        self.why = why


@dataclasses.dataclass(frozen=True)
class Generation:
    """One /generate call: the server's final meta_info plus the client's own clock."""

    text: str
    meta_info: dict[str, Any]
    ttft_s: float  # request sent → first streamed message (prefill + first token)
    e2e_s: float  # request sent → final message
    chunks: int  # streamed messages (SGLang may merge several tokens into one)
    # completion_tokens of the first message: SGLang's tokenizer manager keeps only the newest of
    # queued outputs, so the first message can carry more than the prefill's one token.
    first_tokens: int = 1
    arrivals_s: tuple[float, ...] = ()  # each message's arrival, from the request's start
    # The answer's token ids: SGLang's streamed messages each carry the whole answer so far in
    # output_ids, so the last one has them all. Empty when it has none, or when their count is
    # not completion_tokens (a server streaming only each message's new ids, for one).
    output_ids: tuple[int, ...] = ()

    @property
    def completion_tokens(self) -> int:
        return _int(self.meta_info.get("completion_tokens"), 0)

    @property
    def prompt_tokens(self) -> int:
        return _int(self.meta_info.get("prompt_tokens"), 0)

    @property
    def spec_verify_ct(self) -> int | None:
        """Verify passes, as reported; None when the answer carries no spec fields (a baseline
        server, or a request that ended at its first token: SGLang adds spec_* only when
        spec_verify_ct > 0)."""
        value = self.meta_info.get("spec_verify_ct")
        return None if value is None else _int(value, 0)

    @property
    def server_e2e_s(self) -> float | None:
        value = self.meta_info.get("e2e_latency")
        return None if value is None else float(value)

    @property
    def finish_reason(self) -> str:
        reason = self.meta_info.get("finish_reason")
        if isinstance(reason, dict):
            return str(reason.get("type", "unknown"))
        return "unknown" if reason is None else str(reason)


class SGLangClient:
    """Talks to one SGLang server; every failure becomes a ServerError that says what happened."""

    def __init__(self, base_url: str, api_key: str | None = None,
                 timeout_s: float = 600.0, *,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.clock = clock  # what requests and streamed messages are timed by
        self._session = requests.Session()
        self._api_key = api_key
        self._keyed = bool(api_key)
        if api_key:
            self._session.headers["Authorization"] = f"Bearer {api_key}"

    def close(self) -> None:
        self._session.close()

    def clone(self) -> SGLangClient:
        """Another client of the same server with its own session, so its own connection: one
        per stream when several requests are in flight at once."""
        return SGLangClient(self.base_url, self._api_key, self.timeout_s, clock=self.clock)

    def __enter__(self) -> SGLangClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _url(self, path: str) -> str:
        return f"{self.base_url}{path}"

    def _request(self, method: str, path: str, *, timeout_s: float | None = None,
                 **kw: Any) -> requests.Response:
        try:
            return self._session.request(method, self._url(path),
                                         timeout=(CONNECT_TIMEOUT_S, timeout_s or self.timeout_s),
                                         **kw)
        except requests.ConnectTimeout:
            why = f"timed out: no connection within {CONNECT_TIMEOUT_S:.0f} s"
            raise Unreachable(f"{method} {self._url(path)}: {why}; is the server running and "
                              "reachable from here?", why) from None
        except requests.Timeout:
            why = f"no answer within {timeout_s or self.timeout_s:.0f} s"
            raise NoAnswer(f"{method} {self._url(path)}: {why}; the server is hung or "
                           "overloaded ([bench] request_timeout_s sets the limit)", why) from None
        except requests.ConnectionError as exc:
            why = unreachable_why(exc, self.base_url)
            raise Unreachable(f"{method} {self._url(path)}: {why}; is the server running and "
                              "reachable from here?", why) from None

    def server_info(self) -> dict[str, Any]:
        """GET /server_info (older SGLang: /get_server_info), with what a refusal means."""
        last = ""
        for path in ("/server_info", "/get_server_info"):
            resp = self._request("GET", path)
            if resp.status_code == 404:
                last = f"{path} answered 404"
                continue
            if resp.status_code in (401, 403):
                raise ServerError(
                    f"{self._url(path)} answered {resp.status_code}: "
                    + ("the server refused the API key from [server] api_key_env; it was started "
                       "with another --api-key (or a launcher replaced it); export the key the "
                       "server expects" if self._keyed else
                       "the server wants an API key; set [server] api_key_env to the variable "
                       "holding it"))
            _raise_for_status("GET", self._url(path), resp)
            return _object(resp, self._url(path))
        raise ServerError(f"{self.base_url}: neither /server_info nor /get_server_info exists "
                          f"({last}); is this an SGLang server?")

    def flush_cache(self, *, attempts: int = 10, wait_s: float = 0.5) -> None:
        """Empty the radix cache; SGLang answers 400 while requests are in flight, so retry."""
        last = ""
        for attempt in range(attempts):
            resp = self._request("POST", "/flush_cache", timeout_s=60.0)
            if resp.status_code == 200:
                return
            last = f"HTTP {resp.status_code}: {resp.text[:200]!r}"
            if resp.status_code != 400:
                break
            time.sleep(wait_s * (attempt + 1))
        raise ServerError(f"POST {self._url('/flush_cache')}: cache not flushed ({last}); "
                          "a benchmark pass needs an empty prefix cache to be comparable")

    def generate(self, text: str, sampling_params: dict[str, Any], *,
                 stream: bool = True) -> Generation:
        """POST /generate; streamed calls time the first chunk (TTFT) and the final message."""
        payload = {"text": text, "sampling_params": sampling_params, "stream": stream}
        url = self._url("/generate")
        start = self.clock()
        resp = self._request("POST", "/generate", json=payload, stream=stream)
        try:
            _raise_for_status("POST", url, resp)
            if not stream:
                body = _object(resp, url)
                _raise_embedded_error(url, body)
                end = self.clock()
                meta = _meta(url, body)
                return Generation(str(body.get("text", "")), meta, end - start, end - start, 1,
                                  output_ids=_output_ids(body.get("output_ids"), meta))
            return _read_stream(url, resp, start, self.clock)
        finally:
            resp.close()

    def generate_many(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        """POST /generate with a whole body (a list of prompts, logprob fields, …), not
        streamed; one answer object per prompt, each with meta_info."""
        url = self._url("/generate")
        resp = self._request("POST", "/generate", json={**payload, "stream": False})
        try:
            _raise_for_status("POST", url, resp)
            try:
                body = resp.json()
            except ValueError:
                raise ServerError(f"POST {url}: answer is not JSON: {resp.text[:200]!r}") from None
        finally:
            resp.close()
        answers = body if isinstance(body, list) else [body]
        out = []
        for answer in answers:
            if not isinstance(answer, dict):
                raise ServerError(f"POST {url}: expected answer objects, found "
                                  f"{type(answer).__name__}")
            _raise_embedded_error(url, answer)
            _meta(url, answer)
            out.append(answer)
        return out


def _read_stream(url: str, resp: requests.Response, start: float,
                 clock: Callable[[], float] = time.perf_counter) -> Generation:
    """Read SGLang's server-sent events as they arrive, timing each message.

    The body is read straight from the socket (chunk by chunk, or whatever bytes are there), not
    through requests' iter_lines, which waits for 512-byte blocks and turns a read timeout into a
    ConnectionError. After [DONE] the rest of the body (the final empty chunk) is drained so the
    connection goes back to the pool and the next request reuses it.
    """
    buf = b""
    first: dict[str, Any] | None = None
    last: dict[str, Any] | None = None
    arrivals: list[float] = []
    done = False
    try:
        for piece in _pieces(resp):
            now = clock()
            buf += piece
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                if done or not raw.startswith(b"data:"):
                    continue
                data = raw[5:].strip().decode("utf-8", errors="replace")
                if data == "[DONE]":
                    done = True
                    continue
                obj = _message(url, data, len(arrivals) + 1)
                arrivals.append(now)
                first = first or obj
                last = obj
    except (ReadTimeoutError, TimeoutError):
        raise ServerError(f"POST {url}: the stream stalled after {len(arrivals)} messages: no "
                          "data within the read timeout while the connection stayed open (a hung "
                          "server, e.g. a stuck collective); [bench] request_timeout_s sets the "
                          "limit") from None
    except (HTTPError, OSError, requests.RequestException) as exc:
        raise ServerError(f"POST {url}: the stream was cut after {len(arrivals)} messages "
                          f"({_short(exc)}); the server closed the connection or died") from None
    if last is None or first is None:
        raise ServerError(f"POST {url}: the stream ended without any message")
    meta = _meta(url, last)
    if not done and meta.get("finish_reason") is None:
        raise ServerError(f"POST {url}: the stream ended after {len(arrivals)} messages without "
                          "a finished message or [DONE]; the response is truncated")
    if meta.get("finish_reason") is None:
        raise ServerError(f"POST {url}: the last streamed message has no finish_reason; the "
                          "generation did not finish")
    first_meta = first.get("meta_info")
    first_tokens = _int(first_meta.get("completion_tokens") if isinstance(first_meta, dict)
                        else None, 1)
    return Generation(str(last.get("text", "")), meta, arrivals[0] - start, arrivals[-1] - start,
                      len(arrivals), first_tokens=first_tokens,
                      arrivals_s=tuple(t - start for t in arrivals),
                      output_ids=_output_ids(last.get("output_ids"), meta))


def _output_ids(value: object, meta: dict[str, Any]) -> tuple[int, ...]:
    """A message's output_ids when they are the whole answer (one int per completion token)."""
    if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        return ()
    return tuple(value) if len(value) == _int(meta.get("completion_tokens"), -1) else ()


def _pieces(resp: requests.Response) -> Iterator[bytes]:
    """The body's bytes as they arrive: whole chunks of a chunked body, else what is there."""
    raw = resp.raw
    if raw.chunked:
        yield from raw.read_chunked(decode_content=True)
        return
    while True:
        piece = raw.read1(65536, decode_content=True)
        if not piece:
            return
        yield piece


def _message(url: str, data: str, number: int) -> dict[str, Any]:
    try:
        obj = json.loads(data)
    except json.JSONDecodeError:
        raise ServerError(f"POST {url}: streamed message {number} is not JSON: "
                          f"{data[:200]!r}") from None
    if not isinstance(obj, dict):
        raise ServerError(f"POST {url}: streamed message {number} is not a JSON object: "
                          f"{data[:200]!r}")
    _raise_embedded_error(url, obj)
    return obj


def _meta(url: str, body: dict[str, Any]) -> dict[str, Any]:
    meta = body.get("meta_info")
    if not isinstance(meta, dict) or "completion_tokens" not in meta:
        raise ServerError(f"POST {url}: answer has no meta_info.completion_tokens (keys "
                          f"{sorted(body)}); is this an SGLang server?")
    finish = meta.get("finish_reason")
    if isinstance(finish, dict) and finish.get("type") == "abort":
        raise ServerError(f"POST {url}: the server aborted the request: "
                          f"{finish.get('message', finish)}")
    return meta


def _raise_embedded_error(url: str, body: dict[str, Any]) -> None:
    if "error" in body:
        err = body["error"]
        text = err.get("message", err) if isinstance(err, dict) else err
        raise ServerError(f"POST {url}: the server reported an error: {text}")


def _raise_for_status(method: str, url: str, resp: requests.Response) -> None:
    if resp.status_code == 200:
        return
    hint = {401: "the API key is missing or wrong ([server] api_key_env)",
            403: "the key lacks admin rights for this endpoint",
            503: "the server is starting, shutting down or unhealthy"}.get(resp.status_code,
                                                                          "see the server log")
    raise ServerError(f"{method} {url}: HTTP {resp.status_code} {resp.reason}: "
                      f"{resp.text[:200]!r}; {hint}")


def _object(resp: requests.Response, url: str) -> dict[str, Any]:
    method = resp.request.method or "GET" if resp.request is not None else "GET"
    try:
        body = resp.json()
    except ValueError:
        raise ServerError(f"{method} {url}: answer is not JSON: {resp.text[:200]!r}") from None
    if not isinstance(body, dict):
        raise ServerError(f"{method} {url}: expected a JSON object, found "
                          f"{type(body).__name__}")
    return body


def _int(value: Any, default: int) -> int:
    """A count from JSON; anything else (None, a string, a float) gives the default."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def unreachable_why(exc: BaseException, url: str) -> str:
    """What stopped a connection, in words (urllib3 wraps the cause in several layers of repr)."""
    parts = urlsplit(url)
    host, port = parts.hostname or "?", parts.port or (443 if parts.scheme == "https" else 80)
    causes = list(_causes(exc))
    if any(isinstance(c, ConnectionRefusedError) for c in causes):
        return f"connection refused (nothing listens on {host} port {port})"
    if any(isinstance(c, (NameResolutionError, socket.gaierror)) for c in causes):
        return f"the host name {host!r} does not resolve (DNS)"
    if any(isinstance(c, TimeoutError) for c in causes):
        return f"timed out connecting to {host} port {port}"
    if any(isinstance(c, ConnectionResetError) for c in causes):
        return f"the connection to {host} port {port} was reset"
    if any(isinstance(c, ssl.SSLError) for c in causes):
        return f"the TLS handshake with {host} port {port} failed"
    plain = [c for c in causes if isinstance(c, OSError) and c.strerror]
    if plain:
        return f"no connection to {host} port {port}: {plain[-1].strerror}"
    return f"no connection to {host} port {port} ({type(causes[-1]).__name__})"


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """exc and what it wraps: __cause__, __context__, urllib3's .reason and exception args."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        wrapped = [current.__cause__, current.__context__, getattr(current, "reason", None),
                   *current.args]
        todo += [w for w in wrapped if isinstance(w, BaseException)]


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) < 200 else text[:200] + "…"
