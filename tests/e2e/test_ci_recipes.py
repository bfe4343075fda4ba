"""The CI recipes users copy (ci/github/specgate-gate.yml, ci/gitlab/specgate-gate.gitlab-ci.yml):
valid YAML, and each recipe's own commands, read from the file and run here in the order and
under the conditions its CI system runs them, on the demo profile. The runner's parts that are
not commands (the Actions cache, GitLab's cache, the artifact upload) are played from what the
recipe declares: the keys it names, the paths it keeps."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
GITHUB = ROOT / "ci" / "github" / "specgate-gate.yml"
GITLAB = ROOT / "ci" / "gitlab" / "specgate-gate.gitlab-ci.yml"
GATE = re.compile(r"^\s*pytest -m gate\b")
REGRESS = ("regress.accept_len", "regress.tps", "regress.accept_pos")

def _github() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(GITHUB.read_text(encoding="utf-8"))
    return doc


def _gitlab() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(GITLAB.read_text(encoding="utf-8"))
    return doc


def _gate_lines(commands: list[str]) -> list[str]:
    return [line.strip() for command in commands for line in command.splitlines()
            if GATE.match(line)]


def _base_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The runner's environment: no specgate or pytest settings of this test run, this
    interpreter's pytest and specgate first on PATH, demo assets in a folder of the test."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SPECGATE_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["SPECGATE_CACHE"] = str(tmp / "cache")
    return {**env, **extra}


def _demo_drafter(tmp: Path) -> Path:
    from specgate.testing.demo import ensure_assets

    return ensure_assets(tmp / "cache" / "demo") / "drafter"


def _shell(script: str, cwd: Path, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    # What both systems run a step's or a job's lines with: bash, stopping at the first error.
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
                          cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=600,
                          check=False)


def test_both_recipes_are_valid_yaml_and_run_the_same_gate() -> None:
    github, gitlab = _github(), _gitlab()
    job = github["jobs"]["gate"]
    on = github.get("on", github.get(True))  # YAML 1.1 reads a bare `on` as true
    assert isinstance(on, dict), github
    assert on, github
    for step in job["steps"]:
        assert ("uses" in step) != ("run" in step), step
    gh_lines = _gate_lines([s["run"] for s in job["steps"] if "run" in s])
    gl_job = gitlab["specgate-gate"]
    gl_lines = _gate_lines(gl_job["script"])
    assert len(gh_lines) == 1, gh_lines
    assert gh_lines == gl_lines, (gh_lines, gl_lines)
    # The gate is the job's outcome: GitLab's script holds it alone (after_script never fails a
    # job), and every GitHub step after it runs whatever it returned.
    assert [line.strip() for line in gl_job["script"]] == gl_lines
    after = job["steps"][[s.get("id") for s in job["steps"]].index("gate") + 1:]
    assert after
    assert all(s.get("if") == "always()" for s in after), after
    # What each keeps and uploads.
    uploads = [s for s in after if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    assert len(uploads) == 1
    kept = set(uploads[0]["with"]["path"].split())
    assert kept == set(gl_job["artifacts"]["paths"]) == {
        "reports/allure-report/", "reports/verdict.json", "reports/junit.xml"}
    assert gl_job["artifacts"]["when"] == "always"
    assert gl_job["artifacts"]["reports"]["junit"] == "reports/junit.xml"
    assert gl_job["cache"]["paths"] == ["reports/history/"]
    assert gl_job["cache"]["when"] == "always"
    assert "$CI_COMMIT_REF_SLUG" in gl_job["cache"]["key"]
    saves = [s for s in after if str(s.get("uses", "")).startswith("actions/cache/save")]
    assert len(saves) == 1
    assert saves[0]["with"]["path"] == "reports/history"
    # An Actions cache entry is never overwritten: the key must be new on every run.
    assert "github.run_id" in saves[0]["with"]["key"]


# -- GitHub Actions, played ---------------------------------------------------------------------

@dataclasses.dataclass
class GithubRun:
    outcome: int
    summary: str
    log: str
    uploaded: list[Path]


class ActionsCache:
    """The Actions cache as the recipe uses it: entries never overwritten, a restore by exact
    key, else the newest entry whose key starts with one of restore-keys, in their order."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.keys: list[str] = []

    def restore(self, key: str, prefixes: list[str], into: Path) -> str | None:
        found = key if key in self.keys else next(
            (k for p in prefixes for k in reversed(self.keys) if k.startswith(p)), None)
        if found is not None:
            shutil.copytree(self.root / str(self.keys.index(found)), into, dirs_exist_ok=True)
        return found

    def save(self, key: str, path: Path) -> None:
        assert key not in self.keys, f"cache key {key} saved twice: the save would be refused"
        if path.is_dir():
            shutil.copytree(path, self.root / str(len(self.keys)))
            self.keys.append(key)


