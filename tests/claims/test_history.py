"""Run history and the regression claims that compare against the last passing run."""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from specgate.claims import regress, verdict
from specgate.claims import result as claims
from specgate.claims.result import Status
from specgate.core.profile import Profile, parse_profile
from specgate.io import history as history_store
from specgate.io import jsonl
from specgate.io.history import Figure, RunRecord
from specgate.io.identity import drafter_key
from specgate.report import history, runinfo
from specgate.results import drift, stats

T0 = dt.datetime(2026, 11, 1, 12, 0, tzinfo=dt.UTC)


def _run(profile: str, outcome: str, accept: float | None, tps: float | None = None,
         *, hour: int = 0, ci: float = 0.0) -> RunRecord:
    figures: dict[str, Figure] = {}
    if accept is not None:
        figures["accept_len"] = Figure(accept, accept - ci, accept + ci, "tokens/step")
    if tps is not None:
        figures["spec_tps"] = Figure(tps, tps - ci, tps + ci, "tok/s")
    when = (T0 + dt.timedelta(hours=hour)).isoformat(timespec="seconds")
    return RunRecord(profile, "/d/drafter", outcome, when, figures)


def test_records_round_trip_through_the_file(tmp_path: Path) -> None:
    path = history_store.history_file(tmp_path)
    first = history_store.record_run(path, profile="demo", drafter="/d/a", outcome="passed",
                               figures={"accept_len": Figure(2.6, 2.5, 2.7, "tokens/step")},
                               when=T0)
    second = history_store.record_run(path, profile="demo", drafter=None, outcome="failed",
                                figures={}, when=T0 + dt.timedelta(hours=1))
    assert history_store.read_history(path) == [first, second]
    assert path == tmp_path / "history" / "verdicts.jsonl"


def test_torn_and_foreign_lines_are_skipped(tmp_path: Path) -> None:
    path = history_store.history_file(tmp_path)
    kept = history_store.record_run(path, profile="demo", drafter=None, outcome="passed",
                                    figures={})
    with open(path, "a", encoding="utf-8") as fh:
        fh.write('{"profile": "demo", "outc\n[1, 2]\n{"no": "profile"}\n')
    with pytest.warns(jsonl.SkippedLine) as caught:  # the torn line, naming file and line
        assert history_store.read_history(path) == [kept]
    assert [str(w.message).split(": ", 1)[0] for w in caught] == [f"{path}:2"]
    assert history_store.read_history(tmp_path / "missing.jsonl") == []


def test_a_torn_non_utf8_line_is_skipped_with_a_warning(tmp_path: Path) -> None:
    """A run killed mid-write can leave half a multi-byte character: the line is skipped with a
    warning naming the file and line (no UnicodeDecodeError, and regress.* still judges)."""
    path = history_store.history_file(tmp_path)
    first = history_store.record_run(path, profile="demo", drafter=None, outcome="passed",
                                     figures={}, when=T0)
    with open(path, "ab") as fh:
        fh.write('{"profile": "dé'.encode()[:-1] + b"\n")
    last = history_store.record_run(path, profile="demo", drafter=None, outcome="failed",
                                    figures={}, when=T0 + dt.timedelta(hours=1))
    with pytest.warns(jsonl.SkippedLine, match="not UTF-8") as caught:
        assert history_store.read_history(path) == [first, last]
    assert str(caught[0].message).startswith(f"{path}:2: ")


def test_last_passing_is_the_latest_passed_run_of_that_profile() -> None:
    runs = [_run("demo", "passed", 2.4, hour=0), _run("demo", "passed", 2.6, hour=1),
            _run("demo", "failed", 1.2, hour=2), _run("other", "passed", 3.0, hour=3)]
    found = history_store.last_passing("demo", runs)
    assert found is runs[1]
    assert history_store.last_passing("nobody", runs) is None


