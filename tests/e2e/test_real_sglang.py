"""The live path against what real SGLang 0.5.17 did on an H200.

tests/data/real-sglang-0.5.17/transcripts.txt holds the bytes real SGLang sent and when each
recv() returned them. A replay server sends the same bytes at the same offsets, so the client
is held to behaviour nobody here chose: byte for byte, arrival times included.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import sim_support

from specgate.claims import perf as perf_claims
from specgate.claims import spec as spec_claims
from specgate.claims.result import Status
from specgate.core.errors import ServerError
from specgate.core.profile import parse_profile
from specgate.measure import live, passes
from specgate.results import bench, prompts
from specgate.results.bench import RequestSample, Sampling, build_measurement
from specgate.results.live import ConfigRun, LiveResults
from specgate.results.prompts import template_named
from specgate.serving import safety_net, server
from specgate.serving.client import SGLangClient
from specgate.serving.launch import LaunchSpec, free_port
from specgate.serving.launchers.base import port_in_use
from specgate.serving.launchers.local import LocalLauncher

TRANSCRIPTS = Path(__file__).parents[1] / "data" / "real-sglang-0.5.17" / "transcripts.txt"
PLAIN = template_named("plain", "test")


@dataclasses.dataclass(frozen=True)
class Transcript:
    name: str
    stamps: tuple[tuple[float, int], ...]  # (seconds after the request was sent, bytes)
    data: bytes

    def pieces(self) -> list[tuple[float, bytes]]:
        out, pos = [], 0
        for t, n in self.stamps:
            out.append((t, self.data[pos:pos + n]))
            pos += n
        return out


def _transcripts() -> dict[str, Transcript]:
    raw = TRANSCRIPTS.read_bytes()
    found: dict[str, Transcript] = {}
    pos = 0
    while (start := raw.find(b"==== ", pos)) >= 0:
        end = raw.index(b"\n", start)
        name = raw[start + 5:end].split(b" ")[0].decode()
        if raw[end + 1:end + 6] != b"---- ":
            pos = end + 1
            continue
        stamp_end = raw.index(b"\n", end + 1)
        stamps = tuple(ast.literal_eval(raw[end + 1:stamp_end].decode().split(": ", 1)[1]))
        size = sum(n for _, n in stamps)
        found[name] = Transcript(name, stamps, raw[stamp_end + 1:stamp_end + 1 + size])
        pos = stamp_end + 1 + size
    return found


RECORDED = _transcripts()


class Lockstep:
    """A client clock a replay can wait on: with it the server sends a message only after the
    client has timed the one before, so each stamp lies between its own message's send and the
    next one's however busy the machine is. A client that waits for more bytes before timing a
    message (512-byte blocks, the whole body) stalls the replay instead, which the replay notes."""

    def __init__(self) -> None:
        self.stamps: list[float] = []  # every reading of the client's clock, in order
        self.stalled: list[int] = []  # pieces after which the client never read its clock
        self._cond = threading.Condition()

    def clock(self) -> float:
        with self._cond:
            self.stamps.append(time.perf_counter())
            self._cond.notify_all()
            return self.stamps[-1]

    def wait_for_readings(self, n: int, piece: int) -> None:
        with self._cond:  # the timeout only ends a stall the test then reports
            if not self._cond.wait_for(lambda: len(self.stamps) >= n, timeout=5.0):
                self.stalled.append(piece)


class Replay:
    """A loopback server that answers every request with a transcript's bytes on its clock,
    and keeps when it read each request and began to send each piece (time.perf_counter, the
    client's clock): what a client's timing is held to. With a Lockstep, every piece between
    the headers and the last goes out only once the client has read its clock for the one
    before (the request's start is the first reading)."""

    def __init__(self, pieces: list[tuple[float, bytes]], *, hold_open_s: float = 0.0,
                 first: list[tuple[float, bytes]] | None = None,
                 lockstep: Lockstep | None = None) -> None:
        self.pieces = pieces
        self.hold_open_s = hold_open_s
        self.first = first  # what the first /generate gets instead, when given
        self.lockstep = lockstep
        self.connections = 0
        self.generates = 0
        # per answered request: (when it was read, when each piece began to be sent)
        self.served: list[tuple[float, list[float]]] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:  # closed
                return
            # asyncio (uvicorn, so SGLang) sets TCP_NODELAY on every connection.
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.connections += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5.0)
            while True:  # keep-alive: one answer per request on this connection
                request = b""
                try:
                    while b"\r\n\r\n" not in request:
                        got = conn.recv(65536)
                        if not got:
                            return
                        request += got
                    head, _, body = request.partition(b"\r\n\r\n")
                    length = int(next((ln.split(b":")[1] for ln in head.split(b"\r\n")
                                       if ln.lower().startswith(b"content-length")), b"0"))
                    while len(body) < length:
                        body += conn.recv(65536)
                    pieces = self.pieces
                    if head.startswith(b"POST /generate"):
                        self.generates += 1
                        if self.generates == 1 and self.first is not None:
                            pieces = self.first
                    t0 = time.perf_counter()
                    sent: list[float] = []
                    self.served.append((t0, sent))
                    for i, (t, piece) in enumerate(pieces):
                        time.sleep(max(0.0, t0 + t - time.perf_counter()))
                        sent.append(time.perf_counter())
                        conn.sendall(piece)
                        if self.lockstep is not None and 0 < i < len(pieces) - 1:
                            self.lockstep.wait_for_readings(1 + i, i)
                    if self.hold_open_s:
                        time.sleep(self.hold_open_s)
                        return
                except OSError:
                    return

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


@pytest.fixture
def replay() -> Iterator[type[Replay]]:
    made: list[Replay] = []

    class Made(Replay):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            made.append(self)

    yield Made
    for r in made:
        r.close()


def _generate(url: str, *, timeout_s: float = 10.0) -> object:
    with SGLangClient(url, timeout_s=timeout_s) as client:
        return client.generate("Hello world number", {"max_new_tokens": 24, "temperature": 0})


# -- the recorded streams, byte for byte ----------------------------------------------------------

def test_recorded_stream_is_read_as_real_sglang_sent_it(replay: type[Replay]) -> None:
    rec = RECORDED["stream"]
    lockstep = Lockstep()
    server_ = replay(rec.pieces(), lockstep=lockstep)
    with SGLangClient(server_.url, timeout_s=10.0, clock=lockstep.clock) as client:
        gen = client.generate("Hello world number", {"max_new_tokens": 24, "temperature": 0})
    assert gen.completion_tokens == 24
    assert gen.spec_verify_ct == 23
    assert gen.chunks == 24  # one streamed message per token: the drafter (random) never hit
    assert gen.first_tokens == 1
    assert gen.finish_reason == "length"
    assert gen.server_e2e_s == pytest.approx(0.23023245400000292)
    # Real SGLang sent the first message in the 2nd piece (the 1st was the headers) and the
    # final one in the 25th, one chunk each (the 25th also holds [DONE]'s chunk): the client
    # times each message by the read that carried it, after its piece began to go out and
    # before the next one did (the replay waits for that reading), not on 512-byte block
    # boundaries or at the end of the body.
    assert lockstep.stalled == []
    ((_, sent),) = server_.served
    start, *reads = lockstep.stamps
    assert len(reads) == 25  # 24 messages, then [DONE]
    messages = reads[:24]
    assert gen.arrivals_s == tuple(r - start for r in messages)
    assert (gen.ttft_s, gen.e2e_s) == (messages[0] - start, messages[-1] - start)
    for piece, read in enumerate(messages, start=1):
        assert sent[piece] <= read < sent[piece + 1]
    assert gen.meta_info["spec_correct_drafts_histogram"] == [23]
    # every message carries the whole answer so far: the last one has all 24 ids
    assert gen.output_ids == (877, 813) * 12


def test_output_ids_are_kept_only_when_they_are_the_whole_answer() -> None:
    from specgate.serving.client import _output_ids

    meta = {"completion_tokens": 3}
    assert _output_ids([5, 6, 7], meta) == (5, 6, 7)
    assert _output_ids([7], meta) == ()  # only the newest ids (incremental streaming)
    assert _output_ids(None, meta) == ()
    assert _output_ids([5, "6", 7], meta) == ()
    assert _output_ids([5, True, 7], meta) == ()


def test_recorded_one_token_answer_has_no_spec_fields_and_counts_zero_verifies(
        replay: type[Replay]) -> None:
    gen = _generate(replay(RECORDED["one_token"].pieces()).url)
    assert gen.completion_tokens == 1
    assert gen.spec_verify_ct is None  # as SGLang sent it
    sample = _sample(gen)
    assert sample.verify_ct == 0  # ended at its first token: no verify ran
    m = build_measurement(config="speculative", url="x", template=PLAIN, sampling=Sampling(),
                          samples=[sample, _sample(_generate(replay(
                              RECORDED["stream"].pieces()).url), prompt="p2")])
    assert m.spec_fields_missing == 0
    assert m.stats["accept_len"].mean == pytest.approx(25 / 23)


def test_a_longer_answer_without_spec_fields_is_still_missing_them() -> None:
    sample = _row(completion=5, verify=None)
    assert sample.verify_ct is None


def test_recorded_plain_answer(replay: type[Replay]) -> None:
    with SGLangClient(replay(RECORDED["plain"].pieces()).url) as client:
        gen = client.generate("Hello world number", {"max_new_tokens": 24}, stream=False)
    assert (gen.completion_tokens, gen.spec_verify_ct) == (24, 23)


def test_streams_reuse_one_connection(replay: type[Replay]) -> None:
    server_ = replay(RECORDED["stream"].pieces())
    with SGLangClient(server_.url) as client:
        for _ in range(3):
            client.generate("x", {"max_new_tokens": 24})
    assert server_.connections == 1


# -- a stream delivered in one burst (a buffering proxy) -----------------------------------------

def _burst(rec: Transcript) -> list[tuple[float, bytes]]:
    """The headers at once, then every message together, in one write, when the last one was
    sent (written one by one, a busy machine could space them out as decoding does)."""
    pieces = rec.pieces()
    return [pieces[0], (pieces[-1][0], b"".join(p for _, p in pieces[1:]))]


def test_burst_stream_is_recognised(replay: type[Replay]) -> None:
    burst = _sample(_generate(replay(_burst(RECORDED["stream"])).url))
    real = _sample(_generate(replay(RECORDED["stream"].pieces()).url), prompt="p2")
    assert burst.burst
    assert burst.median_gap_s is not None
    assert real.median_gap_s is not None
    # Messages a buffer released together sit microseconds apart; decoded ones a decode step.
    assert burst.median_gap_s < bench.BURST_GAP_S < real.median_gap_s
    assert not real.burst


def test_burst_measurement_is_refused_by_timed_claims(replay: type[Replay]) -> None:
    url = replay(_burst(RECORDED["stream"])).url
    samples = [_sample(_generate(url), prompt=f"p{i}") for i in range(3)]
    base = build_measurement(config="baseline", url=url, template=PLAIN, sampling=Sampling(),
                             samples=[dataclasses.replace(s, spec_verify_ct=None)
                                      for s in samples])
    result = perf_claims.baseline_tps_claim(_profile(), _live(base, None))
    assert result.status is Status.BROKEN
    assert "burst" in result.message
    assert result.details == {"bursts": 3, "requests": 3}


def _one_prompt() -> prompts.PromptSet:
    return prompts.PromptSet.rendered(prompts.load_builtin()[:1], PLAIN)


def test_a_stream_read_in_one_burst_once_is_sent_again(replay: type[Replay]) -> None:
    """A reader that was not scheduled for a moment gets a whole stream at once; sent again, the
    stream arrives as decoded and that reading is the one measured."""
    server_ = replay(RECORDED["stream"].pieces(), first=_burst(RECORDED["stream"]))
    with SGLangClient(server_.url) as client:
        samples, _ = passes.run_pass(client, _one_prompt(), {"max_new_tokens": 24}, 1)
    assert server_.generates == 2
    assert [s.burst for s in samples] == [False]


def test_a_buffering_proxy_bursts_again_and_is_still_refused(replay: type[Replay]) -> None:
    server_ = replay(_burst(RECORDED["stream"]))
    with SGLangClient(server_.url) as client:
        samples, _ = passes.run_pass(client, _one_prompt(), {"max_new_tokens": 24}, 1)
    assert server_.generates == 2
    assert [s.burst for s in samples] == [True]


def test_a_stream_that_arrives_as_decoded_is_sent_once(replay: type[Replay]) -> None:
    server_ = replay(RECORDED["stream"].pieces())
    with SGLangClient(server_.url) as client:
        samples, _ = passes.run_pass(client, _one_prompt(), {"max_new_tokens": 24}, 1)
    assert server_.generates == 1
    assert [s.burst for s in samples] == [False]


# -- merged first message --------------------------------------------------------------------------

def _merged(rec: Transcript, merge: int) -> list[tuple[float, bytes]]:
    """The first `merge` messages delivered as one: SGLang's tokenizer manager keeps only the
    newest of the outputs queued while the client was not reading."""
    pieces = rec.pieces()
    events = [p for _, p in pieces[1:]]
    messages = [json.loads(e.split(b"data: ", 1)[1].split(b"\n")[0]) for e in events[:merge]]
    body = f"data: {json.dumps(messages[-1], separators=(',', ':'))}\n\n".encode()
    chunk = b"%x\r\n%s\r\n" % (len(body), body)
    return [pieces[0], (pieces[merge][0], chunk), *pieces[merge + 1:]]


def test_merged_first_message_counts_decode_after_it(replay: type[Replay]) -> None:
    server_ = replay(_merged(RECORDED["stream"], 3))
    gen = _generate(server_.url)
    assert gen.first_tokens == 3
    assert gen.chunks == 22
    sample = _sample(gen)
    assert sample.decode_tokens == 24 - 3
    # Decode is timed from the merged first message to the final one: the window the server
    # sent them in, give or take what the client can see of its own side (it sent the request
    # before the server read it, and reads each message after it was sent). Timed from the
    # request's start instead, it would be longer by the first message's wait.
    ((received, sent),) = server_.served
    first, final = sent[1], sent[-2]  # after the headers; the final message, before [DONE]
    early = gen.ttft_s - (first - received)
    late = gen.e2e_s - (final - received)
    assert early >= 0
    assert late >= 0
    assert -early <= sample.decode_s - (final - first) <= late
    assert first - received > 0.01  # what a window from the request's start would add


# -- a server that hangs mid-stream ----------------------------------------------------------------

def test_stall_mid_stream_is_reported_as_a_stall(replay: type[Replay]) -> None:
    pieces = RECORDED["stream"].pieces()[:6]  # headers and five messages, then nothing
    started = time.monotonic()
    with pytest.raises(ServerError, match=r"stalled after 5 messages"):
        _generate(replay(pieces, hold_open_s=10.0).url, timeout_s=1.0)
    assert time.monotonic() - started < 5.0


def test_small_first_message_without_chunked_encoding_is_timed_when_it_arrives(
        replay: type[Replay]) -> None:
    first = b'data: {"text":"a","meta_info":{"completion_tokens":1,"finish_reason":null}}\n\n'
    final = (b'data: {"text":"ab","meta_info":{"completion_tokens":2,"finish_reason":'
             b'{"type":"length"},"spec_verify_ct":1}}\n\ndata: [DONE]\n\n')
    head = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
    server_ = replay([(0.0, head), (0.01, first), (0.5, final)])
    gen = _generate(server_.url)
    ((received, sent),) = server_.served
    # Timed when it arrived, before the final message was sent (the client sent the request
    # before the server read it): not held back until 512 bytes or the end arrived.
    assert received + gen.ttft_s < sent[-1]
    assert gen.e2e_s >= 0.5


# -- readiness, start-up failures, the port --------------------------------------------------------

SLOW_HEALTH = r'''
import http.server, sys, time
time.sleep(float(sys.argv[3]) if len(sys.argv) > 3 else 0.0)  # loading: nothing listens yet
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        if self.path == "/health_generate":
            time.sleep(float(sys.argv[2]))
        body = b'{"speculative_algorithm": null}'
        self.send_response(200); self.send_header("Content-Length", str(len(body)))
        self.end_headers(); self.wfile.write(body)
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
'''


def _standin(tmp_path: Path, *args: str) -> LaunchSpec:
    script = tmp_path / "standin.py"
    script.write_text(SLOW_HEALTH)
    port = free_port()
    return LaunchSpec(argv=(sys.executable, str(script), str(port), *args), env={},
                      url=f"http://127.0.0.1:{port}", api_key=None, config="baseline",
                      host="127.0.0.1", port=port, prefix_len=2,
                      launcher=LocalLauncher((sys.executable, str(script))), simulated=False)


def test_readiness_waits_for_a_slow_health_generate(tmp_path: Path) -> None:
    # SGLang's /health_generate runs a generation: 1.0 s idle on an H200, more under load.
    spec = _standin(tmp_path, "3.0")
    handle = server.launch(spec, tmp_path / "log.txt", startup_timeout_s=20, poll_s=0.2)
    try:
        assert handle.alive()
    finally:
        handle.stop()


def test_progress_after_the_first_second_reaches_the_callback(tmp_path: Path) -> None:
    spec = _standin(tmp_path, "0.1", "2.5")
    seen: list[tuple[float, str]] = []
    handle = server.launch(spec, tmp_path / "log.txt", startup_timeout_s=20, poll_s=0.2,
                           on_progress=lambda t, line: seen.append((t, line)))
    handle.stop()
    assert seen
    assert seen[0][0] >= 1.0


def test_live_session_progress_survives_a_long_start(tmp_path: Path) -> None:
    # The real-SGLang failure: a one-argument progress function handed to the launcher.
    lines: list[str] = []
    report = server._start_progress("baseline", lines.append)
    report(6.2, "Load weight begin")
    assert lines == ["baseline: starting, 6 s so far: Load weight begin"]


def test_any_exception_during_start_stops_the_server(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(safety_net, "_registry", set())
    spec = _standin(tmp_path, "0.1", "5.0")  # loads for 5 s: the callback fires first

    def broken(elapsed: float, line: str) -> None:
        raise TypeError("a progress callback of the wrong shape")

    started: list[int] = []
    real_popen = subprocess.Popen

    def recording(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        proc = real_popen(*args, **kwargs)  # type: ignore[call-overload]
        started.append(proc.pid)
        return proc  # type: ignore[no-any-return]

    monkeypatch.setattr(subprocess, "Popen", recording)
    with pytest.raises(TypeError):
        server.launch(spec, tmp_path / "log.txt", startup_timeout_s=20, poll_s=0.2,
                      on_progress=broken)
    assert started
    assert not psutil.pid_exists(started[0]) or psutil.Process(started[0]).status() == "zombie"
    assert safety_net.live_handles() == []


def test_port_with_time_wait_sockets_is_free(tmp_path: Path) -> None:
    # A server that closes its keep-alive connections first leaves TIME_WAIT on its port.
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = listener.accept()
    conn.close()  # the server side closes first: its end goes to TIME_WAIT
    client.close()
    listener.close()

    def states() -> set[str]:
        return {c.status for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port}

    # The kernel moves the server's end to TIME_WAIT when the client's FIN arrives.
    deadline = time.monotonic() + 10
    while psutil.CONN_TIME_WAIT not in states() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert psutil.CONN_TIME_WAIT in states()
    assert not port_in_use("127.0.0.1", port)


# -- [server] gpus and CUDA_VISIBLE_DEVICES --------------------------------------------------------

def test_gpus_reach_the_server_and_the_gpu_check() -> None:
    p = parse_profile({"name": "t", "target": {"path": "/models/t"},
                       "server": {"tp": 2, "gpus": [2, 3]}})
    assert p.server.server_env()["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert p.server.server_gpus() == [2, 3]
    from specgate.serving.launch import build_command
    assert build_command(p, "baseline").env["CUDA_VISIBLE_DEVICES"] == "2,3"


def test_cuda_visible_devices_in_env_decides_the_checked_gpus() -> None:
    p = parse_profile({"name": "t", "server": {"tp": 1,
                                               "env": {"CUDA_VISIBLE_DEVICES": "5"}}})
    assert p.server.server_gpus() == [5]
    uuids = parse_profile({"name": "t", "server": {"env": {"CUDA_VISIBLE_DEVICES": "GPU-1a"}}})
    assert uuids.server.server_gpus() == "GPU-1a"


def test_gpus_and_cuda_visible_devices_must_agree() -> None:
    from specgate.core.errors import ProfileError
    with pytest.raises(ProfileError, match="CUDA_VISIBLE_DEVICES"):
        parse_profile({"name": "t", "server": {"gpus": [0],
                                               "env": {"CUDA_VISIBLE_DEVICES": "1"}}})


# -- one hypothesis for break-even and speed-up ----------------------------------------------------

def test_breakeven_and_speedup_never_contradict(monkeypatch: pytest.MonkeyPatch) -> None:
    import random

    from specgate.core.attachment import Attachment
    from specgate.plot import live as live_plots

    # The statuses are under test, not the charts the claims attach: drawing those would take
    # most of the time of 200 trials.
    for chart in ("breakeven", "tps_repeats"):
        monkeypatch.setattr(live_plots, chart,
                            lambda *_a, _name=chart, **_k: Attachment(_name, b"", "png"))
    rng = random.Random(3)
    for trial in range(200):
        base_rate, speedup = 80.0, rng.uniform(0.9, 1.1)
        base, spec = [], []
        for i in range(6):
            tokens = rng.randint(30, 120)
            b = base_rate * rng.lognormvariate(0, 0.1)
            s = b * speedup * rng.lognormvariate(0, 0.05)
            verify = max(1, round((tokens - 1) / rng.uniform(1.8, 2.6)))
            base.append(_row(prompt=f"p{i}", completion=tokens, verify=None, tps=b))
            spec.append(_row(prompt=f"p{i}", completion=tokens, verify=verify, tps=s))
        bench_ = Sampling(repeats=1, max_repeats=1)
        live_ = _live(build_measurement(config="baseline", url="x", template=PLAIN,
                                        sampling=bench_, samples=base),
                      build_measurement(config="speculative", url="x", template=PLAIN,
                                        sampling=bench_, samples=spec))
        profile = _profile(speedup_min=1.0)
        be = spec_claims.breakeven_claim(profile, live_).status
        sp = spec_claims.speedup_claim(profile, live_).status
        assert be == sp, (trial, be, sp)


# -- a fixed xdist --testrunuid --------------------------------------------------------------------

def test_results_of_an_earlier_run_with_the_same_id_are_not_reused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[str] = []

    def fake_run_live(profile: object, reports_dir: Path, **kw: object) -> LiveResults:
        runs.append("measured")
        return _live(None, None)

    monkeypatch.setattr(live, "run_live", fake_run_live)
    live.run_live_once(_profile(), tmp_path, "f" * 32, not_before=0.0)
    live.run_live_once(_profile(), tmp_path, "f" * 32, not_before=0.0)
    assert runs == ["measured"]  # the same run: read back
    live.run_live_once(_profile(), tmp_path, "f" * 32, not_before=time.time() + 1)
    assert runs == ["measured", "measured"]  # a later run with the same id: measured again


# -- samples, rows, profiles and live results for the tests below ----------------------------------

def _sample(gen: object, prompt: str = "p1") -> RequestSample:
    from specgate.serving.client import Generation
    assert isinstance(gen, Generation)
    return RequestSample(
        repeat=1, prompt_id=prompt, category="chat", prompt_tokens=gen.prompt_tokens,
        completion_tokens=gen.completion_tokens, spec_verify_ct=gen.spec_verify_ct,
        ttft_s=gen.ttft_s, e2e_s=gen.e2e_s, server_e2e_s=gen.server_e2e_s,
        finish_reason=gen.finish_reason, chunks=gen.chunks, first_tokens=gen.first_tokens,
        median_gap_s=passes._median_gap(gen.arrivals_s))


def _row(*, prompt: str = "p1", completion: int, verify: int | None,
         tps: float = 100.0) -> RequestSample:
    decode_s = (completion - 1) / tps
    return RequestSample(1, prompt, "chat", 10, completion, verify, 0.02, 0.02 + decode_s,
                         None, "stop", completion)


def _profile(**thresholds: object) -> object:
    return parse_profile({"name": "t", "speculative": {"num_steps": 2, "eagle_topk": 1,
                                                       "num_draft_tokens": 3},
                          "thresholds": {"baseline_tps_min": 1.0, "accept_len_min": 1.0,
                                         **thresholds}})


def _live(base: object, spec: object) -> LiveResults:
    return LiveResults("t", False, ConfigRun("baseline", measurement=base),  # type: ignore[arg-type]
                       ConfigRun("speculative", measurement=spec,  # type: ignore[arg-type]
                                 server_info={"speculative_algorithm": "EAGLE3"}))


# -- the harness's figures against the simulator's own clock, in every mode -----------------------

@pytest.mark.parametrize("mode", ["merged first message (default)", "one token per message",
                                  "three steps merged", "buffering proxy"])
def test_live_figures_match_the_servers_own_clock(tmp_path: Path, mode: str) -> None:
    from benchmarks import accuracy

    kept: dict[str, object] = {}
    row = accuracy.simulator_mode(tmp_path, mode, accuracy.MODES[mode], max_new_tokens=128,
                                  per_category=2, keep=kept)
    assert row["requests"] == 14
    assert row["accept_len"] == pytest.approx(row["true_accept_len"], rel=1e-12)  # exact counts
    if mode == "buffering proxy":
        # Every stream arrived in one burst: its tok/s is the buffer's, and the claims refuse it.
        assert row["bursts"] == 14
        assert row["tps"] > 20 * row["true_tps"]
    else:
        assert row["bursts"] == 0
        # Per request within what the client can observe of the simulator's own clock, however
        # loaded the machine (sim_support.Served).
        served = sim_support.timed_as_served(kept["measurement"], kept["served"])
        assert (served.requests, served.tps) == (14, pytest.approx(row["true_tps"]))


# -- one-token answers, unpaired prompts, untimed decode

def test_a_one_token_baseline_answer_is_not_a_speculative_baseline() -> None:
    rows = [_row(prompt=f"p{i}", completion=40, verify=None) for i in range(4)]
    rows.append(dataclasses.replace(_row(prompt="p9", completion=1, verify=None)))
    base = build_measurement(config="baseline", url="x", template=PLAIN, sampling=Sampling(),
                             samples=rows)
    result = perf_claims.baseline_tps_claim(_profile(), _live(base, None))
    assert result.status is Status.PASSED, result.message


def test_all_one_token_speculative_answers_give_a_reason_not_a_crash() -> None:
    spec = build_measurement(config="speculative", url="x", template=PLAIN, sampling=Sampling(),
                             samples=[_row(prompt=f"p{i}", completion=1, verify=None)
                                      for i in range(3)])
    result = spec_claims.accept_len_claim(_profile(), _live(None, spec))
    assert result.status is Status.BROKEN
    assert "no verify pass ran" in result.message


def test_decode_without_tokens_gives_no_cycle_time_instead_of_a_crash() -> None:
    # Every final message repeats the first message's count: time passed, no tokens after it.
    rows = [dataclasses.replace(_row(prompt=f"p{i}", completion=5, verify=2), first_tokens=5)
            for i in range(3)]
    m = build_measurement(config="speculative", url="x", template=PLAIN, sampling=Sampling(),
                          samples=rows)
    assert "cycle_ms" not in m.stats
    assert "tps" not in m.stats
    assert m.stats["accept_len"].mean == pytest.approx(2.5)


def test_speedup_without_shared_prompts_is_broken_with_the_reason() -> None:
    base = build_measurement(config="baseline", url="x", template=PLAIN, sampling=Sampling(),
                             samples=[_row(prompt=f"b{i}", completion=40, verify=None)
                                      for i in range(3)])
    spec = build_measurement(config="speculative", url="x", template=PLAIN, sampling=Sampling(),
                             samples=[_row(prompt=f"s{i}", completion=40, verify=20, tps=150.0)
                                      for i in range(3)])
    for claim in (spec_claims.speedup_claim, spec_claims.breakeven_claim):
        result = claim(_profile(), _live(base, spec))
        assert result.status is Status.BROKEN, (claim, result.message)
        assert "0 prompt(s) were timed on both servers" in result.message


CRASH_LOGS = (Path(__file__).parents[2] / "benchmarks" / "results"
              / "2026-12-03-h200-tiny-llama-4l-eager" / "faults-kill-stop-refuse-oom" / "logs")


@pytest.mark.parametrize(("log", "said"), [
    ("drafter-wide-speculative-server.log",
     "RuntimeError: mat1 and mat2 shapes cannot be multiplied (13x768 and 1536x512)"),
    ("oom-fraction-baseline-server.log",
     "ValueError: Loaded weights leave no GPU memory for the KV cache under "
     "--mem-fraction-static=0.05. Raise --mem-fraction-static above 0.095 (minimum viable = 1 - "
     "available/pre = 0.0950). If using speculative decoding, draft weights are now counted."),
    ("oom-holder-baseline-server.log",
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 112.00 MiB."),
])
def test_the_error_a_crashed_sglang_printed_is_found_above_its_crash_diagnostics(
        log: str, said: str) -> None:
    """Real SGLang 0.5.17 logs of three starts that failed on an H200: the exception line sits
    above the crash diagnostics and the process-tree kill, out of reach of a short tail."""
    found = server.server_error(CRASH_LOGS / log)
    assert found is not None
    assert found.startswith(said)
    assert said not in server._tail(CRASH_LOGS / log, 3)


def test_a_log_tail_cuts_sglangs_one_line_server_args() -> None:
    log = CRASH_LOGS / "oom-fraction-baseline-server.log"
    longest = max(len(line) for line in log.read_text(encoding="utf-8").splitlines())
    assert longest > 10_000  # SGLang logs its whole ServerArgs on one line
    tail = server._tail(log, 60)
    assert "server_args=ServerArgs(model_path=" in tail
    assert max(len(line) for line in tail.splitlines()) <= server.TAIL_LINE_CHARS + 40
    assert "more characters)" in tail


def test_a_secret_across_the_cut_of_a_long_line_is_masked_whole(tmp_path: Path) -> None:
    from specgate.core.redact import Redactor

    secret = "hf_" + "s3cr3tvalue" * 4
    line = "x" * (server.TAIL_LINE_CHARS - 10) + f" token={secret} " + "y" * 200
    log = tmp_path / "server.log"
    log.write_text(f"{line}\nValueError: bad token {secret}\n", encoding="utf-8")
    redact = Redactor([secret]).redact
    tail = server._tail(log, 5, redact)
    assert secret[:8] not in tail, tail
    said = server.server_error(log, redact)
    assert said is not None
    assert said.startswith("ValueError: bad token ")
    assert secret[:8] not in said
