"""benchmarks/real_sglang/walk_vs_live.py on the real-SGLang results committed here."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from helpers_scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "real-sglang-0.5.17"


@pytest.fixture(scope="module")
def wvl() -> ModuleType:
    return load_script("walk_vs_live")


def test_a_tune_and_its_probes_give_one_row_per_measured_chain(
        wvl: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    s3 = RESULTS / "session3"
    assert wvl.main([str(s3 / "1-train-warm-up" / "prediction.json"),
                     str(s3 / "2-tune" / "tune.json"),
                     str(s3 / "3-probe-s6" / "loop_summary-tuned.json")]) == 0
    table = capsys.readouterr().out
    # The committed table was made by this script from the same files (plus the second probe).
    committed = (s3 / "walk-vs-live.md").read_text()
    for line in table.splitlines()[4:]:
        assert line in committed
    assert "| tune launch 1 (s6-k1-d7) | 6 | 3.065 | 2.896 | +5.8% |" in table


def test_probes_alone_with_no_tune(wvl: ModuleType, tmp_path: Path) -> None:
    s4 = RESULTS / "session4"
    out = tmp_path / "table.md"
    assert wvl.main([str(s4 / "1-train-4-layer" / "prediction.json"), "-",
                     str(s4 / "2-probe-s10-fresh-baseline" / "loop_summary-s10.json"),
                     str(s4 / "1-train-4-layer" / "loop_summary.json"),  # no probe: no row
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
