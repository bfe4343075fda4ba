"""The simulator's command line: SGLang's launcher flags, resolved with SGLang's rules."""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specgate.testing.simulator import model
from specgate.testing.simulator.drafter import DraftLoadError, check_draft_folder

# Targets whose EAGLE draft defaults to the target itself (MTP/NEXTN), facts §1.3.
_MTP_ARCHES = (
    "DeepseekV3ForCausalLM",
    "DeepseekV32ForCausalLM",
    "DeepseekV2ForCausalLM",
    "Glm4MoeForCausalLM",
    "BailingMoeForCausalLM",
)
_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO")

TOPK1_WARNING = (
    "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
    "speculative_eagle_topk == 1"
)


class StartupError(Exception):
    """SGLang would abort start-up; the text is what it prints (an exception line)."""


def build_parser() -> argparse.ArgumentParser:
    """SGLang's flag names; abbreviations allowed like SGLang's argparse, unknown flags exit 2."""
    parser = argparse.ArgumentParser(
        prog="sglang serve",
        description="specgate's SGLang simulator (serves SGLang's HTTP API, no GPU).",
    )
    add = parser.add_argument
    add("--model-path", "--model", dest="model_path", required=True)
    add("--tokenizer-path")
    add("--revision")
    add("--served-model-name")
    add("--host", default="127.0.0.1")
    add("--port", type=int, default=30000)
    add("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    add("--dp-size", "--data-parallel-size", dest="dp_size", type=int, default=1)
    add("--ep-size", "--expert-parallel-size", dest="ep_size", type=int, default=1)
    add("--pp-size", type=int, default=1)
    add("--nnodes", type=int, default=1)
    add("--node-rank", type=int, default=0)
    add("--dist-init-addr")
    add("--device", default="auto")
    add("--base-gpu-id", type=int, default=0)
    add("--gpu-id-step", type=int, default=1)
    add("--api-key")
    add("--admin-api-key")
    add("--trust-remote-code", action="store_true")
    add("--mem-fraction-static", type=float)
    add("--context-length", type=int)
    add("--dtype", default="auto")
    add("--kv-cache-dtype", default="auto")
    add("--quantization")
    add("--load-format", default="auto")
    add("--attention-backend")
    add("--sampling-backend")
    add("--max-running-requests", type=int)
    add("--max-total-tokens", type=int)
    add("--chunked-prefill-size", type=int)
    add("--page-size", type=int, default=1)
    add("--cuda-graph-max-bs-decode", type=int)
    add("--cuda-graph-max-bs-prefill", type=int)
    add("--disable-cuda-graph", action="store_true")
    add("--disable-radix-cache", action="store_true")
    add("--disable-overlap-schedule", action="store_true")
    add("--enable-mixed-chunk", action="store_true")
    add("--enable-cache-report", action="store_true")
    add("--enable-metrics", action="store_true")
    add("--skip-server-warmup", action="store_true")
    add("--decode-log-interval", type=int, default=40)
    add("--log-level", default="info")
    add("--log-requests", action="store_true")
    add("--random-seed", type=int)
    add("--watchdog-timeout", type=float, default=300.0)
    add("--chat-template")
    add("--reasoning-parser")
    add("--tool-call-parser")
    add("--speculative-algorithm", type=str.upper)
    add("--speculative-draft-model-path", "--speculative-draft-model",
        dest="speculative_draft_model_path")
    add("--speculative-draft-model-revision")
    add("--speculative-num-steps", type=int)
    add("--speculative-eagle-topk", type=int)
    add("--speculative-num-draft-tokens", type=int)
    add("--speculative-attention-mode", choices=["prefill", "decode"], default="prefill")
    add("--speculative-draft-attention-backend")
    add("--speculative-token-map")
    add("--speculative-accept-threshold-single", type=float, default=1.0)
    add("--speculative-accept-threshold-acc", type=float, default=1.0)
    add("--speculative-draft-model-quantization")
    add("--speculative-draft-window-size", type=int)
    add("--speculative-use-rejection-sampling", action="store_true")
    return parser


@dataclasses.dataclass(frozen=True)
class Resolved:
    """Server args after SGLang's rules, plus what the simulator derived from the model dirs."""

    args: dict[str, Any]
    params: model.SimParams
    context_length: int
    architectures: tuple[str, ...]
    eos_token_id: int
    warnings: tuple[str, ...]


def _model_dir(path: str | None, flag: str) -> Path | None:
    """A local directory, None for a hub id; a missing local path fails like SGLang does."""
    if not path:
        return None
    candidate = Path(path)
    if candidate.is_dir():
        return candidate
    if path.startswith(("/", ".", "~")) or os.sep in path.strip("/").replace("/", "", 1):
        raise StartupError(
            f"OSError: {path} ({flag}) is not a local folder and is not a valid model identifier "
            "listed on 'https://huggingface.co/models'"
        )
    return None


def _positions(config: Mapping[str, Any]) -> int | None:
    value = config.get("max_position_embeddings")
    return int(value) if isinstance(value, int) else None


def resolve(ns: argparse.Namespace, env: Mapping[str, str]) -> Resolved:
    """Apply SGLang's start-up rules; raise StartupError with SGLang's text when it would abort."""
    args = dict(vars(ns))
    warnings: list[str] = []
    target_dir = _model_dir(ns.model_path, "--model-path")
    target_cfg = model.read_config(target_dir)
    architectures = tuple(target_cfg.get("architectures") or ["LlamaForCausalLM"])
    derived_context = _positions(target_cfg) or 8192
    context_length = ns.context_length or derived_context
    if ns.context_length and ns.context_length > derived_context:
        _check_context(ns.context_length, derived_context, env, warnings)

    algorithm = ns.speculative_algorithm
    speculative = algorithm is not None
    if speculative and algorithm not in _ALGORITHMS:
        raise StartupError(f"ValueError: Unknown speculative algorithm name: {algorithm}")
    if algorithm == "NEXTN":
        algorithm = "EAGLE"
    args["speculative_algorithm"] = algorithm

    draft_dir: Path | None = None
    unloaded: tuple[str, ...] = ()
    steps, topk, draft_tokens = (
        ns.speculative_num_steps, ns.speculative_eagle_topk, ns.speculative_num_draft_tokens,
    )
    if speculative:
        draft_path = ns.speculative_draft_model_path
        if draft_path is None and architectures[0] in _MTP_ARCHES:
            draft_path = ns.model_path
            args["speculative_draft_model_path"] = draft_path
        if draft_path is None:
            raise StartupError(
                f"ValueError: --speculative-draft-model-path is required for {algorithm} "
                f"with target architecture {architectures[0]}"
            )
        draft_dir = _model_dir(draft_path, "--speculative-draft-model-path")
        if args.get("speculative_draft_model_revision") is None:
            args["speculative_draft_model_revision"] = "main"
        if draft_dir is not None and (target_dir is None
                                      or draft_dir.resolve() != target_dir.resolve()):
            # (A draft that is the target's own MTP layers loads with the target, which the
            # simulator does not read.)
            try:
                hidden = target_cfg.get("hidden_size")
                unloaded = check_draft_folder(
                    draft_dir, str(args["speculative_draft_model_revision"]),
                    target_hidden=hidden if isinstance(hidden, int) else None)
            except DraftLoadError as exc:
                raise StartupError(str(exc)) from exc
        if steps is None:
            if topk is not None or draft_tokens is not None:
                raise StartupError(
                    "AssertionError: speculative_eagle_topk and speculative_num_draft_tokens "
                    "must be unset when speculative_num_steps is unset (set all three or none)"
                )
            steps, topk, draft_tokens = model.auto_spec_settings(architectures)
        elif topk is None or draft_tokens is None:
            raise StartupError(
                "AssertionError: speculative_num_steps, speculative_eagle_topk and "
                "speculative_num_draft_tokens must be set together"
            )
        if topk == 1 and draft_tokens != steps + 1:
            warnings.append(TOPK1_WARNING)
            draft_tokens = steps + 1
        if ns.max_running_requests is None:
            warnings.append(
                "Max running requests is reset to 48 for speculative decoding. You can override "
                "this by explicitly setting --max-running-requests."
            )
            args["max_running_requests"] = 48
        draft_positions = _positions(model.read_config(draft_dir))
        if draft_positions is not None and draft_positions < context_length:
            _check_context(context_length, draft_positions, env, warnings)
        args.update(
            speculative_num_steps=steps,
            speculative_eagle_topk=topk,
            speculative_num_draft_tokens=draft_tokens,
        )
    args["context_length"] = context_length
    if args.get("random_seed") is None:  # as SGLang's ServerArgs: drawn anew at each launch
        args["random_seed"] = random.randint(0, 1 << 30)
    args["tokenizer_path"] = ns.tokenizer_path or ns.model_path
    args["served_model_name"] = ns.served_model_name or ns.model_path
    try:
        params = model.load_params(
            target_dir,
            draft_dir,
            speculative=speculative,
            num_steps=steps if speculative else 3,
            eagle_topk=topk if speculative else 1,
            num_draft_tokens=draft_tokens if speculative else 4,
            env=env,
        )
    except ValueError as exc:
        raise StartupError(f"ValueError: {exc}") from exc
    if unloaded:
        # Parameters SGLang never filled: the draft proposes nothing the target accepts.
        silent = model.Drafter(acceptance=(0.0,) * max(1, params.num_steps))
        params = dataclasses.replace(params, drafter=silent)
    eos = target_cfg.get("eos_token_id", 2)
    eos_id = int(eos[0] if isinstance(eos, list) and eos else eos if isinstance(eos, int) else 2)
    return Resolved(
        args=args,
        params=params,
        context_length=context_length,
        architectures=architectures,
        eos_token_id=eos_id,
        warnings=tuple(warnings),
    )


def _check_context(
    context_length: int, derived: int, env: Mapping[str, str], warnings: list[str]
) -> None:
    """SGLang's _derive_context_length: abort unless the overwrite env var (or CI) allows it."""
    head = (
        f"User-specified context_length ({context_length}) is greater than the derived "
        f"context_length ({derived}). This may lead to incorrect model outputs or CUDA errors."
    )
    allowed = {"1", "true", "True", "TRUE", "yes"}
    if (env.get("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN") in allowed
            or env.get("SGLANG_IS_IN_CI") in allowed):
        warnings.append("Warning: " + head)
        return
    raise StartupError(
        f"ValueError: {head} Note that the derived context_length may differ from "
        "max_position_embeddings in the model's config. To allow overriding this maximum, set "
        "the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
    )


def server_args_repr(args: Mapping[str, Any]) -> str:
    """The `server_args=ServerArgs(...)` text SGLang logs at start (api_key included, as SGLang)."""
    return "ServerArgs(" + ", ".join(f"{key}={value!r}" for key, value in args.items()) + ")"


def parse(argv: Sequence[str], env: Mapping[str, str]) -> Resolved:
    return resolve(build_parser().parse_args(list(argv)), env)
