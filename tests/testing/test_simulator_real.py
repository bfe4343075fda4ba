"""The simulator by default behaves as real SGLang 0.5.17 did on an H200.

Ground truth: tests/data/real-sglang-0.5.17/transcripts.txt, the raw bytes real SGLang sent.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from sim_support import target_and_drafter
from test_simulator import SPEC_FLAGS, Sim, assert_on_one_clock, free_port, kill_tree

from specgate.testing.simulator import model

# Its tests share a costly fixture: one xdist worker runs them all (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("test_simulator_real")

TRANSCRIPTS = Path(__file__).parents[1] / "data" / "real-sglang-0.5.17" / "transcripts.txt"
TRUTH_ENV = model.ENV_TRUTH


# --- the recorded transcripts ----------------------------------------------------------


def recorded() -> dict[str, bytes]:
    """Each recorded exchange's raw response bytes, by name (stream, plain, one_token)."""
    raw = TRANSCRIPTS.read_bytes()
    out = {}
    for part in raw.split(b"==== ")[1:]:
        name = part.split(b" ", 1)[0].decode()
        start = part.find(b"HTTP/1.1 ")
        if start >= 0:
            out[name] = part[start:].rstrip(b"\n") + (b"\n" if name != "plain" else b"")
    return out


def split_response(raw: bytes) -> tuple[list[str], list[bytes], bytes]:
    """(header names in order, chunk payloads for chunked bodies, plain body)."""
    head, _, body = raw.partition(b"\r\n\r\n")
    names = [line.split(b":", 1)[0].decode() for line in head.split(b"\r\n")[1:]]
    chunks: list[bytes] = []
    if b"Transfer-Encoding: chunked" in head:
        rest = body
        while True:
            size_line, _, rest = rest.partition(b"\r\n")
            assert re.fullmatch(rb"[0-9a-f]+", size_line), size_line
            size = int(size_line, 16)
            if size == 0:
                assert rest.startswith(b"\r\n")
                break
            chunks.append(rest[:size])
            assert rest[size:size + 2] == b"\r\n"
            rest = rest[size + 2:]
        return names, chunks, b""
    return names, chunks, body


def messages(chunks: list[bytes]) -> list[dict[str, Any]]:
    out = []
    for chunk in chunks:
        assert chunk.startswith(b"data: "), chunk[:40]
        assert chunk.endswith(b"\n\n"), chunk[-40:]
        payload = chunk[len(b"data: "):-2]
        if payload != b"[DONE]":
            assert b": " not in payload.split(b'"text"', 1)[0]  # compact JSON
            out.append(json.loads(payload))
    return out


def raw_request(port: int, body: dict[str, Any], timeout: float = 10) -> bytes:
    """One POST /generate on a fresh socket; the raw response up to its end."""
    data = json.dumps(body).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        got = b""
        while True:
            piece = sock.recv(65536)
            got += piece
            if not piece or (got.endswith(b"0\r\n\r\n") and b"chunked" in got):
                break
            head, sep, rest = got.partition(b"\r\n\r\n")
            match = re.search(rb"content-length: (\d+)", head)
            if sep and match and len(rest) >= int(match.group(1)):
                break
    return got


# --- running the simulator with its defaults ---------------------------------------------


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return target_and_drafter(tmp_path_factory.mktemp("models"), {
        "architectures": ["LlamaForCausalLM"], "max_position_embeddings": 2048}, positions=2048)


def spec_args(dirs: tuple[Path, Path]) -> list[str]:
    return ["--model-path", str(dirs[0]), *SPEC_FLAGS,
            "--speculative-draft-model-path", str(dirs[1])]


@contextlib.contextmanager
def launched(tmp_path: Path, args: list[str], *, port: int | None = None,
             env: dict[str, str] | None = None, ready: bool = True) -> Iterator[Sim]:
    """The simulator with its default timing (no SPECGATE_SIM_* overrides unless given)."""
    port = port or free_port()
    log_path = tmp_path / f"sim-{port}-{time.monotonic_ns()}.log"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SPECGATE_SIM_")}
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "specgate.testing.simulator", *args, "--port", str(port)],
            stdout=log_file, stderr=subprocess.STDOUT, env={**clean, **(env or {})},
        )
    sim = Sim(proc, f"http://127.0.0.1:{port}", log_path)
    try:
        if ready:
            sim.wait_ready(30)
        yield sim
    finally:
        if proc.poll() is None:
            kill_tree(proc)