def test_no_history_is_skipped_with_the_reason() -> None:
    result = regress.judge_regression("regress.accept_len", {"accept_len": Figure(2.0)}, [],
                                      "demo")
    assert (result.status, result.reason) == (Status.SKIPPED, "no_reference")


def test_nothing_measured_now_is_skipped() -> None:
    result = regress.judge_regression("regress.tps", {}, [_run("demo", "passed", 2.6, 100.0)],
                                      "demo")
    assert (result.status, result.reason) == (Status.SKIPPED, "not_measured")
    assert result.details["figure"] == "spec_tps"


def test_reference_without_the_figure_is_skipped() -> None:
    result = regress.judge_regression("regress.tps", {"spec_tps": Figure(90.0)},
                                      [_run("demo", "passed", 2.6, None)], "demo")
    assert result.status is Status.SKIPPED


def test_a_drop_beyond_the_noise_fails_with_both_figures() -> None:
    past = [_run("demo", "passed", 2.60, ci=0.04)]
    now = {"accept_len": Figure(2.31, 2.26, 2.36, "tokens/step")}
    result = regress.judge_regression("regress.accept_len", now, past, "demo")
    assert result.status is Status.FAILED
    assert result.id == "regress.accept_len"
    assert result.phase == "phase0"
    assert result.details["current"] == {"value": 2.31, "ci": [2.26, 2.36], "unit": "tokens/step"}
    assert result.details["reference"]["value"] == pytest.approx(2.60)
    assert result.details["reference"]["ci"] == pytest.approx([2.56, 2.64])
    assert result.observed == pytest.approx(2.31)
    assert result.details["noise"] == pytest.approx(0.052)  # 2 % of 2.6 beats both CIs
    assert result.unit == "tokens/step"


def test_a_drop_within_the_noise_passes() -> None:
    past = [_run("demo", "passed", 2.60, 110.0, ci=0.1)]
    now = {"accept_len": Figure(2.52, 2.45, 2.59), "spec_tps": Figure(104.0, 96.0, 112.0)}
    assert regress.judge_regression("regress.accept_len", now, past, "demo").status is (
        Status.PASSED)
    assert regress.judge_regression("regress.tps", now, past, "demo").status is Status.PASSED


def test_the_reference_drafter_is_named_by_its_bytes() -> None:
    """regress.* says which bytes passed before, and when they are this run's own bytes."""
    import dataclasses

    past = [dataclasses.replace(_run("demo", "passed", 2.60, ci=0.04), drafter_digest="ab" * 32)]
    now = {"accept_len": Figure(2.59, 2.55, 2.63, "tokens/step")}
    other = regress.judge_regression("regress.accept_len", now, past, "demo",
                                     drafter_digest="cd" * 32)
    assert "drafter BLAKE3 abababababababab…" in other.message
    assert "same drafter bytes" not in other.message
    assert other.details["reference_drafter_digest"] == "ab" * 32
    assert other.details["same_drafter_bytes"] is False
    same = regress.judge_regression("regress.accept_len", now, past, "demo",
                                    drafter_digest="ab" * 32)
    assert "the same drafter bytes as this run's" in same.message
    assert same.details["same_drafter_bytes"] is True
    older = regress.judge_regression("regress.accept_len", now, [_run("demo", "passed", 2.6)],
                                     "demo", drafter_digest="ab" * 32)
    assert "drafter /d/drafter, its bytes not recorded" in older.message
    assert older.details["same_drafter_bytes"] is False


def _positions(*values: tuple[float, float]) -> dict[str, Figure]:
    return {f"accept_pos{k}": Figure(v, v - hw, v + hw) for k, (v, hw) in enumerate(values, 1)}


def _position_run(*values: tuple[float, float], outcome: str = "passed") -> RunRecord:
    when = T0.isoformat(timespec="seconds")
    return RunRecord("demo", "/d/drafter", outcome, when, _positions(*values),
                     drafter_digest="ab" * 32)


