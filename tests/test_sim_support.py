"""The tests' check that a probe on the simulator was measured on the simulator's schedule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sim_support


def _truth_and_results(root: Path, timed_s: float) -> tuple[Path, Path]:
    truth, reports = root / "truth.jsonl", root / "reports"
    (reports / "live").mkdir(parents=True)
    record = {"rid": "r1", "stream": True, "outcome": "finished", "fault": "",
              "t_received": 10.0, "t_first_sent": 10.01, "t_final_sent": 10.21,
              "t_delivered": 10.21, "prompt_tokens": 8, "completion_tokens": 41,
              "first_message_tokens": 1, "messages": 41, "verify_ct": 0, "accepted_drafts": 0,
              "finish_reason": "length", "t_first_due": 10.01, "t_final_due": 10.21}
    truth.write_text(json.dumps({"launch": 0, "role": "baseline", "speed": 1.0, "spread": 0.0,
                                 "seed": None, "pid": 1, "t_started": 9.0, "t_ready": None})
                     + "\n" + json.dumps(record) + "\n")
    sample = {"request_id": "r1", "ttft_s": 0.02, "e2e_s": 0.02 + timed_s}
    (reports / "live" / "results.json").write_text(json.dumps(
        {"baseline": {"measurement": {"samples": [sample]}, "levels": {}}}))
    return reports, truth


@pytest.mark.parametrize(("timed_s", "held"), [(0.205, False), (0.195, False), (0.23, True),
                                               (0.17, True), (1.2, True)])
def test_a_request_timed_off_its_schedule_by_a_tenth_was_held_up(
        tmp_path: Path, timed_s: float, held: bool) -> None:
    reports, truth = _truth_and_results(tmp_path, timed_s)  # scheduled: 200 ms
    found = sim_support.held_up(reports, truth)
    assert bool(found) is held
    if held:
        assert found[0].startswith("request r1: decode timed over ")


def test_a_probe_held_up_every_time_fails_saying_so(tmp_path: Path) -> None:
    runs: list[Path] = []

    def probe(reports: Path, truth: Path) -> int:
        runs.append(reports)
        _truth_and_results(reports.parent / reports.name.replace("reports", "run"), 0.5)
        (reports / "live").mkdir(parents=True)
        target = reports.parent / reports.name.replace("reports", "run")
        (reports / "live" / "results.json").write_text(
            (target / "reports" / "live" / "results.json").read_text())
        truth.write_text((target / "truth.jsonl").read_text())
        return len(runs)

    with pytest.raises(AssertionError, match=r"held up the simulated servers in each of 3 "):
        sim_support.on_schedule(probe, tmp_path)
    assert len(runs) == 3


def test_a_probe_on_schedule_is_run_once(tmp_path: Path) -> None:
    def probe(reports: Path, truth: Path) -> str:
        made_reports, made_truth = _truth_and_results(tmp_path / "made", 0.2)
        (reports / "live").mkdir(parents=True)
        (reports / "live" / "results.json").write_text(
            (made_reports / "live" / "results.json").read_text())
        truth.write_text(made_truth.read_text())
        return "ran"

    result, reports, truth = sim_support.on_schedule(probe, tmp_path)
    assert (result, reports.name, truth.name) == ("ran", "reports-0", "truth-0.jsonl")
