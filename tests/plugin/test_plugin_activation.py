"""The plugin acts only when asked, and its options work with a space or '=' from any folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import suite_support as ss

CLAIM = '''
import pytest
from specgate.claims import result as claims

@pytest.mark.claim("demo.pass")
@pytest.mark.phase0
def test_pass(check, profile):
    check(claims.passed("demo.pass", "phase0", f"drafter {profile.drafter.path}"))
'''


def _pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=120)


def test_a_foreign_suite_sees_nothing_of_specgate(tmp_path: Path) -> None:
    (tmp_path / "test_other.py").write_text("def test_ok():\n    assert True\n")
    proc = _pytest(tmp_path, "-q")
    off = _pytest(tmp_path, "-q", "-p", "no:specgate")
    assert proc.returncode == off.returncode == 0, proc.stdout + proc.stderr
    assert "specgate" not in proc.stdout + proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == [
        "test_other.py"]
    # A foreign suite with nothing to run keeps pytest's own exit code 5.
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _pytest(empty, "-q").returncode == 5
    assert not (empty / "reports").exists()


def test_separated_path_values_keep_the_projects_configuration(tmp_path: Path) -> None:
    project = tmp_path / "project"
    elsewhere = tmp_path / "elsewhere" / "drafter"
    elsewhere.mkdir(parents=True)
    (project / "claims").mkdir(parents=True)
    (project / "claims" / "test_claim.py").write_text(CLAIM)
    profile = tmp_path / "elsewhere" / "p.toml"
    profile.write_text('name = "mine"\n')
    # The project's own configuration, which pytest would miss when it takes the drafter's
    # folder for a test path: the marker opts in, the addopts adds the claims folder.
    (project / "pytest.ini").write_text("[pytest]\naddopts = claims\n")
    proc = _pytest(project, "--profile", str(profile), "--drafter", str(elsewhere))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"rootdir: {project}" in proc.stdout
    assert "configfile: pytest.ini" in proc.stdout
    doc = json.loads((project / "reports" / "verdict.json").read_text())
    assert doc["claims"][0]["message"] == f"drafter {elsewhere}"


def test_a_run_that_collects_no_claim_says_why(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text('name = "mine"\n')
    (tmp_path / "test_claim.py").write_text(CLAIM)
    proc = _pytest(tmp_path, "--profile=p.toml", "-m", "phase2", str(tmp_path))
    assert proc.returncode == 1
    assert ("no claim ran: the selection -m 'phase2' matched none of the 1 collected tests"
            in proc.stdout), proc.stdout
    assert "outcome ERROR\n" in proc.stdout
    assert json.loads((tmp_path / "reports" / "verdict.json").read_text())["nothing_ran"]


def test_the_installed_suites_run_without_a_path(tmp_path: Path) -> None:
    (tmp_path / "my.toml").write_text('name = "mine"\n')
    proc = _pytest(tmp_path, "--collect-only", "-q", "--profile", "my.toml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "test_weights.py::test_layout" in proc.stdout
    assert "test_spec.py::test_speedup" in proc.stdout


def test_a_path_into_the_installed_suites_activates_the_plugin(tmp_path: Path) -> None:
    # No option, no environment, no ini: pointing pytest at specgate's own claims asks for it.
    import specgate_suites

    suites = Path(specgate_suites.__file__).parent
    # An empty configuration of its own: the checkout's `specgate = true` must not decide.
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SPECGATE_", "PYTEST_"))}
    for target in (str(suites / "phase0" / "test_config.py"), "specgate_suites.phase0"):
        args = ["--pyargs", target] if not target.endswith(".py") else [target]
        proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                               "-c", str(tmp_path / "pytest.ini"), "-m", "probe and not live",
                               *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120, env=base)
        assert "specgate verdict" in proc.stdout, proc.stdout + proc.stderr
        assert (tmp_path / "reports" / "verdict.json").exists()


RECORDING_CONFTEST = '''
import json, os, sys

def pytest_sessionfinish(session):
    with open(os.environ["RECORD_TO"], "w") as fh:
        json.dump({"active": session.config.pluginmanager.has_plugin("specgate-session"),
                   "core": "specgate.core.profile" in sys.modules}, fh)
'''


@pytest.mark.parametrize(("ini", "args", "env", "active"), [
    ("", [], {}, False),
    ("", ["--specgate-profile", "demo"], {}, True),
    ("", ["--profile=demo"], {}, True),
    ("", ["--specgate-reports", "out"], {}, True),  # any specgate option, not only the profile
    ("", [], {"SPECGATE_PROFILE": "demo"}, True),
    ("specgate = true\n", [], {}, True),
    ("specgate = false\n", [], {}, False),
], ids=["nothing", "long-option", "short-option", "other-option", "environment", "ini-true",
        "ini-false"])
def test_what_activates_the_plugin(tmp_path: Path, ini: str, args: list[str],
                                   env: dict[str, str], active: bool) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n" + ini)
    (tmp_path / "conftest.py").write_text(RECORDING_CONFTEST)
    (tmp_path / "test_other.py").write_text("def test_ok():\n    assert True\n")
    record = tmp_path / "record.json"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SPECGATE_", "PYTEST_"))}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args,
                           "test_other.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={**base, **env, "RECORD_TO": str(record)})
    assert record.exists(), proc.stdout + proc.stderr
    got = json.loads(record.read_text())
    assert got == {"active": active, "core": active}, proc.stdout + proc.stderr
    assert (tmp_path / "reports").exists() is (active and "--specgate-reports" not in args)


# The harness's own tests beside a project's claims, needing what this environment lacks:
# collecting only the claims must never load their conftest.
FOREIGN_CONFTEST = "import a_module_this_environment_lacks\n"
PROFILE_CLAIM = ss.claim("profile", 'check(claims.passed("demo.profile", "phase0", '
                                    'f"profile {profile.name}"))', marks=["probe"],
                         fixtures=["profile"])


def _shipped_profile_runs() -> list[tuple[str, str]]:
    from specgate.core.profile import shipped_profile_names

    return [(name, form) for name in shipped_profile_names() for form in ("space", "equals")]


@pytest.mark.parametrize(("name", "form"), _shipped_profile_runs())
def test_every_shipped_profile_by_name_in_both_forms(tmp_path: Path, name: str,
                                                     form: str) -> None:
    root = ss.project(tmp_path, ss.suite(PROFILE_CLAIM), name="unused")
    (root / "tests").mkdir()
    (root / "tests" / "conftest.py").write_text(FOREIGN_CONFTEST)
    # A deployment's profile names its checkpoints on the GPU host: given here as folders.
    (root / "t").mkdir()
    paths = [f"--drafter={root / 'd'}", f"--reference-drafter={root / 'd'}",
             f"--target-model={root / 't'}"]
    profile = ["--profile", name] if form == "space" else [f"--profile={name}"]
    proc = _pytest(root, "-m", "probe", *profile, *paths)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((root / "reports" / "verdict.json").read_text())
    assert [c["message"] for c in doc["claims"]] == [f"profile {name}"]


def _specgate_report(reports: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specgate.cli", "report", "--reports",
                           str(reports)], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("stop", ["refused-option", "conftest", "specgate-refused-option"])
def test_a_run_that_did_not_start_leaves_no_earlier_verdict_as_its_own(tmp_path: Path,
                                                                        stop: str) -> None:
    root = ss.project(tmp_path, ss.suite(ss.passing(marks=["probe"])), name="mine")
    reports = root / "reports"
    assert _pytest(root, "-m", "probe", "--profile", "p.toml").returncode == 0
    earlier = json.loads((reports / "verdict.json").read_text())["run"]["id"]
    assert (reports / "junit.xml").is_file()

    args = ["-m", "probe", "--profile", "p.toml"]
    if stop == "refused-option":
        args.append("--no-such-option")
    elif stop == "specgate-refused-option":
        args.append("--specgate-reports-wait=soon")
    else:
        (root / "suites" / "conftest.py").write_text(FOREIGN_CONFTEST)
    proc = _pytest(root, *args)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert not (reports / "verdict.json").exists()
    assert not (reports / "junit.xml").exists()
    note = json.loads((reports / "not-started.json").read_text())
    assert note["earlier_run"] == earlier
    assert note["args"][-len(args):] == args
    # The earlier run keeps its own verdict in its folder.
    assert (reports / "runs" / earlier / "verdict.json").is_file()

    # What a CI job's summary step prints instead of the earlier run's verdict.
    summary = subprocess.run([sys.executable, "-m", "specgate.cli", "summary",
                              str(reports / "verdict.json")], capture_output=True, text=True,
                             timeout=120)
    assert summary.returncode == 1
    assert (f"{reports / 'verdict.json'}: no verdict: the last pytest run there stopped before "
            "any claim ran") in summary.stderr
    assert str(reports / "runs" / earlier) in summary.stderr

    said = _specgate_report(reports)
    assert said.returncode == 1
    assert said.stderr.count("\n") == 1, said.stderr
    assert "stopped before any claim ran and wrote no verdict" in said.stderr
    assert f"--reports {reports / 'runs' / earlier}`" in said.stderr

    # The next run that starts is the last run again.
    (root / "suites" / "conftest.py").unlink(missing_ok=True)
    assert _pytest(root, "-m", "probe", "--profile", "p.toml").returncode == 0
    assert not (reports / "not-started.json").exists()
    assert json.loads((reports / "verdict.json").read_text())["run"]["id"] != earlier


def test_a_run_that_is_not_specgates_leaves_the_verdict_alone(tmp_path: Path) -> None:
    root = ss.project(tmp_path, ss.suite(ss.passing(marks=["probe"])), name="mine")
    assert _pytest(root, "-m", "probe", "--profile", "p.toml").returncode == 0
    (root / "tests").mkdir()
    (root / "tests" / "test_own.py").write_text("def test_ok():\n    pass\n")
    # pytest's own exit codes: 0 for --version, 4 (usage error) for an option it refuses.
    runs = ((["--no-such-option"], 4), (["--version"], 0),
            (["--profile", "p.toml", "--version"], 0),
            (["--profile", "p.toml", "--collect-only", "--no-such-option"], 4),
            (["--profile", "p.toml", "tests", "--no-such-option"], 4))
    for args, code in runs:
        proc = _pytest(root, *args)
        assert proc.returncode == code, proc.stdout + proc.stderr
        assert (root / "reports" / "verdict.json").is_file(), args
        assert not (root / "reports" / "not-started.json").exists(), args
