"""Tests for specgate.testing.simulator run as a real server subprocess on loopback."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests
from ckpt_support import rewrite, tiny_drafter
from sim_support import target_and_drafter

from specgate.io.safetensors_io import TensorSpec
from specgate.serving.launch import free_port
from specgate.testing.generate import tiny, write_drafter
from specgate.testing.simulator import args as sim_args
from specgate.testing.simulator import faults, model

# Its tests share a costly fixture: one xdist worker runs them all (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("test_simulator")

SPEC_KEYS = {
    "spec_verify_ct",
    "spec_accept_length",
    "spec_accept_rate",
    "spec_num_correct_drafts",
    "spec_num_proposed_drafts",
    "spec_correct_drafts_histogram",
    "spec_accepted_drafts",
    "spec_proposed_drafts",
    "spec_accept_histogram",
}
ALWAYS_META = {
    "id",
    "finish_reason",
    "prompt_tokens",
    "weight_version",
    "num_retractions",
    "reasoning_tokens",
    "completion_tokens",
    "cached_tokens",
    "cached_tokens_details",
    "dp_rank",
}
SPEC_FLAGS = (
    "--speculative-algorithm", "EAGLE3",
    "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1",
    "--speculative-num-draft-tokens", "4",
)


@dataclass
class Sim:
    proc: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        return requests.get(self.url + path, timeout=kwargs.pop("timeout", 5), **kwargs)

    def generate(self, body: dict[str, Any], **kwargs: Any) -> requests.Response:
        return requests.post(self.url + "/generate", json=body,
                             timeout=kwargs.pop("timeout", 30), **kwargs)

    def wait_ready(self, timeout_s: float = 15.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"simulator exited:\n{self.log()}"
            with contextlib.suppress(requests.ConnectionError):
                if self.get("/health", timeout=3).status_code == 200:
                    return
            time.sleep(0.05)
        raise AssertionError(f"simulator not ready in {timeout_s} s:\n{self.log()}")


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(psutil.NoSuchProcess):
        parent = psutil.Process(proc.pid)
        for child in parent.children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
        parent.kill()
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return target_and_drafter(tmp_path_factory.mktemp("models"), {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2",
        "max_position_embeddings": 8192, "eos_token_id": 163585,
    }, positions=4096)


@contextlib.contextmanager
def running(
    tmp_path: Path,
    *flags: str,
    env: Mapping[str, str] | None = None,
    wait: bool = True,
) -> Iterator[Sim]:
    port = free_port()
    log_path = tmp_path / f"sim-{port}.log"
    # Fast start and health checks here; tests/testing/test_simulator_real.py covers the defaults.
    full_env = {**os.environ, "SPECGATE_SIM_START_DELAY_S": "0.05",
                "SPECGATE_SIM_HEALTH_GENERATE_S": "0.05", **(env or {})}
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "specgate.testing.simulator", *flags, "--port", str(port)],
            stdout=log_file, stderr=subprocess.STDOUT, env=full_env,
        )
    sim = Sim(proc, f"http://127.0.0.1:{port}", log_path)
    try:
        if wait:
            sim.wait_ready()
        yield sim
    finally:
        kill_tree(proc)


def spec_flags(dirs: tuple[Path, Path], *extra: str) -> tuple[str, ...]:
    target, draft = dirs
    return ("--model-path", str(target), *SPEC_FLAGS,
            "--speculative-draft-model-path", str(draft), "--context-length", "4096", *extra)


@pytest.fixture(scope="module")
def spec_sim(dirs: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    flags = spec_flags(dirs, "--enable-metrics", "--decode-log-interval", "5")
    folder = tmp_path_factory.mktemp("spec")
    with running(folder, *flags, env={model.ENV_TRUTH: str(folder / "truth.jsonl")}) as sim:
        yield sim


@pytest.fixture(scope="module")
def base_sim(dirs: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    folder = tmp_path_factory.mktemp("base")
    with running(folder, "--model-path", str(dirs[0]),
                 env={model.ENV_TRUTH: str(folder / "truth.jsonl")}) as sim:
        yield sim


def served_as(sim: Sim, rid: str) -> model.RequestTruth:
    """The simulator's truth-log record of one request it answered."""
    (record,) = [r for r in model.read_truth(sim.log_path.parent / "truth.jsonl") if r.rid == rid]
    return record


