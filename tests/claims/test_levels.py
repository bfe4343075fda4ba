"""Tests for specgate.claims.levels and its suite: claims per concurrency level, their ids, how
`-m gate` and `-m probe` select them, and the demo at three levels end to end."""

import json
import re
import subprocess
import sys
from pathlib import Path

import fault_support as fh
import pytest
import sim_support

from specgate.claims import levels
from specgate.claims.result import Status
from specgate.core.profile import parse_profile
from specgate.results.live import ConfigRun, Failure, LiveResults
from specgate.testing.simulator import model

# Its tests share a costly fixture: one xdist worker runs them all (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("test_levels")


@pytest.fixture(scope="module")
def collect(tmp_path_factory):
    """The claim tests a selection collects, by node id (each selection collected once)."""
    root = tmp_path_factory.mktemp("collect")
    found: dict[tuple[str, str], list[str]] = {}

    def collected(profile: str, select: str) -> list[str]:
        if (profile, select) not in found:
            out = subprocess.run(
                [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", select,
                 f"--profile={profile}", f"--reports={root / 'reports'}"],
                cwd=fh.REPO, env=fh.child_env(SPECGATE_CACHE=str(root / "cache")),
                capture_output=True, text=True, timeout=120)
            assert out.returncode == 0, out.stdout + out.stderr
            found[profile, select] = [line for line in out.stdout.splitlines() if "::" in line]
        return found[profile, select]

    return collected


def test_the_gate_selects_no_other_level_and_the_probe_every_one(collect):
    gate = collect("demo-concurrency", "gate")
    assert gate
    assert not [n for n in gate if "test_levels.py" in n]
    probe = collect("demo-concurrency", "probe")
    at_levels = sorted(n.split("::")[1] for n in probe if "test_levels.py" in n)
    assert at_levels == sorted(f"test_{name}_at_level[c{n}]" for n in (4, 16)
                               for name in ("baseline_tps", "accept_len", "breakeven", "speedup",
                                            "parity"))
    assert [n for n in probe if "test_levels.py" not in n] == [
        n for n in collect("demo", "probe")]  # the rest as without levels


def test_one_level_collects_no_claim_per_level_and_skips_nothing(collect):
    probe = collect("demo", "probe")
    assert not [n for n in probe if "test_levels.py" in n]
    assert "test_levels" not in " ".join(collect("demo", "live"))


def test_ids_and_levels_follow_the_profile():
    profile = parse_profile({"name": "x", "bench": {"concurrency": [1, 4, 16]},
                             "thresholds": {"gate_concurrency": 4}})
    assert levels.other_levels(profile) == [1, 16]
    assert levels.level_id("spec.speedup", 16) == "spec.speedup@c16"
    with pytest.raises(ValueError, match=r"no claim 'spec\.nothing' per concurrency level"):
        levels.level_claim("spec.nothing", profile, _not_started(), 16)


def _not_started() -> LiveResults:
    failed = Failure("start", "the speculative server did not start: port taken")
    return LiveResults("x", True, ConfigRun("baseline", gate_level=4),
                       ConfigRun("speculative", gate_level=4, failure=failed))


def test_a_server_that_did_not_start_breaks_every_level_with_its_reason():
    profile = parse_profile({"name": "x", "bench": {"concurrency": [1, 4, 16]},
                             "thresholds": {"gate_concurrency": 4}})
    live = _not_started()
    for n in (1, 16):
        result = levels.level_claim("spec.speedup", profile, live, n)
        assert result.status is Status.BROKEN
        assert "the speculative server did not start" in result.message
        assert "port taken" in result.cause
        assert result.id == f"spec.speedup@c{n}"
        assert f"at {n} in flight: " in result.message


@pytest.mark.slow
def test_the_demo_at_three_levels_plots_the_curve_and_gates_at_one(tmp_path):
    """pytest -m probe --profile demo-concurrency: the gate's claims pass at one stream, the
    drafter pays at 4 and stops paying by 16, and the verdict and the report say so."""
    def probe(reports: Path, truth: Path) -> fh.ProbeRun:
        return fh.run_probe(fh.REPO / "specgate" / "profiles" / "demo-concurrency.toml",
                            reports, timeout_s=300,
                            env=fh.child_env(SPECGATE_CACHE=str(tmp_path / "cache"),
                                             **{model.ENV_TRUTH: str(truth)}))

    # The curve's verdicts are the simulator's only when the machine kept its schedule.
    run, reports, _ = sim_support.on_schedule(probe, tmp_path)
    assert not run.timed_out, run.output[-3000:]
    claims = run.claims()
    assert claims["spec.speedup"]["status"] == "passed"
    assert claims["spec.speedup@c4"]["status"] == "passed"
    assert claims["spec.speedup@c16"]["status"] == "failed"
    assert claims["spec.breakeven@c16"]["status"] == "failed"
    assert claims["perf.baseline_tps@c16"]["status"] == "skipped"
    assert run.verdict["outcome"] == "failed"
    assert run.returncode == 1
    curve = claims["spec.speedup"]["details"]["curve"]
    assert curve["crossover"]["pays_up_to"] == 4
    assert curve["crossover"]["stops_at"] == 16
    assert [level["verdict"] for level in curve["levels"]] == ["pays", "pays", "costs"], [
        (level["concurrency"], level["speedup"], level["speedup_within_launch"])
        for level in curve["levels"]]
    results = reports / "allure-results"
    speedup = next(json.loads(p.read_text()) for p in results.glob("*-result.json")
                   if json.loads(p.read_text())["name"] == "spec.speedup")
    assert "speed-up against concurrency" in {a["name"] for a in speedup["attachments"]}
    live = json.loads((reports / "live" / "results.json").read_text())
    assert sorted(live["speculative"]["levels"]) == ["16", "4"]
    assert re.search(r"spec\.speedup@c16: \[simulated server\] at 16 in flight: ", run.output)


@pytest.mark.slow
def test_the_gate_measures_and_judges_the_gates_level_only(tmp_path):
    """pytest -m gate --profile demo-concurrency: no claim of another level is selected, so no
    other level is measured, and the gate passes at one stream."""
    def probe(reports: Path, truth: Path) -> fh.ProbeRun:
        return fh.run_probe(fh.REPO / "specgate" / "profiles" / "demo-concurrency.toml",
                            reports, timeout_s=300, select="gate",
                            env=fh.child_env(SPECGATE_CACHE=str(tmp_path / "cache"),
                                             **{model.ENV_TRUTH: str(truth)}))

    run, reports, _ = sim_support.on_schedule(probe, tmp_path)
    assert not run.timed_out, run.output[-3000:]
    assert run.verdict["outcome"] == "passed", run.output[-3000:]
    assert run.returncode == 0
    assert not [cid for cid in run.claims() if "@c" in cid]
    live = json.loads((reports / "live" / "results.json").read_text())
    for config in ("baseline", "speculative"):
        assert live[config]["levels"] == {}
        assert live[config]["measurement"]["concurrency"] == 1
