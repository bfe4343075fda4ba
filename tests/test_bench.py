"""Tests for specgate.measure.bench: end to end against the simulator, held to its truth."""

import json
import math
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from specgate.core.profile import BenchSection
from specgate.measure import bench, prompts
from specgate.serving.client import SGLangClient
from specgate.testing.simulator import model

STEPS = 2
ACCEPTANCE = [0.8, 0.6]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _model_dirs(root: Path) -> tuple[Path, Path]:
    target, draft = root / "target", root / "draft"
    target.mkdir()
    draft.mkdir()
    (target / "specgate_sim.json").write_text(json.dumps(
        {"decode_ms": 1.0, "verify_ms": 1.75, "draft_step_ms": 0.125}))
    (draft / "specgate_sim.json").write_text(json.dumps({"acceptance": ACCEPTANCE}))
    return target, draft


def _start(argv: list[str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    fh = open(log, "wb")
    proc = subprocess.Popen([sys.executable, "-m", "specgate.testing.simulator", *argv,
                             "--port", str(port)], stdout=fh, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            if requests.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except requests.ConnectionError:
            pass
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("simulator did not get ready:\n" + log.read_text())


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    root = tmp_path_factory.mktemp("sim")
    target, draft = _model_dirs(root)
    base_proc, base_url = _start(["--model-path", str(target)], root / "base.log")
    spec_proc, spec_url = _start(
        ["--model-path", str(target), "--speculative-algorithm", "EAGLE3",
         "--speculative-draft-model-path", str(draft), "--speculative-num-steps", str(STEPS),
         "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(STEPS + 1)],
        root / "spec.log")
    params = model.load_params(target, draft, speculative=True, num_steps=STEPS, eagle_topk=1,
                               num_draft_tokens=STEPS + 1)
    yield {"base": base_url, "spec": spec_url, "truth": model.truth(params)}
    for proc in (base_proc, spec_proc):
        proc.kill()
        proc.wait(10)


def _measure(url, config, **bench_kw):
    b = BenchSection(**{"max_new_tokens": 64, "warmup": 1, "repeats": 2, **bench_kw})
    # Every prompt: the simulator's acceptance is exact per request only to within one token
    # per depth, so tau is within 1 % only over a few dozen requests.
    chosen = prompts.load_builtin()
    with SGLangClient(url) as client:
        return bench.measure(client, b, config=config, prompts=chosen,
                             template=prompts.template_named("chatml", "test"))


@pytest.mark.slow
def test_measurement_matches_simulator_truth(sim):
    truth = sim["truth"]
    base = _measure(sim["base"], "baseline")
    spec = _measure(sim["spec"], "speculative")
    n_prompts = len(prompts.load_builtin())
    assert base.repeats == 2
    assert len(base.samples) == 2 * n_prompts
    assert base.spec_fields_missing == len(base.samples)
    assert "accept_len" not in base.stats
    assert spec.spec_fields_missing == 0
    tps_err = base.stats["tps"].mean / truth.baseline_tps - 1
    tau_err = spec.stats["tau_decode"].mean / truth.tau - 1
    cycle_err = spec.stats["cycle_ms"].mean / truth.cycle_ms - 1
    spec_tps_err = spec.stats["tps"].mean / truth.spec_tps - 1
    print(f"baseline tps err {tps_err:+.4f}, tau err {tau_err:+.4f}, cycle err "
          f"{cycle_err:+.4f}, spec tps err {spec_tps_err:+.4f}, accept_len "
          f"{spec.stats['accept_len'].mean:.4f} vs tau {truth.tau:.4f}")
    assert abs(tps_err) < 0.02
    assert abs(tau_err) < 0.01
    assert abs(cycle_err) < 0.02
    assert abs(spec_tps_err) < 0.02
    # Σcompletion/Σverify also counts the prefill token: above tau by about one per request.
    per_request = len(spec.samples) / sum(s.spec_verify_ct or 0 for s in spec.samples)
    assert spec.stats["accept_len"].mean == pytest.approx(
        spec.stats["tau_decode"].mean + per_request, rel=1e-9)
    assert set(spec.per_category_accept_len) == {p.category for p in prompts.load_builtin()}
    back = bench.Measurement.from_json(json.loads(json.dumps(spec.to_json())))
    assert back.stats["accept_len"].mean == spec.stats["accept_len"].mean
    assert back.samples == spec.samples
    assert all(len(s.output_ids) == s.completion_tokens for s in spec.samples)
    assert "output_ids" not in spec.samples_csv().splitlines()[0]
    assert spec.samples_csv().count("\n") == len(spec.samples) + 1
    assert "accept_len" in spec.stats_table()


def test_sequential_repeats_stop_at_max_and_say_why(sim):
    b = BenchSection(max_new_tokens=16, warmup=0, repeats=1, max_repeats=3)
    chosen = prompts.load_builtin()[:2]
    calls = []

    def keep_going(m):
        calls.append(m.repeats)
        return "the tps interval straddles 1"

    with SGLangClient(sim["base"]) as client:
        m = bench.measure(client, b, config="baseline", prompts=chosen,
                          template=prompts.template_named("plain", "test"), keep_going=keep_going)
    assert calls == [1, 2, 3]
    assert m.repeats == 3
    assert m.stop_reason == "3 repeats (max_repeats) and still the tps interval straddles 1"


def test_keep_going_none_stops_after_configured_repeats(sim):
    b = BenchSection(max_new_tokens=8, warmup=0, repeats=2, max_repeats=5)
    with SGLangClient(sim["spec"]) as client:
        m = bench.measure(client, b, config="speculative", prompts=prompts.load_builtin()[:1],
                          template=prompts.template_named("plain", "t"),
                          keep_going=lambda m: None)
    assert m.repeats == 2
    assert m.stats["accept_len"].n == 1  # one prompt: the interval is over prompts
    assert not math.isnan(m.stats["accept_len"].mean)


def test_pass_rates_from_samples():
    s = [bench.RequestSample(1, "a", "x", 5, 11, 5, 0.01, 0.11, 0.1, "stop", 6),
         bench.RequestSample(1, "b", "y", 5, 21, None, 0.02, 0.22, 0.2, "length", 9)]
    p = bench.PassResult.of(1, s)
    assert p.decode_tokens == 30
    assert p.tps == pytest.approx(30 / 0.30)
    assert p.verify_ct is None
    assert p.accept_len is None
    p = bench.PassResult.of(1, s[:1])
    assert p.accept_len == pytest.approx(11 / 5)
    assert p.tau_decode == pytest.approx(10 / 5)
    assert p.cycle_ms == pytest.approx(100 / 5)


def test_straddles():
    from specgate.measure.stats import summarize

    s = summarize([1.0, 2.0, 3.0])
    assert bench.straddles(s, 2.0, "x") is not None
    assert bench.straddles(s, 100.0, "x") is None
    assert bench.straddles(None, 1.0, "x") is None
    assert bench.straddles(s, None, "x") is None
