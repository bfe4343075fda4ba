"""Speed-up against concurrency on real SGLang, with SGLang's own bench_serving beside it.

Called by crossover.sh once SGLang, specgate and the models of gpu_bound.py are in place. It starts
the baseline and the speculative server from the probe's own launch commands (specgate's
build_command), waits until both answer /health_generate, and then, with both running:

1. `pytest -m probe --server-url=... --baseline-url=...`: specgate attached to the two servers,
   with `[bench] concurrency` = --levels and the gate at the smallest level, so every level gets
   its claims and `spec.speedup` carries the curve and the crossover;
2. SGLang's `python -m sglang.bench_serving` against each server at --peer-levels, with the same
   prompts (the probe's built-in set in the target's chat template, `custom` dataset, repeated to
   --peer-waves times the concurrency) and the same 128 new tokens;
3. `specgate calibrate-simulator` on the probe's results, fitted on --fit-levels, with its
   prediction at the levels held out; each server's batch is capped by the max_running_requests
   its log states (SGLang runs at most 48 requests at once on a speculative server unless
   --max-running-requests is given: --max-running sets it on both).

Then it stops both servers and writes the summary (`summarize`, also callable alone with
--summarize-only on a finished OUT).

    python3 crossover.py --models DIR --out OUT --work WORK
        [--launcher "python3 -m sglang.launch_server"]
        [--levels 1,2,4,8,16,32,64] [--peer-levels 1,16,64] [--fit-levels 1,4,16]
        [--graphs-max-bs 64] [--mem-fraction 0.45] [--max-running N] [--sim]

Writes to OUT: crossover-probe.log (pytest's output), crossover-verdict.json,
crossover-results.json (the live session), peer/<config>-c<N>.jsonl and .log (bench_serving's
output), calibration.json, crossover.json and crossover.md (the summary), servers/*.log.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.real_sglang import (
    gpu_bound,
    suite,
)
from benchmarks.servers import Started, free_port, start, until_healthy

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

CONFIGS = ("baseline", "speculative")


def say(message: str) -> None:
    print(f"[crossover {time.strftime('%H:%M:%S')}] {message}", flush=True)


def levels_arg(text: str) -> list[int]:
    try:
        levels = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give levels as 1,4,16") from None
    if not levels or levels[0] < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: levels are whole numbers of 1 or more")
    return levels


def profile(ns: argparse.Namespace) -> dict[str, Any]:
    """gpu_bound's probe profile, measured at every level, graphs and memory set for both
    servers running at once."""
    doc = gpu_bound.profile(ns.models, shlex.split(ns.launcher), ns.sim)
    # e.g. real-sglang-0.5.17-llama8b-shapes-crossover-alternate-c1-64: the models and levels
    doc["name"] = (f"real-sglang-{suite.SGLANG_VERSION}-llama8b-shapes-{ns.models.name}"
                   f"-c{ns.levels[0]}-{ns.levels[-1]}" + ("-sim" if ns.sim else ""))
    doc["description"] = ("SGLang on one GPU: a random target with Llama-3-8B's shapes and an "
                          "EAGLE-3 drafter (gpu_bound.py), both servers running, measured at "
                          + ", ".join(map(str, ns.levels)) + " in flight")
    flags = list(doc["server"]["args"])
    if "--cuda-graph-max-bs-decode" in flags:
        at = flags.index("--cuda-graph-max-bs-decode")
        flags[at:at + 2] = (["--cuda-graph-max-bs-decode", str(ns.graphs_max_bs)]
                            if ns.graphs_max_bs > 0 else
                            ["--cuda-graph-backend-decode", "disabled"])
    flags[flags.index("--mem-fraction-static") + 1] = str(ns.mem_fraction)
    if ns.max_running > 0:
        flags += ["--max-running-requests", str(ns.max_running)]
    doc["server"]["args"] = flags
    doc["bench"].update(concurrency=ns.levels, prompts_per_category=ns.prompts_per_category)
    doc["thresholds"]["gate_concurrency"] = ns.levels[0]
    return doc


def start_servers(profile_path: Path, out: Path) -> list[Started]:
    """The profile's baseline and speculative servers, from specgate's launch commands."""
    from specgate.core.profile import load_profile
    from specgate.serving.launch import build_command

    loaded = load_profile(profile_path)
    started = []
    for config in CONFIGS:
        port = free_port()
        spec = build_command(loaded, config, port=port)  # type: ignore[arg-type]
        started.append(start(config, spec.argv, port, out / "servers" / f"{config}.log",
                             env=spec.env, tag="crossover"))
        say(f"{config}: starting on port {port}")
    return started


def wait_ready(started: list[Started], timeout_s: float) -> str | None:
    """None once both answer, else why not."""
    return until_healthy(started, time.time() + timeout_s,
                         lambda s: say(f"{s.config}: ready after {s.ready_s} s"))


def run_probe(ns: argparse.Namespace, profile_path: Path, servers: list[Started]) -> int:
    reports = ns.work / "crossover-reports"
    shutil.rmtree(reports, ignore_errors=True)
    urls = {s.config: s.url for s in servers}
    argv = [sys.executable, "-m", "pytest", "-m", "probe", f"--profile={profile_path}",
            f"--reports={reports}", f"--server-url={urls['speculative']}",
            f"--baseline-url={urls['baseline']}", "-p", "no:cacheprovider"]
    say(f"probe: {shlex.join(argv)}")
    with (ns.out / "crossover-probe.log").open("wb") as fh:
        code = subprocess.call(argv, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL)
    for name, dest in (("verdict.json", "crossover-verdict.json"),
                       ("live/results.json", "crossover-results.json")):
        with contextlib.suppress(OSError):
            shutil.copy(reports / name, ns.out / dest)
    say(f"probe: pytest exit {code}")
    return code


def peer_dataset(ns: argparse.Namespace, path: Path) -> int:
    """The probe's prompts as bench_serving's custom dataset (one conversation per line, the
    user turn first; bench_serving renders it with the target's chat template); returns how
    many prompts it has."""
    from specgate.results.prompts import load_builtin, select

    prompts = select(load_builtin(), None, ns.prompts_per_category)
    lines = [json.dumps({"conversations": [{"role": "user", "content": p.text},
                                           {"role": "assistant", "content": "ok"}]})
             for p in prompts]
    copies = max(1, math.ceil(ns.peer_waves * max(ns.peer_levels) / len(lines)))
    path.write_text("\n".join(lines * copies) + "\n", encoding="utf-8")
    return len(lines)


def datasets_stub(work: Path) -> Path | None:
    """bench_serving imports `datasets` (for datasets it is not asked for here); where the
    package is missing, a stand-in whose load_dataset says so."""
    if subprocess.call([sys.executable, "-c", "import datasets"], stderr=subprocess.DEVNULL) == 0:
        return None
    stub = work / "peer-stub"
    (stub / "datasets").mkdir(parents=True, exist_ok=True)
    (stub / "datasets" / "__init__.py").write_text(
        "def load_dataset(*args, **kwargs):\n"
        "    raise RuntimeError('the Hugging Face datasets package is not installed')\n",
        encoding="utf-8")
    return stub


def run_peer(ns: argparse.Namespace, servers: list[Started]) -> None:
    peer = ns.out / "peer"
    peer.mkdir(parents=True, exist_ok=True)
    data = ns.work / "peer-prompts.jsonl"
    n_prompts = peer_dataset(ns, data)
    stub = datasets_stub(ns.work)
    env = dict(os.environ)
    if stub is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [env.get("PYTHONPATH"), str(stub)]))
    target = ns.models / "target"
    for srv in servers:
        for level in ns.peer_levels:
            requests_n = max(n_prompts, ns.peer_waves * level)
            result = peer / f"{srv.config}-c{level}.jsonl"
            result.unlink(missing_ok=True)
            argv = [sys.executable, "-m", "sglang.bench_serving", "--backend", "sglang",
                    "--base-url", srv.url, "--dataset-name", "custom", "--dataset-path",
                    str(data), "--num-prompts", str(requests_n), "--sharegpt-output-len",
                    str(ns.max_new_tokens), "--apply-chat-template", "--max-concurrency",
                    str(level), "--tokenizer", str(target), "--model", str(target),
                    "--output-file", str(result), "--seed", "1", "--disable-tqdm"]
            say(f"peer: {srv.config} at {level} in flight, {requests_n} requests")
            with (peer / f"{srv.config}-c{level}.log").open("wb") as fh:
                fh.write(f"# {shlex.join(argv)}\n".encode())
                fh.flush()
                code = subprocess.call(argv, cwd=ns.work, stdout=fh, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, env=env, timeout=ns.peer_timeout)
            if code != 0:
                say(f"peer: bench_serving exited {code} ({peer / f'{srv.config}-c{level}.log'})")


def log_max_running(log: Path) -> int | None:
    """The max_running_requests a server's log states last (SGLang prints its resolved
    ServerArgs, and its reset to 48 for speculative decoding); None when the log has none."""
    with contextlib.suppress(OSError):
        found = re.findall(r"max_running_requests=(\d+)", log.read_text(errors="replace"))
        if found:
            return int(found[-1])
    return None


def run_calibration(ns: argparse.Namespace) -> None:
    """specgate calibrate-simulator on the probe's results, each server's batch capped by the
    max_running_requests its log states (the results keep it too, from /server_info)."""
    results = ns.out / "crossover-results.json"
    if not results.exists():
        return
    argv = [sys.executable, "-m", "specgate.cli", "calibrate-simulator", str(results),
            "--fit-levels", ",".join(map(str, ns.fit_levels))]
    for config in CONFIGS:
        cap = log_max_running(ns.out / "servers" / f"{config}.log")
        if cap is not None:
            argv += [f"--{config}-max-running", str(cap)]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        say(f"calibration: exit {proc.returncode}: {proc.stderr.strip()}")
        return
    (ns.out / "calibration.json").write_text(proc.stdout, encoding="utf-8")


# ---- the summary ---------------------------------------------------------------------------

def _peer(out: Path, config: str, level: int) -> dict[str, Any] | None:
    path = out / "peer" / f"{config}-c{level}.jsonl"
    with contextlib.suppress(OSError, ValueError, IndexError):
        row = json.loads(path.read_text(encoding="utf-8").strip().splitlines()[-1])
        return {k: row.get(k) for k in ("output_throughput", "duration", "completed",
                                        "total_output_tokens", "max_concurrency",
                                        "accept_length", "median_itl_ms", "median_ttft_ms")}
    return None


def _load(path: Path) -> Any:
    with contextlib.suppress(OSError, ValueError):
        return json.loads(path.read_text(encoding="utf-8"))
    return None


def summarize(out: Path) -> dict[str, Any]:
    """crossover.json and crossover.md from what a run left in OUT."""
    from specgate.results import curve
    from specgate.results.live import LiveResults

    doc: dict[str, Any] = {"meta": _load(out / "crossover-meta.json")}
    verdict = _load(out / "crossover-verdict.json")
    if verdict is not None:
        doc["outcome"] = verdict.get("outcome")
        doc["deployment"] = verdict.get("deployment")
        doc["claims"] = {c["id"]: {"status": c.get("status"),
                                   "message": str(c.get("message") or "").splitlines()[0][:300]
                                   if c.get("message") else ""}
                         for c in verdict.get("claims", []) if c.get("id")}
    levels: list[dict[str, Any]] = []
    results = out / "crossover-results.json"
    if results.exists():
        live = LiveResults.read(results)
        found = curve.curve(live)
        doc["curve"] = found.to_json()
        for level in live.levels:
            view = live.at(level)
            row: dict[str, Any] = {"concurrency": level}
            for name, run in (("baseline", view.baseline), ("speculative", view.speculative)):
                m = run.measurement
                row[name] = {k: (m.stat(k).mean if m is not None and m.stat(k) is not None
                                 else None)
                             for k in ("tps", "total_tps", "cycle_ms", "accept_len")}
                peer = _peer(out, name, level)
                if peer is not None:
                    row[name]["bench_serving"] = peer
                    ours, theirs = row[name]["total_tps"], peer.get("output_throughput")
                    if ours and isinstance(theirs, (int, float)) and theirs > 0:
                        row[name]["specgate_over_bench_serving"] = round(ours / theirs, 4)
            levels.append(row)
    doc["levels"] = levels
    calibration = _load(out / "calibration.json")
    if calibration is not None:
        doc["calibration"] = calibration
    (out / "crossover.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    (out / "crossover.md").write_text(markdown(doc), encoding="utf-8")
    return doc


def _f(value: Any, digits: int = 1) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) else "—"


def markdown(doc: dict[str, Any]) -> str:
    lines = ["# Speed-up against concurrency", ""]
    if "outcome" in doc:
        lines += [f"Probe outcome: **{doc['outcome']}**", ""]
    lines += ["| in flight | baseline tok/s per request | cycle ms | accept length | "
              "decode speed-up | baseline total tok/s (specgate / bench_serving) | "
              "speculative total tok/s (specgate / bench_serving) |",
              "|---|---|---|---|---|---|---|"]
    curve = {p.get("concurrency"): p for p in ((doc.get("curve") or {}).get("levels") or [])}
    for row in doc.get("levels", []):
        n = row["concurrency"]
        base, spec = row.get("baseline", {}), row.get("speculative", {})
        point = curve.get(n) or {}
        ratio = point.get("speedup") or {}
        speed = (f"{_f(ratio.get('mean'), 3)} [{_f(ratio.get('ci_low'), 3)}, "
                 f"{_f(ratio.get('ci_high'), 3)}]" if ratio else "—")
        cells = []
        for side in (base, spec):
            peer = side.get("bench_serving") or {}
            cells.append(f"{_f(side.get('total_tps'))} / {_f(peer.get('output_throughput'))}")
        lines.append(f"| {n} | {_f(base.get('tps'))} | {_f(spec.get('cycle_ms'), 3)} | "
                     f"{_f(spec.get('accept_len'), 3)} | {speed} | {cells[0]} | {cells[1]} |")
    crossover = (doc.get("curve") or {}).get("crossover")
    if crossover:
        lines += ["", f"Crossover: {json.dumps(crossover)}"]
    cal = doc.get("calibration")
    if cal:
        fitted = json.dumps(cal.get("specgate_sim.json"))
        lines += ["", "## Calibration", "",
                  f"Fitted on {cal.get('fit_levels')}: `{fitted}`",
                  "", "| in flight | held out | speculative batch | step ms (measured / fitted) | "
                  "cycle ms (measured / fitted) | speed-up (measured / predicted) | error |",
                  "|---|---|---|---|---|---|---|"]
        for p in cal.get("levels", []):
            error = p.get("speedup_error")
            lines.append(
                f"| {p.get('concurrency')} | {'yes' if p.get('held_out') else 'no'} | "
                f"{p.get('speculative_batch', p.get('concurrency'))} | "
                f"{_f(p.get('decode_step_ms'), 3)} / {_f(p.get('fitted_decode_step_ms'), 3)} | "
                f"{_f(p.get('cycle_ms'), 3)} / {_f(p.get('fitted_cycle_ms'), 3)} | "
                f"{_f(p.get('speedup'), 3)} / {_f(p.get('fitted_speedup'), 3)} | "
                f"{_f(100 * error, 1) + ' %' if isinstance(error, float) else '—'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=Path, required=True, help="a folder gpu_bound.py wrote")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--launcher", default=f"{sys.executable} -m sglang.launch_server")
    parser.add_argument("--levels", type=levels_arg, default=levels_arg("1,2,4,8,16,32,64"))
    parser.add_argument("--peer-levels", type=levels_arg, default=levels_arg("1,16,64"))
    parser.add_argument("--fit-levels", type=levels_arg, default=levels_arg("1,4,16"))
    parser.add_argument("--peer-waves", type=int, default=5,
                        help="bench_serving sends this many times the concurrency in requests "
                             "(at least the probe's prompts once)")
    parser.add_argument("--peer-timeout", type=float, default=600.0)
    parser.add_argument("--graphs-max-bs", type=int, default=64,
                        help="decode CUDA graphs up to this batch on both servers (0: eager)")
    parser.add_argument("--mem-fraction", type=float, default=0.45,
                        help="--mem-fraction-static of each server (both run at once)")
    parser.add_argument("--max-running", type=int, default=0,
                        help="--max-running-requests of both servers (0: SGLang's own, which "
                             "is 48 for the speculative server)")
    parser.add_argument("--prompts-per-category", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--startup-timeout", type=float, default=900.0)
    parser.add_argument("--sim", action="store_true", help="against specgate's simulator")
    parser.add_argument("--no-peer", action="store_true", help="leave bench_serving out")
    parser.add_argument("--summarize-only", action="store_true",
                        help="fit the calibration (to --fit-levels) and write the summary of a "
                             "finished OUT")
    ns = parser.parse_args(argv)
    ns.out.mkdir(parents=True, exist_ok=True)
    ns.work.mkdir(parents=True, exist_ok=True)
    if ns.summarize_only:
        run_calibration(ns)
        summarize(ns.out)
        return 0
    profile_path = ns.out / "crossover-profile.toml"
    profile_path.write_text(suite.toml(profile(ns)), encoding="utf-8")
    servers = start_servers(profile_path, ns.out)
    meta: dict[str, Any] = {"levels": ns.levels, "peer_levels": ns.peer_levels,
                            "fit_levels": ns.fit_levels, "graphs_max_bs": ns.graphs_max_bs,
                            "max_running": ns.max_running,
                            "mem_fraction": ns.mem_fraction, "sim": ns.sim}
    code = 1
    try:
        why = wait_ready(servers, ns.startup_timeout)
        meta["ready_s"] = {s.config: s.ready_s for s in servers}
        if why is not None:
            say(f"servers: {why}")
            meta["failure"] = why
        else:
            code = run_probe(ns, profile_path, servers)
            if not ns.no_peer:
                run_peer(ns, servers)
    finally:
        meta["exit_codes"] = {s.config: s.stop() for s in servers}
        (ns.out / "crossover-meta.json").write_text(json.dumps(meta, indent=1) + "\n",
                                                    encoding="utf-8")
    run_calibration(ns)
    doc = summarize(ns.out)
    say(f"summary: {ns.out / 'crossover.md'} (outcome {doc.get('outcome')})")
    return code


if __name__ == "__main__":
    sys.exit(main())