def _expand(text: str, context: Mapping[str, Mapping[str, str]]) -> str:
    def one(match: re.Match[str]) -> str:
        scope, name = match.group(1).split(".", 1)
        return context[scope][name]
    return re.sub(r"\$\{\{\s*([\w.]+)\s*\}\}", one, text)


def _play_github(workdir: Path, tmp: Path, cache: ActionsCache, *, run_id: str,
                 env: Mapping[str, str]) -> GithubRun:
    job = _github()["jobs"]["gate"]
    workdir.mkdir(parents=True)
    summary_file = tmp / f"step-summary-{run_id}.md"
    summary_file.touch()
    context: dict[str, dict[str, str]] = {
        "github": {"ref_name": "main", "run_id": run_id, "run_attempt": "1",
                   "ref": "refs/heads/main"},
        "inputs": {"drafter": env["SPECGATE_GATE_DRAFTER"]},
    }
    job_env = {k: _expand(str(v), context) for k, v in job["env"].items()}
    job_env.update(env)  # the values a user sets
    context["env"] = job_env
    full_env = _base_env(tmp, **job_env, GITHUB_STEP_SUMMARY=str(summary_file))
    failed = False
    outcome = 0
    log: list[str] = []
    uploaded: list[Path] = []
    for step in job["steps"]:
        if failed and step.get("if") != "always()":
            continue
        uses = str(step.get("uses", ""))
        with_ = {k: _expand(str(v), context) for k, v in (step.get("with") or {}).items()}
        if uses.startswith("actions/cache/restore"):
            cache.restore(with_["key"], with_.get("restore-keys", "").split(),
                          workdir / with_["path"])
        elif uses.startswith("actions/cache/save"):
            cache.save(with_["key"], workdir / with_["path"])
        elif uses.startswith("actions/upload-artifact"):
            uploaded = [workdir / p for p in with_["path"].split()]
        elif "run" in step and step.get("id") != "install":
            done = _shell(step["run"], workdir, full_env)
            log.append(f"$ {step['run']}\n{done.stdout}{done.stderr}")
            if done.returncode != 0:
                failed = True
                outcome = outcome or done.returncode
    return GithubRun(outcome, summary_file.read_text(encoding="utf-8"), "\n".join(log), uploaded)


def _claims(verdict: Path) -> dict[str, dict[str, Any]]:
    doc = json.loads(verdict.read_text(encoding="utf-8"))
    return {c["id"]: c for c in doc["claims"]}


@pytest.mark.slow
def test_github_recipe_gates_uploads_summarises_and_keeps_the_history(tmp_path: Path) -> None:
    drafter = _demo_drafter(tmp_path)
    cache = ActionsCache(tmp_path / "actions-cache")
    user = {"SPECGATE_GATE_PROFILE": "demo", "SPECGATE_GATE_DRAFTER": str(drafter)}

    # A first run on an ephemeral runner: nothing to compare with.
    first = _play_github(tmp_path / "runner-1", tmp_path, cache, run_id="101", env=user)
    assert first.outcome == 0, first.log
    for path in first.uploaded:
        assert path.exists(), (path, first.log)
    assert (tmp_path / "runner-1/reports/allure-report/index.html").is_file()
    claims = _claims(tmp_path / "runner-1/reports/verdict.json")
    assert {claims[c]["reason"] for c in REGRESS} == {"no_reference"}
    assert "## specgate verdict: PASSED" in first.summary, first.summary
    assert "keep `reports/history/` between runs" in first.summary
    assert "| speed-up |" in first.summary
    assert cache.keys == ["specgate-history-my-deployment-main-101-1"]

    # The next run starts on a fresh runner: only the cache carries the history.
    second = _play_github(tmp_path / "runner-2", tmp_path, cache, run_id="102", env=user)
    assert second.outcome == 0, second.log
    claims = _claims(tmp_path / "runner-2/reports/verdict.json")
    assert {claims[c]["status"] for c in REGRESS} == {"passed"}, [claims[c] for c in REGRESS]
    first_doc = json.loads((tmp_path / "runner-1/reports/verdict.json").read_text())
    history = (tmp_path / "runner-2/reports/history/verdicts.jsonl").read_text().splitlines()
    assert [json.loads(line)["run"] for line in history] == [
        first_doc["run"]["id"], json.loads(
            (tmp_path / "runner-2/reports/verdict.json").read_text())["run"]["id"]]
    assert "keep `reports/history/`" not in second.summary
    assert cache.keys[-1] == "specgate-history-my-deployment-main-102-1"


# -- GitLab CI, played --------------------------------------------------------------------------

def _gitlab_vars(text: str, env: Mapping[str, str]) -> str:
    return re.sub(r"\$(\w+)", lambda m: env[m.group(1)], text)


@pytest.mark.slow
def test_gitlab_recipe_fails_the_job_and_still_keeps_everything(tmp_path: Path) -> None:
    """A failing gate (an empty drafter folder) fails the job; the summary, the report, the
    junit report and the history are there all the same."""
    _demo_drafter(tmp_path)
    empty = tmp_path / "empty-drafter"
    empty.mkdir()
    job = _gitlab()["specgate-gate"]
    predefined = {"CI_COMMIT_REF_SLUG": "feature-x", "CI_DEFAULT_BRANCH": "main"}
    variables = {**{k: str(v) for k, v in job["variables"].items()}, **predefined,
                 "SPECGATE_GATE_PROFILE": "demo", "SPECGATE_GATE_DRAFTER": str(empty)}
    env = _base_env(tmp_path, **variables)
    workdir = tmp_path / "build"
    workdir.mkdir()
    script = _shell("\n".join(job["script"]), workdir, env)
    after = _shell("\n".join(job["after_script"]), workdir, env)
    log = script.stdout + script.stderr + after.stdout + after.stderr

    assert script.returncode == 1, log
    assert after.returncode == 0, log
    assert "## specgate verdict: ERROR" in after.stdout, log
    assert str(empty) in after.stdout
    for path in job["artifacts"]["paths"]:
        assert (workdir / path).exists(), (path, log)
    assert (workdir / "reports/allure-report/index.html").is_file()
    assert (workdir / job["artifacts"]["reports"]["junit"]).read_text().startswith("<?xml")
    key = _gitlab_vars(job["cache"]["key"], env)
    assert key == "specgate-history-my-deployment-feature-x"
    assert [_gitlab_vars(k, env) for k in job["cache"]["fallback_keys"]] == [
        "specgate-history-my-deployment-main"]
    (kept,) = job["cache"]["paths"]
    lines = (workdir / kept / "verdicts.jsonl").read_text().splitlines()
    assert [json.loads(line)["outcome"] for line in lines] == ["error"]


# -- specgate summary on what is not a verdict ---------------------------------------------------

@pytest.mark.parametrize(("content", "said"), [
    (None, "no such verdict file"),
    ("not json", "not a verdict file: it is not JSON"),
    ('{"profile": "demo"}', 'not a verdict file: it has no "outcome" and "claims"'),
])
def test_summary_of_what_is_not_a_verdict_is_one_sentence(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None,
        said: str) -> None:
    from specgate.cli import main

    path = tmp_path / "verdict.json"
    if content is not None:
        path.write_text(content)
    assert main(["summary", str(path)]) == 1
    out = capsys.readouterr()
    assert out.out == ""
    (line,) = out.err.splitlines()
    assert line.startswith(f"specgate summary: {path}: {said}"), line
