"""The gate when servers drift between launches: false passes at a true speed-up of 1.0, passes at
1.5, over many seeded launches of the simulator's model (specgate.testing.drift_trials).

    python -m benchmarks.launch_drift [--trials N]

Each trial is one probe: a baseline and a speculative launch (and, for A–B–A, the baseline
again), each at a speed factor exp(N(0, σ²)) drawn as the simulator draws it, measured
in-process with the gate's sequential passes and judged by spec.speedup. Per design and spread:

- first probe: every trial a new deployment, so the spread is the prior;
- learned: the trials are successive probes of one deployment sharing one launch log;
- spread set to about 0 in the profile: what a gate that ignores launches judges on (an A–B–A
  run still bounds the spread by its own two baseline launches).
"""

from __future__ import annotations

import sys
from typing import Any

from benchmarks.common import trials_main
from specgate.testing import drift_trials

SPREADS = (0.05, 0.12, 0.25)
DESIGNS = ("ab", "aba")


def _rate(true_speedup: float, spread: float, design: str, trials: int, *, fresh: bool,
          blind: bool = False) -> float:
    profile = drift_trials.profile(design, spread=1e-6 if blind else None)
    if fresh:
        runs = [drift_trials.Trials(true_speedup, spread=spread, profile_=profile)
                .run(f"bench-{design}-{spread}-{i}") for i in range(trials)]
    else:
        shared = drift_trials.Trials(true_speedup, spread=spread, profile_=profile)
        runs = [shared.run(f"bench-{design}-{spread}-{i}") for i in range(trials)]
    return drift_trials.pass_rate(runs)


def run(trials: int = 400) -> dict[str, Any]:
    profile = drift_trials.profile()
    result: dict[str, Any] = {"trials": trials,
                              "nominal_false_pass": drift_trials.nominal_false_pass(profile),
                              "cells": {}}
    for design in DESIGNS:
        for spread in SPREADS:
            result["cells"][f"{design} {spread}"] = {
                "false_pass_first_probe": _rate(1.0, spread, design, trials, fresh=True),
                "false_pass_learned": _rate(1.0, spread, design, trials, fresh=False),
                "false_pass_without_spread": _rate(1.0, spread, design, trials // 4,
                                                   fresh=False, blind=True),
                "pass_1_5_first_probe": _rate(1.5, spread, design, trials // 4, fresh=True),
                "pass_1_5_learned": _rate(1.5, spread, design, trials, fresh=False)}
    return result


def rows(result: dict[str, Any]) -> list[list[str]]:
    out = []
    nominal = result["nominal_false_pass"]
    for key, cell in result["cells"].items():
        design, spread = key.split()
        label = f"11 launch drift σ {float(spread):.0%}, {'A–B–A' if design == 'aba' else 'A–B'}"
        out.append([f"{label}, true 1.00",
                    f"false passes: first probe {cell['false_pass_first_probe']:.1%}, "
                    f"learned {cell['false_pass_learned']:.1%}",
                    f"launch spread set to ≈0: {cell['false_pass_without_spread']:.1%}", "",
                    f"≤ {nominal:.1%}"])
        out.append([f"{label}, true 1.50",
                    f"passes: first probe {cell['pass_1_5_first_probe']:.0%}, learned "
                    f"{cell['pass_1_5_learned']:.0%}", "", "", ""])
    return out


def main() -> int:
    return trials_main(run, rows)


if __name__ == "__main__":
    sys.exit(main())
