"""Benchmark 4: the live path on the simulator: overhead, error against truth, requests spent."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.servers import simulator
from specgate.claims import perf as perf_claims
from specgate.claims import spec as spec_claims
from specgate.core.profile import Profile, parse_profile
from specgate.measure import gate, launches, passes
from specgate.results import bench, drift, prompts
from specgate.results.live import ConfigRun, LiveResults
from specgate.serving.client import SGLangClient
from specgate.testing import demo, generate
from specgate.testing.simulator import model

STEPS = 2
LAUNCH_SPREAD = 0.02
FIXED_PROMPTS = 80
FIXED_REPEATS = 3


def _dirs(root: Path) -> tuple[Path, Path]:
    """The demo's timing and acceptance (seeds' deployment ten times faster)."""
    target, draft = root / "sim_target", root / "sim_draft"
    if not (draft / "config.json").exists():
        # A whole drafter: the simulator, like SGLang, will not start on a folder without one.
        generate.write_drafter(draft, generate.tiny(),
                               config_overrides={"max_position_embeddings": 8192})
    for folder, data in ((target, demo.DEMO_TIMING), (draft, {"acceptance":
                                                              demo.DEMO_ACCEPTANCE})):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / model.SIM_FILE).write_text(json.dumps(data), encoding="utf-8")
    return target, draft


def fixed_prompts(n: int = FIXED_PROMPTS) -> list[prompts.Prompt]:
    """n distinct prompts: the builtin set, cycled with a suffix so every text is new."""
    builtin = prompts.load_builtin()
    out = []
    for i in range(n):
        p = builtin[i % len(builtin)]
        lap = i // len(builtin)
        text = p.text if lap == 0 else f"{p.text} (variant {lap + 1})"
        out.append(prompts.Prompt(id=f"{p.id}-{lap}", category=p.category, text=text))
    return out


def _profile(target: Path, draft: Path, bench_kw: dict[str, Any],
             thresholds: dict[str, Any]) -> Profile:
    # The simulator's launches run at one speed here, so the profile states a small
    # launch-to-launch spread (benchmark 11 measures the gate with launches that drift).
    return parse_profile({
        "name": "bench-live", "simulated": True,
        "target": {"path": str(target)}, "drafter": {"path": str(draft)},
        "speculative": {"algorithm": "EAGLE3", "num_steps": STEPS, "eagle_topk": 1,
                        "num_draft_tokens": STEPS + 1},
        "bench": {"launch_spread": LAUNCH_SPREAD, **bench_kw}, "thresholds": thresholds})


def _coverage(profile: Profile) -> drift.Coverage:
    return launches.coverage(drift.Settings.of(profile.bench), [], launches.Keys(None, None))


def _measure(url: str, config: str, profile: Profile, chosen: Sequence[prompts.Prompt],
             baseline: bench.Measurement | None, sequential: bool) -> bench.Measurement:
    sent = prompts.PromptSet.rendered(chosen, prompts.template_named("chatml", "benchmark"))
    keep = (gate.keep_going_rule(profile.thresholds, config, baseline, _coverage(profile))
            if sequential else None)
    with SGLangClient(url) as client:
        return passes.measure(client, bench.Sampling.of(profile.bench), sent,
                             config=config,  # type: ignore[arg-type]
                             keep_going=keep, simulated=True)


def _results(profile: Profile, base: bench.Measurement,
             spec: bench.Measurement) -> LiveResults:
    return LiveResults(profile.name, True, ConfigRun("baseline", measurement=base),
                       ConfigRun("speculative", measurement=spec), coverage=_coverage(profile))


def _decisions(profile: Profile, results: LiveResults) -> dict[str, str]:
    claims = (perf_claims.baseline_tps_claim(profile, results),
              spec_claims.accept_len_claim(profile, results),
              spec_claims.speedup_claim(profile, results))
    return {c.id: c.status.value for c in claims}


def _requests(m: bench.Measurement) -> int:
    return len(m.samples) + m.warmup


def run(root: Path, *, fixed_n: int = FIXED_PROMPTS, fixed_repeats: int = FIXED_REPEATS,
        max_new_tokens: int = 64, per_category: int = 3) -> dict[str, Any]:
    root.mkdir(parents=True, exist_ok=True)
    target, draft = _dirs(root)
    params = model.load_params(target, draft, speculative=True, num_steps=STEPS, eagle_topk=1,
                               num_draft_tokens=STEPS + 1, env={})
    truth = model.truth(params)
    template = prompts.template_named("chatml", "benchmark")
    spec_argv = ["--model-path", str(target), "--speculative-algorithm", "EAGLE3",
                 "--speculative-draft-model-path", str(draft), "--speculative-num-steps",
                 str(STEPS), "--speculative-eagle-topk", "1",
                 "--speculative-num-draft-tokens", str(STEPS + 1)]
    # A clear pass, a clear fail and a speed-up threshold at the true speed-up.
    cases = {"clear_pass": 1.0, "clear_fail": 1.25 * truth.speedup, "near": truth.speedup}
    common_th = {"baseline_tps_min": 0.8 * truth.baseline_tps,
                 "accept_len_min": 0.8 * truth.tau}
    fixed_bench = {"max_new_tokens": max_new_tokens, "warmup": 2, "repeats": fixed_repeats,
                   "max_repeats": fixed_repeats}
    seq_bench = {"max_new_tokens": max_new_tokens, "warmup": 1, "repeats": 2,
                 "max_repeats": 8, "prompts_per_category": per_category}
    out: dict[str, Any] = {"truth": truth.to_json(), "max_new_tokens": max_new_tokens,
                           "fixed_shape": f"{fixed_n}×{fixed_repeats}"}
    with simulator(["--model-path", str(target)], root / "base.log") as base_url, \
            simulator(spec_argv, root / "spec.log") as spec_url:
        chosen = fixed_prompts(fixed_n)
        fprofile = _profile(target, draft, fixed_bench, {**common_th, "speedup_min": 1.0})
        t0 = time.perf_counter()
        fbase = _measure(base_url, "baseline", fprofile, chosen, None, False)
        fspec = _measure(spec_url, "speculative", fprofile, chosen, fbase, False)
        fixed_s = time.perf_counter() - t0
        completion, verify = model.expected_totals(
            params, [template.render(p.text) for p in chosen], max_new_tokens)
        overhead = [s.e2e_s - s.server_e2e_s for s in (*fbase.samples, *fspec.samples)
                    if s.server_e2e_s is not None]
        out["overhead_ms"] = {
            "median": 1000 * statistics.median(overhead),
            "p90": 1000 * sorted(overhead)[int(0.9 * (len(overhead) - 1))],
            "mean": 1000 * statistics.fmean(overhead), "requests": len(overhead),
            "mean_e2e_ms": 1000 * statistics.fmean(s.e2e_s for s in fspec.samples)}
        out["error_vs_truth"] = {
            "baseline_tps": fbase.stats["tps"].mean / truth.baseline_tps - 1,
            "spec_tps": fspec.stats["tps"].mean / truth.spec_tps - 1,
            "tau_decode": fspec.stats["tau_decode"].mean / truth.tau - 1,
            "cycle_ms": fspec.stats["cycle_ms"].mean / truth.cycle_ms - 1,
            # The simulator's exact totals for these very prompts: the harness's arithmetic.
            "accept_len_exact": fspec.stats["accept_len"].mean / (completion / verify) - 1,
            "speedup": (fspec.stats["tps"].mean / fbase.stats["tps"].mean) / truth.speedup - 1,
        }
        fixed_requests = _requests(fbase) + _requests(fspec)
        case_out: dict[str, Any] = {}
        seq_chosen = prompts.select(prompts.load_builtin(), None, per_category)
        for name, speedup_min in cases.items():
            th = {**common_th, "speedup_min": speedup_min}
            fixed_decision = _decisions(_profile(target, draft, fixed_bench, th),
                                        _results(fprofile, fbase, fspec))
            sprofile = _profile(target, draft, seq_bench, th)
            t1 = time.perf_counter()
            sbase = _measure(base_url, "baseline", sprofile, seq_chosen, None, True)
            sspec = _measure(spec_url, "speculative", sprofile, seq_chosen, sbase, True)
            seq_s = time.perf_counter() - t1
            case_out[name] = {
                "speedup_min": speedup_min,
                "sequential": {"requests": _requests(sbase) + _requests(sspec),
                               "repeats": [sbase.repeats, sspec.repeats],
                               "seconds": seq_s,
                               "stop": [sbase.stop_reason, sspec.stop_reason],
                               "decisions": _decisions(sprofile, _results(sprofile, sbase,
                                                                          sspec))},
                "fixed": {"requests": fixed_requests, "seconds": fixed_s,
                          "decisions": fixed_decision},
            }
        out["cases"] = case_out
    return out


def rows(result: dict[str, Any]) -> list[list[str]]:
    o, e = result["overhead_ms"], result["error_vs_truth"]
    out = [["4 harness overhead per request (client − server e2e)",
            f"median {o['median']:.2f} ms, p90 {o['p90']:.2f} ms",
            f"mean request {o['mean_e2e_ms']:.0f} ms", "", ""],
           ["4 error vs simulator truth",
            f"accept len {e['accept_len_exact'] * 100:+.2f} %, tau {e['tau_decode'] * 100:+.2f} %",
            f"tok/s base {e['baseline_tps'] * 100:+.2f} %, spec {e['spec_tps'] * 100:+.2f} %",
            f"speedup {e['speedup'] * 100:+.2f} %", ""]]
    for name, case in result["cases"].items():
        s, f = case["sequential"], case["fixed"]
        out.append([f"4 sequential stopping, {name} (speedup_min {case['speedup_min']:.3f})",
                    f"{s['requests']} requests, {s['seconds']:.1f} s → "
                    f"{s['decisions']['spec.speedup']}",
                    f"fixed {result['fixed_shape']}: {f['requests']} requests, "
                    f"{f['seconds']:.1f} s → "
                    f"{f['decisions']['spec.speedup']}",
                    f"{f['requests'] / s['requests']:.1f}× fewer requests", ""])
    return out
