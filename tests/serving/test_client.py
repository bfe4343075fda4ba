"""Tests for specgate.serving.client against a tiny in-process fake SGLang server."""

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from specgate.core.errors import ServerError
from specgate.serving.client import SGLangClient

FINAL_META = {"completion_tokens": 3, "prompt_tokens": 5, "e2e_latency": 0.01,
              "finish_reason": {"type": "stop", "matched": 2}, "spec_verify_ct": 2}


class FakeSGLang(BaseHTTPRequestHandler):
    mode = "ok"
    flush_failures = 0
    seen: ClassVar[list[tuple[str, str | None]]] = []

    def log_message(self, *args):
        pass

    def _send(self, code, body, ctype="application/json"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        type(self).seen.append((self.path, self.headers.get("Authorization")))
        if self.path == "/server_info" and self.mode == "old":
            self._send(404, {"detail": "Not Found"})
        elif self.path in ("/server_info", "/get_server_info"):
            self._send(200, {"speculative_algorithm": "EAGLE3", "path": self.path})
        elif self.path == "/health":
            self._send(200, b"", "text/plain")
        else:
            self._send(404, {"detail": "Not Found"})

    def do_POST(self):
        type(self).seen.append((self.path, self.headers.get("Authorization")))
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path == "/flush_cache":
            if type(self).flush_failures > 0:
                type(self).flush_failures -= 1
                self._send(400, b"requests in flight", "text/plain")
            else:
                self._send(200, b"Cache flushed.", "text/plain")
            return
        mode = self.mode
        if mode == "http500":
            self._send(500, {"error": {"message": "boom"}})
            return
        if not body.get("stream"):
            self._send(200, {"text": "a b c", "meta_info": FINAL_META})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        if mode == "drop":
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        partial = {"completion_tokens": 1, "prompt_tokens": 5, "finish_reason": None}
        chunks = [{"text": "a", "meta_info": partial}, {"text": "a b c", "meta_info": FINAL_META}]
        if mode == "error_event":
            chunks[1] = {"error": {"message": "CUDA out of memory"}}
        if mode == "bad_json":
            self.wfile.write(b"data: {\"text\": \"a\", \"meta\n\n")
            return
        if mode == "truncated":
            chunks = chunks[:1]
        if mode == "no_spec":
            meta = dict(FINAL_META)
            del meta["spec_verify_ct"]
            chunks[1] = {"text": "a b c", "meta_info": meta}
        if mode == "drop":
            event = f"data: {json.dumps(chunks[0])}\n\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.write(b"400\r\ndata: {\"te")  # promised 1 KiB, then the server dies
            self.wfile.flush()
            self.connection.shutdown(2)
            return
        for chunk in chunks:
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        if mode != "truncated":
            self.wfile.write(b"data: [DONE]\n\n")


@pytest.fixture
def fake() -> Iterator[type[FakeSGLang]]:
    handler = type("Handler", (FakeSGLang,), {"mode": "ok", "flush_failures": 0, "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield handler
    server.shutdown()
    server.server_close()


def test_streamed_generation_reads_final_meta(fake):
    with SGLangClient(fake.url, api_key="sekret") as client:
        gen = client.generate("hi", {"max_new_tokens": 8})
    assert gen.text == "a b c"
    assert gen.completion_tokens == 3
    assert gen.spec_verify_ct == 2
    assert gen.server_e2e_s == 0.01
    assert gen.finish_reason == "stop"
    assert gen.chunks == 2
    assert 0 < gen.ttft_s <= gen.e2e_s
    assert fake.seen[-1] == ("/generate", "Bearer sekret")


def test_non_streamed_generation(fake):
    gen = SGLangClient(fake.url).generate("hi", {}, stream=False)
    assert gen.completion_tokens == 3
    assert gen.ttft_s == gen.e2e_s


def test_missing_spec_fields_read_as_none(fake):
    fake.mode = "no_spec"
    gen = SGLangClient(fake.url).generate("hi", {})
    assert gen.spec_verify_ct is None
    assert gen.completion_tokens == 3


@pytest.mark.parametrize(("mode", "match"), [
    ("http500", r"HTTP 500 .*boom"),
    ("error_event", r"server reported an error: CUDA out of memory"),
    ("bad_json", r"streamed message 1 is not JSON"),
    ("truncated", r"ended after 1 messages without a finished message"),
    ("drop", r"the stream was cut after 1 messages"),
])
def test_faults_become_server_errors(fake, mode, match):
    fake.mode = mode
    with pytest.raises(ServerError, match=match):
        SGLangClient(fake.url).generate("hi", {})


def test_connection_refused_is_a_server_error():
    with pytest.raises(ServerError, match=r"connection refused \(nothing listens on 127\.0\.0\.1 "
                                          r"port 9\)"):
        SGLangClient("http://127.0.0.1:9", timeout_s=2).generate("hi", {})


def test_flush_cache_retries_on_400(fake):
    fake.flush_failures = 2
    SGLangClient(fake.url).flush_cache(wait_s=0.01)
    assert [p for p, _ in fake.seen].count("/flush_cache") == 3


def test_flush_cache_gives_up(fake):
    fake.flush_failures = 99
    with pytest.raises(ServerError, match=r"cache not flushed .*HTTP 400"):
        SGLangClient(fake.url).flush_cache(attempts=2, wait_s=0.01)


def test_server_info_falls_back_to_old_endpoint(fake):
    assert SGLangClient(fake.url).server_info()["path"] == "/server_info"
    fake.mode = "old"
    assert SGLangClient(fake.url).server_info()["path"] == "/get_server_info"
