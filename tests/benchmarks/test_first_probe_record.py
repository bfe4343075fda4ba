"""The committed first-probe run against what it was set from and what quotes it.

benchmarks/results/2026-12-08-simulated-first-probes/first-probe.json is benchmarks/first_probe.py's
output: its noise must be what the benchmark reads from today's launch records and priors (a
changed record or prior makes it stale, and fails here), and every figure its README and
docs/claims.md state is read from it again here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import first_probe

ROOT = Path(__file__).resolve().parents[2]
RESULT = ROOT / "benchmarks" / "results" / "2026-12-08-simulated-first-probes"


def _record() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((RESULT / "first-probe.json").read_text(encoding="utf-8"))
    return doc


def _pct(value: float, digits: int = 2) -> str:
    return f"{value * 100:.{digits}f} %"


def _speedup(value: float | None) -> str:
    assert value is not None
    return f"{value:g}×"


@pytest.mark.parametrize("setting", first_probe.SETTINGS, ids=lambda s: s.name)
def test_the_record_was_set_from_todays_launch_records(setting: first_probe.Setting) -> None:
    cell = _record()["deployments"][setting.name]
    noise = first_probe.noise_of(setting)
    assert {k: cell[k] for k in noise} == pytest.approx(noise, rel=1e-12)
    assert (cell["kind"], cell["gpu"]) == (setting.kind, setting.gpu)
    assert set(cell["pass_rates"]) == {f"{s:.3f}" for s in first_probe.LADDER}
    rates = {float(k): v for k, v in cell["pass_rates"].items()}
    assert cell["smallest_half"] == first_probe.smallest(rates, 0.5)
    assert cell["smallest_nine_in_ten"] == first_probe.smallest(rates, 0.9)


def test_the_readme_table_is_the_record() -> None:
    record = _record()
    readme = (RESULT / "README.md").read_text(encoding="utf-8")
    for name, cell in record["deployments"].items():
        (row,) = [line for line in readme.splitlines() if line.startswith(f"| {name} |")]
        assert row == (
            f"| {name} | {_pct(cell['baseline_spread'])}, {_pct(cell['speculative_spread'])} | "
            f"{_pct(cell['noise'], 1)} | {_pct(cell['false_pass'], 1)} | "
            f"{_pct(cell['false_pass_at_widest_group'], 1)} ({_pct(cell['widest_baseline'])}, "
            f"{_pct(cell['widest_speculative'])}) | {_speedup(cell['smallest_half'])} | "
            f"{_speedup(cell['smallest_nine_in_ten'])} |"), row
    assert f"{record['false_trials']:,} first probes at a true speed-up of 1.00" in readme
    assert f"{record['trials']} at each rung" in readme


def test_docs_quote_the_record() -> None:
    record = _record()["deployments"]
    docs = (ROOT / "docs" / "claims.md").read_text(encoding="utf-8")
    start = docs.index("**What a first probe decides**")
    text = " ".join(docs[start:docs.index("\n\n", start)].split())
    host = record["host-bound, H200 (SmolLM2-135M-Instruct)"]
    h200 = record["GPU-bound, H200 (Llama-3-8B shapes)"]
    h100 = record["GPU-bound, H100 (Llama-3-8B shapes)"]
    said = [
        f"drift {_pct(host['baseline_spread'])} and {_pct(host['speculative_spread'])}, per "
        f"request {_pct(host['noise'], 1)}",
        f"a true 1.00 passed {_pct(host['false_pass'], 1)} of 1,000 first probes; half pass from "
        f"{_speedup(host['smallest_half'])}, nine in ten from "
        f"{_speedup(host['smallest_nine_in_ten'])}",
        f"baseline {_pct(h200['baseline_spread'])} on the H200, {_pct(h100['baseline_spread'])} "
        f"on the H100; verify cycle {_pct(h200['speculative_spread'])}",
        f"a true 1.00 passed {_pct(h200['false_pass'], 1)} (H200) and "
        f"{_pct(h100['false_pass'], 1)} (H100)",
        f"at 1.05×, {_pct(h200['pass_rates']['1.050'], 1)} and "
        f"{_pct(h100['pass_rates']['1.050'], 1)} pass",
        f"{_pct(min(h200['false_pass_at_widest_group'], h100['false_pass_at_widest_group']), 1)}"
        f"–{_pct(max(h200['false_pass_at_widest_group'], h100['false_pass_at_widest_group']), 1)}"
        .replace(" %–", "–"),
    ]
    for cell in (h200, h100):
        assert (cell["smallest_half"], cell["smallest_nine_in_ten"]) == (
            h200["smallest_half"], h200["smallest_nine_in_ten"])
    assert f"half pass from {_speedup(h200['smallest_half'])}, nine in ten from " \
           f"{_speedup(h200['smallest_nine_in_ten'])} (at 1.05×" in text
    for phrase in said:
        assert phrase in text, phrase