@contextlib.contextmanager
def launched_with_fault(tmp_path: Path, args: list[str],
                        fault: str) -> Iterator[tuple[Sim, Path]]:
    """The simulator with SPECGATE_SIM_FAULT=fault, and the file its ground truth goes to."""
    truth = tmp_path / "truth.jsonl"
    env = {"SPECGATE_SIM_FAULT": fault, "SPECGATE_SIM_START_DELAY_S": "0.1",
           TRUTH_ENV: str(truth)}
    with launched(tmp_path, args, env=env) as sim:
        yield sim, truth


def port_of(sim: Sim) -> int:
    return int(sim.url.rsplit(":", 1)[1])


@pytest.fixture(scope="module")
def spec(dirs: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    tmp = tmp_path_factory.mktemp("spec")
    with launched(tmp, spec_args(dirs), env={TRUTH_ENV: str(tmp / "truth.jsonl")}) as sim:
        yield sim


def truth_of(sim: Sim, rid: str) -> model.RequestTruth:
    path = Path(sim.log_path.parent / "truth.jsonl")
    found = [r for r in model.read_truth(path) if r.rid == rid]
    assert len(found) == 1, f"{rid} not in {path}"
    return found[0]


def stream(sim: Sim, body: dict[str, Any],
           timeout: float = 30) -> tuple[list[dict[str, Any]], list[float]]:
    events, stamps = [], []
    with requests.post(sim.url + "/generate", json={**body, "stream": True}, stream=True,
                       timeout=timeout) as reply:
        for line in reply.iter_lines(chunk_size=None):
            if line.startswith(b"data: {"):
                stamps.append(time.monotonic())
                events.append(json.loads(line[6:]))
    return events, stamps


# --- 1. start-up and health ------------------------------------------------------------


def test_default_start_outlasts_the_first_progress_report(
    dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    started = time.monotonic()
    with launched(tmp_path, ["--model-path", str(dirs[0])], ready=False) as sim:
        codes = []
        while time.monotonic() - started < 30:
            with contextlib.suppress(requests.ConnectionError):
                codes.append(sim.get("/health_generate", timeout=5).status_code)
                if codes[-1] == 200:
                    break
            time.sleep(0.05)
        took = time.monotonic() - started
    assert codes[-1] == 200
    assert 503 in codes
    # The harness reports progress first after 1 s; the start must outlast it.
    assert took >= model.DEFAULT_START_DELAY_S >= 1.5


def test_health_generate_takes_about_a_second(spec: Sim) -> None:
    # Real SGLang 0.5.17: 1.003 s idle, one one-token generation polled once a second.
    assert model.DEFAULT_HEALTH_GENERATE_S == 1.0
    for path in ("/health_generate", "/health"):
        start = time.monotonic()
        assert spec.get(path, timeout=30).status_code == 200
        took = time.monotonic() - start
        # One generation's wait: never answered before it, nor after a second one.
        assert 0.95 <= took < 2 * model.DEFAULT_HEALTH_GENERATE_S, (path, took)


# --- 2. wire format against the transcripts --------------------------------------------


def test_stream_bytes_have_sglangs_framing_headers_and_key_order(spec: Sim) -> None:
    real = recorded()
    real_names, real_chunks, _ = split_response(real["stream"])
    real_msgs = messages(real_chunks)
    body = {"text": "Hello world number", "stream": True,
            "sampling_params": {"max_new_tokens": 24, "temperature": 0}}
    got = raw_request(port_of(spec), body)
    assert got.startswith(b"HTTP/1.1 200 OK\r\n")
    names, chunks, _ = split_response(got)
    assert names == real_names  # date, server, content-type, vary, Transfer-Encoding
    head = got.split(b"\r\n\r\n", 1)[0]
    for line in (b"server: uvicorn", b"content-type: text/event-stream; charset=utf-8",
                 b"vary: Origin", b"Transfer-Encoding: chunked"):
        assert line in head.split(b"\r\n")
    assert chunks[-1] == real_chunks[-1] == b"data: [DONE]\n\n"
    sims = messages(chunks)
    for mine, theirs in ((sims[0], real_msgs[0]), (sims[-1], real_msgs[-1])):
        assert list(mine) == list(theirs) == ["text", "output_ids", "meta_info"]
        assert list(mine["meta_info"]) == list(theirs["meta_info"])
    if len(sims) > 2:
        assert list(sims[1]["meta_info"]) == list(real_msgs[1]["meta_info"])
    assert all(m["meta_info"]["finish_reason"] is None for m in sims[:-1])
    for earlier, later in itertools.pairwise(sims):
        assert later["text"].startswith(earlier["text"])
        assert later["output_ids"][:len(earlier["output_ids"])] == earlier["output_ids"]


def test_plain_and_one_token_bodies_match_the_transcripts(spec: Sim) -> None:
    real = recorded()
    names, _, real_body = split_response(real["plain"])
    got = raw_request(port_of(spec), {"text": "Hello world number",
                                      "sampling_params": {"max_new_tokens": 24,
                                                          "temperature": 0}})
    my_names, _, my_body = split_response(got)
    assert my_names == names  # date, server, content-length, content-type, vary
    assert list(json.loads(my_body)["meta_info"]) == list(json.loads(real_body)["meta_info"])
    _, real_chunks, _ = split_response(real["one_token"])
    one = {"text": "Hi", "stream": True, "sampling_params": {"max_new_tokens": 1,
                                                           "temperature": 0}}
    _, chunks, _ = split_response(raw_request(port_of(spec), one))
    assert len(chunks) == len(real_chunks) == 2
    mine, theirs = messages(chunks)[0]["meta_info"], messages(real_chunks)[0]["meta_info"]
    assert list(mine) == list(theirs)  # e2e_latency, then response_sent_to_client_ts
    assert mine["finish_reason"] == theirs["finish_reason"] == {"type": "length", "length": 1}


# --- 3. one-token answers ---------------------------------------------------------------


@pytest.mark.parametrize("streamed", [True, False])
def test_one_token_answers_have_no_spec_fields_on_a_speculative_server(
    spec: Sim, streamed: bool
) -> None:
    body = {"text": "one token only", "stream": streamed,
            "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
    with requests.post(spec.url + "/generate", json=body, timeout=10) as reply:
        text = reply.text
    payload = text.split("data: ", 1)[1].split("\n\n", 1)[0] if streamed else text
    meta = json.loads(payload)["meta_info"]
    assert meta["completion_tokens"] == 1
    assert not [key for key in meta if key.startswith("spec_")]
    assert truth_of(spec, meta["id"]).verify_ct == 0


# --- 4. merged first messages -------------------------------------------------------------


def test_first_message_carries_the_first_verify_cycle(spec: Sim) -> None:
    body = {"text": "merge me", "sampling_params": {"max_new_tokens": 64, "temperature": 0}}
    events, _ = stream(spec, body)
    first, final = events[0]["meta_info"], events[-1]["meta_info"]
    params = model.load_params(None, "draft", num_steps=3, eagle_topk=1, num_draft_tokens=4,
                               env={})
    plan = model.plan_request(params, "merge me", 64)
    assert first["completion_tokens"] == 1 + plan.tokens_per_event[0] > 1
    assert len(events) == final["spec_verify_ct"] == plan.verify_ct
    record = truth_of(spec, first["id"])
    assert record.first_message_tokens == first["completion_tokens"]
    assert record.messages == len(events)


def test_first_merge_is_configurable(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    with launched(tmp_path, spec_args(dirs), env={"SPECGATE_SIM_FIRST_MERGE": "0",
                                                  "SPECGATE_SIM_START_DELAY_S": "0.1"}) as sim:
        events, _ = stream(sim, {"text": "x", "sampling_params": {"max_new_tokens": 32}})
    assert events[0]["meta_info"]["completion_tokens"] == 1
    assert len(events) == events[-1]["meta_info"]["spec_verify_ct"] + 1


# --- 8. the truth log -------------------------------------------------------------------


def test_truth_log_gives_accept_length_and_decode_rate_on_the_servers_clock(spec: Sim) -> None:
    ids, completion, verify = [], 0, 0
    cycle_s = model.cycle_ms(model.SimParams(speculative=True)) / 1000  # SPEC_FLAGS's chain
    for i in range(4):
        body = {"text": f"truth prompt {i}",
                "sampling_params": {"max_new_tokens": 256, "ignore_eos": True}}
        started = time.monotonic()
        events, stamps = stream(spec, body)
        final, first = events[-1]["meta_info"], events[0]["meta_info"]
        record = truth_of(spec, final["id"])
        ids.append(final["id"])
        assert record.first_message_tokens == first["completion_tokens"] > 1
        assert record.decode_tokens == final["completion_tokens"] - first["completion_tokens"]
        assert record.verify_ct == final["spec_verify_ct"]
        assert record.accepted_drafts == final["spec_num_correct_drafts"]
        # One clock (CLOCK_MONOTONIC) in both processes: read after it was sent, each message
        # sent at its step's end or later and seen by the client after that.
        assert_on_one_clock(record, started, stamps)
        # The schedule: a verify cycle per release after the first message.
        assert record.due_decode_s == pytest.approx((record.verify_ct - 1) * cycle_s, rel=1e-6)
        completion += final["completion_tokens"]
        verify += final["spec_verify_ct"]
    records = [truth_of(spec, rid) for rid in ids]
    assert model.accept_length_of(records) == completion / verify
    true_tps = model.decode_tps_of(records)
    assert true_tps == pytest.approx(sum(r.decode_tokens for r in records)
                                     / sum(r.decode_s or 0.0 for r in records))
    truth_line = json.loads(
        (spec.log_path.parent / "truth.jsonl").read_text().splitlines()[-1])
    assert truth_line["decode_tps"] == pytest.approx(records[-1].decode_tps)
    assert {"t_first_sent", "t_final_sent", "t_first_due", "t_final_due", "completion_tokens",
            "first_message_tokens", "verify_ct", "accepted_drafts"} <= set(truth_line)


# --- 7. fault modes -----------------------------------------------------------------------


def test_stall_mid_stream_keeps_the_socket_open_and_the_process_alive(
    dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    with launched_with_fault(tmp_path, spec_args(dirs), "stall_mid_stream") as (sim, truth):
        body = {"text": "stall", "stream": True, "sampling_params": {"max_new_tokens": 64}}
        got = []
        with requests.post(sim.url + "/generate", json=body, stream=True,
                           timeout=(5, 1.0)) as reply:
            lines = reply.iter_lines(chunk_size=None)

            def read_all() -> None:
                for line in lines:
                    if line.startswith(b"data: "):
                        got.append(json.loads(line[6:]))

            with pytest.raises(requests.exceptions.ConnectionError, match="timed out"):
                read_all()
            assert len(got) == 3
            assert got[-1]["meta_info"]["finish_reason"] is None
            assert sim.proc.poll() is None
        assert sim.get("/health_generate", timeout=5).status_code == 503
        (record,) = model.read_truth(truth)
        assert (record.outcome, record.messages, record.t_final_sent) == ("stalled", 3, None)


def test_buffer_proxy_delivers_the_whole_stream_in_one_burst(
    dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    with launched_with_fault(tmp_path, ["--model-path", str(dirs[0])],
                             "buffer_proxy") as (sim, truth):
        body = {"text": "burst", "sampling_params": {"max_new_tokens": 128,
                                                     "ignore_eos": True}}
        started = time.monotonic()
        events, stamps = stream(sim, body)
    (record,) = model.read_truth(truth)
    assert len(events) == record.messages > 100
    assert record.t_first_sent is not None
    assert record.t_final_sent is not None
    assert record.t_delivered is not None
    # Made as decoded, released all at the end: no message arrived before the last was made.
    assert started <= record.t_received <= record.t_first_sent < record.t_final_sent
    assert record.t_final_sent <= record.t_delivered <= stamps[0]
    # Made on the default schedule: one 2 ms decode step per message after the first.
    assert record.due_decode_s == pytest.approx(
        (record.messages - 1) * model.DEFAULT_DECODE_MS / 1000, rel=1e-6)


# --- 2. server-side closes at shutdown -----------------------------------------------------


def time_wait_on(port: int) -> int:
    """TIME_WAIT sockets whose local port is `port` (/proc/net/tcp, state 06)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "06":
                    count += 1
    return count


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc/net/tcp")
def test_sigterm_closes_keep_alive_connections_and_the_port_can_be_reused(
    dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    port = free_port()
    env = {"SPECGATE_SIM_START_DELAY_S": "0.1", "SPECGATE_SIM_HEALTH_GENERATE_S": "0.05"}
    args = ["--model-path", str(dirs[0])]
    with launched(tmp_path, args, port=port, env=env) as sim:
        sessions = [requests.Session() for _ in range(3)]
        for session in sessions:  # keep-alive connections, idle at shutdown
            body = {"text": "keep", "sampling_params": {"max_new_tokens": 4}}
            assert session.post(sim.url + "/generate", json=body, timeout=5).status_code == 200
        sim.proc.send_signal(signal.SIGTERM)
        assert sim.proc.wait(timeout=15) == 0
        assert "Draining requests and shutting down" in sim.log()
        for session in sessions:
            session.close()  # the clients answer the server's FIN
    deadline = time.monotonic() + 5
    while time_wait_on(port) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert time_wait_on(port) >= 1, "no TIME_WAIT on the server's port"
    # A plain bind (no SO_REUSEADDR) is refused while they last; uvicorn and the simulator
    # bind with SO_REUSEADDR, so a new server starts on the same port at once.
    with socket.socket() as plain, pytest.raises(OSError, match="in use") as refused:
        plain.bind(("127.0.0.1", port))
    assert refused.value.errno == errno.EADDRINUSE
    with launched(tmp_path, args, port=port, env=env) as again:
        assert again.generate({"text": "again", "sampling_params": {"max_new_tokens": 3}}
                              ).status_code == 200
