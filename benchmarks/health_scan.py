"""Benchmark 2: the health scan's bandwidth against `cat` of the same non-sparse files."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import PYTHON, drop_cache, measure_child, weight_files

TARGETS = {"fraction_of_cat": 0.70, "rss_mb": 512.0}
MODULE = "benchmarks.health_scan"


def make_drafter(root: Path, preset: str = "mid") -> Path:
    """A real (every byte written) drafter: Llama-3-8B-like widths, a 64k vocab, ~1.4 GB."""
    from specgate.testing import generate
    folder = root / f"health_{preset}"
    if (folder / "config.json").exists():
        return folder
    if preset == "mid":
        shape = generate.DrafterPreset("mid", 4096, 14336, 32, 8, 128, 64000, 32000, 131072,
                                      (1, 15, 29))
    else:
        shape = generate.small()
    generate.write_drafter(folder, shape, fill="random")
    return folder


def child_scan(folder: str, workers: str, skip_holes: str) -> dict[str, Any]:
    from specgate.io import health
    from specgate.io.checkpoint import open_drafter

    t0 = time.perf_counter()
    report = health.scan(open_drafter(folder), workers=int(workers),
                         skip_holes=skip_holes == "1")
    return {"seconds": time.perf_counter() - t0, "bytes": report.bytes_scanned,
            "ok": report.ok, "tensors": len(report.tensors)}


def _cat(files: list[Path]) -> dict[str, Any]:
    # Timed bare (the RSS wrapper's own Python start-up would flatter the scan).
    t0 = time.perf_counter()
    subprocess.run(["cat", *map(str, files)], stdout=subprocess.DEVNULL, check=True)
    return {"seconds": time.perf_counter() - t0}


def _dd(files: list[Path]) -> dict[str, Any]:
    # cat reads 128 KiB at a time; dd with the scan's 4 MiB requests is the fairer limit cold.
    t0 = time.perf_counter()
    for f in files:
        subprocess.run(["dd", f"if={f}", "of=/dev/null", "bs=4M"], check=True,
                       capture_output=True)
    return {"seconds": time.perf_counter() - t0}


def _scan(folder: Path, workers: int) -> dict[str, Any]:
    """`seconds` is the scan inside the child (what a pytest run, imports paid, waits for)."""
    run = measure_child([PYTHON, "-m", MODULE, "scan", str(folder), str(workers), "1"])
    out = run.json_out()
    out.update(process_wall_s=run.wall_s, peak_rss_mb=run.peak_rss_mb)
    return out


def run(root: Path, preset: str = "mid", repeats: int = 3) -> dict[str, Any]:
    """cat and the scan interleaved round by round, so each sees the same disk and neighbours
    (on a shared VM cold reads vary twofold from minute to minute); medians are reported."""
    folder = make_drafter(root, preset)
    files = weight_files(folder)
    nbytes = sum(f.stat().st_size for f in files)
    out: dict[str, Any] = {"preset": preset, "bytes": nbytes, "targets": TARGETS,
                           "repeats": repeats}
    for temp in ("cold", "warm"):
        runs: dict[str, list[dict[str, Any]]] = {"cat": [], "dd_4m": [], "scan_w1": [],
                                                 "scan_w2": []}
        for _ in range(repeats):
            for name in runs:
                if temp == "cold":
                    drop_cache(files)
                else:
                    _cat(files)  # make sure every page is resident
                runs[name].append(_cat(files) if name == "cat" else _dd(files)
                                  if name == "dd_4m" else _scan(folder, int(name[-1])))
        side: dict[str, Any] = {}
        for name, got in runs.items():
            seconds = sorted(r["seconds"] for r in got)
            summary = dict(got[0])
            summary.update(seconds=statistics.median(seconds), seconds_runs=seconds,
                           peak_rss_mb=max(r.get("peak_rss_mb", 0.0) for r in got))
            summary["gb_s"] = nbytes / summary["seconds"] / 1e9
            side[name] = summary
        for name in ("scan_w1", "scan_w2"):
            side[name]["fraction_of_cat"] = side["cat"]["seconds"] / side[name]["seconds"]
            side[name]["fraction_of_dd"] = side["dd_4m"]["seconds"] / side[name]["seconds"]
        out[temp] = side
    out["meets"] = {
        f"{temp}_{name}": (out[temp][name]["fraction_of_cat"] >= TARGETS["fraction_of_cat"]
                           and out[temp][name]["peak_rss_mb"] < TARGETS["rss_mb"])
        for temp in ("cold", "warm") for name in ("scan_w1", "scan_w2")}
    return out


def rows(result: dict[str, Any]) -> list[list[str]]:
    out = []
    for temp in ("cold", "warm"):
        side = result[temp]
        for name in ("scan_w1", "scan_w2"):
            s = side[name]
            out.append([f"2 health scan {result['bytes'] / 1e9:.2f} GB, {temp}, "
                        f"workers={name[-1]}",
                        f"{s['gb_s']:.2f} GB/s, {s['peak_rss_mb']:.0f} MB RSS "
                        f"(median of {result['repeats']})",
                        f"cat: {side['cat']['gb_s']:.2f} GB/s, dd bs=4M: "
                        f"{side['dd_4m']['gb_s']:.2f} GB/s",
                        f"{s['fraction_of_cat'] * 100:.0f} % of cat, "
                        f"{s['fraction_of_dd'] * 100:.0f} % of dd",
                        "ok" if result["meets"][f"{temp}_{name}"] else "MISSED"])
    return out


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    print(json.dumps({"scan": child_scan}[mode](*args)))
