"""Tests for specgate.io.launch_log: the log of measured launches the spread is learned from."""

import pytest

from specgate.io import jsonl, launch_log, runs
from specgate.io.launch_log import LaunchRecord


def _record(fp="fp", value=6.2, **kw):
    return LaunchRecord(fp, "dep", "baseline", "2026-12-01T00:00:00+00:00",
                        figures={"tps": (value, 0.01)}, **kw)


def test_launches_round_trip_in_order(tmp_path):
    path = launch_log.log_file(tmp_path)
    first, second = _record(run="a"), _record("other", 6.4, design="aba", run="b")
    launch_log.append(path, first)
    launch_log.append(path, second)
    assert launch_log.read(path) == [first, second]
    assert path == tmp_path / "history" / "launches.jsonl"
    assert launch_log.read(tmp_path / "missing.jsonl") == []


def test_every_run_folder_adds_to_its_reports_folders_log(tmp_path):
    run = runs.new_run(tmp_path)
    assert launch_log.log_file(run.path) == tmp_path / "history" / "launches.jsonl"


def test_a_torn_line_is_skipped_with_a_warning_and_a_foreign_one_quietly(tmp_path):
    path = launch_log.log_file(tmp_path)
    launch_log.append(path, _record())
    with open(path, "a", encoding="utf-8") as fh:
        fh.write('{"fingerprint": "fp", "depl\n{"no": "fingerprint"}\n')
    launch_log.append(path, _record(value=6.3))
    with pytest.warns(jsonl.SkippedLine):
        found = launch_log.read(path)
    assert [r.log_of("tps") for r in found] == [6.2, 6.3]
    assert found[0].log_of("cycle_ms") is None


def test_figures_that_are_not_finite_are_left_out():
    back = LaunchRecord.from_json({"fingerprint": "f", "deployment": "d", "config": "baseline",
                                   "figures": {"tps": [float("nan"), 0.1], "x": [1.0, 0.0]}})
    assert dict(back.figures) == {"x": (1.0, 0.0)}