def test_a_drop_at_one_draft_position_fails_naming_it() -> None:
    """The second position falls by more than its noise while the first holds: the claim names
    position 2 only."""
    past = [_position_run((0.80, 0.02), (0.60, 0.03), (0.40, 0.03))]
    now = _positions((0.80, 0.02), (0.45, 0.03), (0.39, 0.03))
    result = regress.judge_position_regression(now, past, "demo", confidence=0.95)
    assert result.status is Status.FAILED
    assert "acceptance dropped at draft 2 by 0.150" in result.message
    assert "draft 1 by" not in result.message
    assert "draft 3 by" not in result.message
    assert "expected" not in result.message
    assert result.expected.endswith("at draft 2")
    rows = result.details["positions"]
    # the noise of a difference: both half-widths in quadrature, at the Bonferroni level for 3
    widen = stats.t_quantile(1 - 0.05 / 6, math.inf) / stats.t_quantile(0.975, math.inf)
    assert rows[1]["noise"] == pytest.approx(math.hypot(0.03, 0.03) * widen)
    assert result.details["bonferroni_positions"] == 3


def test_drops_within_the_noise_of_both_runs_pass() -> None:
    past = [_position_run((0.80, 0.04), (0.60, 0.05))]
    now = _positions((0.75, 0.04), (0.54, 0.05))
    result = regress.judge_position_regression(now, past, "demo", confidence=0.95,
                                               drafter_digest="cd" * 32)
    assert result.status is Status.PASSED, result.message
    assert "drafter BLAKE3 abababababababab…" in result.message
    # One more position to judge raises the bar (Bonferroni): a drop that passes over two
    # positions is judged against a wider noise over five.
    single = regress.judge_position_regression(
        _positions((0.75, 0.04)), [_position_run((0.80, 0.04))], "demo", confidence=0.95)
    assert single.details["positions"][0]["noise"] < result.details["positions"][0]["noise"]


def test_positions_without_history_or_interval_are_skipped_with_why() -> None:
    now = _positions((0.8, 0.02))
    none = regress.judge_position_regression({}, [_position_run((0.8, 0.02))], "demo",
                                             confidence=0.95)
    assert none.status is Status.SKIPPED
    assert none.reason == "not_measured"
    first = regress.judge_position_regression(now, [], "demo", confidence=0.95)
    assert first.status is Status.SKIPPED
    assert first.reason == "no_reference"
    failed_before = regress.judge_position_regression(
        now, [_position_run((0.9, 0.01), outcome="failed")], "demo", confidence=0.95)
    assert failed_before.reason == "no_reference"
    unmeasured = {"accept_pos1": Figure(0.5)}
    flat = regress.judge_position_regression(unmeasured, [_position_run((0.9, 0.0))], "demo",
                                             confidence=0.95)
    assert flat.status is Status.SKIPPED
    assert flat.reason == "no_interval"


def test_a_position_never_accepted_does_not_hide_a_drop_at_the_others() -> None:
    """Draft 3 accepted in no pass of either run (0 ± 0): it is judged with no noise, and the
    drops at drafts 1 and 2 fail the claim; a position without an interval is only left out."""
    past = [_position_run((0.80, 0.02), (0.50, 0.03), (0.0, 0.0))]
    now = _positions((0.20, 0.02), (0.10, 0.03), (0.0, 0.0))
    result = regress.judge_position_regression(now, past, "demo", confidence=0.95)
    assert result.status is Status.FAILED
    assert "draft 1 by 0.600" in result.message
    assert "draft 2 by 0.400" in result.message
    blind = {**now, "accept_pos3": Figure(0.0)}
    left_out = regress.judge_position_regression(blind, past, "demo", confidence=0.95)
    assert left_out.status is Status.FAILED
    assert "draft 3 not judged: no interval" in left_out.message
    assert left_out.details["unjudged_positions"] == [3]


def test_per_position_figures_reach_the_history() -> None:
    summary = {"mean": 0.8, "ci_low": 0.78, "ci_high": 0.82}
    results = [claims.passed("spec.accept_len", "phase0", "ok", observed=2.6,
                             details={"accept_pos": [summary, {**summary, "mean": 0.6}]})]
    found = history.figures_from_claims(results)
    assert found["accept_pos1"] == Figure(0.8, 0.78, 0.82)
    assert found["accept_pos2"].value == 0.6


def test_unknown_regression_id_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown regression claim"):
        regress.judge_regression("regress.vibes", {}, [], "demo")


values = st.floats(min_value=0.1, max_value=1e4, allow_nan=False, allow_infinity=False)
noises = st.floats(min_value=0.0, max_value=50.0, allow_nan=False, allow_infinity=False)


@given(before=values, after=values, ci_before=noises, ci_after=noises)
def test_an_improvement_never_fails(before: float, after: float, ci_before: float,
                                    ci_after: float) -> None:
    assume(after >= before)
    past = [RunRecord("p", None, "passed", "t",
                      {"accept_len": Figure(before, before - ci_before, before + ci_before)})]
    now = {"accept_len": Figure(after, after - ci_after, after + ci_after)}
    assert regress.judge_regression("regress.accept_len", now, past, "p").status is (
        Status.PASSED)


@given(before=values, after=values, lower=st.floats(min_value=0.0, max_value=1.0),
       ci=noises)
def test_failing_is_monotone_in_the_current_value(before: float, after: float, lower: float,
                                                  ci: float) -> None:
    """If a value fails, any lower value (with the same noise) fails too."""
    past = [RunRecord("p", None, "passed", "t",
                      {"spec_tps": Figure(before, before - ci, before + ci)})]

    def status(value: float) -> Status:
        now = {"spec_tps": Figure(value, value - ci, value + ci)}
        return regress.judge_regression("regress.tps", now, past, "p").status

    if status(after) is Status.FAILED:
        assert status(after * lower) is Status.FAILED


@given(before=values, drop_in_noises=st.floats(min_value=1.01, max_value=100.0), ci=noises)
def test_a_drop_of_more_than_the_larger_half_width_fails(before: float,
                                                         drop_in_noises: float,
                                                         ci: float) -> None:
    noise = max(ci, before * regress.DEFAULT_MIN_REL_NOISE)
    after = before - drop_in_noises * noise
    past = [RunRecord("p", None, "passed", "t",
                      {"accept_len": Figure(before, before - ci, before + ci)})]
    now = {"accept_len": Figure(after)}
    assert regress.judge_regression("regress.accept_len", now, past, "p").status is (
        Status.FAILED)


def test_figures_come_from_the_summaries_in_the_claims_details() -> None:
    def summary(mean: float, low: float, high: float) -> dict[str, object]:
        return {"n": 6, "mean": mean, "std": 0.1, "cv": 0.01, "ci_low": low, "ci_high": high,
                "confidence": 0.95, "df": 5.0}

    results = [
        claims.passed("spec.accept_len", "phase0", "ok", observed=2.6,
                      details={"accept_len": summary(2.613, 2.55, 2.67), "per_category": {}}),
        claims.failed("perf.baseline_tps", "phase0", "slow", observed=80.5,
                      details={"tps": summary(80.48, 79.0, 82.0)}),
        claims.passed("spec.speedup", "phase0", "ok", observed=1.31,
                      details={"speedup": {**summary(1.31, 1.2, 1.4), "ci_low": None},
                               "spec_tps": summary(105.2, 101.0, 109.4)}),
        claims.broken("vocab.d2t_match", "phase0", "no reference"),
    ]
    figures = history.figures_from_claims(results)
    assert figures["accept_len"] == Figure(2.613, 2.55, 2.67, "tokens/verify")
    assert figures["baseline_tps"] == Figure(80.48, 79.0, 82.0, "tok/s")
    assert figures["speedup"] == Figure(1.31, None, None, "x")
    assert figures["spec_tps"] == Figure(105.2, 101.0, 109.4, "tok/s")


