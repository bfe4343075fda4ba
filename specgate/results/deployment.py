"""The deployment's class from its first probe: how much of the GPU's memory bandwidth its
single-stream decode uses.

A decode step at one stream reads every weight it uses once (the KV cache of a short prompt is
small beside them). Bytes read a step per GPU × decode steps per second (the baseline's tok/s
at one stream) ÷ the GPU's peak memory bandwidth is the share of the memory system the decode
keeps busy. A large share is a decode bound by the GPU's memory, whose speed moves little from
one launch to the next; a small one is bound by the host (Python scheduling, kernel launches),
whose speed moves a lot. results/drift.py picks the prior of the launch-to-launch spread by it;
docs/claims.md gives the data behind the shares.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from specgate.core.errors import CheckpointError
from specgate.io.checkpoint import load_target_config, shard_files
from specgate.io.safetensors_io import TensorInfo, read_header

Kind = Literal["GPU-bound", "between", "host-bound", "unknown"]
KINDS: tuple[Kind, ...] = ("GPU-bound", "between", "host-bound", "unknown")

# The shares that divide the classes. Real SGLang 0.5.17 on one H200 (docs/claims.md): the two
# GPU-bound targets (Llama-3-8B shapes, 2026-12-03) used 62 % of the memory bandwidth and moved
# 0.4–0.9 % between launches; SmolLM2-135M-Instruct used 4 % and moved 12.6 %. At 40 % a step
# spends at least two thirds of the time the measured GPU-bound ones spend reading weights; the
# one target measured in between (Llama-3.2-1B shapes: 28 % over 5 launches, which moved
# 12.3 %, as much as the host-bound ones) stays out of the class. Below 10 % the weights are
# read in a small part of the step, as in every host-bound target measured (4 % and less).
GPU_BOUND_SHARE = 0.40
HOST_BOUND_SHARE = 0.10

# Peak memory bandwidth (TB/s) by the model name nvidia-smi prints, matched on the name with
# "NVIDIA " dropped and "-" read as a space, first match wins (the more specific names first).
# Each figure is NVIDIA's data sheet for that product.
PEAK_TBPS: tuple[tuple[str, float], ...] = (
    # H200 (SXM and NVL): 4.8 TB/s, NVIDIA H200 Tensor Core GPU data sheet
    (r"\bH200\b", 4.8),
    # H100 data sheet: SXM 3.35 TB/s, NVL 3.9 TB/s, PCIe 2.0 TB/s (nvidia-smi names the SXM
    # part "H100 80GB HBM3")
    (r"\bH100 NVL\b", 3.9),
    (r"\bH100 PCIE\b", 2.0),
    (r"\bH100\b.*\bHBM3\b|\bH100 SXM", 3.35),
    # A100 data sheet: 80GB SXM 2,039 GB/s, 80GB PCIe 1,935 GB/s, 40GB (SXM and PCIe) 1,555 GB/s
    (r"\bA100 SXM4 80GB\b", 2.039),
    (r"\bA100 80GB PCIE\b", 1.935),
    (r"\bA100\b.*\b40GB\b", 1.555),
    # L40S data sheet: 864 GB/s (GDDR6)
    (r"\bL40S\b", 0.864),
    # RTX PRO 6000 Blackwell (Server, Workstation and Max-Q Workstation Editions) data sheets:
    # 1,792 GB/s (GDDR7, 512-bit)
    (r"\bRTX PRO 6000 BLACKWELL\b", 1.792),
    # B200 (HGX B200 / DGX B200 data sheets): 8 TB/s per GPU
    (r"\bB200\b", 8.0),
)

# Tensors a single-stream decode step does not read: the input embedding is a lookup of one
# row; a multimodal target's vision and audio towers run on images and sounds only.
_EMBED = re.compile(r"(?:^|\.)(?:embed_tokens|tok_embeddings|wte|word_embeddings)\.weight$")
_OTHER_MODALITY = re.compile(r"(?:^|\.)(?:vision_tower|vision_model|visual|vision|"
                             r"mm_projector|multi_modal_projector|audio_tower|audio)\.")
_LM_HEAD = re.compile(r"(?:^|\.)(?:lm_head|output)\.weight$")
# A routed expert's tensors (DeepSeek-V3 / Kimi `mlp.experts.<e>.`, Mixtral
# `block_sparse_moe.experts.<e>.`, fused `mlp.experts.gate_up_proj`); `shared_experts.` is read
# every step and does not match.
_ROUTED = re.compile(r"(?:^|\.)experts\.")
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_EXPERTS_TOTAL = ("n_routed_experts", "num_experts", "num_local_experts")
_EXPERTS_ACTIVE = ("num_experts_per_tok",)


def peak_tbps(gpu_name: str) -> float | None:
    """The GPU's peak memory bandwidth in TB/s from its nvidia-smi name; None: not in the table."""
    name = re.sub(r"\s+", " ", gpu_name.upper().replace("-", " ")).strip()
    name = name.removeprefix("NVIDIA ")
    for pattern, tbps in PEAK_TBPS:
        if re.search(pattern, name):
            return tbps
    return None


@dataclasses.dataclass(frozen=True)
class StepBytes:
    """The bytes one single-stream decode step reads on each GPU, from the checkpoint's
    safetensors headers."""

    per_gpu: float
    tp: int = 1
    experts_active: int = 0  # routed experts a token uses (0: a dense model)
    experts_total: int = 0

    def describe(self) -> str:
        out = f"{self.per_gpu / 1e9:.2f} GB a step"
        if self.tp > 1:
            out += f" per GPU at TP {self.tp}"
        if self.experts_total:
            out += f", {self.experts_active} of {self.experts_total} routed experts"
        return out


def _first_int(config: Mapping[str, Any], keys: Sequence[str]) -> int | None:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def step_bytes(target: Path, tp: int = 1) -> StepBytes:
    """The bytes a single-stream decode step of the target folder reads per GPU: every tensor of
    the language model but the input embedding (counted when tied to the output projection),
    routed experts scaled by the share a token uses, layers beyond num_hidden_layers (a
    next-token-prediction module plain decoding does not run) left out, divided over the TP
    ranks. Raises CheckpointError naming the file when the headers or config cannot be read."""
    if not target.is_dir():
        raise CheckpointError(f"{target}: the target folder is not on this machine")
    config = load_target_config(target)
    files = shard_files(target)
    if not files:
        raise CheckpointError(f"{target}: no *.safetensors weights to read the step's bytes "
                              "from")
    tensors: list[TensorInfo] = []
    for file in files:
        tensors.extend(read_header(file).values())
    layers = _first_int(config, ("num_hidden_layers",))
    dense = routed = embed = 0
    has_head = False
    for info in tensors:
        name = info.name
        if _OTHER_MODALITY.search(name):
            continue
        layer = _LAYER.search(name)
        if layer is not None and layers is not None and int(layer.group(1)) >= layers:
            continue
        if _EMBED.search(name):
            embed += info.nbytes
        elif _ROUTED.search(name):
            routed += info.nbytes
        else:
            has_head = has_head or bool(_LM_HEAD.search(name))
            dense += info.nbytes
    if not has_head and config.get("tie_word_embeddings"):
        dense += embed  # the output projection reads the embedding every step
    active = total = 0
    if routed:
        found_total = _first_int(config, _EXPERTS_TOTAL)
        found_active = _first_int(config, _EXPERTS_ACTIVE)
        if found_total is None or found_active is None:
            raise CheckpointError(
                f"{target / 'config.json'}: the weights hold routed experts but the config "
                f"gives no {' / '.join(_EXPERTS_TOTAL)} and num_experts_per_tok to say how "
                "many a token uses")
        total, active = found_total, min(found_active, found_total)
    read = dense + (routed * active / total if total else 0.0)
    return StepBytes(read / max(tp, 1), max(tp, 1), active, total)


