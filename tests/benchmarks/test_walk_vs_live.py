"""benchmarks/real_sglang/walk_vs_live.py on the committed real-SGLang results."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from script_support import load_script

# A 4-layer target on SGLang 0.5.17, one H200.
RESULTS = (Path(__file__).resolve().parents[2] / "benchmarks" / "results"
           / "2026-11-30-h200-tiny-llama-4l")


@pytest.fixture(scope="module")
def wvl() -> ModuleType:
    return load_script("walk_vs_live")


def test_a_tune_and_its_probes_give_one_row_per_measured_chain(
        wvl: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    drafter = RESULTS / "drafter-507k-a"
    assert wvl.main([str(drafter / "train" / "prediction.json"),
                     str(drafter / "tune-s1-s6" / "tune.json"),
                     str(drafter / "probe-s6-k1-d7" / "loop_summary-tuned.json")]) == 0
    table = capsys.readouterr().out
    # The committed table was made by this script from the same files (plus the second probe).
    committed = (drafter / "walk-vs-live.md").read_text()
    for line in table.splitlines()[4:]:
        assert line in committed
    assert "| tune launch 1 (s6-k1-d7) | 6 | 3.065 | 2.896 | +5.8% |" in table


def test_probes_alone_with_no_tune(wvl: ModuleType, tmp_path: Path) -> None:
    drafter = RESULTS / "drafter-507k-b"
    out = tmp_path / "table.md"
    assert wvl.main([str(drafter / "train" / "prediction.json"), "-",
                     str(drafter / "probe-s10-k1-d11" / "loop_summary-s10.json"),
                     str(drafter / "train" / "loop_summary.json"),  # no probe: no row
                     "--out", str(out)]) == 0
    rows = [line for line in out.read_text().splitlines() if line.startswith("| probe ")]
    assert len(rows) == 1
    assert rows[0].startswith("| probe 2026-11-30T23:31:00 |")
    # walk 3.104 per request against 2.866 measured at 10 steps: +8.3 %.
    assert "| 10 | 3.079 | — | — | 3.104 | 2.866 | +8.3% |" in rows[0]


def test_unreadable_input_is_named(wvl: ModuleType, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert wvl.main([str(tmp_path / "missing.json"), "-"]) == 2
    assert "missing.json" in capsys.readouterr().err
