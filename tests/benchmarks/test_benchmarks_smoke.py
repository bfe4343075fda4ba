"""Smoke test of benchmarks/: every benchmark's code path on tiny inputs (no timing asserts)."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks import (
    common,
    health_scan,
    launch_drift,
    launches,
    offline_claims,
    probe_run,
    run_all,
)
from specgate.core.profile import load_profile

# offline_claims compares the claims with what a naive script does: safetensors.torch.load_file.
OFFLINE_CLAIMS_NEEDS_TORCH = "benchmarks/offline_claims.py times a safetensors.torch load"


def test_measured_child_reports_its_own_peak_rss() -> None:
    big = common.measure_child([sys.executable, "-c",
                                "b = bytearray(120 * 1024 * 1024); b[::4096] = b'x' * len("
                                "b[::4096]); print('{\"ok\": 1}')"])
    small = common.measure_child([sys.executable, "-c", "print('{\"ok\": 1}')"])
    assert big.json_out() == {"ok": 1}
    assert big.peak_rss_mb >= 120
    # Measured per child, not as a running maximum over every child reaped so far.
    assert small.peak_rss_mb < 60


def test_failed_child_raises_with_its_stderr() -> None:
    run = common.run_child([sys.executable, "-c", "import sys; sys.exit('boom')"])
    with pytest.raises(RuntimeError, match="boom"):
        run.json_out()


@given(st.lists(st.lists(st.text(alphabet="ab |×", max_size=6), min_size=3, max_size=3),
                min_size=1, max_size=5))
def test_table_rows_line_up(rows: list[list[str]]) -> None:
    lines = common.table(rows).splitlines()
    assert len(lines) == len(rows) + 1
    assert len({len(line) for line in lines}) == 1


@pytest.mark.slow
def test_offline_claims_on_a_small_pair(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason=OFFLINE_CLAIMS_NEEDS_TORCH)
    result = offline_claims.run(tmp_path, "small")
    statuses = result["claims"]["statuses"]
    assert statuses["vocab.d2t_match"] == ["failed", 252]
    for cid in ("weights.layout", "weights.shape_parity", "vocab.invariants"):
        assert statuses[cid][0] == "passed", cid
    # The generated pair is sparse: far fewer bytes on disk than the files' sizes.
    assert sum(result["allocated_bytes"].values()) < sum(result["file_bytes"].values())
    assert result["naive_load_file"]["bytes"] > 0
    for side in ("claims", "naive_load_file", "naive_load_file_touch"):
        assert math.isfinite(result[side]["peak_rss_mb"])
        assert result[side]["peak_rss_mb"] > 0
    assert set(result["meets"]) == {"claims_s", "claims_rss_mb", "ratio"}
    assert len(offline_claims.rows(result)) == 2


def test_health_scan_against_cat_on_a_small_drafter(tmp_path: Path) -> None:
    result = health_scan.run(tmp_path, "small", repeats=1)
    assert result["bytes"] > 0
    for temp in ("cold", "warm"):
        for name in ("scan_w1", "scan_w2"):
            got = result[temp][name]
            assert got["ok"] is True
            # fill="random" writes every byte: nothing is skipped as a hole.
            assert got["bytes"] >= result["bytes"] - 4096
            assert got["fraction_of_cat"] > 0
    assert len(health_scan.rows(result)) == 4


def test_probe_argv_keeps_option_values_in_one_token(tmp_path: Path) -> None:
    argv = probe_run._pytest(tmp_path / "p.toml", tmp_path / "r", True)
    assert f"--reports={tmp_path / 'r'}" in argv
    assert f"--profile={tmp_path / 'p.toml'}" in argv
    assert str(tmp_path / "r") not in argv


def test_full_size_profile_is_a_valid_profile(tmp_path: Path) -> None:
    path = probe_run.full_profile(tmp_path, tmp_path / "d", tmp_path / "r")
    profile = load_profile(path)
    assert profile.drafter.expect["hidden_size"] == 7168
    assert (tmp_path / "k25_target" / "config.json").exists()


def test_import_costs_parse_top_level_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    stderr = ("import time: self [us] | cumulative | imported package\n"
              "import time:       100 |        100 |     numpy.core\n"
              "import time:       200 |       5000 | numpy\n"
              "import time:       300 |      40000 | specgate.testing.demo\n")
    fake = common.ChildRun(0.1, 1.0, 0, "", stderr)
    monkeypatch.setattr(probe_run, "run_child", lambda *a, **k: fake)
    got = probe_run.import_costs(None, Path("unused"))
    assert got["by_package_ms"] == {"specgate": 40.0, "numpy": 5.0}
    assert got["total_import_ms"] == 45.0


def test_counting_launcher_counts_and_execs(tmp_path: Path) -> None:
    script, counter = launches.counting_launcher(tmp_path)
    for _ in range(2):
        subprocess.run([str(script), "--help"], check=True, capture_output=True, timeout=60)
    lines = counter.read_text().splitlines()
    assert len(lines) == 2
    pids = [line.split(" ", 1)[0] for line in lines]
    assert all(p.isdigit() for p in pids)
    assert pids[0] != pids[1]
    assert all(line.endswith(" --help") for line in lines)


@pytest.mark.slow
def test_run_all_quick_writes_bench_json_and_a_table(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch", reason=OFFLINE_CLAIMS_NEEDS_TORCH)  # benchmark 1 of the three
    out = tmp_path / "bench.json"
    rc = run_all.main(["--quick", "--only", "1,2,4", "--out", str(out),
                       "--workdir", str(tmp_path / "work")])
    doc = json.loads(out.read_text())
    assert doc["errors"] == {}, doc["errors"]
    assert rc == 0
    assert set(doc["benchmarks"]) == {"offline_claims", "health_scan", "live_sim"}
    live = doc["benchmarks"]["live_sim"]
    assert set(live["cases"]) == {"clear_pass", "clear_fail", "near"}
    assert live["cases"]["clear_pass"]["sequential"]["decisions"]["spec.speedup"] == "passed"
    assert live["cases"]["clear_fail"]["sequential"]["decisions"]["spec.speedup"] == "failed"
    # The harness's accept length is the simulator's exact Σcompletion / Σverify.
    assert abs(live["error_vs_truth"]["accept_len_exact"]) < 1e-9
    printed = capsys.readouterr().out
    assert printed.startswith("| benchmark")
    assert str(out) in printed


@pytest.mark.slow
def test_bounded_work_runs_every_case(tmp_path: Path) -> None:
    from benchmarks import bounded_work
    from specgate.core.profile import MAX_EXPECT_KEYS

    result = bounded_work.run(tmp_path, quick=True, warm_up=False)  # no timing is judged here
    cases = result["cases"]
    assert {name: c["exit_codes"] for name, c in cases.items()} == {
        "normal": [0], "empty_tensors": [0], "expect_keys": [0], "refused_keys": [4]}
    assert cases["empty_tensors"]["claims"] == cases["normal"]["claims"]
    assert cases["expect_keys"]["claims"] == cases["normal"]["claims"] + MAX_EXPECT_KEYS - 2
    assert cases["empty_tensors"]["extra_header_bytes"] > 20_000 * 50
    assert all(math.isfinite(c["ratio_wall"]) for c in cases.values())
    assert result["empty_tensors_extra_cpu_s"] == (cases["empty_tensors"]["cpu_s"]
                                                   - cases["normal"]["cpu_s"])
    assert set(result["meets"]) == {"ratio_max", "empty_tensors_extra_cpu_s"}
    assert len(bounded_work.rows(result)) == 3


def test_launch_drift_benchmark_reports_rates_per_design_and_spread() -> None:
    result = launch_drift.run(trials=8)
    assert set(result["cells"]) == {f"{d} {s}" for d in launch_drift.DESIGNS
                                    for s in launch_drift.SPREADS}
    for cell in result["cells"].values():
        assert all(0.0 <= rate <= 1.0 for rate in cell.values())
    rows = launch_drift.rows(result)
    assert len(rows) == 2 * len(result["cells"])
    assert rows[0][0].startswith("11 launch drift σ 5%, A–B, true 1.00")


def test_first_probe_benchmark_reports_each_deployment_and_the_smallest_speedup_passed() -> None:
    from benchmarks import first_probe

    assert first_probe.smallest({1.1: 0.2, 1.2: 0.95, 1.3: 0.9, 1.4: 1.0}, 0.9) == 1.2
    assert first_probe.smallest({1.1: 0.95, 1.2: 0.5, 1.3: 1.0}, 0.9) == 1.3
    assert first_probe.smallest({1.1: 0.1, 1.2: 0.2}, 0.9) is None
    result = first_probe.run(false_trials=6, trials=3)
    assert list(result["deployments"]) == [s.name for s in first_probe.SETTINGS]
    for cell in result["deployments"].values():
        assert 0.0 <= cell["false_pass"] <= 1.0
        assert set(cell["pass_rates"]) == {f"{s:.3f}" for s in first_probe.LADDER}
    rows = first_probe.rows(result)
    assert len(rows) == 2 * len(first_probe.SETTINGS)
    assert rows[0][0].startswith("12 first probe, host-bound, H200 (SmolLM2-135M-Instruct) "
                                 "(drift σ baseline 12.16%")
    short = first_probe.misses({"deployments": {"d": {
        **result["deployments"]["GPU-bound, H100 (Llama-3-8B shapes)"],
        "false_pass": 0.03, "smallest_half": 1.075, "smallest_nine_in_ten": None}}})
    assert short == ["d: false passes 3.0% above 2.5%",
                     "d: half of first probes pass from 1.075×, not ≤ 1.05×",
                     "d: nine in ten of first probes pass from none up to 2×, not ≤ 1.1×"]


def test_first_probe_noise_is_read_from_the_launch_records(tmp_path: Path) -> None:
    """Each deployment's drift is its class and GPU's prior, and its per-request variation the
    median within-launch CV of its records: a changed record changes it."""
    import shutil

    from benchmarks import first_probe
    from specgate.results import drift

    h100 = next(s for s in first_probe.SETTINGS if s.gpu.startswith("NVIDIA H100"))
    noise = first_probe.noise_of(h100)
    assert noise["baseline_spread"] == drift.prior("tps", "GPU-bound", h100.gpu).sd
    assert noise["speculative_spread"] == drift.prior("cycle_ms", "GPU-bound", h100.gpu).sd
    cvs = {name: [launch["cv_within"] for launch in first_probe.launches(((pattern, name),))]
           for pattern, name in h100.baseline + h100.speculative}
    assert noise["noise"] == max(statistics.median(v) for v in cvs.values())
    root = tmp_path / "results"
    shutil.copytree(first_probe.RESULTS / "2026-12-07-h100-llama8b-shapes-launches",
                    root / "2026-12-07-h100-llama8b-shapes-launches")
    for path in root.glob("*/*/launch-records.json"):
        doc = json.loads(path.read_text())
        for launch in doc["targets"].get("llama8b-shapes-eagle3", {}).get("launches", []):
            launch["cv_within"] = 0.2
        path.write_text(json.dumps(doc))
    assert first_probe.noise_of(h100, root)["noise"] == 0.2


def test_launch_spread_model_sets_each_prior_group_against_the_model(tmp_path: Path) -> None:
    from benchmarks import launch_spread_model
    from specgate.results import drift

    out = tmp_path / "model.json"
    assert launch_spread_model.main(["--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    groups = {(r["figure"], r["group"]) for r in doc["model"]}
    assert groups == {(f, g) for table in (drift.GPU_BOUND_LAUNCHES, drift.PRIOR_LAUNCHES)
                      for f, named in table.items() for g in named}
    gpu = next(r for r in doc["model"] if r["group"] == "H200: Llama-3-8B shapes, dummy weights")
    assert (gpu["measured_sd"], gpu["model_sd"]) == (pytest.approx(0.0038, abs=1e-4),
                                                     pytest.approx(0.0064, abs=1e-4))
    classes = {c["target"]: c["class"] for c in doc["coverage"]}
    assert classes == {"llama8b-shapes": "GPU-bound", "llama1b-shapes": "between",
                       "smollm2-135m-instruct": "host-bound"}


def test_bounded_work_takes_its_flags_and_never_a_flag_for_its_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import bounded_work

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        bounded_work.main(["--help"])
    assert stopped.value.code == 0
    assert "--quick" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []
