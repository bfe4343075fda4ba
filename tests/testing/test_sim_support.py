"""The tests' check that a probe on the simulator was measured on the simulator's schedule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sim_support


def _truth_and_results(root: Path, timed_s: float | list[float]) -> tuple[Path, Path]:
    """Ten requests each scheduled over 200 ms of decode, timed by the client over `timed_s`
    (one figure for all, or one each)."""
    timed = timed_s if isinstance(timed_s, list) else [timed_s] * 10
    truth, reports = root / "truth.jsonl", root / "reports"
    (reports / "live").mkdir(parents=True)
    lines = [json.dumps({"launch": 0, "role": "baseline", "speed": 1.0, "spread": 0.0,
                         "seed": None, "pid": 1, "t_started": 9.0, "t_ready": None})]
    samples = []
    for i, window in enumerate(timed):
        t0 = 10.0 + i
        lines.append(json.dumps({
            "rid": f"r{i}", "stream": True, "outcome": "finished", "fault": "",
            "t_received": t0, "t_first_sent": t0 + 0.01, "t_final_sent": t0 + 0.21,
            "t_delivered": t0 + 0.21, "prompt_tokens": 8, "completion_tokens": 41,
            "first_message_tokens": 1, "messages": 41, "verify_ct": 0, "accepted_drafts": 0,
            "finish_reason": "length", "t_first_due": t0 + 0.01, "t_final_due": t0 + 0.21}))
        samples.append({"request_id": f"r{i}", "ttft_s": 0.02, "e2e_s": 0.02 + window})
    truth.write_text("\n".join(lines) + "\n")
    (reports / "live" / "results.json").write_text(json.dumps(
        {"baseline": {"measurement": {"samples": samples}, "levels": {}}}))
    return reports, truth


@pytest.mark.parametrize(("timed_s", "held"), [
    (0.205, False),  # every request 2.5 % long: a busy machine
    (0.192, False),  # 4 % short
    ([0.261] + [0.2] * 9, False),  # one request 61 ms late among ten: 3 % of the whole
    (0.22, True),  # every request 10 % long
    ([1.2] + [0.2] * 9, True),  # a stall of a second in one request
])
def test_a_measurement_timed_off_its_schedule_by_a_twentieth_was_held_up(
        tmp_path: Path, timed_s: float | list[float], held: bool) -> None:
    reports, truth = _truth_and_results(tmp_path, timed_s)  # scheduled: 10 × 200 ms
    found = sim_support.held_up(reports, truth)
    assert bool(found) is held
    if held:
        assert found[0].startswith("10 requests timed ")


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