def test_observed_values_stand_in_when_details_have_no_summary() -> None:
    results = [claims.passed("spec.accept_len", "phase0", "ok", observed=2.61,
                             details={"ci": [2.55, 2.67]}),
               claims.passed("spec.speedup", "phase0", "ok", observed=1.2)]
    figures = history.figures_from_claims(results)
    assert figures == {"accept_len": Figure(2.61, 2.55, 2.67, "tokens/verify"),
                       "speedup": Figure(1.2, None, None, "x")}


def test_claims_without_numbers_give_no_figures() -> None:
    results = [claims.broken("spec.accept_len", "phase0", "server died"),
               claims.passed("spec.speedup", "phase0", "ok", observed=float("nan"))]
    assert history.figures_from_claims(results) == {}


def _profile(tolerance: float | None = None) -> Profile:
    raw: dict[str, object] = {"name": "demo", "thresholds": {}}
    if tolerance is not None:
        raw["thresholds"] = {"regression_tolerance": tolerance}
    return parse_profile(raw)


def test_append_run_records_the_verdict_and_its_figures(tmp_path: Path) -> None:
    results = [claims.passed("spec.accept_len", "phase0", "ok", observed=2.6,
                             details={"accept_len": {"mean": 2.6, "ci_low": 2.5,
                                                     "ci_high": 2.7}})]
    doc = verdict.build(results, profile="demo", drafter="/d/k25", outcome="passed")
    doc["identity"] = {"drafter": {"path": "/d/k25", "weights_blake3": "ef" * 32,
                                   "config_sha256": "01" * 32}}
    record = history.append_run(tmp_path, _profile(), doc)
    assert history_store.read_history(history_store.history_file(tmp_path)) == [record]
    assert record.drafter == "/d/k25"
    # The drafter is its weights and its config: another config.json is another drafter.
    assert record.drafter_digest == drafter_key("ef" * 32, "01" * 32)
    assert record.drafter_digest != drafter_key("ef" * 32, "02" * 32)
    assert record.figures["accept_len"] == Figure(2.6, 2.5, 2.7, "tokens/verify")


def test_a_run_is_recorded_once_and_from_its_own_folder_too(tmp_path: Path) -> None:
    """The same run appended twice (its run id in the verdict) is one line; a run folder's
    history is its reports folder's."""
    from specgate.io import runs

    run = runs.new_run(tmp_path)
    results = [claims.passed("spec.accept_len", "phase0", "ok", observed=2.6)]
    doc = verdict.build(results, profile="demo", drafter="/d/k25", outcome="passed",
                        extra={"run": {"id": run.id, "folder": run.relative}})
    first = history.append_run(run.path, _profile(), doc)
    again = history.append_run(tmp_path, _profile(), doc)
    other = history.append_run(tmp_path, _profile(), {**doc, "run": {"id": "another"}})
    assert history_store.history_file(run.path) == history_store.history_file(tmp_path)
    assert again == first
    assert first.run == run.id
    assert history_store.read_history(history_store.history_file(tmp_path)) == [first, other]


def test_check_regression_reads_the_history_and_the_profile_tolerance(tmp_path: Path) -> None:
    history_store.record_run(history_store.history_file(tmp_path), profile="demo", drafter=None,
                       outcome="passed", figures={"accept_len": Figure(2.6)})
    now = {"accept_len": Figure(2.4)}
    strict = regress.check_regression("regress.accept_len", _profile(), tmp_path, now)
    loose = regress.check_regression("regress.accept_len", _profile(0.1), tmp_path, now)
    assert strict.status is Status.FAILED
    assert loose.status is Status.PASSED