@dataclasses.dataclass(frozen=True)
class Deployment:
    """The class of a deployment's single-stream decode and what it was read from."""

    kind: Kind
    share: float | None = None  # of the GPU's peak memory bandwidth
    gpu: str = ""  # the nvidia-smi name
    peak_tbps: float | None = None
    step: StepBytes | None = None
    tps: float | None = None  # the baseline's single-stream decode tok/s
    why: str = ""  # an unknown class: what is missing

    @property
    def gpu_short(self) -> str:
        return self.gpu.removeprefix("NVIDIA ").strip()

    def line(self) -> str:
        """One line: the class and the figures behind it, or why it is unknown."""
        if self.kind == "unknown" or self.share is None or self.step is None \
                or self.tps is None:
            return f"unknown: {self.why or 'not classified'}"
        return (f"{self.kind}: {self.share * 100:.0f} % of the {self.gpu_short}'s memory "
                f"bandwidth ({self.step.describe()} × {self.tps:.0f} tok/s, against "
                f"{self.peak_tbps:g} TB/s)")

    def short(self) -> str:
        """The class with its share, as a spread's description names it."""
        if self.share is None or self.kind == "unknown":
            return f"unknown ({self.why or 'not classified'})"
        return f"{self.kind}, {self.share * 100:.0f} % of memory bandwidth"

    def to_json(self) -> dict[str, Any]:
        return {"class": self.kind, "line": self.line(),
                "share": None if self.share is None else round(self.share, 4),
                "gpu": self.gpu, "peak_tbps": self.peak_tbps,
                "step_bytes_per_gpu": None if self.step is None else round(self.step.per_gpu),
                "tp": None if self.step is None else self.step.tp,
                "experts_active": None if self.step is None else self.step.experts_active,
                "experts_total": None if self.step is None else self.step.experts_total,
                "tps": None if self.tps is None else round(self.tps, 3), "why": self.why}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Deployment:
        step_bytes_ = data.get("step_bytes_per_gpu")
        step = None if step_bytes_ is None else StepBytes(
            float(step_bytes_), int(data.get("tp") or 1), int(data.get("experts_active") or 0),
            int(data.get("experts_total") or 0))
        share, peak, tps = data.get("share"), data.get("peak_tbps"), data.get("tps")
        return cls(kind=kind_of(str(data.get("class", "unknown"))),
                   share=None if share is None else float(share), gpu=str(data.get("gpu", "")),
                   peak_tbps=None if peak is None else float(peak), step=step,
                   tps=None if tps is None else float(tps), why=str(data.get("why", "")))


def kind_of(value: str) -> Kind:
    """A class by its name (as verdict.json and results.json write it)."""
    for kind in KINDS:
        if value == kind:
            return kind
    raise ValueError(f"unknown deployment class {value!r}; expected one of {', '.join(KINDS)}")


def unknown(why: str) -> Deployment:
    return Deployment("unknown", why=why)


def classify(*, tps: float | None, gpu_names: Sequence[str], step: StepBytes | str) -> Deployment:
    """The class from the baseline's single-stream tok/s, the names of the server's GPUs and
    the bytes a step reads (or why they are not known)."""
    if tps is None or not math.isfinite(tps) or tps <= 0:
        return unknown("no single-stream tok/s of the baseline")
    models = sorted(set(gpu_names))
    if not models:
        return unknown("no GPU name")
    if len(models) > 1:
        return unknown(f"the server's GPUs are of several models ({', '.join(models)})")
    gpu = models[0]
    peak = peak_tbps(gpu)
    if peak is None:
        return Deployment("unknown", gpu=gpu, tps=tps,
                          why=f"no peak memory bandwidth known for {gpu!r}")
    if isinstance(step, str):
        return Deployment("unknown", gpu=gpu, peak_tbps=peak, tps=tps,
                          why=f"the bytes a decode step reads are not known ({step})")
    share = step.per_gpu * tps / (peak * 1e12)
    if share > 1.0:
        return Deployment("unknown", share=share, gpu=gpu, peak_tbps=peak, step=step, tps=tps,
                          why=f"{step.describe()} × {tps:.0f} tok/s is {share * 100:.0f} % of "
                              f"the {gpu}'s peak memory bandwidth, more than it has: the "
                              "checkpoint's bytes overstate what a step reads")
    kind: Kind = ("GPU-bound" if share >= GPU_BOUND_SHARE
                  else "host-bound" if share < HOST_BOUND_SHARE else "between")
    return Deployment(kind, share=share, gpu=gpu, peak_tbps=peak, step=step, tps=tps)
