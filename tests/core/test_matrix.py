"""A checkpoint matrix: pytest -n 2 spreads two drafters over two fake GPU sets, one verdict each
and one for the matrix, published from the run's folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specgate.core.errors import ProfileError
from specgate.core.matrix import load_matrix, on_gpu_set, parse_gpu_sets
from specgate.core.profile import parse_profile
from specgate.testing import fake_gpus

MATRIX = """
[[checkpoint]]
name = "main"
drafter = "cache/demo/drafter"

[[checkpoint]]
name = "previous"
drafter = "cache/demo/reference"
"""


def test_the_matrix_file_and_gpu_sets_are_read_with_clear_errors(tmp_path: Path) -> None:
    (tmp_path / "m.toml").write_text(MATRIX)
    matrix = load_matrix(tmp_path / "m.toml")
    assert matrix.names == ["main", "previous"]
    assert matrix.get("main").drafter == str(tmp_path / "cache" / "demo" / "drafter")
    (tmp_path / "bad.toml").write_text('[[checkpoint]]\nname = "a b"\ndrafter = "x"\n')
    with pytest.raises(ProfileError, match=r"bad.toml: \[\[checkpoint\]\] number 1: name 'a b'"):
        load_matrix(tmp_path / "bad.toml")
    (tmp_path / "twice.toml").write_text('[[checkpoint]]\ndrafter = "x/d"\n'
                                         '[[checkpoint]]\ndrafter = "y/d"\n')
    with pytest.raises(ProfileError, match="checkpoint name 'd' is used twice"):
        load_matrix(tmp_path / "twice.toml")
    assert parse_gpu_sets("0,1;2,3") == [(0, 1), (2, 3)]
    with pytest.raises(ProfileError, match="the sets overlap"):
        parse_gpu_sets("0,1;1,2")
    profile = parse_profile({"name": "t", "server": {"tp": 2, "baseline_gpus": [6, 7]}})
    placed = on_gpu_set(profile, (2, 3))
    assert placed.server.server_gpus("baseline") == [2, 3]
    with pytest.raises(ProfileError, match="the set 4 does not fit"):
        on_gpu_set(profile, (4,))


@pytest.mark.slow
def test_two_checkpoints_run_side_by_side_on_their_gpu_sets(tmp_path: Path) -> None:
    gpus = fake_gpus.make(tmp_path / "gpus", [fake_gpus.FakeGpu(i) for i in range(4)])
    fake_gpus.install_nvidia_smi(tmp_path / "bin")
    (tmp_path / "m.toml").write_text(MATRIX)
    reports = tmp_path / "reports"
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
           fake_gpus.ENV_GPUS: str(gpus), "SPECGATE_CACHE": str(tmp_path / "cache")}
    env.pop("SPECGATE_PROFILE", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "-m", "probe",
         "--specgate-matrix", "m.toml", "--specgate-gpu-sets", "0,1;2,3",
         f"--specgate-reports={reports}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    top = json.loads((reports / "verdict.json").read_text())
    assert top["outcome"] == "passed"
    assert top["matrix"] == "m.toml"
    assert top["gpu_sets"] == [[0, 1], [2, 3]]
    rows = {row["checkpoint"]: row for row in top["checkpoints"]}
    assert set(rows) == {"main", "previous"}
    # One server per set: each checkpoint's two servers ran on one set, the two on different sets.
    placed = {name: (row["gpus"]["baseline"]["selected"], row["gpus"]["speculative"]["selected"])
              for name, row in rows.items()}
    assert {b == s for b, s in placed.values()} == {True}
    assert sorted(b[0] for b, _s in placed.values()) == [0, 2]
    for name, row in rows.items():
        own = json.loads((reports / row["verdict"]).read_text())
        # Each checkpoint's verdict is a single-checkpoint verdict of its drafter.
        assert own["checkpoint"] == name
        assert own["drafter"].endswith("demo/drafter" if name == "main" else "demo/reference")
        assert own["outcome"] == "passed"
        ids = [c["id"] for c in own["claims"]]
        assert {"vocab.d2t_match", "spec.speedup"} <= set(ids)
        assert ids.count("config.hidden_size") == 1  # its own claims, no other checkpoint's
        (hidden,) = [c for c in own["claims"] if c["id"] == "config.hidden_size"]
        assert hidden["message"].startswith(own["drafter"])
        assert own["run"] == top["run"]
    assert {c["checkpoint"] for c in top["claims"]} == {"main", "previous"}
    assert len(top["claims"]) == sum(len(json.loads((reports / r["verdict"]).read_text())
                                         ["claims"]) for r in rows.values())
    # Both checkpoints measured at once, one on each worker.
    assert "[specgate live gw0]" in out
    assert "[specgate live gw1]" in out
    run_dir = reports / top["run"]["folder"]
    assert (run_dir / "checkpoints" / "main" / "live" / "results.json").is_file()
    assert "checkpoint main: PASSED" in out
    # One report: both checkpoints' claims in the published Allure results.
    results = [json.loads(p.read_text()) for p in (reports / "allure-results").glob(
        "*-result.json")]
    suites = {label["value"] for r in results for label in r["labels"]
              if label["name"] == "parentSuite"}
    assert suites == {"main", "previous"}
    assert not [p for p in fake_gpus.processes(gpus)]
