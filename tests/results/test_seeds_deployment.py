"""The seeds' deployment worked through with specgate's own functions: Kimi-K2.5 at TP 8 on eight
RTX PRO 6000 Blackwell GPUs (PCIe), 82 tok/s single-stream. Its class from the bytes a decode
step reads (a checkpoint of holes with Kimi-K2.5's tensor names and shapes), the prior that class
takes, what a first probe with the shipped profile decides, and what the deployment's own
launches would let it decide. docs/claims.md ("The seeds' deployment") states these figures;
this test computes them and finds each in that section.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from specgate.core.profile import load_profile
from specgate.io.safetensors_io import TensorSpec, write_sparse
from specgate.results import bench, decidable, deployment, drift
from specgate.results.stats import Summary, t_quantile

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "specgate" / "profiles" / "kimi-k2.5-8x-rtx-pro-6000.toml"
GPU = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
TPS = 82.0
# Kimi-K2.5's language model (DeepseekV3 layout under text_config): 61 layers, the first dense,
# 384 routed experts of which a token uses 8, one shared expert, MLA attention.
TEXT = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168,
        "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
        "first_k_dense_replace": 1, "n_routed_experts": 384, "num_experts_per_tok": 8,
        "n_shared_experts": 1, "num_attention_heads": 64, "q_lora_rank": 1536,
        "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "v_head_dim": 128, "vocab_size": 163840, "tie_word_embeddings": False}


def _linear(name: str, out: int, inp: int, int4: bool) -> dict[str, TensorSpec]:
    """One linear layer: bf16, or 4-bit groups of 32 with bf16 scales (compressed-tensors'
    pack-quantized form, eight 4-bit values an int32)."""
    if not int4:
        return {name + ".weight": TensorSpec("BF16", (out, inp))}
    return {name + ".weight_packed": TensorSpec("I32", (out, inp // 8)),
            name + ".weight_scale": TensorSpec("BF16", (out, inp // 32)),
            name + ".weight_shape": TensorSpec("I32", (2,))}


def kimi_k25(folder: Path, *, int4_experts: bool) -> Path:
    """A checkpoint of holes with Kimi-K2.5's language-model tensors (a vision tower beside
    them, which a decode step does not read), one shard per layer."""
    t = TEXT
    h, heads = t["hidden_size"], t["num_attention_heads"]
    lm = "language_model.model."
    folder.mkdir(parents=True)
    weight_map: dict[str, str] = {}

    def shard(name: str, tensors: dict[str, TensorSpec]) -> None:
        write_sparse(folder / name, tensors)
        weight_map.update(dict.fromkeys(tensors, name))

    shard("model-embed.safetensors", {
        lm + "embed_tokens.weight": TensorSpec("BF16", (t["vocab_size"], h)),
        lm + "norm.weight": TensorSpec("BF16", (h,)),
        "language_model.lm_head.weight": TensorSpec("BF16", (t["vocab_size"], h)),
        "vision_tower.encoder.blocks.0.mlp.fc0.weight": TensorSpec("BF16", (4304, 1152)),
        "mm_projector.proj.0.weight": TensorSpec("BF16", (4608, 4608))})
    qk = t["qk_nope_head_dim"] + t["qk_rope_head_dim"]
    for i in range(t["num_hidden_layers"]):
        p = f"{lm}layers.{i}."
        tensors = {p + "input_layernorm.weight": TensorSpec("BF16", (h,)),
                   p + "post_attention_layernorm.weight": TensorSpec("BF16", (h,)),
                   p + "self_attn.q_a_layernorm.weight": TensorSpec("BF16", (t["q_lora_rank"],)),
                   p + "self_attn.kv_a_layernorm.weight": TensorSpec("BF16",
                                                                     (t["kv_lora_rank"],))}
        for name, out, inp in (
                ("self_attn.q_a_proj", t["q_lora_rank"], h),
                ("self_attn.q_b_proj", heads * qk, t["q_lora_rank"]),
                ("self_attn.kv_a_proj_with_mqa", t["kv_lora_rank"] + t["qk_rope_head_dim"], h),
                ("self_attn.kv_b_proj", heads * (t["qk_nope_head_dim"] + t["v_head_dim"]),
                 t["kv_lora_rank"]),
                ("self_attn.o_proj", h, heads * t["v_head_dim"])):
            tensors.update(_linear(p + name, out, inp, False))
        if i < t["first_k_dense_replace"]:
            mlp, width = [("mlp", t["intermediate_size"])], t["intermediate_size"]
        else:
            width = t["moe_intermediate_size"]
            tensors[p + "mlp.gate.weight"] = TensorSpec("BF16", (t["n_routed_experts"], h))
            tensors[p + "mlp.gate.e_score_correction_bias"] = TensorSpec(
                "F32", (t["n_routed_experts"],))
            mlp = [("mlp.shared_experts", width)] + [
                (f"mlp.experts.{e}", width) for e in range(t["n_routed_experts"])]
        for prefix, width in mlp:
            int4 = int4_experts and ".experts." in f".{prefix}."
            for name, out, inp in (("gate_proj", width, h), ("up_proj", width, h),
                                   ("down_proj", h, width)):
                tensors.update(_linear(f"{p}{prefix}.{name}", out, inp, int4))
        shard(f"model-layer-{i:02d}.safetensors", tensors)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (folder / "config.json").write_text(json.dumps(
        {"architectures": ["KimiK25ForConditionalGeneration"], "text_config": TEXT}))
    return folder


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> dict[str, deployment.Deployment]:
    root = tmp_path_factory.mktemp("kimi")
    out = {}
    for label, int4 in (("int4", True), ("bf16", False)):
        step = deployment.step_bytes(kimi_k25(root / label, int4_experts=int4), tp=8)
        out[label] = deployment.classify(tps=TPS, gpu_names=[GPU], step=step)
    return out


def _section() -> str:
    text = (ROOT / "docs" / "claims.md").read_text(encoding="utf-8")
    start = text.index("### The seeds' deployment")
    end = text.find("\n## ", start)
    return text[start:end if end > 0 else None]


def _said(figure: str) -> None:
    """The section says it (its lines joined as a reader reads them)."""
    section = " ".join(_section().split())
    assert figure in section, f"docs/claims.md, the seeds' deployment, does not say {figure!r}"


def _first_probe(coverage: drift.Coverage, confidence: float, se_log: float,
                 mean: float = 1.0) -> decidable.Decidable:
    """What a probe decides that measured `mean` over prompts and passes with log-scale standard
    error se_log (0: no spread over prompts, the launch part alone)."""
    half = t_quantile(0.5 + confidence / 2.0, math.inf) * max(se_log, 1e-12)
    within = Summary(42, mean, 0.0, 0.0, mean * math.exp(-half), mean * math.exp(half),
                     confidence, math.inf)
    found = decidable.decidable(drift.cover(within, coverage, "speedup"), 1.0, passes=3)
    assert found is not None
    return found


def test_the_seeds_deployment_is_between_the_classes_and_takes_the_host_bound_prior(
        found: dict[str, deployment.Deployment]) -> None:
    int4, bf16 = found["int4"], found["bf16"]
    assert int4.kind == bf16.kind == "between"
    assert int4.step is not None
    assert bf16.step is not None
    assert int4.step.experts_active == 8
    assert int4.step.experts_total == 384
    for _label, one in found.items():
        assert one.share is not None
        assert one.step is not None
        _said(f"{one.step.per_gpu / 1e9:.2f} GB a step per GPU")
        _said(f"{one.share * 100:.0f} %")
    _said(f"{deployment.peak_tbps(GPU):g} TB/s")
    coverage = drift.prior_coverage(deployment=int4)
    assert (coverage.baseline.prior, coverage.speculative.prior) == ("host-bound", "host-bound")
    _said(f"{coverage.term('speedup').sd * 100:.1f} %")


def test_what_a_first_probe_there_decides_and_what_its_own_launches_would(
        found: dict[str, deployment.Deployment]) -> None:
    profile = load_profile(PROFILE)
    sampling = bench.Sampling(repeats=profile.bench.repeats,
                              max_repeats=profile.bench.max_repeats,
                              confidence=profile.bench.confidence)
    confidence = bench.judged_confidence(sampling)
    _said(f"{confidence * 100:.4g} %")
    first = drift.prior_coverage(deployment=found["int4"])
    floor = _first_probe(first, confidence, 0.0)
    typical = _first_probe(first, confidence, 0.02)
    assert 1.4 < floor.above < typical.above
    _said(f"{floor.above:.2f}×")
    _said(f"{typical.above:.2f}×")
    # A drafter that pays 1.2× measured on a first probe: how many launches would decide it.
    at = _first_probe(first, confidence, 0.02, mean=1.2)
    assert not at.decided
    assert at.passes_needed is None  # the launch part alone holds it: passes cannot
    assert at.launches_needed is not None
    _said(f"about {at.launches_needed} launches")
    aba = drift.Coverage("aba", first.baseline, first.speculative, baseline_launches=2,
                         deployment=found["int4"])
    _said(f"brings the first probe to {_first_probe(aba, confidence, 0.02).above:.2f}×")
    # The deployment's own launches replace the prior once min_launches of each are logged.
    minimum = profile.bench.launch_spread_min_launches
    _said(f"{minimum} launches")
    for sd in (0.03, 0.12):
        own = drift.Coverage("ab", drift.Spread("tps", sd, float(minimum - 1), "learned"),
                             drift.Spread("cycle_ms", sd, float(minimum - 1), "learned"))
        learned = _first_probe(own, confidence, 0.02)
        _said(f"{sd * 100:.0f} %: {learned.above:.2f}×")


def test_the_section_names_the_functions_it_was_worked_from() -> None:
    section = _section()
    for name in ("deployment.step_bytes", "deployment.classify", "drift.prior_coverage",
                 "decidable.decidable", "tests/results/test_seeds_deployment.py"):
        assert name in section
    assert re.search(r"--server-url", section)
