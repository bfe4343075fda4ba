"""Benchmark 10: the offline claims on pathological inputs against a normal one, as ratios.

`pytest -m "probe and not live"` in a fresh process on the same tiny drafter four ways: as it is
with a few [drafter.expect] keys (normal); with an extra file of 300,000 zero-size tensors (a
valid 21 MB header); with as many expect keys as a profile may hold (MAX_EXPECT_KEYS); and
with 3,000 keys (refused by the profile check). The cases run interleaved, several rounds, each
in a fresh reports folder; the figure is the median wall and CPU time (user + system of the
pytest process and its children) and each case's ratio to the normal one, and for the 300,000
empty tensors the CPU seconds they add to the normal run's (the two medians' difference).
"""

from __future__ import annotations

import json
import os
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import PYTHON

# The offline claims on a pathological input take at most this many times the normal run, and
# the 300,000 empty tensors' header adds at most this many CPU seconds to it.
TARGETS = {"ratio_max": 4.0, "empty_tensors_extra_cpu_s": 1.0}
FULL = {"empty_tensors": 300_000, "refused_keys": 3000, "rounds": 5}
QUICK = {"empty_tensors": 20_000, "refused_keys": 300, "rounds": 1}


def make_cases(root: Path, empty_tensors: int, refused_keys: int) -> dict[str, Path]:
    """One folder per case, each with its drafter and p.toml (two expect keys besides the
    k<i> ones: hidden_size and vocab_size)."""
    from specgate.core.profile import MAX_EXPECT_KEYS
    from specgate.testing.generate import tiny, write_drafter

    cases = {"normal": (0, 0), "empty_tensors": (empty_tensors, 0),
             "expect_keys": (0, MAX_EXPECT_KEYS - 2), "refused_keys": (0, refused_keys)}
    out: dict[str, Path] = {}
    for name, (empties, keys) in cases.items():
        folder = root / name
        drafter = folder / "drafter"
        if not (folder / "p.toml").exists():
            write_drafter(drafter, tiny(), fill="random")
            config = json.loads((drafter / "config.json").read_text())
            config.update({f"k{i}": i for i in range(keys)})
            (drafter / "config.json").write_text(json.dumps(config))
            if empties:
                header = json.dumps({f"extra.t{i}": {"dtype": "F32", "shape": [0],
                                                     "data_offsets": [0, 0]}
                                     for i in range(empties)}).encode()
                (drafter / "extra.safetensors").write_bytes(
                    struct.pack("<Q", len(header)) + header)
            expect = "".join(f"k{i} = {i}\n" for i in range(keys))
            (folder / "p.toml").write_text(
                f'name = "{name}"\n[drafter]\npath = "{drafter}"\n[drafter.expect]\n'
                f'hidden_size = {config["hidden_size"]}\nvocab_size = {config["vocab_size"]}\n'
                f"{expect}")
        out[name] = folder
    return out


def run_once(folder: Path, reports: Path) -> dict[str, Any]:
    """One offline run in a fresh process: wall and CPU seconds, exit code, claims judged."""
    argv = [PYTHON, "-m", "pytest", "-m", "probe and not live", "--specgate-profile", "p.toml",
            f"--specgate-reports={reports}", "-q", "-p", "no:cacheprovider"]
    started = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=folder, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    claims = 0
    try:
        claims = len(json.loads((reports / "verdict.json").read_text())["claims"])
    except (OSError, ValueError, KeyError):
        pass
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "rc": proc.returncode,
            "claims": claims}


def run(root: Path, quick: bool = False, warm_up: bool = True) -> dict[str, Any]:
    """warm_up=False leaves out the round that only warms the caches (its figures are thrown
    away): for a run that checks the cases, not their times."""
    sizes = QUICK if quick else FULL
    cases = make_cases(root / "bounded", sizes["empty_tensors"], sizes["refused_keys"])
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in cases}
    for k in range(0 if warm_up else 1, sizes["rounds"] + 1):
        for name, folder in cases.items():
            result = run_once(folder, folder / f"reports-{k}")
            if k:  # the first round warms the page cache and the bytecode caches
                runs[name].append(result)
    out: dict[str, Any] = {"sizes": sizes, "cases": {}}
    for name, results in runs.items():
        header = cases[name] / "drafter" / "extra.safetensors"
        out["cases"][name] = {
            "wall_s": statistics.median(r["wall_s"] for r in results),
            "cpu_s": statistics.median(r["cpu_s"] for r in results),
            "wall_s_runs": [round(r["wall_s"], 3) for r in results],
            "exit_codes": sorted({r["rc"] for r in results}),
            "claims": results[-1]["claims"],
            "extra_header_bytes": header.stat().st_size if header.exists() else 0,
        }
    normal = out["cases"]["normal"]
    for case in out["cases"].values():
        case["ratio_wall"] = case["wall_s"] / normal["wall_s"]
        case["ratio_cpu"] = case["cpu_s"] / normal["cpu_s"]
    worst = max(max(c["ratio_wall"], c["ratio_cpu"]) for c in out["cases"].values())
    extra = out["cases"]["empty_tensors"]["cpu_s"] - normal["cpu_s"]
    out["targets"] = TARGETS
    out["worst_ratio"] = worst
    out["empty_tensors_extra_cpu_s"] = extra
    out["meets"] = {"ratio_max": worst <= TARGETS["ratio_max"],
                    "empty_tensors_extra_cpu_s": extra <= TARGETS["empty_tensors_extra_cpu_s"]}
    return out


def rows(result: dict[str, Any]) -> list[list[str]]:
    normal = result["cases"]["normal"]
    what = {
        "empty_tensors": f"{result['sizes']['empty_tensors']:,} zero-size tensors",
        "expect_keys": "expect keys at the bound",
        "refused_keys": f"{result['sizes']['refused_keys']:,} expect keys (refused)",
    }
    out = []
    for name, label in what.items():
        case = result["cases"][name]
        ok = case["ratio_wall"] <= TARGETS["ratio_max"] and case["ratio_cpu"] <= TARGETS[
            "ratio_max"]
        extra = ""
        if name == "empty_tensors":
            ok = ok and result["meets"]["empty_tensors_extra_cpu_s"]
            extra = (f" (+{result['empty_tensors_extra_cpu_s']:.2f} s CPU, ≤ "
                     f"{TARGETS['empty_tensors_extra_cpu_s']:g} s)")
        out.append([f"10 offline claims, {label}",
                    f"{case['wall_s']:.2f} s wall, {case['cpu_s']:.2f} s CPU{extra}, "
                    f"{case['claims']} claims",
                    f"normal: {normal['wall_s']:.2f} s wall, {normal['cpu_s']:.2f} s CPU, "
                    f"{normal['claims']} claims",
                    f"{case['ratio_wall']:.2f}× wall, {case['ratio_cpu']:.2f}× CPU",
                    f"≤ {TARGETS['ratio_max']:g}×: " + ("ok" if ok else "MISSED")])
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workdir", type=Path, nargs="?",
                        help="where the cases' drafters are written (default: a new temporary "
                             "folder)")
    parser.add_argument("--quick", action="store_true", help="small cases, one round")
    ns = parser.parse_args(argv)
    found = run(ns.workdir or Path(tempfile.mkdtemp()), quick=ns.quick)
    print(json.dumps(found, indent=1))
    print("\n".join(" | ".join(r) for r in rows(found)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
