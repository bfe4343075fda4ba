"""specgate profiles for SmolLM2-135M-Instruct on real SGLang: probe, vocab, Phase 1 and Phase 2.

The server flags are the real-SGLang suite's (benchmarks/real_sglang/suite.py: Triton attention,
decode CUDA graphs up to batch 4 with RS_CUDA_GRAPHS=1, context 2048, memory fraction 0.3, 65,536
KV tokens); the bench is the probe's 42 built-in prompts at 256 new tokens, greedy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.real_sglang import suite  # server flags, TOML writer, option names

NAME = "smollm2-135m-instruct"
MAX_NEW_TOKENS = 256
# The generation server: the baseline's flags with a larger KV pool and more requests in flight.
GENERATION_OVERRIDES = {"--max-total-tokens": "600000", "--max-running-requests": "512"}


def chat_template(target: Path) -> str | None:
    """None when specgate picks the target's own template; else "chatml" (SmolLM2's family):
    a specgate without the target-template fix reads no chat_template.jinja and would send the
    probe's prompts as plain text."""
    from specgate.results import prompts

    try:
        chosen = prompts.choose_template(None, target)
    except Exception:  # an API that moved: say chatml explicitly
        return "chatml"
    return "chatml" if getattr(chosen, "name", "plain") == "plain" else None


OPTIONS: dict[str, str] = suite.OPTIONS  # specgate's pytest option names


def flags(sim: bool, overrides: dict[str, str] | None = None) -> list[str]:
    args: list[str] = list(suite.server_flags(sim))
    for flag, value in (overrides or {}).items():
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    return args


def describe(target: Path) -> str:
    """The profile's description: the model, and pad_target.py's widening when it made TARGET."""
    import json

    text = "SmolLM2-135M-Instruct (GGUF Q4_1 dequantised to bf16) on SGLang 0.5.17"
    try:
        cfg = json.loads((target / "config.json").read_text())
    except (OSError, ValueError):
        return text
    pad = cfg.get("specgate_padding") if isinstance(cfg, dict) else None
    if isinstance(pad, dict) and isinstance(pad.get("step_bytes"), (int, float)):
        text += (f", its MLPs widened with zero-output channels to {pad['step_bytes'] / 1e9:.2f}"
                 " GB read a decode step (pad_target.py: the same answers, a GPU-bound decode)")
    return text


def base(name: str, target: Path, launcher: list[str], sim: bool,
         overrides: dict[str, str] | None = None) -> dict[str, Any]:
    bench: dict[str, Any] = {"prompts": "builtin", "prompts_per_category": 6,
                             "max_new_tokens": MAX_NEW_TOKENS, "temperature": 0.0, "warmup": 1,
                             "repeats": 1, "max_repeats": 2, "request_timeout_s": 120.0}
    template = chat_template(target)
    if template is not None:
        bench["chat_template"] = template
    return {
        "name": f"{NAME}-{name}" + ("-sim" if sim else ""),
        "description": describe(target),
        "target": {"path": str(target)},
        "server": {"launcher": launcher, "host": "127.0.0.1", "port": 0, "tp": 1,
                   "startup_timeout_s": 600.0, "stop_timeout_s": 30.0,
                   "args": flags(sim, overrides)},
        "bench": bench,
        "thresholds": {"baseline_tps_min": 100.0, "accept_len_min": "breakeven",
                       "d2t_match_min": 0.99},
    }


def expect(target: Path) -> dict[str, Any]:
    """[drafter.expect]: the config fields a drafter for this target must have."""
    import json

    cfg = json.loads((target / "config.json").read_text())
    n = int(cfg["num_hidden_layers"])
    return {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": cfg["hidden_size"],
            "num_attention_heads": cfg["num_attention_heads"],
            "num_key_value_heads": cfg["num_key_value_heads"], "vocab_size": cfg["vocab_size"],
            # the ids that make SGLang capture its default layers [2, n // 2, n - 3] (capture.py)
            "eagle_config.eagle_aux_hidden_state_layer_ids": [1, n // 2 - 1, n - 4]}


def speculative(steps: int) -> dict[str, Any]:
    return {"algorithm": "EAGLE3", "num_steps": steps, "eagle_topk": 1,
            "num_draft_tokens": steps + 1}


def probe(target: Path, drafter: Path, heldout: Path, launcher: list[str], sim: bool,
          steps: int, label: str = "trained",
          overrides: dict[str, str] | None = None) -> dict[str, Any]:
    """`pytest -m probe`: the drafter against the baseline, with the prediction on the held-out
    dump of the probe's own prompts (eval.live_agreement)."""
    doc = base(f"{label}-s{steps}-k1-d{steps + 1}", target, launcher, sim, overrides)
    doc["drafter"] = {"path": str(drafter), "expect": expect(target)}
    doc["speculative"] = speculative(steps)
    doc["eval"] = {"hidden_states": str(heldout), "device": "auto"}
    return doc


def vocab_check(target: Path, drafter: Path, reference: Path, launcher: list[str], sim: bool,
                label: str) -> dict[str, Any]:
    """The offline probe claims (`-m "probe and not live"`) of a drafter against a reference."""
    doc = base(label, target, launcher, sim)
    doc["drafter"] = {"path": str(drafter), "reference": str(reference),
                      "expect": expect(target)}
    doc["speculative"] = speculative(3)
    return doc


def phase1(target: Path, drafter: Path, init: Path, log: Path, reference_log: Path,
           vocab_map: Path, hidden_states: Path, launcher: list[str], sim: bool,
           label: str) -> dict[str, Any]:
    doc = base(label, target, launcher, sim)
    doc["drafter"] = {"path": str(drafter)}
    doc["speculative"] = speculative(3)
    doc["finetune"] = {"init": str(init), "log": str(log), "reference_log": str(reference_log),
                       "vocab_map": str(vocab_map), "hidden_states": str(hidden_states)}
    doc["eval"] = {"device": "auto"}
    return doc


def phase2(target: Path, drafter: Path, dump: Path, launcher: list[str], sim: bool,
           label: str) -> dict[str, Any]:
    doc = base(label, target, launcher, sim)
    doc["drafter"] = {"path": str(drafter)}
    doc["speculative"] = speculative(3)
    doc["data"] = {"path": str(dump)}
    return doc


def generation(target: Path, launcher: list[str], sim: bool) -> dict[str, Any]:
    """The server that writes the training answers (baseline, larger KV pool)."""
    return base("generation", target, launcher, sim, GENERATION_OVERRIDES)


def write(doc: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(suite.toml(doc))
    return path


def load(doc: dict[str, Any], path: Path) -> Any:
    """Write the profile and read it back through specgate's validation."""
    from specgate.core.profile import load_profile

    return load_profile(write(doc, path))
