"""benchmarks/real_sglang/suite.py: what a result keeps of each run lands beside the summary."""

from __future__ import annotations

import json
import tarfile
import time
from pathlib import Path

from script_support import load_script


def test_each_run_made_leaves_its_verdict_and_live_results_beside_the_summary(
        tmp_path: Path) -> None:
    suite = load_script("suite")
    work, out = tmp_path / "work", tmp_path / "out"
    for run, outcome in (("a_launch", "failed"), ("c_port_taken", "error"),
                         ("c_old", "passed")):  # c_old: an earlier invocation's run
        reports = work / "runs" / run / "reports"
        (reports / "live").mkdir(parents=True)
        (reports / "verdict.json").write_text(json.dumps({"outcome": outcome}))
        if run != "c_port_taken":  # a run that broke before any live session
            (reports / "live" / "results.json").write_text(json.dumps({"run": run}))
    ctx = suite.Ctx(work=work, out=out, tiny=work / "tiny", root=tmp_path, python="python3",
                    launcher=["python3"], sim=True, deadline=time.time() + 60)
    ctx.runs = [{"name": "a_launch"}, {"name": "c_port_taken"},
                {"name": "c_kill_launched", "skipped": "skipped: 5 s left"}]
    out.mkdir()
    suite.archive(ctx)
    assert sorted(p.name for p in (out / "verdicts").iterdir()) == ["a_launch.json",
                                                                    "c_port_taken.json"]
    assert json.loads((out / "verdicts" / "c_port_taken.json").read_text()) == {
        "outcome": "error"}
    assert [p.name for p in (out / "live").iterdir()] == ["a_launch.json"]
    with tarfile.open(out / "runs.tar.gz") as tar:  # and every file of every run, packed
        assert "runs/c_old/reports/verdict.json" in tar.getnames()


def test_a_signal_fault_run_sends_its_signal_under_its_own_name() -> None:
    suite = load_script("suite")
    calls: list[tuple[str, int]] = []

    def fault(ctx: object, name: str, sig: int) -> dict[str, str]:
        calls.append((name, sig))
        return {"name": name}

    name, seconds, servers, run = suite.signalled("c_x", 5, suite.NONE, fault, 15)
    assert (name, seconds, servers) == ("c_x", 5, suite.NONE)
    assert run(None) == {"name": "c_x"}
    assert calls == [("c_x", 15)]
    assert len({n for n, *_ in suite.RUNS}) == len(suite.RUNS)  # a run is chosen by name
