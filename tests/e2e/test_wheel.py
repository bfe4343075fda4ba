"""specgate where users run it: built as a wheel, installed into a fresh virtualenv beside
pytest-profiling, next to another project's tests, with the README's commands run as written from
a folder outside the checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from filelock import FileLock

# Its tests share a costly fixture: one xdist worker runs them all (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("test_wheel")

REPO = Path(__file__).resolve().parents[2]

FOREIGN = '''
def test_one():
    assert 1 + 1 == 2

def test_two():
    assert "spec" in "specgate"
'''


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 300,
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _pip_offline(venv_python: Path, *args: str, env: dict[str, str]) -> None:
    # The dependencies come from this interpreter's site-packages (the venv is made with
    # --system-site-packages); pytest-profiling comes from pip's own sources (index, cache).
    proc = _run([str(venv_python), "-m", "pip", "install", "-q", *args], REPO, env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """A virtualenv holding the wheel (not editable) and pytest-profiling."""
    # `pip wheel --no-build-isolation` builds with this environment's setuptools, whose own
    # bdist_wheel arrived in 70.1; an older one needs the wheel package for it.
    if not entry_points(group="distutils.commands", name="bdist_wheel"):
        pytest.importorskip("wheel", reason="building specgate's wheel needs bdist_wheel: "
                            "setuptools 70.1 or later, or the wheel package")
    root = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "SPECGATE_", "COV_"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    started = time.monotonic()
    # Built once per run: two builds at once would collide in the checkout's build/ folder, so
    # xdist workers share one, in the run's folder above their own.
    run_dir = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        run_dir = run_dir.parent
    dist = run_dir / "specgate-wheel"
    with FileLock(str(dist) + ".lock"):
        if not any(dist.glob("specgate-*.whl")):
            proc = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                         "--no-build-isolation", "-w", str(dist), str(REPO)], REPO, env,
                        timeout=300)
            assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = dist.glob("specgate-*.whl")
    # A venv over the base interpreter, seeing this environment's packages through a .pth:
    # the dependencies are those the constraints pinned, and the network is never needed.
    base = Path(getattr(sys, "_base_executable", sys.executable))
    venv = root / "venv"
    proc = _run([str(base), "-m", "venv", str(venv)], root, env)
    assert proc.returncode == 0, proc.stderr
    py = venv / "bin" / "python"
    site = next((venv / "lib").glob("python3*/site-packages"))
    ours = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    # A plain path entry: the .pth files there (the checkout's editable install) are not run.
    (site / "zz_deps.pth").write_text("\n".join(ours) + "\n")
    # --ignore-installed: pip never touches the environment the .pth points at.
    _pip_offline(py, "--no-deps", "--ignore-installed", str(wheel), env=env)
    # pytest itself again, for the `pytest` command in the venv's bin/ (as a user has it).
    _pip_offline(py, "--no-deps", "--ignore-installed", "-c", str(REPO / "constraints.txt"),
                 "pytest", "pytest-profiling", "gprof2dot", "six", env=env)
    where = _run([str(py), "-c", "import specgate, specgate_fixtures; "
                  "print(specgate.__file__); print(specgate_fixtures.__file__)"], root, env)
    assert where.returncode == 0, where.stderr
    assert str(REPO) not in where.stdout, f"the checkout leaked into the venv: {where.stdout}"
    return {"py": py, "bin": venv / "bin", "root": root, "env": env,
            "install_s": time.monotonic() - started}


def _venv_env(installed: dict[str, object]) -> dict[str, str]:
    env = dict(installed["env"])  # type: ignore[call-overload]
    env["PATH"] = f"{installed['bin']}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(Path(str(installed["bin"])).parent)
    return env


@pytest.mark.slow
def test_a_foreign_suite_runs_as_without_specgate(installed: dict[str, object],
                                                  tmp_path: Path) -> None:
    env = _venv_env(installed)
    runs = {}
    for name, extra in (("with", []), ("without", ["-p", "no:specgate"])):
        project = tmp_path / name / "other-project"
        project.mkdir(parents=True)
        (project / "test_other.py").write_text(FOREIGN)
        (project / "pytest.ini").write_text("[pytest]\naddopts = --strict-config\n")
        runs[name] = _run(["pytest", "-q", "-p", "no:cacheprovider", *extra], project, env)
    with_plugin, without = runs["with"], runs["without"]
    assert with_plugin.returncode == without.returncode == 0, with_plugin.stdout
    # The same files (other plugins of this environment may write their own, in both).
    assert (sorted(p.name for p in (tmp_path / "with" / "other-project").iterdir())
            == sorted(p.name for p in (tmp_path / "without" / "other-project").iterdir()))
    assert not (project.parent.parent / "with" / "other-project" / "reports").exists()
    project = tmp_path / "with" / "other-project"
    # The same lines but for timing: no specgate output, no verdict, no files.
    strip = [ln for ln in with_plugin.stdout.splitlines() if " in " not in ln]
    assert strip == [ln for ln in without.stdout.splitlines() if " in " not in ln]
    assert "specgate" not in with_plugin.stdout + with_plugin.stderr
    # pytest-profiling's --profile works beside specgate (it would not if both registered it).
    profiled = _run(["pytest", "-q", "-p", "no:cacheprovider", "--profile"], project, env)
    assert profiled.returncode == 0, profiled.stdout + profiled.stderr
    assert (project / "prof").is_dir()
    # A failing foreign suite keeps its own exit code.
    (project / "test_bad.py").write_text("def test_bad():\n    assert False\n")
    assert _run(["pytest", "-q", "-p", "no:cacheprovider"], project, env).returncode == 1
    assert not (project / "reports").exists()


@pytest.mark.slow
def test_readme_commands_from_an_empty_folder(installed: dict[str, object],
                                              tmp_path: Path) -> None:
    env = _venv_env(installed)
    work = tmp_path / "my-deployment"
    work.mkdir()
    # The user's profile: the demo's, written where they run (any deployment would do).
    shipped = _run([str(installed["py"]), "-c", "from specgate.core.profile import "
                    "default_profile_path as d; print(d())"], work, env)
    assert "site-packages" in shipped.stdout, shipped.stdout
    shutil.copy(shipped.stdout.strip(), work / "my.toml")
    timings: dict[str, float] = {}

    def run(name: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
        t0 = time.monotonic()
        proc = _run(argv, work, env, timeout=300)
        timings[name] = round(time.monotonic() - t0, 1)
        return proc

    # pytest-profiling owns --profile in this environment: the long name, with a space.
    offline = run("offline", ["pytest", "-m", "probe and not live",
                              "--specgate-profile", "my.toml"])
    assert offline.returncode == 0, offline.stdout + offline.stderr
    doc = json.loads((work / "reports" / "verdict.json").read_text())
    assert doc["outcome"] == "passed", doc
    assert len(doc["claims"]) == 16, doc
    # The demo's assets are generated here, never inside the installed package.
    assert (work / ".specgate" / "demo" / "drafter" / "config.json").exists()
    # The README's line as written, where pytest-profiling is not active (-p no:profiling).
    plain = run("plain", ["pytest", "-p", "no:profiling", "-m", "probe and not live",
                          "--profile", "my.toml"])
    assert plain.returncode == 0, plain.stdout + plain.stderr
    # --profile where pytest-profiling owns it: one clear sentence, not a collection error.
    clash = run("clash", ["pytest", "-m", "probe and not live", "--profile", "my.toml"])
    assert clash.returncode == 4
    assert "--specgate-profile my.toml" in clash.stderr, clash.stderr
    named = run("clash-named", ["pytest", "-m", "probe and not live", "--profile", "demo"])
    assert named.returncode == 4
    assert "--specgate-profile demo" in named.stderr, named.stderr

    live = run("live", ["pytest", "-m", "probe", "--specgate-profile=my.toml"])
    assert live.returncode == 0, live.stdout[-3000:] + live.stderr[-3000:]
    doc = json.loads((work / "reports" / "verdict.json").read_text())
    ids = {c["id"]: c["status"] for c in doc["claims"]}
    assert ids["spec.speedup"] == "passed", ids
    assert doc["simulated"] is True
    assert "outcome PASSED" in live.stdout
    # The gate line of the README, space form, drafter given.
    gate = run("gate", ["pytest", "-m", "gate and not live", "--specgate-profile", "my.toml",
                        "--drafter", str(work / ".specgate" / "demo" / "drafter")])
    assert gate.returncode == 0, gate.stdout[-3000:]
    # SGLang is not installed here: preflight says so and fails, so CI cannot pass unchecked.
    preflight = run("preflight", ["specgate", "preflight", "my.toml"])
    assert preflight.returncode == 2, preflight.stdout + preflight.stderr
    assert "No module named 'sglang'" in preflight.stdout
    if shutil.which("npm") is None or shutil.which("node") is None:
        pytest.skip(f"npm/node not on PATH: `specgate report` not tried (timings {timings})")
    report = run("report", ["specgate", "report"])
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    assert (work / "reports" / "allure-report" / "index.html").stat().st_size > 10_000
    print(f"install {installed['install_s']:.1f}s, commands {timings}")


@pytest.mark.slow
def test_installed_use_explains_itself(installed: dict[str, object], tmp_path: Path) -> None:
    """From a folder with no pytest configuration: skipped claims say why, at the claim and not
    at a path of this machine; --profile=NAME beside pytest-profiling gets specgate's hint; the
    command says its version."""
    env = _venv_env(installed)
    work = tmp_path / "elsewhere"
    work.mkdir()
    skipped = _run(["pytest", "-p", "no:profiling", "-m", "phase2", "--profile", "demo"], work,
                   env)
    assert skipped.returncode == 1, skipped.stdout + skipped.stderr  # nothing evaluated
    lines = [ln for ln in skipped.stdout.splitlines() if ln.startswith("SKIPPED")]
    assert len(lines) == 6, skipped.stdout
    for line in lines:
        assert line.startswith("SKIPPED [1] specgate_suites/phase2/test_data.py:"), line
        assert "no [data] path" in line, line
    assert "site-packages" not in skipped.stdout
    clash = _run(["pytest", "-m", "phase2", "--profile=demo"], work, env)
    assert clash.returncode == 4
    assert "--specgate-profile=demo" in clash.stderr, clash.stderr
    assert "ignored explicit argument" not in clash.stderr
    version = _run(["specgate", "--version"], work, env)
    assert version.returncode == 0, version.stderr
    import tomllib

    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert version.stdout.strip() == f"specgate {declared}"
