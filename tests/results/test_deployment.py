"""Tests for specgate.results.deployment: the share of the GPU's memory bandwidth a
single-stream decode uses, the class it gives, and the prior of the launch spread it picks."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.models import LAYER_NORMS, layer_shapes
from specgate.core.errors import CheckpointError
from specgate.core.profile import parse_profile
from specgate.io.launch_log import LaunchRecord
from specgate.io.safetensors_io import TensorSpec, write_sparse
from specgate.measure import launches, live, plan, server_session
from specgate.results import deployment, drift
from specgate.results.bench import Measurement, RequestSample, Sampling, build_measurement
from specgate.results.live import ConfigRun, Failure, GpuCheck, LiveResults, server_facts
from specgate.results.prompts import template_named
from specgate.serving.launch import ServerPlan
from specgate.testing import fake_gpus

H200 = "NVIDIA H200"
BF16 = 2


# -- checkpoints ---------------------------------------------------------------------------------

def _write(folder: Path, config: dict[str, Any], shapes: dict[str, tuple[int, ...]],
           shards: int = 1) -> Path:
    """A checkpoint of bf16 holes (headers are all a step's bytes are read from)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    names = list(shapes)
    if shards == 1:
        write_sparse(folder / "model.safetensors",
                     {n: TensorSpec("BF16", shapes[n]) for n in names})
        return folder
    weight_map = {}
    for k in range(shards):
        file = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        part = names[k::shards]
        write_sparse(folder / file, {n: TensorSpec("BF16", shapes[n]) for n in part})
        weight_map.update({n: file for n in part})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return folder


def _llama(folder: Path, *, hidden: int, layers: int, heads: int, kv_heads: int, mlp: int,
           vocab: int, tied: bool = False) -> Path:
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden),
                                          "model.norm.weight": (hidden,)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update(layer_shapes(p, hidden, heads, kv_heads, hidden // heads, mlp))
        shapes.update({f"{p}{norm}.weight": (hidden,) for norm in LAYER_NORMS})
    if not tied:
        shapes["lm_head.weight"] = (vocab, hidden)
    config = {"architectures": ["LlamaForCausalLM"], "hidden_size": hidden,
              "num_hidden_layers": layers, "num_attention_heads": heads,
              "num_key_value_heads": kv_heads, "intermediate_size": mlp, "vocab_size": vocab,
              "tie_word_embeddings": tied, "torch_dtype": "bfloat16"}
    return _write(folder, config, shapes)


@pytest.fixture(scope="module")
def llama8b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Llama-3-8B's layer shapes with a 1,024-token vocabulary: the target measured on the H200
    (benchmarks/results/2026-12-03-h200-llama-shapes-dummy)."""
    return _llama(tmp_path_factory.mktemp("llama8b"), hidden=4096, layers=32, heads=32,
                  kv_heads=8, mlp=14336, vocab=1024)


# The bytes those shapes read a step, by hand: per layer q, k, v, o, the MLP and two norms; then
# the final norm and the output projection. The embedding is a lookup.
LLAMA8B_STEP = BF16 * (32 * (2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 4096 * 14336 + 2 * 4096)
                       + 4096 + 1024 * 4096)


def test_the_bytes_of_a_dense_step_are_every_tensor_but_the_embedding(llama8b: Path) -> None:
    step = deployment.step_bytes(llama8b)
    assert step.per_gpu == LLAMA8B_STEP
    assert f"{LLAMA8B_STEP / 1e9:.2f}" == "13.97"  # the README's figure
    assert step.describe() == "13.97 GB a step"


def test_the_measured_8b_shaped_target_is_gpu_bound_on_an_h200(llama8b: Path) -> None:
    found = deployment.classify(tps=212.05, gpu_names=[H200],
                                step=deployment.step_bytes(llama8b))
    assert found.kind == "GPU-bound"
    assert found.share == pytest.approx(LLAMA8B_STEP * 212.05 / 4.8e12)
    assert found.line() == ("GPU-bound: 62 % of the H200's memory bandwidth (13.97 GB a step × "
                            "212 tok/s, against 4.8 TB/s)")


def test_a_tied_135m_model_is_host_bound_and_its_embedding_is_the_output_projection(
        tmp_path: Path) -> None:
    """SmolLM2-135M's shapes (tied embeddings, no lm_head tensor) at 716.6 tok/s on an H200:
    about 0.19 TB/s, 4 %, as measured."""
    folder = _llama(tmp_path / "smol", hidden=576, layers=30, heads=9, kv_heads=3, mlp=1536,
                    vocab=49152, tied=True)
    per_layer = 2 * 576 * 576 + 2 * 192 * 576 + 3 * 576 * 1536 + 2 * 576
    expected = BF16 * (30 * per_layer + 576 + 49152 * 576)
    step = deployment.step_bytes(folder)
    assert step.per_gpu == expected
    found = deployment.classify(tps=716.6, gpu_names=[H200], step=step)
    assert found.kind == "host-bound"
    assert found.share == pytest.approx(expected * 716.6 / 4.8e12)
    assert found.line().startswith("host-bound: 4 % of the H200's memory bandwidth (0.27 GB")


def _moe(folder: Path, **config_overrides: Any) -> Path:
    """A Kimi-K2.5-shaped miniature: the language model under text_config, 8 routed experts of
    which a token uses 2, a shared expert, a dense first layer, a vision tower, a projector, a
    next-token-prediction layer past num_hidden_layers, two shards and an index."""
    text = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 64,
            "num_hidden_layers": 2, "n_routed_experts": 8, "num_experts_per_tok": 2,
            "n_shared_experts": 1, "first_k_dense_replace": 1, "vocab_size": 128,
            "tie_word_embeddings": False, **config_overrides}
    lm = "language_model.model."
    shapes: dict[str, tuple[int, ...]] = {
        lm + "embed_tokens.weight": (128, 64),
        "vision_tower.blocks.0.attn.weight": (64, 64),
        "mm_projector.linear_1.weight": (64, 64),
        lm + "layers.0.self_attn.q_proj.weight": (64, 64),
        lm + "layers.0.mlp.gate_proj.weight": (256, 64),
        lm + "layers.1.self_attn.q_proj.weight": (64, 64),
        lm + "layers.1.mlp.gate.weight": (8, 64),
        lm + "layers.1.mlp.shared_experts.up_proj.weight": (32, 64),
        **{lm + f"layers.1.mlp.experts.{e}.up_proj.weight": (32, 64) for e in range(8)},
        lm + "layers.2.mlp.experts.0.up_proj.weight": (32, 64),
        "language_model.lm_head.weight": (128, 64)}
    config = {"architectures": ["KimiK25ForConditionalGeneration"], "text_config": text}
    return _write(folder, config, shapes, shards=2)


def test_a_moe_step_reads_the_routed_experts_a_token_uses_divided_over_tp(
        tmp_path: Path) -> None:
    folder = _moe(tmp_path / "moe")
    dense = BF16 * (64 * 64 + 256 * 64 + 64 * 64 + 8 * 64 + 32 * 64 + 128 * 64)
    routed = BF16 * 8 * 32 * 64
    step = deployment.step_bytes(folder, tp=8)
    assert step.per_gpu == pytest.approx((dense + routed * 2 / 8) / 8)
    assert (step.experts_active, step.experts_total, step.tp) == (2, 8, 8)
    assert step.describe().endswith("a step per GPU at TP 8, 2 of 8 routed experts")


def test_routed_experts_without_their_counts_are_named_not_guessed(tmp_path: Path) -> None:
    folder = _moe(tmp_path / "moe", num_experts_per_tok=None)
    with pytest.raises(CheckpointError, match=r"config\.json: the weights hold routed experts"):
        deployment.step_bytes(folder)
    found = deployment.classify(tps=80.0, gpu_names=[H200], step="…")
    assert found.kind == "unknown"


def test_a_target_without_weights_here_is_an_error_naming_the_folder(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="not on this machine"):
        deployment.step_bytes(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text("{}")
    with pytest.raises(CheckpointError, match=r"empty: no \*\.safetensors"):
        deployment.step_bytes(tmp_path / "empty")


@pytest.mark.parametrize(("name", "tbps"), [
    ("NVIDIA H200", 4.8), ("NVIDIA H200 NVL", 4.8), ("NVIDIA H100 80GB HBM3", 3.35),
    ("NVIDIA H100 PCIe", 2.0), ("NVIDIA H100 NVL", 3.9), ("NVIDIA A100-SXM4-80GB", 2.039),
    ("NVIDIA A100 80GB PCIe", 1.935), ("NVIDIA A100-SXM4-40GB", 1.555),
    ("NVIDIA A100-PCIE-40GB", 1.555), ("NVIDIA L40S", 0.864),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 1.792),
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 1.792), ("NVIDIA B200", 8.0),
    ("NVIDIA L40", None), ("Tesla T4", None), ("NVIDIA RTX 6000 Ada Generation", None)])
def test_peak_bandwidth_by_the_name_nvidia_smi_prints(name: str, tbps: float | None) -> None:
    assert deployment.peak_tbps(name) == tbps


def test_the_class_boundaries_are_the_shares_the_docs_give() -> None:
    step = deployment.StepBytes(1e9)  # 1 GB a step on an H200: tok/s × 1e9 / 4.8e12
    kinds = {tps: deployment.classify(tps=tps, gpu_names=[H200], step=step).kind
             for tps in (4800 * 0.40, 4800 * 0.399, 4800 * 0.10, 4800 * 0.099)}
    assert kinds == {1920.0: "GPU-bound", 4800 * 0.399: "between", 480.0: "between",
                     4800 * 0.099: "host-bound"}


@pytest.mark.parametrize(("kw", "why"), [
    ({"tps": None}, "no single-stream tok/s of the baseline"),
    ({"gpu_names": []}, "no GPU name"),
    ({"gpu_names": [H200, "NVIDIA H100 80GB HBM3"]},
     "the server's GPUs are of several models (NVIDIA H100 80GB HBM3, NVIDIA H200)"),
    ({"gpu_names": ["Tesla T4"]}, "no peak memory bandwidth known for 'Tesla T4'"),
    ({"step": "no *.safetensors"},
     "the bytes a decode step reads are not known (no *.safetensors)"),
    ({"tps": 10_000.0}, "more than it has")])
def test_an_unknown_class_says_what_is_missing(kw: dict[str, Any], why: str) -> None:
    args: dict[str, Any] = {"tps": 200.0, "gpu_names": [H200],
                            "step": deployment.StepBytes(14e9), **kw}
    found = deployment.classify(**args)
    assert found.kind == "unknown"
    assert why in found.line()
    assert found.line().startswith("unknown: ")


def test_a_class_round_trips_through_json(llama8b: Path) -> None:
    found = deployment.classify(tps=212.0, gpu_names=[H200],
                                step=deployment.step_bytes(llama8b, tp=2))
    back = deployment.Deployment.from_json(json.loads(json.dumps(found.to_json())))
    assert back.line() == found.line()
    assert back.kind == found.kind
    assert back.step is not None
    assert found.step is not None
    assert back.step.tp == 2
    assert back.step.per_gpu == pytest.approx(found.step.per_gpu, abs=1)
    unknown = deployment.unknown("no GPU name (simulated server)")
    assert deployment.Deployment.from_json(unknown.to_json()) == unknown
    with pytest.raises(ValueError, match="unknown deployment class 'fast'"):
        deployment.Deployment.from_json({"class": "fast"})


# -- the prior each class takes -------------------------------------------------------------------

def _pooled(groups: list[tuple[float, ...]]) -> tuple[float, int]:
    squares, df = 0.0, 0
    for values in groups:
        logs = [math.log(v) for v in values]
        squares += sum((x - statistics.fmean(logs)) ** 2 for x in logs)
        df += len(logs) - 1
    return math.sqrt(squares / df), df


def test_a_gpu_bound_baseline_takes_the_prior_of_the_gpu_bound_launches_of_its_gpu() -> None:
    h200, df200 = _pooled([(212.051, 211.909, 210.42, 212.512, 212.037),
                           (207.01, 209.64, 206.8, 210.43)])
    h100, df100 = _pooled([(168.974, 168.865, 168.953, 168.585, 168.799, 168.561)])
    on_h200 = drift.prior("tps", "GPU-bound", "NVIDIA H200")
    on_h100 = drift.prior("tps", "GPU-bound", "NVIDIA H100 80GB HBM3")
    assert (on_h200.sd, on_h200.df, on_h200.prior_launches, on_h200.gpu) == (
        pytest.approx(h200), df200, 9, "H200")
    assert (on_h100.sd, on_h100.df, on_h100.prior_launches, on_h100.gpu) == (
        pytest.approx(h100), df100, 6, "H100")
    assert on_h100.sd < on_h200.sd < 0.01 < drift.prior("tps").sd / 10
    assert on_h200.describe() == (
        f"baseline tok/s {h200 * 100:.1f} %, the prior of GPU-bound targets (9 launches of real "
        "SGLang on H200 GPUs, docs/claims.md; none of this deployment's yet)")


def test_a_gpu_bound_verify_cycle_takes_the_prior_of_every_gpu_kinds_launches() -> None:
    sd, df = _pooled([(7.1658, 7.2782, 7.495), (8.4641, 8.4176, 8.4236, 8.4027, 8.555),
                      (8.6583, 9.105, 9.2237)])
    spread = drift.prior("cycle_ms", "GPU-bound", "NVIDIA H100 80GB HBM3")
    assert spread.sd == pytest.approx(sd)
    assert (spread.df, spread.prior_launches, spread.prior, spread.gpu) == (
        df, 11, "GPU-bound", "")
    assert spread.sd < drift.prior("cycle_ms").sd / 4
    assert spread.describe() == (
        f"speculative cycle {sd * 100:.1f} %, the prior of GPU-bound targets (11 launches of real "
        "SGLang on H200 and H100 GPUs, docs/claims.md; none of this deployment's yet)")


def test_a_class_without_launches_of_a_figure_says_it_took_the_host_bound_prior(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(drift.GPU_BOUND_LAUNCHES, "cycle_ms", {})
    spread = drift.prior("cycle_ms", "GPU-bound")
    assert spread == dataclasses.replace(drift.prior("cycle_ms"), kind="GPU-bound")
    assert "the prior of host-bound targets (" in spread.describe()
    assert "no speculative cycle of a GPU-bound target measured over launches yet" in \
        spread.describe()


def test_a_deployments_own_launches_update_and_then_replace_its_class_prior() -> None:
    gpu = drift.prior("tps", "GPU-bound")
    records = [LaunchRecord("fp", "fp", "baseline", "t", figures={"tps": (math.log(v), 1e-4)})
               for v in (200.0, 204.0)]
    updated = drift.learn(records, config="baseline", fingerprint="fp", deployment="fp",
                          min_launches=5, kind="GPU-bound")
    own = abs(math.log(204.0 / 200.0)) / math.sqrt(2.0)
    assert updated.source == "updated"
    assert updated.sd == pytest.approx(math.sqrt((gpu.df * gpu.sd**2 + own**2) / (gpu.df + 1)))
    assert "the prior of GPU-bound targets (9 launches" in updated.describe()
    learned = drift.learn(records, config="baseline", fingerprint="fp", deployment="fp",
                          min_launches=2, kind="GPU-bound")
    assert (learned.source, learned.sd) == ("learned", pytest.approx(own))


def test_a_coverage_names_the_class_and_round_trips_through_json(llama8b: Path) -> None:
    found = deployment.classify(tps=212.0, gpu_names=[H200], step=deployment.step_bytes(llama8b))
    coverage = drift.prior_coverage("aba", found)
    assert coverage.baseline.prior == coverage.speculative.prior == "GPU-bound"
    text = coverage.describe("baseline")
    assert "the prior of GPU-bound targets (9 launches" in text
    assert text.endswith("; this deployment: GPU-bound, 62 % of memory bandwidth")
    back = drift.Coverage.from_json(json.loads(json.dumps(coverage.to_json())))
    assert back.describe("speedup") == coverage.describe("speedup")
    assert back.baseline == coverage.baseline
    assert back.deployment is not None
    assert back.deployment.line() == found.line()
    # A coverage written without a class reads back as the host-bound priors it was judged on.
    bare = coverage.to_json()
    for key in ("baseline", "speculative"):
        bare[key] = {k: v for k, v in bare[key].items() if k not in ("prior", "kind")}
    del bare["deployment"]
    old = drift.Coverage.from_json(bare)
    assert (old.baseline.prior, old.deployment) == ("host-bound", None)


# -- the first probe: where the class is taken ----------------------------------------------------

def _measured(tps: float, *, burst: bool = False) -> Measurement:
    """Single-stream requests that decode at exactly `tps` (burst: their messages all arrive
    at the end, as through a buffering proxy)."""
    ttft, gap = (5.0, 1e-5) if burst else (0.05, None)
    samples = [RequestSample(repeat, f"p{i}", "chat", 10, 83, None, ttft, ttft + 82 / tps, None,
                             "stop", 10, median_gap_s=gap)
               for repeat in (1, 2) for i in range(3)]
    return build_measurement(config="baseline", url="http://x",
                             template=template_named("plain", "test"),
                             sampling=Sampling(max_repeats=2), samples=samples)


def _run(tps: float | None = 212.0, *, names: tuple[str, ...] = (H200,),
         failure: Failure | None = None, attached: bool = False,
         burst: bool = False) -> ConfigRun:
    measured = None if tps is None else _measured(tps, burst=burst)
    check = None if attached else GpuCheck(True, "GPUs [0] checked", gpus=(0,), names=names)
    return ConfigRun("baseline", measurement=measured, failure=failure, gpu=check,
                     attached=attached)


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two fake H200s and an nvidia-smi on PATH that lists them."""
    folder = fake_gpus.make(tmp_path / "gpus", [fake_gpus.FakeGpu(i) for i in range(2)])
    fake_gpus.install_nvidia_smi(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv(fake_gpus.ENV_GPUS, str(folder))
    return folder


def _plan(tmp_path: Path, target: Path, **server: Any) -> plan.LivePlan:
    from ckpt_support import tiny_drafter

    draft = tmp_path / "draft"
    tiny_drafter(draft)
    profile = parse_profile({
        "name": "t", "target": {"path": str(target)}, "drafter": {"path": str(draft)},
        "server": {"launcher": [sys.executable, "-m", "specgate.testing.simulator"],
                   "port": 0, "gpus": [1], **server},
        "speculative": {"algorithm": "EAGLE3", "num_steps": 2, "eagle_topk": 1,
                        "num_draft_tokens": 3}}, source=tmp_path / "profile.toml")
    return plan.resolve(profile, tmp_path / "reports")


def test_the_gpu_check_keeps_the_names_of_the_servers_gpus(machine: Path, tmp_path: Path,
                                                           llama8b: Path) -> None:
    planned = _plan(tmp_path, llama8b)
    server = planned.server("baseline")
    assert not isinstance(server, plan.Blocked)
    check = server_session.check_gpus(server)
    assert check.checked
    assert check.names == (H200,)
    back = ConfigRun.from_json(json.loads(json.dumps(ConfigRun("baseline", gpu=check).to_json())))
    assert back.gpu == check


def test_a_measured_baseline_on_named_gpus_classes_the_deployment(machine: Path, tmp_path: Path,
                                                                  llama8b: Path) -> None:
    planned = dataclasses.replace(_plan(tmp_path, llama8b), simulated=False)
    found = live.classify(planned, _run(212.0))
    assert found.kind == "GPU-bound", found.line()
    assert found.line().startswith("GPU-bound: 62 % of the H200's memory bandwidth")
    coverage = launches.coverage(drift.Settings(), [], launches.Keys(None, None),
                                 deployment=found)
    assert (coverage.baseline.prior, coverage.speculative.prior) == ("GPU-bound", "GPU-bound")
    assert coverage.deployment == found
    assert live.classify(planned, _run(20.0)).kind == "host-bound"
    # The simulator's tok/s are no GPU's.
    assert live.classify(dataclasses.replace(planned, simulated=True), _run()).line() == \
        "unknown: no GPU name (simulated server)"


def test_a_failed_baseline_keeps_the_host_bound_prior_and_says_why(machine: Path,
                                                                   tmp_path: Path,
                                                                   llama8b: Path) -> None:
    planned = dataclasses.replace(_plan(tmp_path, llama8b), simulated=False)
    failed = _run(None, failure=Failure("start", "the server exited with code 1"))
    found = live.classify(planned, failed)
    assert found.line() == ("unknown: the baseline gave no single-stream tok/s (failed during "
                            "start: the server exited with code 1)")
    settings = drift.Settings()
    coverage = launches.coverage(settings, [], launches.Keys(None, None), deployment=found)
    assert coverage.baseline.prior == coverage.speculative.prior == "host-bound"
    assert "this deployment: unknown (the baseline gave no single-stream tok/s" in \
        coverage.describe("speedup")
    # A baseline measured but failed afterwards (its stop) is broken in its claims: not used.
    stopped = live.classify(planned, _run(212.0, failure=Failure("stop", "did not exit")))
    assert stopped.line() == ("unknown: the baseline gave no single-stream tok/s (failed during "
                              "stop: did not exit)")
    # Buffered streams time the buffer, not the server (perf.baseline_tps is broken then too).
    bursty = live.classify(planned, _run(28_000.0, burst=True))
    assert bursty.line() == ("unknown: the baseline's streams arrived in bursts, so its tok/s is "
                             "not the server's")
    unchecked = live.classify(planned, _run(212.0, attached=True))
    assert unchecked.line() == "unknown: no GPU name (no GPU check was made)"


def _attached_run(planned: plan.LivePlan, tps: float) -> ConfigRun:
    """The attached baseline's run as run_config makes it: its GPUs as listed for it."""
    server = planned.server("baseline")
    assert isinstance(server, ServerPlan)
    assert server.spec is None
    return dataclasses.replace(_run(tps, attached=True), gpu=server_session.check_gpus(server))


@pytest.mark.parametrize("url", ["http://127.0.0.1:30000", "http://localhost:30000",
                                 "http://[::1]:30000"])
def test_an_attached_baseline_on_this_machine_is_classed_from_its_gpus_here(
        machine: Path, tmp_path: Path, llama8b: Path, url: str) -> None:
    planned = dataclasses.replace(_plan(tmp_path, llama8b, baseline_url=url), simulated=False)
    run = _attached_run(planned, 212.0)
    assert run.gpu is not None
    assert run.gpu.names == (H200,)
    assert not run.gpu.checked  # its own processes hold them: no check for others
    found = live.classify(planned, run)
    assert found.kind == "GPU-bound", found.line()
    assert found.line().startswith("GPU-bound: 62 % of the H200's memory bandwidth")
    assert live.classify(planned, _attached_run(planned, 20.0)).kind == "host-bound"


def test_an_attached_baseline_on_another_machine_without_a_launcher_prefix_stays_unknown(
        machine: Path, tmp_path: Path, llama8b: Path) -> None:
    url = "http://10.0.0.5:30000"
    planned = dataclasses.replace(_plan(tmp_path, llama8b, baseline_url=url), simulated=False)
    found = live.classify(planned, _attached_run(planned, 212.0))
    assert found.line() == (
        "unknown: no GPU name (the attached server at http://10.0.0.5:30000 is on another "
        "machine and the profile names no launcher prefix to list its GPUs)")
    assert launches.coverage(drift.Settings(), [], launches.Keys(None, None),
                             deployment=found).baseline.prior == "host-bound"


def test_an_attached_baseline_behind_a_launcher_prefix_is_classed_from_its_gpus_there(
        machine: Path, tmp_path: Path, llama8b: Path) -> None:
    """`pct exec 101 --` before the SGLang module: the GPUs are listed through it, wherever
    the URL points (a fake pct runs the command here, where the fake GPUs are)."""
    pct = tmp_path / "bin" / "pct"
    pct.write_text('#!/bin/sh\nshift 3\nexec "$@"\n')
    pct.chmod(0o755)
    planned = dataclasses.replace(_plan(
        tmp_path, llama8b, baseline_url="http://10.0.0.5:30000",
        launcher=["pct", "exec", "101", "--", "python3", "-m", "sglang.launch_server"]),
        simulated=False)
    found = live.classify(planned, _attached_run(planned, 212.0))
    assert found.kind == "GPU-bound", found.line()


def test_the_class_reaches_results_json_and_the_verdicts_facts(tmp_path: Path,
                                                               llama8b: Path) -> None:
    found = deployment.classify(tps=212.0, gpu_names=[H200], step=deployment.step_bytes(llama8b))
    results = LiveResults("t", False, _run(), ConfigRun("speculative"),
                          coverage=drift.prior_coverage("ab", found))
    results.write(tmp_path / "live" / "results.json")
    back = LiveResults.read(tmp_path / "live" / "results.json")
    assert back.deployment.line() == found.line()
    assert back.launch_coverage.baseline.prior == "GPU-bound"
    facts = server_facts(tmp_path)
    assert facts["deployment"]["class"] == "GPU-bound"
    assert facts["deployment"]["line"] == found.line()
    assert facts["deployment"]["share"] == pytest.approx(found.share, abs=1e-4)
    assert LiveResults("t", False, _run(), ConfigRun("speculative")).deployment.kind == "unknown"


@pytest.mark.slow
def test_the_demo_probes_verdict_says_its_class(tmp_path: Path) -> None:
    """pytest -m probe --profile demo: the simulator has no GPU, so the class is unknown, and
    the verdict and perf.baseline_tps say so."""
    import fault_support as fh

    run = fh.run_probe(fh.REPO / "specgate" / "profiles" / "demo.toml", tmp_path / "reports",
                       timeout_s=300, env=fh.child_env(SPECGATE_CACHE=str(tmp_path / "cache")))
    assert not run.timed_out, run.output[-3000:]
    line = "unknown: no GPU name (simulated server)"
    assert run.verdict["deployment"]["class"] == "unknown", run.output[-3000:]
    assert run.verdict["deployment"]["line"] == line
    baseline = run.claims()["perf.baseline_tps"]
    assert baseline["message"].endswith(f". Deployment: {line}")
    assert baseline["details"]["deployment"]["why"] == "no GPU name (simulated server)"
    assert baseline["details"]["launch_spread"]["baseline"]["prior"] == "host-bound"
