"""Offline prediction against live measurement, for every chain a tune or probe measured.

usage: python3 -m benchmarks.real_sglang.walk_vs_live PREDICTION_JSON TUNE_JSON
           [LOOP_SUMMARY_JSON ...] [--out FILE]

PREDICTION_JSON is train_drafter.py's prediction.json (`specgate eval` of the drafter on the
held-out dump of the probe's prompts: the served walk per verify pass and per request, and the
chain model averaged over every position). TUNE_JSON is a `specgate tune` result on the same
drafter and prompts, or - when no tune ran; each LOOP_SUMMARY_JSON a loop.py probe of it.
Prints (or writes) a Markdown table: per chain, the offline walk against the measured tokens
per verify in decode (tau_decode) and per request (accept length as SGLang counts it), with the
relative error, beside the two chain models (offline over every position, and the tune's from
SGLang's histogram).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def _key(steps: int) -> str:
    return f"steps{steps}_topk1_draft{steps + 1}"


def _err(predicted: float | None, measured: float | None) -> str:
    if predicted is None or measured is None or measured == 0:
        return "—"
    return f"{(predicted - measured) / measured:+.1%}"


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def rows(prediction: dict[str, Any], tune: dict[str, Any],
         probes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    group = prediction["groups"]["all"]
    out = []
    for trial in tune.get("trials", []):
        cand = trial.get("candidate") or {}
        steps, topk = int(cand.get("steps", 0)), int(cand.get("topk", 1))
        m = (trial.get("run") or {}).get("measurement") or {}
        st = m.get("stats") or {}
        if topk != 1 or "tau_decode" not in st or "accept_len" not in st:
            continue
        acc = st["accept_len"]
        ci = (acc["ci_low"], acc["ci_high"]) if acc.get("ci_low") is not None and \
            acc.get("ci_high") is not None else None
        out.append({
            "source": f"tune launch {trial.get('launch')} ({trial.get('key')})", "steps": steps,
            "walk_verify": group["predicted"].get(_key(steps)),
            "tau_decode": st["tau_decode"]["mean"],
            "walk_request": group["predicted_per_request"].get(_key(steps)),
            "accept_len": acc["mean"], "accept_ci": ci,
            "chain_offline": (group.get("chain_model") or {}).get(_key(steps)),
            "chain_histogram": ((tune.get("predictions") or {}).get(trial.get("key")) or {})
            .get("tau"),
        })
    for summary in probes:
        served = summary.get("served") or {}
        steps = int(served.get("steps", 0))
        chain = int(served.get("topk", 1)) == 1 and \
            int(served.get("draft_tokens", steps + 1)) == steps + 1
        if not chain or "probe" not in (summary.get("steps") or {}):
            continue  # a tree (not predicted), or a run with no probe
        live = (summary.get("predicted_vs_measured") or {}).get("groups", {}).get("all", {})
        out.append({
            "source": f"probe {summary.get('started', '')}", "steps": steps,
            "walk_verify": group["predicted"].get(_key(steps)), "tau_decode": None,
            "walk_request": group["predicted_per_request"].get(_key(steps)),
            "accept_len": live.get("measured_accept_len"), "accept_ci": None,
            "chain_offline": (group.get("chain_model") or {}).get(_key(steps)),
            "chain_histogram": None,
        })
    return sorted(out, key=lambda r: (r["steps"], r["source"]))


def markdown(table: list[dict[str, Any]], prediction: dict[str, Any]) -> str:
    group = prediction["groups"]["all"]
    lines = [
        f"Offline: `specgate eval` of {prediction.get('drafter')} on {prediction.get('dump')} "
        f"({group['samples']} samples, {group['tokens']} tokens, "
        f"{group.get('served_verifies')} replayed verify passes at the deepest chain).",
        "",
        "| measured by | steps | walk per verify | measured τ decode | error | walk per request "
        "| measured accept length (CI) | error | chain model, every position (offline) "
        "| chain model, SGLang histogram (tune) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table:
        ci = f" [{r['accept_ci'][0]:.3f}, {r['accept_ci'][1]:.3f}]" if r["accept_ci"] else ""
        lines.append(
            f"| {r['source']} | {r['steps']} | {_num(r['walk_verify'])} | {_num(r['tau_decode'])} "
            f"| {_err(r['walk_verify'], r['tau_decode'])} | {_num(r['walk_request'])} "
            f"| {_num(r['accept_len'])}{ci} | {_err(r['walk_request'], r['accept_len'])} "
            f"| {_num(r['chain_offline'])} | {_num(r['chain_histogram'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("prediction", type=Path)
    ap.add_argument("tune", help="tune.json, or - when no tune ran (probes only)")
    ap.add_argument("probes", type=Path, nargs="*")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    try:
        prediction = json.loads(args.prediction.read_text())
        tune = {} if args.tune == "-" else json.loads(Path(args.tune).read_text())
        probes = [json.loads(p.read_text()) for p in args.probes]
    except (OSError, ValueError) as exc:
        print(f"walk_vs_live: cannot read the inputs: {exc}", file=sys.stderr)
        return 2
    if "groups" not in prediction or "all" not in prediction["groups"]:
        print(f"walk_vs_live: {args.prediction} has no 'all' group (not a prediction.json?)",
              file=sys.stderr)
        return 2
    text = markdown(rows(prediction, tune, probes), prediction)
    if args.out:
        args.out.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