def test_figure_of_a_summary_keeps_its_interval() -> None:
    summary = stats.Summary(n=3, mean=82.0, std=0.5, cv=0.006, ci_low=80.8, ci_high=83.2,
                            confidence=0.95)
    assert Figure.of(summary, "tok/s") == Figure(82.0, 80.8, 83.2, "tok/s")
    one = stats.Summary(n=1, mean=82.0, std=float("nan"), cv=float("nan"),
                        ci_low=float("nan"), ci_high=float("nan"), confidence=0.95)
    assert Figure.of(one).half_width == 0.0


def test_an_offline_pass_does_not_hide_the_last_measured_pass():
    """Full probe, then `-m "probe and not live"` (passes, measures nothing): the regression
    claim must still compare with the full run."""
    from specgate.claims.regress import judge_regression as regression_claim
    from specgate.io.history import Figure, RunRecord

    measured = RunRecord(profile="p", drafter="d", outcome="passed", time="t1",
                         figures={"accept_len": Figure(2.5, 2.45, 2.55, "tokens/verify")})
    offline = RunRecord(profile="p", drafter="d", outcome="passed", time="t2", figures={})
    result = regression_claim("regress.accept_len",
                              {"accept_len": Figure(2.0, 1.95, 2.05, "tokens/verify")},
                              [measured, offline], "p")
    assert result.status.value == "failed"
    assert result.details["reference_time"] == "t1"


# -- what a run leaves in the history, and what regress.* reads back ------------------------------

def _summary(mean: float, half: float) -> dict[str, object]:
    return {"n": 6, "mean": mean, "std": half, "cv": 0.01, "ci_low": mean - half,
            "ci_high": mean + half, "confidence": 0.95, "df": 5.0}


def _finish(reports: Path, *, outcome: str, accept: float, profile: str = "demo",
            complete: bool = True) -> None:
    """The end of a run as the plugin does it: the verdict document, then runinfo.finish."""
    make = claims.passed if outcome == "passed" else claims.failed
    results = [make("spec.accept_len", "phase0", "measured", observed=accept,
                    details={"accept_len": _summary(accept, 0.01)})]
    doc = verdict.build(results, profile=profile, drafter="/d/drafter", outcome=outcome,
                        extra={"complete": complete})
    assert runinfo.finish(parse_profile({"name": profile}), reports, doc, None) == []


def test_only_complete_runs_enter_the_history(tmp_path: Path) -> None:
    _finish(tmp_path, outcome="passed", accept=2.6)
    _finish(tmp_path, outcome="passed", accept=1.2, complete=False)  # claims never reported
    _finish(tmp_path, outcome="failed", accept=1.5)
    records = history_store.read_history(history_store.history_file(tmp_path))
    assert [(r.outcome, r.figures["accept_len"].value) for r in records] == [
        ("passed", 2.6), ("failed", 1.5)]


def test_a_run_without_a_profile_leaves_no_history(tmp_path: Path) -> None:
    results = [claims.passed("spec.accept_len", "phase0", "ok", observed=2.0)]
    doc = verdict.build(results, profile="<no profile>", drafter=None, outcome="passed",
                        extra={"complete": True})
    assert runinfo.finish(None, tmp_path, doc, None) == []
    assert not history_store.history_file(tmp_path).exists()


def test_a_record_holds_the_verdicts_outcome_and_every_key_figure(tmp_path: Path) -> None:
    results = [
        claims.passed("spec.accept_len", "phase0", "ok", observed=2.5,
                      details={"accept_len": _summary(2.5, 0.25)}),
        claims.passed("perf.baseline_tps", "phase0", "ok", observed=82.0,
                      details={"tps": _summary(82.0, 1.0)}),
        claims.failed("spec.speedup", "phase0", "slower", observed=0.75,
                      details={"speedup": _summary(0.75, 0.125),
                               "spec_tps": _summary(64.0, 2.0)}),
        claims.failed("vocab.d2t_match", "phase0", "252 of 32000", observed=252),
    ]
    doc = verdict.build(results, profile="demo", drafter="/d/k25", outcome="failed",
                        extra={"complete": True})
    record = history.append_run(tmp_path, _profile(), doc)
    assert (record.profile, record.drafter, record.outcome) == ("demo", "/d/k25", "failed")
    assert record.figures == {
        "accept_len": Figure(2.5, 2.25, 2.75, "tokens/verify"),
        "baseline_tps": Figure(82.0, 81.0, 83.0, "tok/s"),
        "speedup": Figure(0.75, 0.625, 0.875, "x"),
        "spec_tps": Figure(64.0, 62.0, 66.0, "tok/s"),
    }
    assert history_store.read_history(history_store.history_file(tmp_path)) == [record]


