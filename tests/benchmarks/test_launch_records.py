"""benchmarks/real_sglang/launch_records.py against specgate's simulator: the targets launched in
turn, a target served with its drafter recording the verify cycle, and a deadline that no launch
outlives."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from benchmarks.real_sglang import launch_records, make_tiny

SIM = f"{sys.executable} -m specgate.testing.simulator"
FLAGS = ["--", "--attention-backend", "triton", "--dtype", "bfloat16", "--context-length", "2048"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny")
    assert make_tiny.main([str(out), "--no-tokenizer"]) == 0
    return out


def _run(tiny: Path, out: Path, *extra: str) -> dict:
    argv = [str(out), "--target", f"alone={tiny / 'target'},0.3",
            "--target", f"eagle3={tiny / 'target'},0.3,,{tiny / 'draft'}",
            "--requests", "3", "--tokens", "16", "--launcher", SIM, *extra, *FLAGS]
    assert launch_records.main(argv) == 0
    return json.loads(out.read_text())


@pytest.mark.slow
def test_targets_are_launched_in_turn_and_the_drafters_launches_keep_the_cycle(
        tiny: Path, tmp_path: Path) -> None:
    doc = _run(tiny, tmp_path / "records.json", "--launches", "2")
    alone, eagle3 = (doc["targets"][n]["launches"] for n in ("alone", "eagle3"))
    assert [r["launch"] for r in alone] == [r["launch"] for r in eagle3] == [0, 1]
    starts = sorted((r["started"], name) for name, runs in (("alone", alone), ("eagle3", eagle3))
                    for r in runs)
    assert [name for _, name in starts] == ["alone", "eagle3", "alone", "eagle3"]
    for record in alone + eagle3:
        assert "error" not in record, record
        assert record["launch_s"] >= record["ready_s"] > 0
        assert len(record["requests"]) == 3
    assert all("median_cycle_ms" in r and "median_cycle_ms" not in a
               for r, a in zip(eagle3, alone, strict=True))
    assert "spread_sd_ln" in doc["targets"]["alone"]
    assert "cycle_spread_sd_ln" in doc["targets"]["eagle3"]
    assert "stopped" not in doc


def test_no_launch_starts_that_would_end_after_the_deadline(tiny: Path, tmp_path: Path) -> None:
    deadline = time.time() + 3600
    doc = _run(tiny, tmp_path / "records.json", "--launches", "3", "--deadline", str(deadline),
               "--first-launch-s", "7200")
    assert all(not t["launches"] for t in doc["targets"].values())
    assert doc["stopped"] == ("launch 0 of alone would not end by the deadline (the longest "
                              "launch so far took 7200 s)")
    assert "finished" in doc  # the summary is written whatever stopped the run
