"""What a probe could decide (specgate/results/decidable.py): the smallest speed-up its own
interval would clear, and the passes or launches that would decide a value it left undecided,
checked by measuring again: intervals built for that many passes or launches and widened as the
claims widen them. Then in spec.speedup's message, verdict.json, the closing block and the report.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from conftest import DEMO_SPEEDUP_GATE, GateRun
from specgate.claims.result import ClaimResult, passed
from specgate.results import decidable, drift
from specgate.results.stats import Summary

CONFIDENCE = 0.975
Z = 2.2414027276049464  # the normal quantile of a two-sided 97.5 % interval


def _within(mean: float, se_log: float) -> Summary:
    """An interval over prompts and passes with a known log-scale standard error."""
    half = Z * se_log
    return Summary(40, mean, 0.0, 0.0, mean * math.exp(-half), mean * math.exp(half),
                   CONFIDENCE, math.inf)


def _coverage(sd: float) -> drift.Coverage:
    return drift.Coverage("ab", drift.fixed("tps", sd), drift.fixed("cycle_ms", sd))


def _speedup(mean: float) -> ClaimResult:
    """A passed spec.speedup of this mean, with its covered figure and what it could decide."""
    covered = drift.cover(_within(mean, 0.02), _coverage(0.01), "speedup")
    found = decidable.decidable(covered, 1.0, passes=3)
    assert found is not None
    return passed("spec.speedup", "phase0", "m", observed=mean, details={
        "speedup": covered.judged.to_json(), "decidable": found.to_json()})


def _decided(mean: float, se_log: float, launch_var: float, threshold: float = 1.0) -> bool:
    judged = drift.widen(_within(mean, se_log), drift.Term(launch_var, math.inf))
    return not judged.ci_low <= threshold <= judged.ci_high


def test_the_smallest_speedup_decided_is_where_an_interval_as_wide_as_this_one_clears_1() -> None:
    coverage = _coverage(0.03)
    covered = drift.cover(_within(1.4, 0.02), coverage, "speedup")
    found = decidable.decidable(covered, 1.0, passes=3)
    assert found is not None
    assert found.decided
    launch_var = covered.term.var
    assert _decided(found.above * 1.001, 0.02, launch_var)
    assert not _decided(found.above * 0.999, 0.02, launch_var)
    assert _decided(found.below * 0.999, 0.02, launch_var)
    assert not _decided(found.below * 1.001, 0.02, launch_var)
    assert found.passes_needed is None
    assert found.launches_needed is None
    assert found.text() == (
        f"this probe decides a speed-up of {found.above:.3f}× or more above 1 (or "
        f"{found.below:.3f}× or less below it) at 97.5 %, from its own intervals and launch "
        "spread")


def test_an_undecided_value_names_the_passes_and_the_launches_that_decide_it() -> None:
    se, sd, passes = 0.03, 0.005, 3
    covered = drift.cover(_within(1.03, se), _coverage(sd), "speedup")
    launch_var = covered.term.var
    found = decidable.decidable(covered, 1.0, passes=passes)
    assert found is not None
    assert not found.decided
    p, k = found.passes_needed, found.launches_needed
    assert p is not None
    assert k is not None
    # More passes within these launches: the part over prompts and passes shrinks, the launch
    # part stays.
    assert _decided(1.03, se * math.sqrt(passes / p), launch_var)
    assert not _decided(1.03, se * math.sqrt(passes / (p - 1)), launch_var)
    # k launches of each server, each measured as these were: both parts shrink.
    assert _decided(1.03, se / math.sqrt(k), launch_var / k)
    assert not _decided(1.03, se / math.sqrt(k - 1), launch_var / (k - 1))
    assert (f"the measured 1.030 would be decided by about {p - passes} more passes over the "
            f"prompts in these launches ({p} in all), or by about {k - 1} more launches of "
            f"each server measured as these were ({k} in all)") in found.text()


def test_passes_cannot_decide_a_value_the_launch_spread_alone_holds() -> None:
    covered = drift.cover(_within(1.05, 0.005), _coverage(0.05), "speedup")
    found = decidable.decidable(covered, 1.0, passes=2)
    assert found is not None
    assert not found.decided
    assert found.passes_needed is None
    k = found.launches_needed
    assert k is not None
    assert _decided(1.05, 0.005 / math.sqrt(k), covered.term.var / k)
    assert not _decided(1.05, 0.005 / math.sqrt(k - 1), covered.term.var / (k - 1))
    assert "more passes cannot decide it (the launch-to-launch spread alone holds the " \
           "interval)" in found.text()


def test_a_value_on_the_threshold_is_decided_by_nothing() -> None:
    found = decidable.decidable(drift.cover(_within(1.0, 0.02), _coverage(0.01), "speedup"),
                                1.0, passes=2)
    assert found is not None
    assert not found.decided
    assert found.launches_needed is None
    assert found.passes_needed is None
    assert "equals the threshold: no number of passes or launches decides it" in found.text()


def _speedup_claim(doc: dict) -> dict:
    return next(c for c in doc["claims"] if c["id"] == "spec.speedup")


@pytest.mark.slow
@pytest.mark.xdist_group(DEMO_SPEEDUP_GATE)
def test_a_gate_states_what_it_could_decide_in_the_verdict_the_closing_block_and_the_report(
        demo_speedup_gate: GateRun) -> None:
    proc = demo_speedup_gate
    assert proc.returncode == 0, proc.stdout + proc.stderr
    reports = proc.reports
    doc = json.loads((reports / "verdict.json").read_text())
    found = doc["decidable"]
    assert found == _speedup_claim(doc)["details"]["decidable"]
    # From the speed-up figure the verdict reports: its interval's lower side, on the log scale,
    # is the margin a speed-up needs above 1.
    figure = doc["figures"]["speedup"]
    assert found["above"] == pytest.approx(figure["value"] / figure["ci_low"], abs=1e-4)
    assert found["below"] == pytest.approx(figure["value"] / figure["ci_high"], abs=1e-4)
    assert found["decided"] is True
    assert found["text"] in _speedup_claim(doc)["message"]
    block = proc.stdout[proc.stdout.index("= specgate verdict ="):]
    (line,) = [x for x in block.splitlines() if x.strip().startswith("decidable ")]
    assert line.split("decidable", 1)[1].strip() == found["text"]
    properties = (reports / "allure-results" / "environment.properties").read_text()
    assert "decidable\\ speed-up=this probe decides a speed-up of " in properties


def test_an_inconclusive_speedup_says_what_would_decide_it(tmp_path: Path) -> None:
    import sim_support

    from specgate.claims import spec, verdict
    from specgate.measure import live

    profile = sim_support.sim_profile(
        tmp_path, name="undecided", drafter_sim=json.dumps({"acceptance": [0.9, 0.8]}), env={},
        bench={"prompts_per_category": 1, "max_new_tokens": 32, "warmup": 1, "repeats": 2,
               "max_repeats": 2}, thresholds={"accept_len_min": 2.0})
    results = live.run_live(profile, tmp_path / "reports")
    measured = spec.speedup_claim(profile, results, attach=False)
    speedup = measured.details["speedup"]
    # A minimum just under the measured speed-up: inside the interval the prior's spread gives.
    near = round(speedup["mean"] * 0.97, 3)
    assert speedup["ci_low"] < near
    profile = profile.model_copy(update={"thresholds": profile.thresholds.model_copy(
        update={"speedup_min": near})})
    claim = spec.speedup_claim(profile, results, attach=False)
    found = claim.details["decidable"]
    assert found["decided"] is False
    assert found["threshold"] == near
    assert found["launches_needed"] >= 2
    assert f"the measured {speedup['mean']:.3f} would be decided by about" in claim.message
    assert found["text"] in claim.message
    assert found["above"] == pytest.approx(near * speedup["mean"] / speedup["ci_low"], abs=1e-4)
    doc = verdict.build([claim], profile="undecided", drafter=None, outcome="failed")
    assert doc["decidable"] == found


def test_the_verdict_states_what_the_probe_of_its_speedup_figure_could_decide() -> None:
    """Where a verdict holds several spec.speedup results (one per checkpoint of a matrix), its
    `decidable` is that of the claim its speed-up figure is read from."""
    from specgate.claims import verdict

    first, last = _speedup(1.2), _speedup(1.6)
    doc = verdict.build([first, last], profile="p", drafter=None, outcome="passed")
    assert doc["figures"]["speedup"]["value"] == pytest.approx(1.6)
    assert doc["decidable"] == last.details["decidable"]
    assert doc["decidable"] != first.details["decidable"]


@pytest.mark.slow
@pytest.mark.xdist_group(DEMO_SPEEDUP_GATE)
def test_specgate_summary_states_what_the_gate_could_decide(
        demo_speedup_gate: GateRun, capsys: pytest.CaptureFixture[str]) -> None:
    from specgate.cli import main

    verdict_file = demo_speedup_gate.reports / "verdict.json"
    found = json.loads(verdict_file.read_text())["decidable"]
    assert found["text"].startswith("this probe decides a speed-up of ")
    assert main(["summary", str(verdict_file)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"**decidable**: {found['text']}" in lines


def test_the_summary_of_an_undecided_speedup_says_what_would_decide_it() -> None:
    """An interval that straddles the minimum: the summary's decidable line names the smallest
    speed-up decided and the passes or launches that would decide the measured one; a verdict
    with no speed-up interval has no such line."""
    from specgate.claims import result as claims
    from specgate.claims import verdict
    from specgate.cli import summary

    covered = drift.cover(_within(1.02, 0.02), _coverage(0.01), "speedup")
    found = decidable.decidable(covered, 1.0, passes=3)
    assert found is not None
    assert not found.decided
    claim = claims.failed("spec.speedup", "phase0", "m", observed=1.02, details={
        "speedup": covered.judged.to_json(), "decidable": found.to_json()})
    doc = verdict.build([claim], profile="p", drafter=None, outcome="failed")
    (line,) = [x for x in summary.render(doc).splitlines() if x.startswith("**decidable**")]
    assert line == f"**decidable**: {found.text()}"
    assert f"a speed-up of {found.above:.3f}× or more above 1" in line
    assert f"({found.launches_needed} in all)" in line
    bare = verdict.build([claims.passed("spec.acceptance", "phase0", "m")], profile="p",
                         drafter=None, outcome="passed")
    assert bare["decidable"] is None
    assert "decidable" not in summary.render(bare)


def test_a_matrix_verdict_gives_each_checkpoint_its_own_figures_and_none_to_the_matrix() -> None:
    """No one checkpoint's speed-up is a matrix's: each checkpoint's row carries its figures and
    decidable speed-up, the top carries none, and the summary shows each under its name."""
    from specgate.claims import verdict
    from specgate.cli import summary

    a, b = _speedup(1.2), _speedup(1.6)
    doc = verdict.build_matrix(
        [("a", a), ("b", b)], [], profile="p", outcome="passed",
        extra={"checkpoints": [{"checkpoint": "a", "outcome": "passed"},
                               {"checkpoint": "b", "outcome": "passed"},
                               {"checkpoint": "c", "outcome": "interrupted"}]})
    assert (doc["figures"], doc["latency"], doc["decidable"]) == ({}, None, None)
    rows = {row["checkpoint"]: row for row in doc["checkpoints"]}
    assert list(rows) == ["a", "b", "c"]
    assert rows["a"]["figures"]["speedup"]["value"] == pytest.approx(1.2)
    assert rows["b"]["figures"]["speedup"]["value"] == pytest.approx(1.6)
    assert (rows["a"]["decidable"], rows["b"]["decidable"]) == (
        a.details["decidable"], b.details["decidable"])
    assert (rows["c"]["figures"], rows["c"]["decidable"], rows["c"]["outcome"]) == (
        {}, None, "interrupted")
    text = summary.render(doc)
    assert "| `a` | speed-up | 1.200× |" in text, text
    assert "| `b` | speed-up | 1.600× |" in text, text
    for name, claim in (("a", a), ("b", b)):
        assert f"**`{name}` decidable**: {claim.details['decidable']['text']}" in text, text
    assert "\n| figure | value | interval |" not in text