def test_regress_reads_the_last_passing_run_of_this_profile(tmp_path: Path) -> None:
    _finish(tmp_path, outcome="passed", accept=2.4)
    _finish(tmp_path, outcome="passed", accept=2.6)  # the reference
    _finish(tmp_path, outcome="failed", accept=1.5)  # failed since: not a reference
    _finish(tmp_path, outcome="passed", accept=1.0, profile="other")  # another deployment
    _finish(tmp_path, outcome="passed", accept=1.1, complete=False)  # never finished
    now = {"accept_len": Figure(2.3, 2.29, 2.31, "tokens/verify")}
    result = regress.check_regression("regress.accept_len", _profile(), tmp_path, now)
    assert result.details["reference"]["value"] == 2.6
    assert result.status is Status.FAILED  # 0.3 below 2.6 ± 0.052
    other = regress.check_regression("regress.accept_len", parse_profile({"name": "other"}),
                                     tmp_path, now)
    assert other.details["reference"]["value"] == 1.0
    assert other.status is Status.PASSED


def test_regress_compares_the_speculative_servers_figures(tmp_path: Path) -> None:
    from specgate.results.bench import RequestSample, Sampling, build_measurement
    from specgate.results.live import ConfigRun, LiveResults
    from specgate.results.prompts import template_named

    def measured(config: str, tps: float, verify: int | None) -> object:
        rows = [RequestSample(1, f"p{i}", "chat", 10, 101, verify, 0.01, 0.01 + 100 / tps,
                              None, "stop", 10) for i in range(4)]
        return build_measurement(config=config, url="x", template=template_named("plain", "t"),
                                 sampling=Sampling(repeats=1, max_repeats=1), samples=rows)

    history_store.record_run(history_store.history_file(tmp_path), profile="demo",
                             drafter=None, outcome="passed",
                             figures={"accept_len": Figure(2.0), "spec_tps": Figure(150.0)})
    live = LiveResults("demo", False, ConfigRun("baseline", measurement=measured(
        "baseline", 100.0, None)), ConfigRun("speculative", measurement=measured(
            "speculative", 150.0, 40)))
    tps = regress.regression_claim("regress.tps", _profile(), live, tmp_path)
    accept = regress.regression_claim("regress.accept_len", _profile(), live, tmp_path)
    assert (tps.observed, tps.status) == (pytest.approx(150.0), Status.PASSED)
    assert (accept.observed, accept.status) == (pytest.approx(101 / 40), Status.PASSED)


def test_regress_tps_allows_the_drop_a_new_launch_alone_could_show() -> None:
    past = [_run("p", "passed", 2.6, 100.0)]
    now = {"spec_tps": Figure(88.0, unit="tok/s")}
    assert regress.judge_regression("regress.tps", now, past, "p").status is Status.FAILED
    coverage = drift.Coverage("ab", drift.fixed("tps", 0.1), drift.fixed("cycle_ms", 0.1))
    launch = regress.launch_noise(coverage, 0.95)
    # Two launches of the speculative server: ln of their ratio has sd √2 × 10 %.
    assert launch.rel == pytest.approx(1 - math.exp(-1.959964 * math.sqrt(2) * 0.1), rel=1e-5)
    result = regress.judge_regression("regress.tps", now, past, "p", launch=launch)
    assert result.status is Status.PASSED
    assert "the noise includes the launch-to-launch spread of two launches, 14.1 %" in (
        result.message)
    assert result.details["launch_spread"]["included"] is True
    beyond = regress.judge_regression("regress.tps", {"spec_tps": Figure(70.0)}, past, "p",
                                      launch=launch)
    assert beyond.status is Status.FAILED
    assert "launch-to-launch spread" in beyond.message


