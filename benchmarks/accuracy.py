"""The harness's live figures against the truth the server logs itself, in every simulator mode,
and against real SGLang's own server-side figures (e2e_latency, spec_verify_ct).

    python -m benchmarks.accuracy            # prints the table; writes reports/accuracy.json

Simulator: each mode runs `passes.measure` over the 42 built-in prompts against a simulator that
logs every request on its own clock (SPECGATE_SIM_TRUTH); accept length and decode tok/s are
compared with that log. Real SGLang: the per-request figures of the committed H200 suite run
(benchmarks/results/2026-11-30-h200-tiny-llama-4l-eager/suite-launch-attach-faults/live/), the
client's clock against the server's.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.servers import simulator

ROOT = Path(__file__).resolve().parents[1]
# live/<run>.json: each suite run's live/results.json (the per-request figures)
LIVE = (ROOT / "benchmarks" / "results" / "2026-11-30-h200-tiny-llama-4l-eager"
        / "suite-launch-attach-faults" / "live")
MODES = {  # name: extra environment of the simulator
    "merged first message (default)": {},
    "one token per message": {"SPECGATE_SIM_FIRST_MERGE": "0"},
    "three steps merged": {"SPECGATE_SIM_FIRST_MERGE": "3"},
    "buffering proxy": {"SPECGATE_SIM_FAULT": "buffer_proxy"},
}


def simulator_mode(root: Path, name: str, env: dict[str, str], steps: int = 3,
                   max_new_tokens: int = 64, per_category: int = 6,
                   keep: dict[str, Any] | None = None) -> dict[str, Any]:
    """The harness's figures against the simulator's truth log in one streaming mode; `keep`
    receives the measurement and the served records for a caller that checks each request."""
    from specgate.measure import passes
    from specgate.results import bench, prompts
    from specgate.serving.client import SGLangClient
    from specgate.testing import generate
    from specgate.testing.simulator import model

    target, draft = root / "target", root / "draft"
    target.mkdir(exist_ok=True)
    if not (draft / "config.json").exists():
        # A whole drafter: the simulator, like SGLang, does not start on a folder without one.
        generate.write_drafter(draft, generate.tiny(),
                               config_overrides={"max_position_embeddings": 8192})
    (target / "specgate_sim.json").write_text(json.dumps(
        {"decode_ms": 1.0, "verify_ms": 1.75, "draft_step_ms": 0.125}))
    (draft / "specgate_sim.json").write_text(json.dumps({"acceptance": [0.8, 0.6, 0.5]}))
    truth_file = root / f"truth-{len(list(root.glob('truth-*')))}.jsonl"
    argv = ["--model-path", str(target), "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", str(draft), "--speculative-num-steps", str(steps),
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(steps + 1)]
    with simulator(argv, truth_file.with_suffix(".log"),
                   env={**env, "SPECGATE_SIM_TRUTH": str(truth_file)}) as url:
        b = bench.Sampling(max_new_tokens=max_new_tokens, warmup=0, repeats=1, max_repeats=1)
        chosen = prompts.PromptSet.rendered(
            prompts.select(prompts.load_builtin(), None, per_category),
            prompts.template_named("chatml", "bench"))
        with SGLangClient(url) as client:
            m = passes.measure(client, b, chosen, config="speculative")
    # The requests measured: a stream read in one burst is sent again, and only the second
    # reading counts.
    measured = {s.request_id for s in m.samples}
    truth = [r for r in model.read_truth(truth_file) if r.rid in measured]
    if keep is not None:
        keep.update(measurement=m, served=truth)
    true_accept = model.accept_length_of(truth)
    true_tps = model.decode_tps_of(truth)
    accept, tps = m.stats["accept_len"].mean, m.stats["tps"].mean
    return {"mode": name, "requests": len(m.samples), "bursts": m.bursts,
            "accept_len": accept, "true_accept_len": true_accept,
            "accept_len_error_pct": 100.0 * (accept / true_accept - 1) if true_accept else None,
            "tps": tps, "true_tps": true_tps,
            "tps_error_pct": 100.0 * (tps / true_tps - 1) if true_tps else None}


def real_sglang() -> list[dict[str, Any]]:
    """Client-side figures of the committed real-SGLang runs against the server's own."""
    out = []
    for path in sorted(LIVE.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        for config in ("baseline", "speculative"):
            m = (doc.get(config) or {}).get("measurement")
            if not m:
                continue
            samples = m["samples"]
            served = [s for s in samples if s.get("server_e2e_s")]
            gap = [1000.0 * (s["e2e_s"] - s["server_e2e_s"]) for s in served]
            verify = [s["spec_verify_ct"] for s in samples]
            row: dict[str, Any] = {
                "run": path.stem, "config": config,
                "requests": len(samples),
                "client_minus_server_e2e_ms_mean": sum(gap) / len(gap) if gap else None,
                "client_minus_server_e2e_ms_max": max(gap) if gap else None,
                "tps": m["stats"]["tps"]["mean"]}
            if all(v is not None for v in verify) and sum(verify):
                row["accept_len"] = m["stats"]["accept_len"]["mean"]
                row["server_accept_len"] = (sum(s["completion_tokens"] for s in samples)
                                            / sum(verify))
            out.append(row)
    return out


def run(work: Path) -> dict[str, Any]:
    rows = []
    for i, (name, env) in enumerate(MODES.items()):
        root = work / f"accuracy-{i}"
        root.mkdir(parents=True, exist_ok=True)
        rows.append(simulator_mode(root, name, env))
    return {"simulator": rows, "real_sglang": real_sglang()}


def bench_rows(result: dict[str, Any]) -> list[list[str]]:
    return [[f"9 accuracy: {r['mode']}", f"decode tok/s {r['tps_error_pct']:+.2f} %"
             + (f" ({r['bursts']} bursts: refused)" if r["bursts"] else ""),
             "the simulator's own clock", f"accept length {r['accept_len_error_pct']:+.3f} %",
             "±0.5 % tok/s, exact accept length"] for r in result["simulator"]]


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        result = run(Path(tmp))
    rows, real = result["simulator"], result["real_sglang"]
    print("| simulator mode | requests | bursts | accept length (truth) | error | decode tok/s "
          "(truth) | error |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['requests']} | {r['bursts']} | {r['accept_len']:.4f} "
              f"({r['true_accept_len']:.4f}) | {r['accept_len_error_pct']:+.3f} % | "
              f"{r['tps']:.1f} ({r['true_tps']:.1f}) | {r['tps_error_pct']:+.2f} % |")
    print()
    print("| real SGLang run | config | requests | client − server e2e, mean / max | accept "
          "length (server counts) |")
    print("|---|---|---|---|---|")
    for r in real:
        acc = (f"{r['accept_len']:.4f} ({r['server_accept_len']:.4f})" if "accept_len" in r
               else "—")
        print(f"| {r['run']} | {r['config']} | {r['requests']} | "
              f"{r['client_minus_server_e2e_ms_mean']:.2f} / "
              f"{r['client_minus_server_e2e_ms_max']:.2f} ms | {acc} |")
    out = ROOT / "reports" / "accuracy.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
