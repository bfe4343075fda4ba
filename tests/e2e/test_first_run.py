"""What a new user meets first, each run as the user runs it (a real pytest or specgate process):
an empty drafter folder, `pytest -m probe` where specgate is not active, an empty
$SPECGATE_PROFILE in a foreign suite, preflight without SGLang, and the servers' messages when an
attached URL carries credentials or the API-key variable is empty."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# The claim families that read the drafter folder, offline or through the speculative server.
_READS_DRAFTER = ("config.", "weights.", "vocab.", "spec.", "regress.")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SPECGATE_"))}
    return {**env, **extra}


def _pytest(cwd: Path, *args: str, env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=300,
                          env=env or _env(SPECGATE_CACHE=str(cwd / "cache")))


def test_an_empty_drafter_folder_is_one_cause_said_once(tmp_path: Path) -> None:
    drafter = tmp_path / "drafter"
    drafter.mkdir()
    proc = _pytest(tmp_path, "-m", "probe", "--specgate-profile=demo",
                   f"--specgate-drafter={drafter}")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    block = proc.stdout[proc.stdout.index("= specgate verdict ="):]
    block = block[:block.index("verdict: ")]
    said = [line for line in block.splitlines() if str(drafter) in line]
    assert len(said) == 1, block
    assert "claims by one cause" in said[0]
    assert "the folder is empty" in said[0]
    doc = json.loads((tmp_path / "reports" / "verdict.json").read_text())
    (cause,) = doc["causes"]
    broken = [c["id"] for c in doc["claims"] if c["status"] == "broken"]
    assert cause["claims"] == broken, (cause, broken)
    # Every claim that reads the drafter, offline or through the speculative server, and only
    # those: the baseline was measured; the speculative server was never launched on the folder.
    assert {c["id"] for c in doc["claims"] if c["status"] == "passed"} >= {"perf.baseline_tps"}
    reads_drafter = {c["id"] for c in doc["claims"] if c["id"].startswith(_READS_DRAFTER)}
    assert {"spec.speedup", "spec.accept_len", "weights.layout"} <= set(broken)
    assert set(broken) == reads_drafter, sorted(set(broken) ^ reads_drafter)
    assert not list((tmp_path / "reports").glob("**/speculative-server.log"))


def test_every_reader_words_an_empty_model_folder_alike(tmp_path: Path) -> None:
    """The claims that read the drafter directly (where the run's path check does not apply:
    a remote launcher's paths) break for one cause with one wording."""
    from specgate.core.errors import CheckpointError
    from specgate.io.checkpoint import open_drafter, read_config

    folder = tmp_path / "d"
    folder.mkdir()
    said = set()
    for reader in (read_config, open_drafter):
        with pytest.raises(CheckpointError) as err:
            reader(folder)
        said.add(str(err.value))
    assert len(said) == 1, said
    assert "the folder is empty" in said.pop()


def test_probe_where_specgate_is_not_active_says_how_to_run_it(tmp_path: Path) -> None:
    work = tmp_path / "empty-folder"
    work.mkdir()
    proc = _pytest(work, "-m", "probe")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "specgate is not active here" in proc.stdout, proc.stdout
    assert "--specgate-profile PATH" in proc.stdout
    # A foreign suite that collects its own tests keeps pytest's own exit code and output.
    (work / "test_other.py").write_text("def test_one():\n    assert True\n")
    proc = _pytest(work, "-m", "probe")
    assert proc.returncode == 5, proc.stdout
    assert "specgate:" not in proc.stdout, proc.stdout
    # An expression that asks for no claim is not specgate's either.
    (work / "test_other.py").unlink()
    proc = _pytest(work, "-m", "not probe")
    assert proc.returncode == 5, proc.stdout


def test_an_empty_specgate_profile_variable_leaves_a_foreign_suite_alone(tmp_path: Path) -> None:
    project = tmp_path / "foreign"
    project.mkdir()
    (project / "test_foreign.py").write_text("def test_ok():\n    assert True\n")
    (project / "conftest.py").write_text(
        "def pytest_sessionfinish(session):\n"
        "    open('active.txt', 'w').write(str(session.config.pluginmanager"
        ".has_plugin('specgate-session')))\n")
    runs = {}
    for name, value in (("empty", ""), ("unset", None)):
        env = _env()
        if value is not None:
            env["SPECGATE_PROFILE"] = value
        proc = _pytest(project, "-q", env=env)
        runs[name] = proc
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert (project / "active.txt").read_text() == "False", name
    strip = [[ln for ln in p.stdout.splitlines() if " in " not in ln] for p in runs.values()]
    assert strip[0] == strip[1]
    assert not (project / "reports").exists()
    assert not (project / ".specgate").exists()


def test_preflight_without_sglang_names_no_version(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "specgate.cli", "preflight", "demo",
                           "--python", sys.executable], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env=_env(SPECGATE_CACHE=str(tmp_path / "c")))
    if "No module named 'sglang'" not in proc.stdout:
        pytest.skip("SGLang is importable here: the case of a machine without it cannot be run")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "None" not in proc.stdout, proc.stdout
    assert "n/a  demo.toml baseline: " in proc.stdout, proc.stdout


