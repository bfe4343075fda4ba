"""Benchmark 6: fewer launches. (a) A probe that reuses a stored baseline launches once instead
of twice, with the same verdict as the simulator's truth predicts; (b) `specgate tune` finds the
configuration a full grid finds best with at most half its launches and requests."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from benchmarks.common import PYTHON, ROOT, measure_child
from benchmarks.launches import counting_launcher

DEMO = ROOT / "specgate" / "profiles" / "demo.toml"
GATING = ("spec.accept_len", "spec.breakeven", "spec.speedup", "perf.baseline_tps")


def _reuse_profile(root: Path) -> Path:
    text = DEMO.read_text(encoding="utf-8").replace(
        "max_repeats = 5\n", "max_repeats = 5\nbaseline_max_age_h = 24\n", 1)
    path = root / "demo-reuse.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _probe(root: Path, profile: Path, script: Path, reports: Path) -> dict[str, Any]:
    argv = [PYTHON, "-m", "pytest", "-m", "probe", "-q", "-p", "no:cacheprovider",
            f"--profile={profile}", f"--reports={reports}", f"--sglang-launcher={script}"]
    child = measure_child(argv, cwd=ROOT, env={"PYTHONUNBUFFERED": "1",
                                               "SPECGATE_CACHE": str(ROOT / ".specgate")})
    verdict = json.loads((reports / "verdict.json").read_text())
    return {"wall_s": child.wall_s, "rc": child.rc, "outcome": verdict["outcome"],
            "statuses": {c["id"]: c["status"] for c in verdict["claims"] if c["id"] in GATING},
            "observed": {c["id"]: c["observed"] for c in verdict["claims"]
                         if c["id"] in GATING},
            "baseline_reuse": verdict.get("baseline_reuse")}


def run_reuse(root: Path) -> dict[str, Any]:
    from specgate.core.profile import load_profile
    from specgate.testing.simulator import model

    work = root / "reuse"
    shutil.rmtree(work, ignore_errors=True)
    script, counter = counting_launcher(work)
    profile_path = _reuse_profile(work)
    reports = work / "reports"
    runs = []
    for _ in range(2):
        before = len(counter.read_text().splitlines()) if counter.exists() else 0
        got = _probe(work, profile_path, script, reports)
        lines = counter.read_text().splitlines()[before:]
        got["launches"] = len(lines)
        got["baseline_launches"] = sum(1 for ln in lines if "--speculative-algorithm" not in ln)
        runs.append(got)
    profile = load_profile(profile_path)
    truth = model.truth_for_profile(profile)
    th = profile.thresholds
    expected = {"spec.speedup": "passed" if truth.speedup > th.speedup_min else "failed",
                "perf.baseline_tps": "passed" if truth.baseline_tps >= (th.baseline_tps_min or 0)
                else "failed"}
    second = runs[1]
    return {"runs": runs, "truth": truth.to_json(), "expected_from_truth": expected,
            "meets": {"one_launch": second["launches"] == 1 and second["baseline_launches"] == 0,
                      "reused": bool((second["baseline_reuse"] or {}).get("reused")),
                      "verdict_unchanged": second["statuses"] == runs[0]["statuses"]
                      and all(second["statuses"].get(k) == v for k, v in expected.items())}}


def run_tune(root: Path) -> dict[str, Any]:
    from specgate.core.profile import load_profile
    from specgate.measure.plan import resolve
    from specgate.measure.server_session import run_config
    from specgate.measure.tune import Candidate, run_tune
    from specgate.testing.demo import ensure_assets
    from specgate.testing.simulator import model

    os.environ.setdefault("SPECGATE_CACHE", str(ROOT / ".specgate"))
    profile = load_profile(DEMO)
    assert profile.demo is not None
    ensure_assets(profile.demo_assets(), profile.demo.kind)
    steps = profile.tune.steps
    work = root / "tune"
    shutil.rmtree(work, ignore_errors=True)
    # The grid, as bench_speculative.py does it: one launch per configuration, a fixed number of
    # passes over the prompts on each (the profile's repeats), no statistics between them.
    grid: dict[int, dict[str, Any]] = {}
    for s in steps:
        c = Candidate(s)
        spec = profile.speculative.model_copy(update={
            "num_steps": s, "eagle_topk": 1, "num_draft_tokens": c.draft_tokens})
        prof = profile.model_copy(update={"speculative": spec})
        run = run_config(resolve(prof, work / "grid" / c.key), "speculative",
                         keep_going=lambda _m: None)
        m = run.measurement
        assert m is not None, run.failure
        assert "tps" in m.stats, run.failure
        truth = model.truth_for_profile(prof)
        grid[s] = {"tps": m.stats["tps"].mean, "requests": len(m.samples) + m.warmup,
                   "truth_tps": truth.spec_tps, "truth_tau": truth.tau}
    grid_best = max(grid, key=lambda s: grid[s]["tps"])
    truth_best = max(grid, key=lambda s: grid[s]["truth_tps"])
    result = run_tune(profile, work / "reports")
    grid_launches, grid_requests = len(grid), sum(g["requests"] for g in grid.values())
    tuned = result.best.steps if result.best else None
    return {"grid": {str(k): v for k, v in grid.items()}, "grid_best": grid_best,
            "truth_best": truth_best, "tune_best": tuned, "tune_launches": result.launches,
            "tune_requests": result.requests, "grid_launches": grid_launches,
            "grid_requests": grid_requests, "stop_reason": result.stop_reason,
            "trials": [{"key": t.candidate.key, "status": t.status, "requests": t.requests}
                       for t in result.trials],
            "launch_ratio": result.launches / grid_launches,
            "request_ratio": result.requests / grid_requests,
            "meets": {"same_best": tuned == grid_best == truth_best,
                      "half_launches": result.launches * 2 <= grid_launches,
                      "half_requests": result.requests * 2 <= grid_requests}}


def run(root: Path) -> dict[str, Any]:
    return {"reuse": run_reuse(root), "tune": run_tune(root)}


def rows(result: dict[str, Any]) -> list[list[str]]:
    r, t = result["reuse"], result["tune"]
    first, second = r["runs"]
    ok_r = all(r["meets"].values())
    ok_t = all(t["meets"].values())
    return [
        ["6 probe with a reused baseline (demo)",
         f"{second['launches']} launch, outcome {second['outcome']}, {second['wall_s']:.1f} s",
         f"fresh: {first['launches']} launches, {first['wall_s']:.1f} s",
         f"statuses unchanged: {r['meets']['verdict_unchanged']}",
         "1 launch, same verdict: " + ("ok" if ok_r else "MISSED")],
        ["6 specgate tune, steps " + ",".join(t["grid"]) + " (demo)",
         f"best s{t['tune_best']}: {t['tune_launches']} launches, {t['tune_requests']} requests",
         f"grid best s{t['grid_best']} (truth s{t['truth_best']}): {t['grid_launches']} "
         f"launches, {t['grid_requests']} requests",
         f"launches ×{t['launch_ratio']:.2f}, requests ×{t['request_ratio']:.2f}",
         "same best, ≤ ½ launches and requests: " + ("ok" if ok_t else "MISSED")]]


if __name__ == "__main__":
    print(json.dumps(run(Path(os.environ.get("TMPDIR", "/tmp")) / "specgate-tune-bench")))
