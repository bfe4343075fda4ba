"""Benchmark 3: the offline probe against collection alone, and what start-up imports cost."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import PYTHON, ROOT, measure_child, run_child

SELECT = "probe and not live"
HEAVY = ("torch", "matplotlib", "requests", "allure", "allure_pytest", "pydantic", "numpy",
         "filelock", "psutil", "safetensors", "xdist", "hypothesis", "PIL", "urllib3")

_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def full_profile(root: Path, drafter: Path, reference: Path) -> Path:
    """A profile pointing at the full-size generated pair and a Kimi-K2.5 target config."""
    from specgate.testing import generate
    target = generate.write_target_config(root / "k25_target", "kimi-k25")
    text = f'''name = "bench-full-size"
[target]
path = "{target}"
[drafter]
path = "{drafter}"
reference = "{reference}"
[drafter.expect]
architectures = ["LlamaForCausalLMEagle3"]
hidden_size = 7168
intermediate_size = 18432
num_attention_heads = 64
num_key_value_heads = 64
vocab_size = 163840
draft_vocab_size = 32000
max_position_embeddings = 262144
"eagle_config.eagle_aux_hidden_state_layer_ids" = [2, 30, 58]
'''
    path = root / "full-size.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _pytest(profile: Path | None, reports: Path, collect_only: bool,
            extra: Sequence[str] = ()) -> list[str]:
    # One token each: pytest picks its rootdir (and so its ini file) from every free-standing
    # path on the command line before plugin options are known, so `--reports DIR` with an
    # existing DIR outside the checkout silently loses pyproject.toml's settings.
    argv = [PYTHON, "-m", "pytest", "-m", SELECT, "-q", "-p", "no:cacheprovider",
            f"--reports={reports}", *extra]
    if profile is not None:
        argv.append(f"--profile={profile}")
    if collect_only:
        argv.append("--collect-only")
    return argv


def time_probe(profile: Path | None, reports: Path, repeats: int = 3,
               extra: Sequence[str] = ()) -> dict[str, Any]:
    """Best of `repeats` for the run and for collection alone, each a fresh process, run as
    tox runs it: bytecode caches written (PYTHONDONTWRITEBYTECODE unset) by one unmeasured run.
    """
    out: dict[str, Any] = {}
    unset = ("PYTHONDONTWRITEBYTECODE",)
    run_child(_pytest(profile, reports, False, extra), cwd=ROOT, unset=unset)
    for name, collect in (("collect", True), ("run", False)):
        runs = [measure_child(_pytest(profile, reports, collect, extra), cwd=ROOT,
                              unset=unset) for _ in range(repeats)]
        best = min(runs, key=lambda r: r.wall_s)
        tail = best.stdout.strip().splitlines()[-1] if best.stdout.strip() else ""
        out[name] = {"wall_s": best.wall_s, "runs_s": [r.wall_s for r in runs],
                     "peak_rss_mb": best.peak_rss_mb, "rc": best.rc, "summary": tail}
    out["claims_own_s"] = out["run"]["wall_s"] - out["collect"]["wall_s"]
    return out


def import_costs(profile: Path | None, reports: Path) -> dict[str, Any]:
    """`python -X importtime` of a whole run: cumulative ms per top-level import."""
    run = run_child([PYTHON, "-X", "importtime", *_pytest(profile, reports, False)[1:]],
                    cwd=ROOT, unset=("PYTHONDONTWRITEBYTECODE",))
    per_root: dict[str, float] = defaultdict(float)
    total = 0.0
    for line in run.stderr.splitlines():
        m = _LINE.match(line)
        if m is None:
            continue
        cumulative_us, indent, name = int(m.group(2)), len(m.group(3)), m.group(4)
        if indent <= 1:  # top level: counted once, with everything it pulled in
            per_root[name.split(".")[0]] += cumulative_us / 1000
            total += cumulative_us / 1000
    heavy = {k: round(v, 1) for k, v in sorted(per_root.items(), key=lambda kv: -kv[1])
             if k in HEAVY or v > 30}
    return {"total_import_ms": round(total, 1), "by_package_ms": heavy}


def run(root: Path, drafter: Path | None, reference: Path | None,
        repeats: int = 3) -> dict[str, Any]:
    demo_reports = root / "reports-demo"
    out: dict[str, Any] = {"demo": time_probe(None, demo_reports, repeats)}
    out["demo"]["imports"] = import_costs(None, demo_reports)
    # Profiling found hypothesis's pytest plugin importing all of hypothesis in every run's
    # terminal summary (~0.1 s of imports, ~0.3 s of wall on 2 cores): what dropping it buys.
    out["demo_without_hypothesis_plugin"] = time_probe(None, demo_reports, repeats,
                                                       extra=("-p", "no:hypothesispytest"))
    if drafter is not None and reference is not None:
        prof = full_profile(root, drafter, reference)
        out["full_size"] = time_probe(prof, root / "reports-full", repeats)
    bare = measure_child([PYTHON, "-c", "pass"])
    plain = measure_child([PYTHON, "-m", "pytest", "--version"], cwd=ROOT)
    out["python_start_s"] = bare.wall_s
    out["pytest_version_s"] = plain.wall_s
    return out


def rows(result: dict[str, Any]) -> list[list[str]]:
    out = []
    labels = {"demo": "demo profile", "full_size": "full-size pair",
              "demo_without_hypothesis_plugin": "demo, -p no:hypothesispytest"}
    for key, label in labels.items():
        if key not in result:
            continue
        r = result[key]
        out.append([f"3 pytest -m \"{SELECT}\", {label}",
                    f"{r['run']['wall_s']:.2f} s, {r['run']['peak_rss_mb']:.0f} MB, "
                    f"rc {r['run']['rc']}",
                    f"--collect-only: {r['collect']['wall_s']:.2f} s",
                    f"claims' own: {r['claims_own_s']:.2f} s", ""])
    imports = result["demo"]["imports"]
    top = ", ".join(f"{k} {v:.0f}" for k, v in list(imports["by_package_ms"].items())[:6])
    out.append(["3 imports at collection (ms, -X importtime)", top,
                f"total {imports['total_import_ms']:.0f} ms", "", ""])
    return out