def _live_verdict(work: Path, *args: str, env: dict[str, str]) -> tuple[str, dict[str, object]]:
    proc = _pytest(work, "-m", "probe and live", *args, env=env)
    doc = json.loads((work / "reports" / "verdict.json").read_text())
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr, doc


def test_an_attached_url_with_credentials_names_host_and_port_when_down(tmp_path: Path) -> None:
    """Port 9 (discard) is closed on loopback: both attached servers are down."""
    env = _env(SPECGATE_CACHE=str(tmp_path / "cache"))
    out, doc = _live_verdict(tmp_path, "--specgate-profile=demo",
                             "--specgate-server-url=http://admin:s3cret-pw@127.0.0.1:9/",
                             "--specgate-baseline-url=http://admin:s3cret-pw@127.0.0.1:9",
                             env=env)
    assert "s3cret-pw" not in out
    causes = [str(c["message"]) for c in doc["causes"]]  # type: ignore[union-attr]
    assert len(causes) == 2, causes
    for cause in causes:
        assert "http://admin:***@127.0.0.1:9" in cause, cause
        assert "nothing listens on 127.0.0.1 port 9" in cause, cause
        assert cause in out


def test_an_empty_api_key_variable_is_named(tmp_path: Path) -> None:
    from specgate.core.profile import default_profile_path

    profile = tmp_path / "keyed.toml"
    text = default_profile_path().read_text()
    assert "\n[server]\n" in text
    profile.write_text(text.replace("\n[server]\n", '\n[server]\napi_key_env = "MY_SG_KEY"\n'))
    env = _env(SPECGATE_CACHE=str(tmp_path / "cache"), MY_SG_KEY="")
    out, doc = _live_verdict(tmp_path, f"--specgate-profile={profile}", env=env)
    causes = [str(c["message"]) for c in doc["causes"]]  # type: ignore[union-attr]
    assert causes, doc
    for cause in causes:
        assert "the environment variable MY_SG_KEY is empty" in cause, cause
    assert "MY_SG_KEY is empty" in out


def test_the_readme_names_the_pytest_its_setup_leaves() -> None:
    """The README's setup commands put only tox in .venv/: the pytest it tells a reader of the
    checkout to run is the probe environment's, which those commands create (tox -e probe runs
    pytest from it, with the checkout installed)."""
    import configparser
    import re

    repo = Path(__file__).resolve().parents[2]
    readme = (repo / "README.md").read_text()
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(repo / "tox.ini")
    assert tox["testenv"]["package"] == "editable"
    assert tox["testenv:probe"]["commands"].strip().startswith("pytest -m probe")
    setup = re.findall(r"^python3 -m venv \.venv .*$", readme, re.MULTILINE)
    assert setup
    assert all(".venv/bin/tox -e" in line for line in setup), setup
    assert any("tox -e probe" in line for line in setup)
    assert "`.tox/probe/bin/pytest -m probe`" in readme
    # Nothing in the checkout's part of the README sends a reader to a bare .venv/bin/pytest.
    assert ".venv/bin/pytest" not in readme
    ci = (repo / ".ci" / "run").read_text()
    assert ".tox/probe/bin/pytest -m" in ci  # CI runs the README's line as written