def assert_on_one_clock(record: model.RequestTruth, sent_at: float, stamps: list[float]) -> None:
    """Client and simulator read one clock: the request is read after the client sent it, each
    message leaves at its scheduler step's end or later, and arrives after it left."""
    eps = 1e-6
    assert record.t_first_due is not None
    assert record.t_final_due is not None
    assert record.t_first_sent is not None
    assert record.t_final_sent is not None
    assert sent_at - eps <= record.t_received <= record.t_first_due + eps
    assert record.t_first_due - eps <= record.t_first_sent <= stamps[0] + eps
    assert record.t_final_due - eps <= record.t_final_sent <= stamps[-1] + eps


def stream_events(response: requests.Response) -> tuple[list[dict[str, Any]], list[float], bool]:
    events, stamps, done = [], [], False
    for line in response.iter_lines(chunk_size=None):  # each HTTP chunk as it arrives
        if not line:
            continue
        assert line.startswith(b"data: ")
        payload = line[len(b"data: "):]
        if payload == b"[DONE]":
            done = True
            continue
        events.append(json.loads(payload))
        stamps.append(time.monotonic())
    return events, stamps, done


# --- command line and start-up rules (in process) ---------------------------------------


def parse(*argv: str, env: Mapping[str, str] | None = None) -> sim_args.Resolved:
    return sim_args.parse(argv, env or {})


