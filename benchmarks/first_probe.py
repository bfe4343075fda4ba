"""What a first probe can decide, per deployment: a new deployment's first A–B probe (no launch
history, no stored baseline), judged with the prior of the class and GPU the probe found, on the
simulator's model set to the noise real SGLang showed there (specgate.testing.drift_trials:
seeded launches whose speed factors and true speed-up are known).

    python -m benchmarks.first_probe [--false-trials 1000] [--trials 200] [--json PATH]

Per deployment: the false-pass rate at a true speed-up of 1.00 (a drafter that does not pay),
which must stay within the interval's nominal one-sided error (2.5 % at the default 95 %); and
the share of first probes that pass at each true speed-up of a ladder, with the smallest true
speed-up that half and that nine in ten first probes pass.

Nothing here is typed in: each deployment's noise is read from the committed launch records.
- Launch drift (σ of ln between launches), each server its own: the baseline's decode tok/s and
  the speculative server's verify cycle, the pooled spreads of specgate's prior tables for that
  class and GPU (specgate/results/drift.py, which tests/results/test_prior_records.py recomputes
  from the records).
- Per-request variation: the median over the records' launches of their within-launch CV, the
  larger of the two servers' (the simulator draws one for both).
- A stress row per deployment: each server drifting as much as the widest single group of
  launches of its figure in the class's records on any GPU, the prior unchanged: what a machine
  that moves more than its prior says (another build, another machine) does to the false-pass
  rate.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from specgate.results import drift
from specgate.results.deployment import Deployment, Kind
from specgate.testing import drift_trials

RESULTS = Path(__file__).resolve().parent / "results"
LADDER = (1.02, 1.05, 1.075, 1.10, 1.15, 1.20, 1.30, 1.40, 1.50, 1.60, 1.80, 2.00)
FALSE_PASS_LIMIT = 0.025
GOALS = {"GPU-bound": {"half": 1.05, "nine_in_ten": 1.10}}


# The launch records of one server of a deployment: (a glob of files under benchmarks/results/,
# the target they name).
Records = tuple[tuple[str, str], ...]


@dataclasses.dataclass(frozen=True)
class Setting:
    """A deployment the benchmark probes: its class, the GPU nvidia-smi would name, and the
    launch records of its two servers."""

    name: str
    kind: Kind
    gpu: str
    baseline: Records
    speculative: Records


H200_8B = "2026-12-03-h200-llama-shapes-dummy/launch-records/launch-records-llama8b-shapes.json"
H200_CYCLE = "2026-12-03-h200-launch-spread/verify-cycle/launch-records-*.json"
H100_RUNS = "2026-12-07-h100-llama8b-shapes-launches/*/launch-records.json"
HOST_RECORDS = "2026-12-03-h200-launch-spread/launch-records/launch-records.json"
SETTINGS: tuple[Setting, ...] = (
    Setting("host-bound, H200 (SmolLM2-135M-Instruct)", "host-bound", "NVIDIA H200",
            ((HOST_RECORDS, "smollm2-135m-instruct"),),
            ((HOST_RECORDS, "smollm2-135m-instruct"),)),
    Setting("GPU-bound, H200 (Llama-3-8B shapes)", "GPU-bound", "NVIDIA H200",
            ((H200_8B, "llama8b-shapes"),), ((H200_CYCLE, "llama8b-shapes-eagle3"),)),
    Setting("GPU-bound, H100 (Llama-3-8B shapes)", "GPU-bound", "NVIDIA H100 80GB HBM3",
            ((H100_RUNS, "llama8b-shapes-target"),),
            ((H100_RUNS, "llama8b-shapes-eagle3"),)),
)


def launches(records: Records, root: Path = RESULTS) -> list[dict[str, Any]]:
    """Every launch of the target in the records' files, in file order."""
    out: list[dict[str, Any]] = []
    for pattern, name in records:
        found = [json.loads(path.read_text(encoding="utf-8")).get("targets", {}).get(name)
                 for path in sorted(root.glob(pattern))]
        if not any(found):
            raise SystemExit(f"no launch records of {name} in {root / pattern}")
        for target in found:
            if target is not None:
                out.extend(target["launches"])
    return out


def within(records: Records, root: Path = RESULTS) -> float:
    """The median within-launch CV of the records' launches."""
    values = [float(x["cv_within"]) for x in launches(records, root) if "cv_within" in x]
    if not values:
        raise SystemExit(f"no launch with cv_within in {records} under {root}")
    return statistics.median(values)


def noise_of(setting: Setting, root: Path = RESULTS) -> dict[str, float]:
    """The simulated noise of a deployment, from its records and specgate's priors."""
    base = drift.prior("tps", setting.kind, setting.gpu)
    spec = drift.prior("cycle_ms", setting.kind, setting.gpu)
    def widest(figure: str, prior: drift.Prior) -> float:
        return max(drift.pooled_sd([values])[0]
                   for values in drift.PRIORS[prior][figure].values() if len(values) > 1)

    return {"baseline_spread": base.sd, "speculative_spread": spec.sd,
            "noise": max(within(setting.baseline, root), within(setting.speculative, root)),
            "widest_baseline": widest("tps", base.prior),
            "widest_speculative": widest("cycle_ms", spec.prior)}


