"""Launch records: how much one server's single-stream decode speed moves from one launch to
the next, per target, on real SGLang.

Each target is launched N times in turn (target A, B, C, A, B, C, …, so a drift of the machine
over the run does not fall on one target), each launch measured by the same single-stream greedy
requests of a fixed length, then stopped. Everything a model of the spread needs is kept: every
request's completion tokens and the server's own `e2e_latency`, the client's wall time, start to
ready, the GPU's clocks, power and memory around the measurement, and the weight bytes a decode
step reads (from the target's config).

    python3 launch_records.py OUT.json --target NAME=DIR[,MEM_FRACTION[,LOAD_FORMAT[,DRAFTER]]] ...
        [--launches 5] [--requests 16] [--tokens 128] [--deadline EPOCH] [--first-launch-s 90]
        [--launcher "PYTHON -m sglang.launch_server"] [-- SGLANG FLAGS...]

LOAD_FORMAT (e.g. dummy) is passed as --load-format for that target alone, so a real checkpoint
and generated configs can be launched in turn in one run. DRAFTER (a folder in SGLang's EAGLE-3
layout) serves the target with it (steps 3, topk 1, 4 draft tokens; SPEC_FLAGS): each request
then also records SGLang's `spec_verify_ct`, and each launch its median verify cycle (the
server's `e2e_latency` over the request's verify passes) and accept length.

OUT.json is rewritten after every launch, so a run cut short keeps what it measured. With
--deadline every launch ends by then: a launch starts only when the longest launch so far (from
the start of the server to its stop) still fits, the run's first launch left out once there are
others (it compiles SGLang's kernels on a fresh machine), --first-launch-s before any.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.servers import free_port, start, until_healthy

PROMPTS = [f"Describe, in plain words, how a {thing} works and what it is used for."
           for thing in ("bicycle", "refrigerator", "rainbow", "compass", "volcano",
                         "telescope", "battery", "piano")]
SPEC_FLAGS = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
              "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
              "--speculative-draft-attention-backend", "triton"]
SMI_FIELDS = ("name,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,pstate,power.draw,"
              "temperature.gpu,memory.used,memory.total,clocks_throttle_reasons.active")


def smi() -> dict[str, str]:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={SMI_FIELDS}",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=30, check=False).stdout.strip().splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if not out:
        return {}
    return dict(zip(SMI_FIELDS.split(","), (v.strip() for v in out[0].split(",")), strict=False))


def weight_bytes(config: dict[str, Any]) -> int:
    """Bytes of bf16 weights a Llama decode step reads (every linear layer, the final norm and
    the lm_head; the embedding is a lookup)."""
    h = int(config["hidden_size"])
    layers = int(config["num_hidden_layers"])
    heads = int(config["num_attention_heads"])
    kv = int(config.get("num_key_value_heads") or heads)
    d = int(config.get("head_dim") or h // heads)
    inter = int(config["intermediate_size"])
    vocab = int(config["vocab_size"])
    per_layer = h * heads * d + 2 * h * kv * d + heads * d * h + 3 * h * inter + 2 * h
    return 2 * (layers * per_layer + h + vocab * h)


def measure(url: str, requests_n: int, tokens: int) -> list[dict[str, Any]]:
    import requests

    session = requests.Session()
    warm = {"text": "Hello", "sampling_params": {"max_new_tokens": 16, "temperature": 0}}
    session.post(url + "/generate", json=warm, timeout=300).raise_for_status()
    rows = []
    for i in range(requests_n):
        body = {"text": PROMPTS[i % len(PROMPTS)],
                "sampling_params": {"max_new_tokens": tokens, "temperature": 0,
                                    "ignore_eos": True}}
        sent = time.perf_counter()
        reply = session.post(url + "/generate", json=body, timeout=300)
        wall = time.perf_counter() - sent
        reply.raise_for_status()
        meta = reply.json()["meta_info"]
        rows.append({"prompt": i % len(PROMPTS), "completion_tokens": meta["completion_tokens"],
                     "prompt_tokens": meta.get("prompt_tokens"),
                     "e2e_latency_s": meta.get("e2e_latency"), "client_wall_s": round(wall, 6),
                     **({"spec_verify_ct": meta["spec_verify_ct"]}
                        if meta.get("spec_verify_ct") else {})})
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, float]:
    rates = [r["completion_tokens"] / r["e2e_latency_s"] for r in rows if r.get("e2e_latency_s")]
    logs = [math.log(x) for x in rates]
    out = {"median_tok_s": round(statistics.median(rates), 3),
           "mean_tok_s": round(statistics.fmean(rates), 3),
           "cv_within": round(statistics.stdev(rates) / statistics.fmean(rates), 5),
           "sd_ln_within": round(statistics.stdev(logs), 5)}
    spec = [r for r in rows if r.get("spec_verify_ct") and r.get("e2e_latency_s")]
    if len(spec) >= 2:
        cycles = [1000 * r["e2e_latency_s"] / r["spec_verify_ct"] for r in spec]
        out.update({"median_cycle_ms": round(statistics.median(cycles), 4),
                    "cv_cycle_within": round(statistics.stdev(cycles)
                                             / statistics.fmean(cycles), 5),
                    "median_accept_len": round(statistics.median(
                        r["completion_tokens"] / r["spec_verify_ct"] for r in spec), 4)})
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--target", action="append", required=True,
                        help="NAME=DIR[,MEM_FRACTION[,LOAD_FORMAT[,DRAFTER]]] (repeat for "
                             "several targets)")
    parser.add_argument("--launches", type=int, default=5)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--deadline", type=float, default=math.inf,
                        help="Unix time by which every launch has ended")
    parser.add_argument("--first-launch-s", type=float, default=90.0,
                        help="what a launch is taken to last before one has been timed")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--launcher", default=None,
                        help="the server command before its flags (default: PYTHON -m "
                             "sglang.launch_server, PYTHON from --python)")
    ns = parser.parse_args(argv)
    launcher = (ns.launcher.split() if ns.launcher
                else [ns.python, "-m", "sglang.launch_server"])
    targets = []
    for item in ns.target:
        name, _, rest = item.partition("=")
        folder, fraction, load_format, drafter = [*rest.split(","), "", "", ""][:4]
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
        targets.append((name, folder, fraction or "0.3", load_format, drafter, config))
    doc: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "method": {"requests_per_launch": ns.requests, "max_new_tokens": ns.tokens,
                   "temperature": 0, "ignore_eos": True, "single_stream": True,
                   "rate": "completion_tokens / e2e_latency (the server's own clock)",
                   "order": "targets in turn, launch by launch", "server_flags": extra},
        "targets": {name: {"path": folder, "mem_fraction_static": fraction,
                           "load_format": load_format or "auto",
                           **({"drafter": drafter, "spec_flags": SPEC_FLAGS} if drafter else {}),
                           "weight_bytes": weight_bytes(config),
                           "config": {k: config.get(k) for k in (
                               "hidden_size", "num_hidden_layers", "num_attention_heads",
                               "num_key_value_heads", "head_dim", "intermediate_size",
                               "vocab_size")}, "launches": []}
                    for name, folder, fraction, load_format, drafter, config in targets},
    }
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    durations: list[float] = []
    for launch in range(ns.launches):
        for name, folder, fraction, load_format, drafter, _ in targets:
            longest = max(durations[1:] or durations or [ns.first_launch_s])
            if time.time() + longest > ns.deadline:
                doc["stopped"] = (f"launch {launch} of {name} would not end by the deadline "
                                  f"(the longest launch so far took {longest:.0f} s)")
                print(doc["stopped"], flush=True)
                break
            port = free_port()
            log = ns.out.parent / f"{name}-{launch}.log"
            argv_server = [*launcher, "--model-path", folder,
                           "--host", "127.0.0.1", "--port", str(port),
                           "--mem-fraction-static", fraction,
                           *(["--load-format", load_format] if load_format else []),
                           *(["--speculative-draft-model-path", drafter, *SPEC_FLAGS]
                             if drafter else []), *extra]
            started = time.time()
            server = start(name, argv_server, port, log)
            record: dict[str, Any] = {"launch": launch, "started": started}
            try:
                why = until_healthy([server], started + 600)
                if why is not None:
                    raise RuntimeError(why)
                record["ready_s"] = round(time.time() - started, 1)
                record["smi_before"] = smi()
                record["requests"] = measure(server.url, ns.requests, ns.tokens)
                record["smi_after"] = smi()
                record.update(summarize(record["requests"]))
            except Exception as exc:  # one failed launch is a record too
                record["error"] = f"{type(exc).__name__}: {exc}"
            finally:
                server.stop(term_s=60.0, kill_s=30.0)
            record["launch_s"] = round(time.time() - started, 1)
            durations.append(record["launch_s"])
            doc["targets"][name]["launches"].append(record)
            ns.out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
            print(name, launch, {k: record.get(k) for k in (
                "ready_s", "median_tok_s", "cv_within", "median_cycle_ms", "median_accept_len",
                "error") if k in record}, flush=True)
        if "stopped" in doc:
            break
    doc["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for entry in doc["targets"].values():
        medians = [r["median_tok_s"] for r in entry["launches"] if "median_tok_s" in r]
        cycles = [r["median_cycle_ms"] for r in entry["launches"] if "median_cycle_ms" in r]
        if len(cycles) >= 2:
            entry["cycle_spread_sd_ln"] = round(statistics.stdev(math.log(c) for c in cycles), 5)
        if len(medians) >= 2:
            entry["spread_sd_ln"] = round(statistics.stdev(math.log(m) for m in medians), 5)
            entry["read_tb_s"] = round(entry["weight_bytes"] * statistics.median(medians)
                                       / 1e12, 3)
    ns.out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
