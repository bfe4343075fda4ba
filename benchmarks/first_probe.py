"""What a first probe can decide, per class of deployment: a new deployment's first A–B probe (no
launch history, no stored baseline), judged with the prior of the class the probe found, on the
simulator's model set to the noise real SGLang showed for that class (specgate.testing.
drift_trials: seeded launches whose speed factors and true speed-up are known).

    python -m benchmarks.first_probe [--false-trials 1000] [--trials 100]

Per class: the false-pass rate at a true speed-up of 1.00 (a drafter that does not pay), which
must stay within the interval's nominal one-sided error (2.5 % at the default 95 %);
and the share of first probes that pass at each true speed-up of a ladder, with the smallest
true speed-up that half and that nine in ten first probes pass.

The noise per class, from the launch records under benchmarks/results/ (docs/claims.md):
- host-bound (SmolLM2-135M and the small targets): launch drift σ 15 % (SmolLM2's launch records
  moved 16.0 %, the host-bound pool 12.2 %), per-request variation 10 % (within a launch
  2 to 11 %);
- GPU-bound (Llama-3-8B shapes): launch drift σ 2.3 % (the verify cycle's, the larger of the two
  figures: the baseline's moved 0.38 to 0.9 %), per-request variation 1.2 % (within a launch 0.7
  to 1.4 %, the verify cycle 1.8 to 3.7 %).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from specgate.results.deployment import Deployment, Kind
from specgate.testing import drift_trials

CLASSES: dict[Kind, dict[str, float]] = {
    "host-bound": {"spread": 0.15, "noise": 0.10},
    "GPU-bound": {"spread": 0.023, "noise": 0.012},
}
LADDER = (1.05, 1.10, 1.15, 1.20, 1.30, 1.40, 1.50, 1.60, 1.80, 2.00)
FALSE_PASS_LIMIT = 0.025


def first_probes(kind: Kind, true_speedup: float, trials: int) -> float:
    """The share of `trials` first probes that pass, each a new deployment of this class."""
    noise = CLASSES[kind]
    runs = [drift_trials.Trials(true_speedup, spread=noise["spread"], noise=noise["noise"],
                                deployment_=Deployment(kind))
            .run(f"first-{kind}-{true_speedup}-{i}") for i in range(trials)]
    return drift_trials.pass_rate(runs)


def smallest(rates: dict[float, float], share: float) -> float | None:
    """The smallest true speed-up of the ladder from which every rung passes at least `share`."""
    found = None
    for speedup in sorted(rates, reverse=True):
        if rates[speedup] < share:
            break
        found = speedup
    return found


def run(false_trials: int = 1000, trials: int = 100) -> dict[str, Any]:
    nominal = drift_trials.nominal_false_pass(drift_trials.profile())
    out: dict[str, Any] = {"false_trials": false_trials, "trials": trials,
                           "nominal_false_pass": nominal, "limit": FALSE_PASS_LIMIT,
                           "classes": {}}
    for kind, noise in CLASSES.items():
        rates = {s: first_probes(kind, s, trials) for s in LADDER}
        out["classes"][kind] = {
            **noise, "false_pass": first_probes(kind, 1.0, false_trials),
            "pass_rates": {f"{s:.2f}": r for s, r in rates.items()},
            "smallest_half": smallest(rates, 0.5), "smallest_nine_in_ten": smallest(rates, 0.9)}
    return out


def rows(result: dict[str, Any]) -> list[list[str]]:
    out = []
    for kind, cell in result["classes"].items():
        label = (f"12 first probe, {kind} (drift σ {cell['spread']:.1%}, per request "
                 f"{cell['noise']:.1%})")
        out.append([f"{label}, true 1.00",
                    f"false passes {cell['false_pass']:.1%} of {result['false_trials']}", "",
                    "", f"≤ {result['nominal_false_pass']:.1%} (nominal one-sided error)"])
        half, most = (f"{s:.2f}×" if s else f"none up to {LADDER[-1]:.2f}×"
                      for s in (cell["smallest_half"], cell["smallest_nine_in_ten"]))
        out.append([f"{label}, smallest true speed-up passed",
                    f"half of first probes from {half}, nine in ten from {most}",
                    "", "", ""])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--false-trials", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=100)
    ns = parser.parse_args(argv)
    result = run(ns.false_trials, ns.trials)
    print(json.dumps(result, indent=1))
    for row in rows(result):
        print(" | ".join(row))
    bad = [k for k, c in result["classes"].items() if c["false_pass"] > FALSE_PASS_LIMIT]
    if bad:
        print(f"false-pass rate above {FALSE_PASS_LIMIT:.1%} for {', '.join(bad)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