def test_tp_prefix_and_model_alias_parse() -> None:
    ns = sim_args.build_parser().parse_args(["--model", "org/m", "--tp", "8"])
    assert (ns.model_path, ns.tp_size) == ("org/m", 8)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model-path", "m", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["--model-path", "m", "--cuda-graph-max-bs", "8"], "ambiguous option"),
        (["--port", "1"], "required: --model-path"),
    ],
)
def test_bad_command_lines_exit_2_with_usage(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        sim_args.build_parser().parse_args(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: sglang serve")
    assert message in err


def test_topk_one_rewrites_draft_tokens_with_sglangs_warning(dirs: tuple[Path, Path]) -> None:
    resolved = parse("--model-path", str(dirs[0]), "--speculative-algorithm", "eagle3",
                     "--speculative-draft-model-path", str(dirs[1]), "--context-length", "4096",
                     "--speculative-num-steps", "2", "--speculative-eagle-topk", "1",
                     "--speculative-num-draft-tokens", "8")
    assert resolved.args["speculative_num_draft_tokens"] == 3
    assert resolved.params.num_draft_tokens == 3
    assert resolved.args["speculative_algorithm"] == "EAGLE3"
    assert sim_args.TOPK1_WARNING in resolved.warnings
    assert resolved.args["max_running_requests"] == 48


def test_steps_settings_are_all_or_none(dirs: tuple[Path, Path]) -> None:
    with pytest.raises(sim_args.StartupError, match="AssertionError"):
        parse("--model-path", str(dirs[0]), "--speculative-algorithm", "EAGLE3",
              "--speculative-draft-model-path", str(dirs[1]), "--speculative-eagle-topk", "1")
    auto = parse("--model-path", str(dirs[0]), "--speculative-algorithm", "EAGLE3",
                 "--speculative-draft-model-path", str(dirs[1]), "--context-length", "4096")
    assert (auto.params.num_steps, auto.params.eagle_topk, auto.params.num_draft_tokens) == (
        3, 1, 4)


def test_short_drafter_context_aborts_unless_overwrite_env(dirs: tuple[Path, Path]) -> None:
    flags = ("--model-path", str(dirs[0]), *SPEC_FLAGS, "--speculative-draft-model-path",
             str(dirs[1]))
    with pytest.raises(sim_args.StartupError) as exc:
        parse(*flags)
    text = str(exc.value)
    assert text.startswith("ValueError: User-specified context_length (8192) is greater than "
                           "the derived context_length (4096)")
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in text
    allowed = parse(*flags, env={"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"})
    assert any("greater than the derived" in w for w in allowed.warnings)


def test_missing_local_model_path_fails_like_sglang(tmp_path: Path) -> None:
    with pytest.raises(sim_args.StartupError, match="is not a local folder"):
        parse("--model-path", str(tmp_path / "absent"))


def test_fault_parsing() -> None:
    parsed = faults.parse_faults("die_after:3, no_spec_fields,slow_start:1.5")
    assert parsed.die_after == 3
    assert "no_spec_fields" in parsed
    assert parsed.slow_start_s == 1.5
    with pytest.raises(ValueError, match="known faults"):
        faults.parse_faults("explode")
    with pytest.raises(ValueError, match="known faults"):
        faults.parse_faults("die_after")


# --- the server on the wire -------------------------------------------------------------


def test_health_is_503_during_start_delay_then_200(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    with running(tmp_path, "--model-path", str(dirs[0]), wait=False,
                 env={"SPECGATE_SIM_START_DELAY_S": "1.0"}) as sim:
        codes = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (not codes or codes[-1] != 200):
            with contextlib.suppress(requests.ConnectionError):
                codes.append(sim.get("/health_generate", timeout=3).status_code)
            time.sleep(0.05)
        assert codes[0] == 503
        assert codes[-1] == 200
        assert sim.get("/ready").status_code == 200
        log = sim.log()
        assert log.index("server_args=ServerArgs(") < log.index("Load weight begin")
        assert log.index("Capture cuda graph") < log.index("fired up and ready to roll")


def test_plain_generate_shape_and_spec_fields(spec_sim: Sim) -> None:
    body = {"text": "Explain speculative decoding.",
            "sampling_params": {"max_new_tokens": 64, "temperature": 0}}
    reply = spec_sim.generate(body)
    assert reply.status_code == 200
    out = reply.json()
    assert set(out) == {"text", "output_ids", "meta_info"}
    meta = out["meta_info"]
    assert set(meta) == ALWAYS_META | {"e2e_latency", "response_sent_to_client_ts"} | SPEC_KEYS
    assert len(out["output_ids"]) == meta["completion_tokens"]
    assert meta["finish_reason"]["type"] in {"stop", "length"}
    assert meta["spec_accept_length"] == pytest.approx(
        meta["completion_tokens"] / meta["spec_verify_ct"])
    assert meta["spec_num_proposed_drafts"] == meta["spec_verify_ct"] * 3
    assert meta["spec_accept_rate"] == pytest.approx(
        meta["spec_num_correct_drafts"] / meta["spec_num_proposed_drafts"])
    assert sum(meta["spec_correct_drafts_histogram"]) == meta["spec_verify_ct"]
    assert meta["e2e_latency"] > 0
    again = spec_sim.generate(body).json()
    assert again["text"] == out["text"]
    assert again["meta_info"]["cached_tokens"] == meta["prompt_tokens"] - 1


def test_stream_is_cumulative_with_spec_fields_only_at_the_end(spec_sim: Sim) -> None:
    body = {"input_ids": [1, 2, 3, 4], "stream": True,
            "sampling_params": {"max_new_tokens": 40, "temperature": 0}}
    with requests.post(spec_sim.url + "/generate", json=body, stream=True, timeout=10) as reply:
        assert reply.headers["Content-Type"].startswith("text/event-stream")
        events, _, done = stream_events(reply)
    assert done
    final = events[-1]["meta_info"]
    assert final["finish_reason"] is not None
    assert SPEC_KEYS <= set(final)
    # The prefill token and the first verify cycle share the first message, then one per verify.
    assert len(events) == final["spec_verify_ct"]
    for earlier, later in itertools.pairwise(events):
        assert later["text"].startswith(earlier["text"])
        assert earlier["meta_info"]["finish_reason"] is None
        assert not SPEC_KEYS & set(earlier["meta_info"])
        assert "e2e_latency" not in earlier["meta_info"]
    assert events[0]["meta_info"]["completion_tokens"] > 1
    plain = spec_sim.generate({**body, "stream": False}).json()
    assert plain["text"] == events[-1]["text"]


def test_baseline_has_no_spec_fields_and_one_event_per_token(base_sim: Sim) -> None:
    body = {"text": "hi", "stream": True, "sampling_params": {"max_new_tokens": 12,
                                                              "temperature": 0}}
    with requests.post(base_sim.url + "/generate", json=body, stream=True, timeout=10) as reply:
        events, _, _ = stream_events(reply)
    counts = [e["meta_info"]["completion_tokens"] for e in events]
    assert counts == list(range(2, len(counts) + 2))  # the first message carries two tokens
    assert not SPEC_KEYS & set(events[-1]["meta_info"])
    info = base_sim.get("/server_info").json()
    assert info["speculative_algorithm"] is None
    assert info["simulated"] is True


def test_server_info_model_info_and_metrics(spec_sim: Sim) -> None:
    for i in range(3):
        spec_sim.generate({"text": f"warm {i}", "sampling_params": {"max_new_tokens": 30}})
    info = spec_sim.get("/server_info").json()
    assert info["simulated"] is True
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"],
            info["speculative_num_draft_tokens"], info["tp_size"]) == (3, 1, 4, 1)
    assert info["version"].startswith("0.5.")
    assert "specgate.testing.simulator" in info["launch_command"]
    assert info["internal_states"][0]["avg_spec_accept_length"] > 1
    assert spec_sim.get("/get_server_info").json()["version"] == info["version"]
    model_info = spec_sim.get("/model_info").json()
    assert model_info["architectures"] == ["DeepseekV3ForCausalLM"]
    assert model_info["model_type"] == "kimi_k2"
    assert spec_sim.get("/v1/models").json()["data"][0]["max_model_len"] == 4096
    metrics = spec_sim.get("/metrics").text
    assert "sglang:spec_verify_calls_total" in metrics
    assert spec_sim.get("/nope").status_code == 404


def test_metrics_need_enable_metrics(base_sim: Sim) -> None:
    assert base_sim.get("/metrics").status_code == 404


def test_flush_cache_is_400_while_a_request_runs(base_sim: Sim) -> None:
    body = {"text": "long one", "stream": True,
            "sampling_params": {"max_new_tokens": 5000, "ignore_eos": True}}
    with requests.post(base_sim.url + "/generate", json=body, stream=True, timeout=10) as reply:
        lines = reply.iter_lines()  # keep it referenced: dropping it closes the connection
        next(lines)
        assert base_sim.get("/flush_cache").status_code == 400
    # The client hung up; the server notices at its next event and stops counting the request.
    deadline = time.monotonic() + 5
    while requests.post(base_sim.url + "/flush_cache", timeout=5).status_code != 200:
        assert time.monotonic() < deadline, "flush_cache still refused after the stream ended"
        time.sleep(0.02)


def test_bad_requests_are_400(base_sim: Sim) -> None:
    assert base_sim.generate({"sampling_params": {}}).status_code == 400
    reply = base_sim.generate({"text": "x", "sampling_params": {"max_new_tokens": -1}})
    assert reply.status_code == 400
    assert "max_new_tokens" in reply.json()["error"]["message"]


def test_batch_input_returns_a_list(base_sim: Sim) -> None:
    out = base_sim.generate({"text": ["a", "b"], "sampling_params": {"max_new_tokens": 5}}).json()
    assert isinstance(out, list)
    assert len(out) == 2


def test_api_key_guards_all_but_health(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    with running(tmp_path, "--model-path", str(dirs[0]), "--api-key", "s3cret") as sim:
        body = {"text": "x", "sampling_params": {"max_new_tokens": 3}}
        denied = sim.generate(body)
        assert denied.status_code == 401
        assert denied.json() == {"error": "Unauthorized"}
        assert sim.generate(body, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert sim.generate(body, headers={"Authorization": "bearer s3cret"}).status_code == 200
        assert sim.get("/server_info").status_code == 401
        assert sim.get("/flush_cache").status_code == 401
        assert sim.get("/health").status_code == 200
        assert sim.get("/ready").status_code == 200
        # Real SGLang prints the key in its server_args line; the harness has to redact it.
        assert "api_key='s3cret'" in sim.log()


# --- processes --------------------------------------------------------------------------


def test_unknown_flag_exits_2_as_a_process(dirs: tuple[Path, Path]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "specgate.testing.simulator", "--model-path", str(dirs[0]),
         "--bogus"],
        capture_output=True, text=True, timeout=30, check=False,
    )
    assert done.returncode == 2
    assert "unrecognized arguments: --bogus" in done.stderr


def test_short_drafter_context_exits_1(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    target, draft = dirs
    flags = ("--model-path", str(target), *SPEC_FLAGS, "--speculative-draft-model-path",
             str(draft))
    with running(tmp_path, *flags, wait=False) as sim:
        assert sim.proc.wait(timeout=30) == 1
        assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in sim.log()
    with running(tmp_path, *flags,
                 env={"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}) as sim:
        assert "Warning: User-specified context_length" in sim.log()


def _drafter_missing(folder: Path, what: str) -> Path:
    """A copy of a whole tiny drafter with one thing wrong, as users have handed them over."""
    tiny_drafter(folder, config_overrides={"max_position_embeddings": 4096})
    weights = folder / "model.safetensors"
    if what == "everything":
        for path in folder.iterdir():
            path.unlink()
    elif what == "config":
        (folder / "config.json").unlink()
    elif what == "valid config":
        (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"],')
    elif what == "weights":
        weights.unlink()
    elif what == "whole weights":
        weights.write_bytes(weights.read_bytes()[:4096])  # a download cut short
    elif what == "right shapes":
        config = json.loads((folder / "config.json").read_text())
        config["intermediate_size"] *= 2
        (folder / "config.json").write_text(json.dumps(config))
    elif what == "d2t":
        rewrite(weights, {"d2t": None, "fc.weight": None})
    return folder


@pytest.mark.parametrize(("what", "said"), [
    ("everything", "does not appear to have a file named config.json"),
    ("config", "does not appear to have a file named config.json"),
    ("valid config", "is not a valid JSON file"),
    ("weights", "RuntimeError: Cannot find any model weights with"),
    ("whole weights", "safetensors_rust.SafetensorError: Error while deserializing header"),
    ("right shapes", "AssertionError: Attempted to load weight (torch.Size("),
])
def test_a_broken_drafter_folder_stops_the_start_as_sglang_does(
        dirs: tuple[Path, Path], tmp_path: Path, what: str, said: str) -> None:
    draft = _drafter_missing(tmp_path / "draft", what)
    flags = spec_flags((dirs[0], draft))
    with running(tmp_path, *flags, wait=False) as sim:
        assert sim.proc.wait(timeout=30) == 1, sim.log()
        log = sim.log()
    assert said in log, log
    assert "Traceback (most recent call last):" in log
    assert "The server is fired up" not in log


def test_a_drafter_missing_tensors_starts_and_is_never_accepted(
        dirs: tuple[Path, Path], tmp_path: Path) -> None:
    """SGLang copies the tensors it finds and does not check for the rest: it starts, and a
    draft model without its fc layer and d2t map proposes nothing the target accepts."""
    draft = _drafter_missing(tmp_path / "draft", "d2t")
    with running(tmp_path, *spec_flags((dirs[0], draft))) as sim:
        body = {"text": "Explain speculative decoding.",
                "sampling_params": {"max_new_tokens": 48, "temperature": 0}}
        meta = sim.generate(body).json()["meta_info"]
    # The first token comes from prefill; every verify after it yields one token and no draft.
    assert meta["spec_verify_ct"] == meta["completion_tokens"] - 1
    assert meta["spec_num_correct_drafts"] == 0


def _target_of_width(folder: Path, hidden: int) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
        "max_position_embeddings": 8192}))
    return folder


def test_a_drafter_for_a_wider_target_stops_at_its_warm_up(tmp_path: Path) -> None:
    """Its fc reads three 48-wide aux states; the target gives three 32-wide ones. SGLang 0.5.17
    loads it and dies at the warm-up request with the matmul's shape error."""
    target = _target_of_width(tmp_path / "target", 32)
    draft = tiny_drafter(tmp_path / "draft", config_overrides={
        "max_position_embeddings": 4096, "target_hidden_size": 48})
    rewrite(draft / "model.safetensors", {"fc.weight": TensorSpec("BF16", (32, 3 * 48))})
    with running(tmp_path, *spec_flags((target, draft)), wait=False) as sim:
        assert sim.proc.wait(timeout=30) == 1, sim.log()
        log = sim.log()
    assert "RuntimeError: mat1 and mat2 shapes cannot be multiplied (13x96 and 144x32)" in log
    assert "The server is fired up" not in log


def test_a_drafter_of_its_own_width_without_embed_tokens_is_never_accepted(
        tmp_path: Path) -> None:
    """48 wide, reading the 32-wide target's aux states: SGLang does not give it the target's
    embedding (the widths differ), so with no embed_tokens of its own it drafts from memory
    nothing loaded; it starts and nothing it proposes is accepted."""
    target = _target_of_width(tmp_path / "target", 32)
    draft = write_drafter(tmp_path / "draft", dataclasses.replace(tiny(), hidden_size=48),
                          fill="random", include_embed=False, config_overrides={
                              "max_position_embeddings": 4096, "target_hidden_size": 32})
    rewrite(draft / "model.safetensors", {"fc.weight": TensorSpec("BF16", (48, 3 * 32))})
    with running(tmp_path, *spec_flags((target, draft))) as sim:
        body = {"text": "Explain speculative decoding.",
                "sampling_params": {"max_new_tokens": 48, "temperature": 0}}
        meta = sim.generate(body).json()["meta_info"]
    assert meta["spec_verify_ct"] == meta["completion_tokens"] - 1
    assert meta["spec_num_correct_drafts"] == 0


def test_children_exist_and_follow_the_parent(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    with running(tmp_path, "--model-path", str(dirs[0]), "--tp-size", "2") as sim:
        children = psutil.Process(sim.proc.pid).children(recursive=True)
        assert len(children) == 3
        assert any("sglang::detokenizer" in " ".join(c.cmdline()) for c in children)
        sim.proc.send_signal(signal.SIGKILL)
        sim.proc.wait(timeout=5)
        _, alive = psutil.wait_procs(children, timeout=5)
        assert not alive
    with running(tmp_path, "--model-path", str(dirs[0])) as sim:
        children = psutil.Process(sim.proc.pid).children(recursive=True)
        sim.proc.terminate()
        assert sim.proc.wait(timeout=10) == 0
        _, alive = psutil.wait_procs(children, timeout=5)
        assert not alive


def test_a_second_sigterm_during_the_stop_changes_nothing(
        dirs: tuple[Path, Path], tmp_path: Path) -> None:
    """A far-side wrapper TERMs the server's process group and then every tagged pid, so the
    server may get a second TERM while the stop the first began is under way (here it drains
    a stalled request). That stop goes on to its end, once, and the server exits 0."""
    with running(tmp_path, *spec_flags(dirs, "--tp-size", "2"),
                 env={"SPECGATE_SIM_FAULT": "stall_mid_stream"}) as sim, \
            requests.post(sim.url + "/generate", json={**GEN, "stream": True}, stream=True,
                          timeout=60) as reply:
        events = reply.iter_lines(chunk_size=None)
        assert next(line for line in events if line.startswith(b"data: "))  # it is running
        children = psutil.Process(sim.proc.pid).children(recursive=True)
        sim.proc.send_signal(signal.SIGTERM)
        while "SIGTERM received" not in sim.log():
            assert sim.proc.poll() is None, sim.log()
            time.sleep(0.02)
        sim.proc.send_signal(signal.SIGTERM)
        assert sim.proc.wait(timeout=60) == 0, sim.log()
        log = sim.log()
        assert log.count("SIGTERM received") == 1, log
        assert log.count("Gracefully exiting... Remaining number of requests 1.") == 1, log
        _, alive = psutil.wait_procs(children, timeout=5)
        assert not alive


# --- fault modes ------------------------------------------------------------------------


def with_fault(dirs: tuple[Path, Path], tmp_path: Path, fault: str,
               wait: bool = True) -> contextlib.AbstractContextManager[Sim]:
    return running(tmp_path, *spec_flags(dirs), env={"SPECGATE_SIM_FAULT": fault}, wait=wait)


GEN = {"text": "hello", "sampling_params": {"max_new_tokens": 16, "temperature": 0}}


def test_fault_exit_at_start(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    with with_fault(dirs, tmp_path, "exit_at_start", wait=False) as sim:
        assert sim.proc.wait(timeout=30) == 1
        assert "CUDA out of memory" in sim.log()


def test_fault_never_ready(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    with with_fault(dirs, tmp_path, "never_ready", wait=False) as sim:
        # Its start-up is over (the port is open before it begins) and it is still not ready.
        deadline = time.monotonic() + 60
        while "Uvicorn running on" not in sim.log():
            assert sim.proc.poll() is None, sim.log()
            assert time.monotonic() < deadline, sim.log()
            time.sleep(0.05)
        assert sim.get("/health").status_code == 503
        assert sim.proc.poll() is None
        assert "ready to roll" not in sim.log()


def test_fault_slow_start(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    with with_fault(dirs, tmp_path, "slow_start:3", wait=False) as sim:
        deadline = time.monotonic() + 10  # a loaded box may take a while to bind the port
        while True:
            try:
                assert sim.get("/health").status_code == 503
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        sim.wait_ready()


def test_fault_die_after(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    with with_fault(dirs, tmp_path, "die_after:1") as sim:
        children = psutil.Process(sim.proc.pid).children(recursive=True)
        assert sim.generate(GEN).status_code == 200
        with pytest.raises(requests.ConnectionError):
            sim.generate(GEN)
        assert sim.proc.wait(timeout=10) == 1
        _, alive = psutil.wait_procs(children, timeout=5)
        assert not alive


def test_fault_hang_after(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    with with_fault(dirs, tmp_path, "hang_after:1") as sim:
        assert sim.generate(GEN).status_code == 200
        with pytest.raises(requests.Timeout):
            sim.generate(GEN, timeout=0.5)
        assert sim.get("/health").status_code == 503


@pytest.mark.parametrize(("fault", "status"), [("http500", 500), ("http503", 503)])
def test_fault_http_errors(dirs: tuple[Path, Path], tmp_path: Path, fault: str,
                           status: int) -> None:
    with with_fault(dirs, tmp_path, fault) as sim:
        reply = sim.generate(GEN)
        assert reply.status_code == status
        assert "error" in reply.json()


@pytest.mark.parametrize("fault", ["malformed_json", "truncated_json"])
def test_fault_bad_json(dirs: tuple[Path, Path], tmp_path: Path, fault: str) -> None:
    with with_fault(dirs, tmp_path, fault) as sim:
        reply = sim.generate(GEN)
        assert reply.status_code == 200
        with pytest.raises(ValueError):  # noqa: PT011 (any JSON decode error)
            reply.json()
        with requests.post(sim.url + "/generate", json={**GEN, "stream": True}, stream=True,
                           timeout=10) as streamed, pytest.raises(ValueError):  # noqa: PT011
            stream_events(streamed)


def test_fault_drop_stream(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    with with_fault(dirs, tmp_path, "drop_stream") as sim:
        body = {**GEN, "stream": True, "sampling_params": {"max_new_tokens": 64}}
        with requests.post(sim.url + "/generate", json=body, stream=True, timeout=10) as reply:
            with pytest.raises(requests.exceptions.ChunkedEncodingError):
                stream_events(reply)
        with pytest.raises(requests.exceptions.RequestException):
            sim.generate(GEN).json()


def test_fault_no_spec_fields(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    with with_fault(dirs, tmp_path, "no_spec_fields") as sim:
        meta = sim.generate(GEN).json()["meta_info"]
        assert not SPEC_KEYS & set(meta)
        assert meta["completion_tokens"] > 1


# --- the model holds on the wire --------------------------------------------------------


def test_measured_throughput_and_accept_length_match_truth(
    spec_sim: Sim, base_sim: Sim, capsys: pytest.CaptureFixture[str]
) -> None:
    params = model.SimParams(speculative=True)
    truth = model.truth(params)

    def decode_rate(sim: Sim, prompt: str) -> tuple[float, dict[str, Any], float,
                                                    model.RequestTruth]:
        body = {"text": prompt, "stream": True,
                "sampling_params": {"max_new_tokens": 128, "temperature": 0}}
        start = time.monotonic()
        with requests.post(sim.url + "/generate", json=body, stream=True, timeout=30) as reply:
            events, stamps, _ = stream_events(reply)
        wall = time.monotonic() - start
        meta = events[-1]["meta_info"]
        first_tokens = events[0]["meta_info"]["completion_tokens"]
        record = served_as(sim, meta["id"])
        assert_on_one_clock(record, start, stamps)
        assert (record.completion_tokens, record.first_message_tokens) == (
            meta["completion_tokens"], first_tokens)
        rate = (meta["completion_tokens"] - first_tokens) / (stamps[-1] - stamps[0])
        return rate, meta, wall - meta["e2e_latency"], record

    base = [decode_rate(base_sim, f"baseline prompt {i}") for i in range(4)]
    # The simulator's schedule is its model's: one decode step a token. (How late the
    # messages follow it is this machine's, and the client is held to that in test_bench.)
    base_due = model.due_decode_tps_of([r for *_, r in base])
    assert base_due == pytest.approx(truth.baseline_tps, rel=1e-6)
    base_tps = statistics.median(r for r, *_ in base)

    spec = [decode_rate(spec_sim, f"prompt {i}: write something long") for i in range(20)]
    spec_tps = sum(r for r, *_ in spec) / len(spec)
    verify = sum(m["spec_verify_ct"] for _, m, _, _ in spec)
    completion = sum(m["completion_tokens"] for _, m, _, _ in spec)
    # The counts are the model's plans exactly (each answer's last cycle cut at its EOS).
    plans = [model.plan_request(params, f"prompt {i}: write something long", 128)
             for i in range(20)]
    assert (completion, verify) == (sum(p.completion_tokens for p in plans),
                                    sum(p.verify_ct for p in plans))
    # Every cycle but the last of each answer runs at the drafter's tau.
    full = sum(p.verify_ct - 1 for p in plans)
    tau_full = sum(p.completion_tokens - 1 - p.tokens_per_event[-1] for p in plans) / full
    assert tau_full == pytest.approx(truth.tau, rel=0.01)
    # A verify cycle per release after the first message, which carries the first cycle's.
    for _, meta, _, record in spec:
        assert record.due_decode_s == pytest.approx(
            (meta["spec_verify_ct"] - 1) * truth.cycle_ms / 1000, rel=1e-6)
    overhead_ms = 1000 * sum(o for _, _, o, _ in base + spec) / len(base + spec)
    with capsys.disabled():
        print(
            f"\n[simulator accuracy] baseline tok/s {base_tps:.2f} vs {truth.baseline_tps:.2f} "
            f"({base_tps / truth.baseline_tps - 1:+.3%}); spec decode tok/s {spec_tps:.2f} "
            f"vs tau/cycle {truth.spec_tps:.2f} ({spec_tps / truth.spec_tps - 1:+.3%}); "
            f"tau {tau_full:.4f} vs {truth.tau:.4f} ({tau_full / truth.tau - 1:+.3%}); "
            f"client overhead per request {overhead_ms:.2f} ms"
        )


def test_argparse_namespace_round_trips_into_server_args() -> None:
    ns = argparse.Namespace(api_key="k", port=1)
    assert sim_args.server_args_repr(vars(ns)) == "ServerArgs(api_key='k', port=1)"


def test_concurrent_requests_all_complete(base_sim: Sim) -> None:
    def one(i: int) -> int:
        body = {"text": f"concurrent {i}", "stream": i % 2 == 0,
                "sampling_params": {"max_new_tokens": 20}}
        return base_sim.generate(body).status_code

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(one, range(16))) == [200] * 16
    assert base_sim.get("/health").status_code == 200


def test_refused_requests_leave_keep_alive_connections_usable(
    dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    with running(tmp_path, "--model-path", str(dirs[0]), "--api-key", "k") as sim:
        session = requests.Session()
        body = {"text": "x" * 500, "sampling_params": {"max_new_tokens": 3}}
        assert session.post(sim.url + "/generate", json=body, timeout=5).status_code == 401
        assert session.post(sim.url + "/nowhere", json=body, timeout=5).status_code == 401
        ok = session.post(sim.url + "/generate", json=body, timeout=5,
                          headers={"Authorization": "Bearer k"})
        assert ok.status_code == 200
        assert ok.json()["meta_info"]["completion_tokens"] >= 2


def test_port_in_use_exits_1(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        done = subprocess.run(
            [sys.executable, "-m", "specgate.testing.simulator", "--model-path", str(dirs[0]),
             "--port", port],
            capture_output=True, text=True, timeout=30, check=False,
        )
    assert done.returncode == 1
    assert "Address already in use" in done.stderr


def test_tree_drafting_reports_its_own_proposal_count(
    dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    target, draft = dirs
    flags = ("--model-path", str(target), "--speculative-algorithm", "EAGLE3",
             "--speculative-draft-model-path", str(draft), "--context-length", "4096",
             "--speculative-num-steps", "5", "--speculative-eagle-topk", "4",
             "--speculative-num-draft-tokens", "8")
    with running(tmp_path, *flags) as sim:
        meta = sim.generate({"text": "tree", "sampling_params": {"max_new_tokens": 64}}).json()[
            "meta_info"]
        assert meta["spec_num_proposed_drafts"] == meta["spec_verify_ct"] * 7
        assert 1 <= len(meta["spec_correct_drafts_histogram"]) <= 6


# --- launch to launch -----------------------------------------------------------------------


def _launch_request(sim: Sim, prompt: str) -> str:
    """One streamed request, held to the truth log's clock; its request id."""
    body = {"text": prompt, "stream": True,
            "sampling_params": {"max_new_tokens": 64, "temperature": 0}}
    start = time.monotonic()
    with requests.post(sim.url + "/generate", json=body, stream=True, timeout=30) as reply:
        events, stamps, _ = stream_events(reply)
    rid = str(events[-1]["meta_info"]["id"])
    assert_on_one_clock(served_as(sim, rid), start, stamps)
    return rid


def test_each_launch_draws_its_speed_logs_it_and_serves_at_it(
        dirs: tuple[Path, Path], tmp_path: Path) -> None:
    truth = tmp_path / "truth.jsonl"
    env = {model.ENV_LAUNCH_SPREAD: "0.3", model.ENV_LAUNCH_SEED: "41",
           model.ENV_TRUTH: str(truth), "SPECGATE_SIM_DECODE_MS": "4"}
    served = []
    for _ in range(2):
        with running(tmp_path, "--model-path", str(dirs[0]), env=env) as sim:
            info = sim.get("/server_info").json()["simulator"]
            rids = {_launch_request(sim, f"launch prompt {i}") for i in range(3)}
            served.append((info["launch_speed"], rids))
    launches = model.read_launches(truth)
    assert [(x.launch, x.role, x.seed) for x in launches] == [(0, "baseline", "41"),
                                                               (1, "baseline", "41")]
    records = model.read_truth(truth)
    for k, launch in enumerate(launches):
        assert launch.speed == model.launch_speed(0.3, f"41/{k}/baseline")
        speed, rids = served[k]
        assert speed == launch.speed
        # Its schedule: a 4 ms decode step divided by the launch's speed.
        mine = [r for r in records if r.rid in rids]
        assert model.due_decode_tps_of(mine) == pytest.approx(250.0 * speed, rel=1e-6)
    assert launches[0].speed != launches[1].speed
    assert len(records) == 6  # the requests; launch lines left out


def test_a_bad_launch_spread_stops_the_start(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    with running(tmp_path, "--model-path", str(dirs[0]), wait=False,
                 env={model.ENV_LAUNCH_SPREAD: "fast"}) as sim:
        assert sim.proc.wait(timeout=30) == 1
        assert "SPECGATE_SIM_LAUNCH_SPREAD must be a number >= 0" in sim.log()
