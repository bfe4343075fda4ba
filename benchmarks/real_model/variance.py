"""Baseline speed from launch to launch: the same configuration started N times and measured.

Each launch records what could make its speed differ: start-to-ready seconds, whether it is the
first start on this machine, CUDA graph capture on or off, the memory fraction, the other
servers resident on the GPU, and nvidia-smi's clocks, power and performance state while it is
measured. The workload is the probe's own (the built-in prompts rendered as the probe renders
them, greedy, 256 new tokens, one at a time, one warm-up), two prompts per category.

usage: python3 variance.py PROFILE.toml --launches 5 --out DIR
`measure` and `record` are used by build.py and serve.py for launches they make anyway.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

from benchmarks.real_model import gen  # noqa: E402

PER_CATEGORY = 2
FIELDS = ("launch", "label", "first_start", "ready_s", "resident_servers", "cuda_graphs",
          "mem_fraction", "tps", "tps_low", "tps_high", "ms_per_token", "clocks_sm",
          "clocks_mem", "power_w", "pstate", "temperature_c", "throttle", "compute_apps")
_FIRST = threading.Lock()
_started_any = False


def first_start() -> bool:
    """True for the first server this process starts (kernels not yet compiled on a fresh
    machine, unless an earlier process compiled them: build.py's generation server is that)."""
    global _started_any
    with _FIRST:
        was = _started_any
        _started_any = True
        return not was


def flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args and args.index(name) + 1 < len(args) \
        else None


def measure(url: str, profile: Any, per_category: int = PER_CATEGORY) -> dict[str, Any]:
    """The probe's measurement (specgate.results.bench) of the server at url on a few prompts,
    with nvidia-smi read just before and just after."""
    from specgate.core.profile import BenchSection
    from specgate.measure import passes
    from specgate.results import prompts
    from specgate.results.bench import Sampling
    from specgate.serving.client import SGLangClient

    section = BenchSection(**{**profile.bench.model_dump(), "prompts_per_category": per_category,
                              "categories": None, "repeats": 1, "max_repeats": 1, "warmup": 1})
    chosen = prompts.load_for(section, source=None, target=profile.target_path)
    before = gen.gpu_state()
    with SGLangClient(url, None, timeout_s=section.request_timeout_s) as client:
        m = passes.measure(client, Sampling.of(section), chosen, config="baseline")
    after = gen.gpu_state()
    tps = m.stat("tps")
    return {"tps": None if tps is None else round(tps.mean, 2),
            "tps_low": None if tps is None else round(tps.ci_low, 2),
            "tps_high": None if tps is None else round(tps.ci_high, 2),
            "ms_per_token": None if tps is None or not tps.mean else round(1000 / tps.mean, 4),
            "requests": len(m.samples), "gpu_before": before, "gpu_after": after}


def record(launch: int, label: str, ready_s: float, first: bool, args: list[str],
           measured: dict[str, Any], resident: int) -> dict[str, Any]:
    """One row: the launch's conditions and its measured speed."""
    g = measured.get("gpu_after") or {}
    return {"launch": launch, "label": label, "first_start": first, "ready_s": round(ready_s, 1),
            "resident_servers": resident,
            "cuda_graphs": flag(args, "--cuda-graph-backend-decode") != "disabled",
            "mem_fraction": flag(args, "--mem-fraction-static"),
            "tps": measured.get("tps"), "tps_low": measured.get("tps_low"),
            "tps_high": measured.get("tps_high"), "ms_per_token": measured.get("ms_per_token"),
            "clocks_sm": g.get("clocks.sm"), "clocks_mem": g.get("clocks.mem"),
            "power_w": g.get("power.draw"), "pstate": g.get("pstate"),
            "temperature_c": g.get("temperature.gpu"),
            "throttle": g.get("clocks_throttle_reasons.active"),
            "compute_apps": len(g.get("compute_apps") or []), "detail": measured}


def write(rows: list[dict[str, Any]], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "variance.json").write_text(json.dumps(rows, indent=1) + "\n")
    with (out / "variance.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def spread(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Min, max, mean and relative spread of tok/s over the rows that measured one."""
    values = [float(r["tps"]) for r in rows if r.get("tps")]
    if not values:
        return {"launches": 0}
    mean = sum(values) / len(values)
    return {"launches": len(values), "min": min(values), "max": max(values),
            "mean": round(mean, 2), "spread_pct": round(100 * (max(values) - min(values)) / mean,
                                                        2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile", type=Path)
    ap.add_argument("--launches", type=int, default=5)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    from specgate.core.profile import load_profile
    from specgate.serving import launch, server

    profile = load_profile(args.profile)
    rows = []
    for k in range(1, args.launches + 1):
        spec = launch.build_command(profile, "baseline")
        first = first_start()
        t0 = time.monotonic()
        handle = server.launch(spec, args.out / f"baseline-{k}.log",
                               startup_timeout_s=profile.server.startup_timeout_s)
        ready = time.monotonic() - t0
        try:
            rows.append(record(k, f"launch {k}", ready, first, list(profile.server.args),
                               measure(handle.url, profile), 0))
        finally:
            handle.stop()
        print(f"launch {k}: ready in {ready:.1f} s, {rows[-1]['tps']} tok/s", flush=True)
    write(rows, args.out)
    print(json.dumps(spread(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
