"""docs/profile.md is generated from the profile model and cannot drift from it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specgate.cli.profile_doc import main_profile_doc
from specgate.core import profile_doc
from specgate.core.profile import Profile

DOC = Path(__file__).resolve().parents[2] / "docs" / "profile.md"


def test_committed_reference_matches_the_model() -> None:
    assert DOC.read_text(encoding="utf-8") == profile_doc.render(), (
        "docs/profile.md is out of date: run `specgate profile-doc --out docs/profile.md`")


def test_every_key_is_listed_with_its_default() -> None:
    text = profile_doc.render()
    for key, _field in profile_doc.keys():
        assert f"| `{key.rsplit('.', 1)[-1]}` |" in text
    assert "| `startup_timeout_s` | number | `1800.0` |" in text
    assert "| `accept_len_min` | number or \"breakeven\" | — |" in text
    assert "| `tolerance` | number | `0.1` |" in text
    sections = ("target", "drafter", "server", "speculative", "bench", "thresholds", "tune",
                "finetune", "eval", "data")
    # name, description, simulated; every section's keys; [demo] (optional) has assets and kind.
    assert len(profile_doc.keys()) == 3 + 2 + sum(
        len(Profile.model_fields[s].annotation.model_fields) for s in sections)


def test_a_key_without_a_description_stops_the_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    descriptions = dict(profile_doc.DESCRIPTIONS)
    del descriptions["server.tp"]
    monkeypatch.setattr(profile_doc, "DESCRIPTIONS", descriptions)
    with pytest.raises(ValueError, match=r"undescribed \['server.tp'\]"):
        profile_doc.render()


def test_check_mode_reports_a_stale_file(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    stale = tmp_path / "profile.md"
    stale.write_text("old\n")
    assert main_profile_doc(["--out", str(stale), "--check"]) == 1
    assert "out of date" in capsys.readouterr().err
    assert main_profile_doc(["--out", str(stale)]) == 0
    assert main_profile_doc(["--out", str(stale), "--check"]) == 0


def test_check_mode_names_a_named_pipe_instead_of_waiting_on_it(tmp_path: Path) -> None:
    # In a process of its own, so a check that blocks on the pipe ends at the ceiling.
    pipe = tmp_path / "profile.md"
    os.mkfifo(pipe)
    done = subprocess.run(
        [sys.executable, "-m", "specgate.cli", "profile-doc", "--out", str(pipe), "--check"],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip() == (
        f"specgate profile-doc: {pipe}: is a FIFO (named pipe), not a regular file")
