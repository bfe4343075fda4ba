"""Close the loop on real SGLang: train a drafter, serve it, probe it, compare with the prediction.

Called by loop.sh once SGLang and specgate are in place (see README.md):

    python3 loop.py --work /tmp/loop --out $OUT --root ROOT --launcher "python3 -m ..." \
        --deadline EPOCH [--sim] [--train-args "..."]

1. train_drafter.py builds the tiny target (saved weights), dumps its hidden states, trains a
   1-layer EAGLE-3 drafter with specgate's own forward and predicts its accept length on the
   probe's prompts (WORK/model/prediction.json).
2. `pytest -m probe` launches SGLang with that target and drafter (baseline, then EAGLE-3) and
   judges every Phase 0 claim, accept length against break-even.
3. `pytest -m "phase1 or phase2"` judges the fine-tune and data claims on the same files.
4. The predicted accept length is set against the measured one, overall and per category.

Writes OUT/loop.log (via loop.sh), OUT/loop_summary.json, OUT/loop_summary.md and
OUT/loop.tar.gz (verdicts, live results, training logs, prediction, profile).
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import suite  # noqa: E402  (the real-SGLang suite's profile writer and server flags)


def log(message: str) -> None:
    print(f"[loop {time.strftime('%H:%M:%S')}] {message}", flush=True)


def served_key(steps: int) -> str:
    return f"steps{steps}_topk1_draft{steps + 1}"


def profile(model: Path, launcher: list[str], sim: bool, max_new_tokens: int,
            steps: int = 3) -> dict[str, Any]:
    return {
        "name": "real-sglang-0.5.17-trained" + ("-sim" if sim else ""),
        "description": "tiny Llama target served by SGLang with a drafter trained by specgate",
        "target": {"path": str(model / "target")},
        "drafter": {"path": str(model / "drafter"), "reference": str(model / "scratch")},
        "server": {"launcher": launcher, "host": "127.0.0.1", "port": 0, "tp": 1,
                   "startup_timeout_s": 480.0, "stop_timeout_s": 30.0,
                   "args": suite.server_flags(sim)},
        "speculative": {"algorithm": "EAGLE3", "num_steps": steps, "eagle_topk": 1,
                        "num_draft_tokens": steps + 1},
        # All 42 built-in prompts, as the held-out dump the prediction was made on.
        "bench": {"prompts": "builtin", "prompts_per_category": 6,
                  "max_new_tokens": max_new_tokens, "temperature": 0.0, "warmup": 1,
                  "repeats": 1, "max_repeats": 2, "request_timeout_s": 60.0},
        "thresholds": {"baseline_tps_min": 100.0, "accept_len_min": "breakeven",
                       "d2t_match_min": 0.99},
        "finetune": {"init": str(model / "scratch"), "log": str(model / "logs/finetune.jsonl"),
                     "reference_log": str(model / "logs/scratch.jsonl"),
                     "hidden_states": str(model / "dump/train"),
                     "vocab_map": str(model / "vocab_map.safetensors")},
        "data": {"path": str(model / "dump/train")},
        # eval.live_agreement: the offline prediction on the probe's own prompts (the held-out
        # dump: the target's greedy continuations from a plain torch forward) against the probe.
        "eval": {"hidden_states": str(model / "dump/heldout")},
    }


def run(argv: list[str], log_file: Path, timeout_s: float, cwd: Path) -> tuple[int, float]:
    log(" ".join(shlex.quote(a) for a in argv) + f"  (timeout {timeout_s:.0f} s)")
    started = time.monotonic()
    with log_file.open("w") as fh:
        try:
            done = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, cwd=cwd,
                                  timeout=max(timeout_s, 1.0), check=False)
            code = done.returncode
        except subprocess.TimeoutExpired:
            code = 124
    took = time.monotonic() - started
    log(f"exit {code} after {took:.0f} s; log {log_file}")
    return code, took


def claims(reports: Path) -> list[dict[str, Any]]:
    try:
        doc = json.loads((reports / "verdict.json").read_text())
    except (OSError, ValueError):
        return []
    return [{k: c.get(k) for k in ("id", "status", "observed", "expected", "message")}
            for c in doc.get("claims", [])]


def compare(model: Path, reports: Path, steps: int) -> dict[str, Any]:
    """Predicted (offline, teacher-forced on the held-out dump) against measured (live) accept
    length, in SGLang's per-request form Σcompletion/Σverify, overall and per category."""
    try:
        pred = json.loads((model / "prediction.json").read_text())
        live = json.loads((reports / "live" / "results.json").read_text())
    except (OSError, ValueError) as exc:
        return {"error": f"cannot compare: {exc}"}
    m = (live.get("speculative") or {}).get("measurement") or {}
    samples = m.get("samples") or []
    out: dict[str, Any] = {"groups": {}}
    by: dict[str, list[dict[str, Any]]] = {"all": samples}
    for s in samples:
        by.setdefault(str(s.get("category")), []).append(s)
    for name, chosen in by.items():
        comp = sum(int(s.get("completion_tokens") or 0) for s in chosen)
        verify = sum(int(s.get("spec_verify_ct") or 0) for s in chosen)
        group = (pred.get("groups") or {}).get(name) or {}
        predicted = (group.get("predicted_per_request") or {}).get(served_key(steps))
        out["groups"][name] = {
            "requests": len(chosen), "measured_accept_len": comp / verify if verify else None,
            "predicted_accept_len": predicted,
            "predicted_per_verify": (group.get("predicted") or {}).get(served_key(steps))}
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--root", type=Path, required=True)
    ap.add_argument("--launcher", required=True)
    ap.add_argument("--deadline", type=float, required=True)
    ap.add_argument("--sim", action="store_true")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--train-args", default="")
    ap.add_argument("--steps", type=int, default=3,
                    help="served chain: --speculative-num-steps N, topk 1, N + 1 draft tokens")
    ap.add_argument("--skip-phase1", action="store_true",
                    help="judge only the probe (the Phase 1/2 claims ran in an earlier call)")
    ap.add_argument("--tag", default="", help="suffix of the summary's file names")
    args = ap.parse_args()
    py = sys.executable
    work, out = args.work, args.out
    model = work / "model"
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "steps": {}}

    def left() -> float:
        return args.deadline - time.time()

    if not (model / "prediction.json").exists():
        code, took = run([py, str(HERE / "train_drafter.py"), str(model),
                          "--heldout-tokens", str(args.max_new_tokens), "--max-steps", "8",
                          *shlex.split(args.train_args)],
                         work / "train.log", min(left() - 240, 300), args.root)
        summary["steps"]["train"] = {"exit": code, "seconds": round(took, 1)}
    for name in ("summary.json", "prediction.json"):
        path = model / name
        if path.exists():
            summary[f"train_{name}"] = json.loads(path.read_text())
    tag = args.tag
    prof = work / f"trained{tag}.toml"
    prof.write_text(suite.toml(profile(model, shlex.split(args.launcher), args.sim,
                                       args.max_new_tokens, args.steps)))
    reports = work / f"reports{tag}"
    code, took = run([py, "-m", "pytest", "-m", "probe", f"--profile={prof}",
                      f"--reports={reports}", "-p", "no:cacheprovider"],
                     work / f"probe{tag}.log", left() - 40, args.root)
    summary["steps"]["probe"] = {"exit": code, "seconds": round(took, 1),
                                 "claims": claims(reports)}
    reports1 = work / "reports-phase1"
    if not args.skip_phase1:
        code, took = run([py, "-m", "pytest", "-m", "phase1 or phase2", f"--profile={prof}",
                          f"--reports={reports1}", "-p", "no:cacheprovider"],
                         work / "phase1.log", left() - 10, args.root)
        summary["steps"]["phase1"] = {"exit": code, "seconds": round(took, 1),
                                      "claims": claims(reports1)}
    summary["served"] = {"steps": args.steps, "topk": 1, "draft_tokens": args.steps + 1,
                         "server_args": suite.server_flags(args.sim)}
    summary["predicted_vs_measured"] = compare(model, reports, args.steps)
    (out / f"loop_summary{tag}.json").write_text(json.dumps(summary, indent=1) + "\n")
    lines = ["# Closing the loop on real SGLang" + (" (simulator dry run)" if args.sim else ""),
             ""]
    for step, info in summary["steps"].items():
        lines.append(f"## {step}: exit {info['exit']}, {info['seconds']} s")
        for c in info.get("claims", []):
            lines.append(f"- {c['id']}: **{c['status']}** — {str(c['message'])[:300]}")
        lines.append("")
    lines.append(f"## predicted vs measured accept length (served: steps {args.steps}, topk 1, "
                 f"{args.steps + 1} drafts)")
    for name, g in (summary["predicted_vs_measured"].get("groups") or {}).items():
        lines.append(f"- {name}: measured {g['measured_accept_len']}, predicted "
                     f"{g['predicted_accept_len']} ({g['requests']} requests)")
    (out / f"loop_summary{tag}.md").write_text("\n".join(lines) + "\n")
    with tarfile.open(out / f"loop{tag}.tar.gz", "w:gz") as tar:
        phase1 = () if args.skip_phase1 else (work / "phase1.log", reports1 / "verdict.json")
        for path in (prof, work / "train.log", work / f"probe{tag}.log", *phase1,
                     reports / "verdict.json", reports / "live",
                     model / "summary.json", model / "prediction.json", model / "logs",
                     model / "drafter" / "config.json"):
            if path.exists():
                tar.add(path, arcname=str(path.relative_to(work)))
    # The trained drafter and the held-out dump travel back too (about 15 MB), so the offline
    # prediction can be re-run off the GPU machine (`specgate eval --served-steps`).
    if not (out / "model.tar.gz").exists():
        with tarfile.open(out / "model.tar.gz", "w:gz") as tar:
            for path in (model / "drafter", model / "target" / "config.json",
                         model / "target" / "tokenizer.json",
                         model / "target" / "tokenizer_config.json", model / "dump" / "heldout"):
                if path.exists():
                    tar.add(path, arcname=str(path.relative_to(work)))
    probe_claims = summary["steps"]["probe"]["claims"]
    ok = bool(probe_claims) and all(c["status"] in ("passed", "skipped") for c in probe_claims)
    log(f"probe {'PASSED' if ok else 'not passed'}; summary in {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