def first_probes(setting: Setting, noise: dict[str, float], true_speedup: float, trials: int,
                 *, stress: bool = False) -> float:
    """The share of `trials` first probes that pass, each a new deployment like this one."""
    base = noise["widest_baseline" if stress else "baseline_spread"]
    spec = noise["widest_speculative" if stress else "speculative_spread"]
    found = Deployment(setting.kind, gpu=setting.gpu)
    runs = [drift_trials.Trials(true_speedup, spread=base, spec_spread=spec,
                                noise=noise["noise"], deployment_=found)
            .run(f"first-{setting.name}-{'stress-' if stress else ''}{true_speedup}-{i}")
            for i in range(trials)]
    return drift_trials.pass_rate(runs)


def smallest(rates: dict[float, float], share: float) -> float | None:
    """The smallest true speed-up of the ladder from which every rung passes at least `share`."""
    found = None
    for speedup in sorted(rates, reverse=True):
        if rates[speedup] < share:
            break
        found = speedup
    return found


def run(false_trials: int = 1000, trials: int = 200, root: Path = RESULTS) -> dict[str, Any]:
    nominal = drift_trials.nominal_false_pass(drift_trials.profile())
    out: dict[str, Any] = {"false_trials": false_trials, "trials": trials,
                           "nominal_false_pass": nominal, "limit": FALSE_PASS_LIMIT,
                           "deployments": {}}
    for setting in SETTINGS:
        noise = noise_of(setting, root)
        rates = {s: first_probes(setting, noise, s, trials) for s in LADDER}
        out["deployments"][setting.name] = {
            "kind": setting.kind, "gpu": setting.gpu, **noise,
            "false_pass": first_probes(setting, noise, 1.0, false_trials),
            "false_pass_at_widest_group": first_probes(setting, noise, 1.0, false_trials,
                                                       stress=True),
            "pass_rates": {f"{s:.3f}": r for s, r in rates.items()},
            "smallest_half": smallest(rates, 0.5), "smallest_nine_in_ten": smallest(rates, 0.9)}
    return out


def _speedup(value: float | None) -> str:
    return f"{value:g}×" if value else f"none up to {LADDER[-1]:g}×"


def rows(result: dict[str, Any]) -> list[list[str]]:
    out = []
    for name, cell in result["deployments"].items():
        label = (f"12 first probe, {name} (drift σ baseline {cell['baseline_spread']:.2%}, "
                 f"cycle {cell['speculative_spread']:.2%}, per request {cell['noise']:.1%})")
        out.append([f"{label}, true 1.00",
                    f"false passes {cell['false_pass']:.1%} of {result['false_trials']}; "
                    f"{cell['false_pass_at_widest_group']:.1%} drifting as the widest groups "
                    f"({cell['widest_baseline']:.2%}, {cell['widest_speculative']:.2%})", "",
                    "", f"≤ {result['nominal_false_pass']:.1%} (nominal one-sided error)"])
        goal = GOALS.get(cell["kind"])
        out.append([f"{label}, smallest true speed-up passed",
                    f"half of first probes from {_speedup(cell['smallest_half'])}, nine in ten "
                    f"from {_speedup(cell['smallest_nine_in_ten'])}", "", "",
                    f"half from ≤ {goal['half']:g}×, nine in ten from ≤ "
                    f"{goal['nine_in_ten']:g}×" if goal else ""])
    return out


def misses(result: dict[str, Any]) -> list[str]:
    """What the result falls short of: the false-pass limit anywhere, the goals where set."""
    out = []
    for name, cell in result["deployments"].items():
        if cell["false_pass"] > FALSE_PASS_LIMIT:
            out.append(f"{name}: false passes {cell['false_pass']:.1%} above "
                       f"{FALSE_PASS_LIMIT:.1%}")
        goal = GOALS.get(cell["kind"])
        if goal is None:
            continue
        for key, share in (("half", "smallest_half"), ("nine_in_ten", "smallest_nine_in_ten")):
            got = cell[share]
            if got is None or got > goal[key]:
                out.append(f"{name}: {key.replace('_', ' ')} of first probes pass from "
                           f"{_speedup(got)}, not ≤ {goal[key]:g}×")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--false-trials", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--json", type=Path, help="also write the result to this file")
    ns = parser.parse_args(argv)
    result = run(ns.false_trials, ns.trials)
    print(json.dumps(result, indent=1))
    if ns.json is not None:
        ns.json.parent.mkdir(parents=True, exist_ok=True)
        ns.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    for row in rows(result):
        print(" | ".join(row))
    short = misses(result)
    for line in short:
        print(line)
    return 1 if short else 0


if __name__ == "__main__":
    sys.exit(main())
