"""spec.parity on a real target: a drafter with random weights for it, the profiles of an alike
pair and of unlike pairs, and the judgement of answers a probe recorded earlier against the
evidence a later probe's baseline gathered.

  python -m benchmarks.real_model.parity drafter TARGET OUT
  python -m benchmarks.real_model.parity profiles TARGET DRAFTER WORK --launcher "CMD" [--sim]
  python -m benchmarks.real_model.parity explain RESULTS_JSON EVIDENCE_RESULTS_JSON OUT_JSON

`drafter`: an EAGLE-3 drafter shaped for TARGET's config.json (its hidden size, heads and
vocabulary; aux layers 1, n/2 − 1 and n − 4 as SGLang's defaults for n layers), seeded random
weights: whatever it drafts, the target decides every answer, so the answers must agree with the
baseline's up to near-ties.
`profiles`: WORK/alike.toml (both servers as the committed SmolLM2 probes served them),
WORK/dtype.toml (the speculative server on float16, the baseline on bfloat16) and
WORK/fp8.toml (the baseline's target quantized to fp8 at load, the speculative server's not).
`explain`: the answers of RESULTS_JSON (a live/results.json) judged as spec.parity judges them,
with the baseline evidence of EVIDENCE_RESULTS_JSON (a later run of the same target, whose
baseline answered the same text: checked), written to OUT_JSON with a summary on stdout.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

# The committed SmolLM2 probes' server flags (benchmarks/results/2026-12-06-h100-smollm2-135m-
# instruct-gpu-bound/probe-1/profile.toml), with a memory share that lets six servers of this
# small target share one GPU.
SERVER_ARGS = ["--attention-backend", "triton", "--speculative-draft-attention-backend",
               "triton", "--sampling-backend", "pytorch", "--grammar-backend", "none",
               "--cuda-graph-max-bs-decode", "4", "--cuda-graph-backend-prefill", "disabled",
               "--dtype", "bfloat16", "--context-length", "2048", "--mem-fraction-static",
               "0.12", "--max-total-tokens", "65536"]
# Unlike pairs: (flags after both servers' own, flags after the baseline's, what that makes).
# Flags given twice take the later value, so the baseline's come last.
UNLIKE = {
    "dtype": (["--dtype", "float16"], ["--dtype", "bfloat16"],
              "the speculative server on float16, the baseline on bfloat16"),
    "fp8": ([], ["--quantization", "fp8"],
            "the baseline's target quantized to fp8 at load, the speculative server's in bf16"),
}


def make_drafter(target: Path, out: Path, seed: int = 0) -> Path:
    from specgate.testing import generate

    config = json.loads((target / "config.json").read_text(encoding="utf-8"))
    layers = int(config["num_hidden_layers"])
    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    shape = generate.DrafterPreset(
        name="random-for-parity", hidden_size=hidden,
        intermediate_size=int(config["intermediate_size"]), num_attention_heads=heads,
        num_key_value_heads=int(config.get("num_key_value_heads", heads)),
        head_dim=int(config.get("head_dim") or hidden // heads),
        vocab_size=int(config["vocab_size"]), draft_vocab_size=int(config["vocab_size"]),
        max_position_embeddings=int(config.get("max_position_embeddings", 2048)),
        aux_layer_ids=(1, layers // 2 - 1, layers - 4), include_embed=False,
        bos_token_id=int(config.get("bos_token_id") or 1),
        eos_token_id=int(config.get("eos_token_id") or 2),
        rope_theta=float(config.get("rope_theta", 10000.0)))
    ids = generate.default_token_ids(shape, seed=seed)
    generate.write_drafter(out, shape, token_ids=ids, fill="random", seed=seed)
    return out


def write_profiles(target: Path, drafter: Path, work: Path, launcher: str, sim: bool) -> None:
    common: dict[str, Any] = {
        "target": {"path": str(target)}, "drafter": {"path": str(drafter)},
        "speculative": {"algorithm": "EAGLE3", "num_steps": 4, "eagle_topk": 1,
                        "num_draft_tokens": 5},
        "thresholds": {"baseline_tps_min": 100.0, "accept_len_min": "breakeven"},
    }
    server: dict[str, Any] = {"launcher": shlex.split(launcher), "host": "127.0.0.1", "port": 0,
                              "tp": 1, "startup_timeout_s": 900.0,
                              "args": [] if sim else list(SERVER_ARGS)}
    bench = {"prompts": "builtin", "prompts_per_category": 6, "max_new_tokens": 256,
             "temperature": 0.0, "warmup": 1, "request_timeout_s": 300.0}
    profiles = {"alike": ({**common, "name": "smollm2-parity-alike",
                           "description": "both servers as the committed SmolLM2 probes served "
                                          "them; a random-weight EAGLE-3 drafter",
                           "server": server, "bench": {**bench, "repeats": 1,
                                                       "max_repeats": 1}})}
    for name, (both, baseline, said) in UNLIKE.items():
        profiles[name] = {**common, "name": f"smollm2-parity-{name}",
                          "description": f"an unlike pair: {said}",
                          "server": {**server, "args": [*server["args"], *both],
                                     "baseline_args": baseline},
                          "bench": {**bench, "repeats": 1, "max_repeats": 1}}
    work.mkdir(parents=True, exist_ok=True)
    for name, raw in profiles.items():
        (work / f"{name}.toml").write_text(_toml(raw), encoding="utf-8")
        print(f"wrote {work / f'{name}.toml'}")


def _toml(raw: dict[str, Any]) -> str:
    lines: list[str] = []
    tables = {k: v for k, v in raw.items() if isinstance(v, dict)}
    for key, value in raw.items():
        if not isinstance(value, dict):
            lines.append(f"{key} = {json.dumps(value)}")
    for name, table in tables.items():
        lines.append(f"\n[{name}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def explain(results: Path, evidence_results: Path, out: Path) -> int:
    from specgate.results import parity
    from specgate.results.live import LiveResults

    then = LiveResults.read(results)
    now = LiveResults.read(evidence_results)
    base, spec = then.baseline.measurement, then.speculative.measurement
    evidence = now.baseline.answers
    if base is None or spec is None or evidence is None or now.baseline.measurement is None:
        print(f"{results} or {evidence_results} lacks a measurement or the baseline evidence")
        return 1
    same = parity.answers_of(now.baseline.measurement) == parity.answers_of(base)
    found = parity.compare(base, spec, evidence, None, then.baseline.server_info,
                           then.speculative.server_info)
    doc = {"results": str(results), "evidence": str(evidence_results),
           "baseline_answers_identical": same, **found.to_json()}
    out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    explained = [d for d in found.divergences if d.explained]
    print(f"{results}: {found.prompts} prompts, {len(found.identical)} identical, "
          f"{len(found.divergences)} part, {len(explained)} at near-ties; "
          f"{found.margin.text()}; the baseline answered the same text now: {same}")
    for d in found.divergences:
        print(f"  {d.prompt_id} token {d.position}: {d.tokens_text()}: {d.why}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("drafter")
    d.add_argument("target", type=Path)
    d.add_argument("out", type=Path)
    p = sub.add_parser("profiles")
    p.add_argument("target", type=Path)
    p.add_argument("drafter", type=Path)
    p.add_argument("work", type=Path)
    p.add_argument("--launcher", required=True)
    p.add_argument("--sim", action="store_true")
    e = sub.add_parser("explain")
    e.add_argument("results", type=Path)
    e.add_argument("evidence", type=Path)
    e.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    if args.command == "drafter":
        print(f"drafter written to {make_drafter(args.target, args.out)}")
        return 0
    if args.command == "profiles":
        write_profiles(args.target.resolve(), args.drafter.resolve(), args.work.resolve(),
                       args.launcher, args.sim)
        return 0
    return explain(args.results, args.evidence, args.out)


if __name__ == "__main__":
    sys.exit(main())