def test_figures_judged_at_another_concurrency_compare_only_with_that_concurrency() -> None:
    at4 = [claims.passed("spec.accept_len", "phase0", "ok", observed=2.6,
                         details={"ci": [2.55, 2.65], "concurrency": 4}),
           claims.passed("spec.accept_len@c16", "phase0", "ok", observed=2.0,
                         details={"concurrency": 16})]  # another level's claim: not a figure
    assert history.figures_from_claims(at4) == {
        "accept_len@c4": Figure(2.6, 2.55, 2.65, "tokens/verify")}
    one_stream = _run("demo", "passed", 2.60, ci=0.01)
    now = {"accept_len": Figure(2.0, 1.99, 2.01)}
    # A run at 4 in flight has no reference among single-stream runs, and the reverse.
    at_four = regress.judge_regression("regress.accept_len", now, [one_stream], "demo",
                                       concurrency=4)
    assert at_four.status is Status.SKIPPED
    assert "accept length at 4 in flight" in at_four.message
    four = RunRecord("demo", "/d", "passed", T0.isoformat(),
                     {"accept_len@c4": Figure(2.6, 2.59, 2.61)})
    assert regress.judge_regression("regress.accept_len", now, [four], "demo").status is (
        Status.SKIPPED)
    assert regress.judge_regression("regress.accept_len", now, [four], "demo",
                                    concurrency=4).status is Status.FAILED


def test_the_live_claim_reads_this_runs_positions_and_names_its_drafter(tmp_path: Path) -> None:
    """regress.accept_pos from a live session: the speculative server's histograms at the gate's
    level, against the history, naming this run's drafter by its bytes."""
    import dataclasses as dc

    from ckpt_support import tiny_drafter

    from specgate.io.identity import drafter_digest
    from specgate.results.bench import RequestSample, Sampling, build_measurement
    from specgate.results.live import ConfigRun, LiveResults
    from specgate.results.prompts import template_named

    drafter = tiny_drafter(tmp_path / "drafter")
    profile = parse_profile({"name": "demo", "drafter": {"path": str(drafter)}})
    mine = drafter_digest(drafter)
    assert mine is not None
    samples = [RequestSample(1, f"p{i}", "c", 5, 20, 10, 0.01, 0.2, None, "stop", 10,
                             drafts_histogram=(6 + i % 2, 3, 1)) for i in range(6)]
    spec = build_measurement(config="speculative", url="u",
                             template=template_named("plain", "t"), sampling=Sampling(),
                             samples=samples, server_spec={"speculative_num_steps": 2})
    live = LiveResults("demo", False, ConfigRun("baseline"),
                       ConfigRun("speculative", measurement=spec))
    history_store.record_run(history_store.history_file(tmp_path), profile="demo",
                             drafter=str(drafter), outcome="passed",
                             figures=_positions((0.9, 0.01), (0.6, 0.01)),
                             drafter_digest=mine)
    result = regress.position_regression_claim(profile, live, tmp_path)
    assert result.status is Status.FAILED, result.message
    assert "acceptance dropped at draft 1" in result.message
    assert result.details["same_drafter_bytes"] is True
    assert result.details["drafter_digest"] == mine
    assert [r["position"] for r in result.details["positions"]] == [1, 2]
    unknown = dc.replace(history_store.read_history(history_store.history_file(tmp_path))[0],
                         drafter_digest=None)
    neither = regress.judge_position_regression(
        {"accept_pos1": Figure(0.9, 0.89, 0.91)}, [unknown], "demo", confidence=0.95)
    assert neither.details["same_drafter_bytes"] is False
