"""A small HTTP client for SGLang's native API: /generate (streamed), /server_info, /flush_cache."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import requests

from specgate.core.errors import ServerError

CONNECT_TIMEOUT_S = 10.0


@dataclasses.dataclass(frozen=True)
class Generation:
    """One /generate call: the server's final meta_info plus the client's own clock."""

    text: str
    meta_info: dict[str, Any]
    ttft_s: float  # request sent → first streamed chunk (prefill + first token)
    e2e_s: float  # request sent → final message
    chunks: int

    @property
    def completion_tokens(self) -> int:
        return int(self.meta_info.get("completion_tokens") or 0)

    @property
    def prompt_tokens(self) -> int:
        return int(self.meta_info.get("prompt_tokens") or 0)

    @property
    def spec_verify_ct(self) -> int | None:
        value = self.meta_info.get("spec_verify_ct")
        return None if value is None else int(value)

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
                 timeout_s: float = 600.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._session = requests.Session()
        if api_key:
            self._session.headers["Authorization"] = f"Bearer {api_key}"

    def close(self) -> None:
        self._session.close()

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
        except requests.Timeout:
            raise ServerError(f"{method} {self._url(path)}: no answer within "
                              f"{timeout_s or self.timeout_s:.0f} s; the server is hung or "
                              "overloaded ([bench] request_timeout_s sets the limit)") from None
        except requests.ConnectionError as exc:
            raise ServerError(f"{method} {self._url(path)}: connection failed ({_short(exc)}); "
                              "is the server running and reachable?") from None

    def _json(self, method: str, path: str, **kw: Any) -> Any:
        resp = self._request(method, path, **kw)
        _raise_for_status(method, self._url(path), resp)
        try:
            return resp.json()
        except ValueError:
            raise ServerError(f"{method} {self._url(path)}: answer is not JSON: "
                              f"{resp.text[:200]!r}") from None

    def health(self) -> bool:
        """True when /health answers 200 (it runs a one-token generation on SGLang)."""
        try:
            resp = self._request("GET", "/health", timeout_s=30.0)
        except ServerError:
            return False
        return resp.status_code == 200

    def server_info(self) -> dict[str, Any]:
        """GET /server_info, falling back to the deprecated /get_server_info on 404."""
        resp = self._request("GET", "/server_info")
        if resp.status_code == 404:
            resp = self._request("GET", "/get_server_info")
        _raise_for_status("GET", self._url("/server_info"), resp)
        return _object(resp, self._url("/server_info"))

    def model_info(self) -> dict[str, Any]:
        resp = self._request("GET", "/model_info")
        if resp.status_code == 404:
            resp = self._request("GET", "/get_model_info")
        _raise_for_status("GET", self._url("/model_info"), resp)
        return _object(resp, self._url("/model_info"))

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
        start = time.perf_counter()
        resp = self._request("POST", "/generate", json=payload, stream=stream)
        try:
            _raise_for_status("POST", url, resp)
            if not stream:
                body = _object(resp, url)
                _raise_embedded_error(url, body)
                end = time.perf_counter()
                meta = _meta(url, body)
                return Generation(str(body.get("text", "")), meta, end - start, end - start, 1)
            return _read_stream(url, resp, start)
        finally:
            resp.close()


def _read_stream(url: str, resp: requests.Response, start: float) -> Generation:
    first: float | None = None
    last: dict[str, Any] | None = None
    chunks = 0
    done = False
    try:
        for raw in resp.iter_lines(decode_unicode=False):
            if not raw:
                continue
            line = raw.decode("utf-8", errors="replace")
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            try:
                obj = json.loads(data)
            except json.JSONDecodeError:
                raise ServerError(f"POST {url}: streamed message {chunks + 1} is not JSON: "
                                  f"{data[:200]!r}") from None
            if not isinstance(obj, dict):
                raise ServerError(f"POST {url}: streamed message {chunks + 1} is not a JSON "
                                  f"object: {data[:200]!r}")
            _raise_embedded_error(url, obj)
            if first is None:
                first = time.perf_counter()
            chunks += 1
            last = obj
    except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError) as exc:
        raise ServerError(f"POST {url}: the stream was cut after {chunks} messages "
                          f"({_short(exc)}); the server closed the connection or died") from None
    except requests.Timeout:
        raise ServerError(f"POST {url}: the stream stalled after {chunks} messages; no data "
                          "within the read timeout") from None
    end = time.perf_counter()
    if last is None or first is None:
        raise ServerError(f"POST {url}: the stream ended without any message")
    meta = _meta(url, last)
    if not done and meta.get("finish_reason") is None:
        raise ServerError(f"POST {url}: the stream ended after {chunks} messages without a "
                          "finished message or [DONE]; the response is truncated")
    if meta.get("finish_reason") is None:
        raise ServerError(f"POST {url}: the last streamed message has no finish_reason; the "
                          "generation did not finish")
    return Generation(str(last.get("text", "")), meta, first - start, end - start, chunks)


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
    try:
        body = resp.json()
    except ValueError:
        raise ServerError(f"GET {url}: answer is not JSON: {resp.text[:200]!r}") from None
    if not isinstance(body, dict):
        raise ServerError(f"GET {url}: expected a JSON object, found {type(body).__name__}")
    return body


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) < 200 else text[:200] + "…"
