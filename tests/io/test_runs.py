"""Runs that share a reports folder: each in its own run folder, one at a time, published whole;
a verdict, published or not, never holds two runs' claims."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fault_support as fh
import pytest

from specgate.io import runs

# A claim that names its run (RUN_TAG) and, given SLOW_MARK, says it started and waits for
# SLOW_GO: the handshake that makes two runs overlap without guessing at timings.
TAGGED = '''
import os, time
import pytest
from specgate.claims import result as claims

TAG = os.environ["RUN_TAG"]

@pytest.mark.probe
@pytest.mark.phase0
@pytest.mark.claim("demo.tag")
def test_tag(check):
    check(claims.passed("demo.tag", "phase0", f"run {TAG}"))

@pytest.mark.probe
@pytest.mark.phase0
@pytest.mark.claim("demo.slow")
def test_slow(check):
    if os.environ.get("SLOW_MARK"):
        open(os.environ["SLOW_MARK"], "w").close()
        while not os.path.exists(os.environ["SLOW_GO"]):
            time.sleep(0.02)
    check(claims.passed("demo.slow", "phase0", f"run {TAG}"))
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The demo profile's offline claims plus the two tagged claims, reports in reports/."""
    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "test_tagged.py").write_text(TAGGED)
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    return tmp_path


def _argv(project: Path, *args: str) -> list[str]:
    import specgate_suites

    suites = str(Path(specgate_suites.__file__).resolve().parent)
    return [sys.executable, "-m", "pytest", "-c", str(project / "pytest.ini"),
            f"--rootdir={project}", "-m", "probe and not live", "--specgate-profile=demo",
            f"--specgate-reports={project / 'reports'}", suites, str(project / "extra"), *args]


def _start(project: Path, tag: str, *args: str, slow: bool = False,
           out: Path | None = None) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["RUN_TAG"] = tag
    if slow:
        env.update(SLOW_MARK=str(project / "slow-started"), SLOW_GO=str(project / "go"))
    with open(out or project / f"{tag}.out", "w") as log:
        return subprocess.Popen(_argv(project, *args), cwd=project, env=env, stdout=log,
                                stderr=subprocess.STDOUT, text=True,
                                preexec_fn=fh.as_foreground_job)


def _start_slow(project: Path) -> subprocess.Popen[str]:
    """Run A, once it is in its slow claim (which goes on when project/go exists)."""
    first = _start(project, "A", slow=True)
    if not _until(lambda: (project / "slow-started").exists()):
        first.kill()
        first.wait()
        pytest.fail(f"A never reached its slow claim:\n{(project / 'A.out').read_text()}")
    return first


def _wait(proc: subprocess.Popen[str], timeout_s: float = 180) -> int:
    try:
        return proc.wait(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _until(predicate: Callable[[], bool], timeout_s: float = 120) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


class Watcher:
    """Reads reports/verdict.json and the published allure-results over and over while runs go,
    keeping every distinct thing it saw."""

    def __init__(self, reports: Path) -> None:
        self.reports = reports
        self.verdicts: list[dict[str, Any]] = []
        self.allure_tags: list[set[str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        last = None
        while True:
            stopping = self._stop.is_set()  # one more look after the stop: the last state
            try:
                text = (self.reports / "verdict.json").read_text(encoding="utf-8")
            except OSError:
                text = None
            if text and text != last:
                self.verdicts.append(json.loads(text))  # replaced atomically: always whole
                last = text
            tags = _allure_tags(self.reports / "allure-results")
            if tags is not None:
                self.allure_tags.append(tags)
            if stopping:
                return
            time.sleep(0.05)


def _allure_tags(results: Path) -> set[str] | None:
    """The run tags of the demo.tag and demo.slow results in an Allure results folder."""
    tags = set()
    try:
        for path in results.glob("*-result.json"):
            doc = json.loads(path.read_text(encoding="utf-8"))
            claim = [lab["value"] for lab in doc.get("labels", []) if lab["name"] == "claim"]
            if claim and claim[0] in ("demo.tag", "demo.slow"):
                tags.add(str(doc.get("description", "")).split()[1])
    except (OSError, ValueError, IndexError):
        return None  # caught in the middle of a swap
    return tags


def _tags(doc: dict[str, Any]) -> set[str]:
    return {c["message"].split()[1] for c in doc["claims"]
            if c["id"] in ("demo.tag", "demo.slow")}


def _run_ids(project: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    for folder in sorted((project / "reports" / "runs").iterdir()):
        if folder.is_dir():
            yield folder.name, json.loads((folder / "verdict.json").read_text(encoding="utf-8"))


@pytest.mark.slow
def test_a_second_run_waits_and_no_verdict_mixes_runs(project: Path) -> None:
    reports = project / "reports"
    with Watcher(reports) as watcher:
        first = _start(project, "A", "-n", "2", slow=True)
        assert _until(lambda: (project / "slow-started").exists()), \
            (project / "A.out").read_text()
        second = _start(project, "B")
        said = _until(lambda: "waiting up to" in (project / "B.out").read_text())
        # B is held still while A ends, so the verdict A publishes last can be read before B
        # could take the folder; B then goes on as a run that waited.
        second.send_signal(signal.SIGSTOP)
        try:
            (project / "go").touch()
            code_a = _wait(first)
            left_by_a = json.loads((reports / "verdict.json").read_text())
            seen_by_watcher = _until(lambda: bool(watcher.verdicts)
                                     and watcher.verdicts[-1] == left_by_a)
        finally:
            second.send_signal(signal.SIGCONT)
        codes = code_a, _wait(second)
    out_b = (project / "B.out").read_text()
    assert codes == (0, 0), (project / "A.out").read_text() + out_b
    assert said, out_b
    assert seen_by_watcher
    assert (left_by_a["interim"], _tags(left_by_a)) == (False, {"A"})
    finished = dict(_run_ids(project))
    assert len(finished) == 2
    (run_a, doc_a), (run_b, doc_b) = sorted(finished.items(),
                                            key=lambda kv: sorted(_tags(kv[1])))
    assert (_tags(doc_a), _tags(doc_b)) == ({"A"}, {"B"})
    assert f"in use by specgate run {run_a}" in out_b  # names the run it waits for
    tag_of = {run_a: "A", run_b: "B"}
    # Every verdict anyone could read holds one run's claims, under that run's id, each once.
    seen = [*watcher.verdicts, doc_a, doc_b]
    for doc in seen:
        ids = [c["id"] for c in doc["claims"]]
        assert len(ids) == len(set(ids)), ids
        assert _tags(doc) <= {tag_of[doc["run"]["id"]]}, (doc["run"], _tags(doc))
    # One run at a time: the published verdict went A (interim…, final), then B, never back.
    order = [(d["run"]["id"], d["interim"]) for d in watcher.verdicts]
    runs_seen = [r for r, _ in order]
    assert runs_seen == sorted(runs_seen, key=lambda r: r != run_a), order
    assert (run_a, False) in order
    assert order.index((run_a, False)) < runs_seen.index(run_b), order
    assert order[-1] == (run_b, False)
    # The published Allure results were one run's at every look, and are B's now.
    assert all(len(tags) <= 1 for tags in watcher.allure_tags), watcher.allure_tags
    assert _allure_tags(reports / "allure-results") == {"B"}
    assert _allure_tags(reports / "runs" / run_a / "allure-results") == {"A"}
    published = json.loads((reports / "verdict.json").read_text())
    assert published == doc_b
    # The history records each finished run once, in the order they finished.
    history = [json.loads(line) for line in
               (reports / "history" / "verdicts.jsonl").read_text().splitlines()]
    assert [h["run"] for h in history] == [run_a, run_b]


@pytest.mark.slow
def test_a_run_told_not_to_wait_is_refused_with_its_own_verdict(project: Path) -> None:
    reports = project / "reports"
    first = _start_slow(project)
    try:
        published = (reports / "verdict.json").read_text()
        second = _start(project, "B", "--specgate-reports-wait=0")
        code = _wait(second)
        out_b = (project / "B.out").read_text()
        assert code == 4, out_b
        assert "is writing its reports there" in out_b
        assert "--specgate-reports=DIR" in out_b
        assert "Traceback" not in out_b
        # The refused run's verdict is in its own folder; the published one is still A's.
        refused = [doc for _, doc in _run_ids(project) if doc["outcome"] == "error"]
        assert len(refused) == 1
        assert [c["id"] for c in refused[0]["claims"]] == ["reports"]
        assert json.loads((reports / "verdict.json").read_text())["run"] == \
            json.loads(published)["run"]
    finally:
        (project / "go").touch()
        assert _wait(first) == 0


@pytest.mark.slow
def test_ctrl_c_while_waiting_leaves_an_interrupted_verdict_of_its_own(project: Path) -> None:
    reports = project / "reports"
    first = _start_slow(project)
    try:
        second = _start(project, "B")
        assert _until(lambda: "waiting up to" in (project / "B.out").read_text())
        second.send_signal(signal.SIGINT)
        code = _wait(second, 60)
        out_b = (project / "B.out").read_text()
        assert code == 2, out_b
        assert "stopped while waiting" in out_b
        assert "Traceback" not in out_b
        stopped = [doc for _, doc in _run_ids(project) if doc["outcome"] == "interrupted"
                   and not doc["interim"]]
        assert len(stopped) == 1, list(_run_ids(project))
        assert json.loads((reports / "verdict.json").read_text())["interim"] is True  # A's
    finally:
        (project / "go").touch()
        assert _wait(first) == 0
    assert _tags(json.loads((reports / "verdict.json").read_text())) == {"A"}


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_a_signal_mid_claim_publishes_an_interrupted_verdict(project: Path,
                                                             sig: signal.Signals) -> None:
    reports = project / "reports"
    first = _start_slow(project)
    first.send_signal(sig)
    assert _wait(first, 60) == 2, (project / "A.out").read_text()
    ((_run_id, own),) = _run_ids(project)
    # docs/verdict.md: a run stopped before every selected claim reported is not complete; the
    # claim the signal stopped, and those after it, are listed as not reported, not broken.
    assert (own["outcome"], own["interim"], own["complete"]) == ("interrupted", False, False)
    assert "demo.slow" in own["not_reported"], own["not_reported"]
    reported = {c["id"] for c in own["claims"]}
    assert reported
    assert not reported & set(own["not_reported"])
    assert "broken" not in {c["status"] for c in own["claims"]}
    assert own["counts"]["passed"] == len(own["claims"])
    assert json.loads((reports / "verdict.json").read_text()) == own
    assert _allure_tags(reports / "allure-results") == {"A"}  # the claims that finished


@pytest.mark.slow
def test_a_killed_run_leaves_its_interim_verdict_and_the_next_run_publishes(
        project: Path) -> None:
    reports = project / "reports"
    first = _start_slow(project)
    first.send_signal(signal.SIGKILL)
    _wait(first, 60)
    killed = json.loads((reports / "verdict.json").read_text())
    assert (killed["outcome"], killed["interim"], killed["complete"]) == (
        "interrupted", True, False)
    assert not (reports / "history" / "verdicts.jsonl").exists()
    (project / "go").touch()
    second = _start(project, "B")
    assert _wait(second) == 0, (project / "B.out").read_text()
    doc = json.loads((reports / "verdict.json").read_text())
    assert doc["run"]["id"] != killed["run"]["id"]
    assert (_tags(doc), doc["interim"]) == ({"B"}, False)
    history = (reports / "history" / "verdicts.jsonl").read_text().splitlines()
    assert [json.loads(line)["run"] for line in history] == [doc["run"]["id"]]


def test_a_broken_profile_publishes_an_error_verdict(project: Path) -> None:
    (project / "bad.toml").write_text('name = "x"\n[servr]\nport = 1\n')
    argv = [a if not a.startswith("--specgate-profile") else "--specgate-profile=bad.toml"
            for a in _argv(project)]
    proc = subprocess.run(argv, cwd=project, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "RUN_TAG": "A"})
    assert proc.returncode == 4, proc.stdout + proc.stderr
    ((_run_id, own),) = _run_ids(project)
    published = json.loads((project / "reports" / "verdict.json").read_text())
    assert published == own
    assert (own["outcome"], own["interim"]) == ("error", False)
    assert own["claims"][0]["id"] == "profile"
    assert "unknown key 'servr'" in own["claims"][0]["message"]


def test_outputs_the_user_placed_are_left_where_they_are(project: Path) -> None:
    """--junitxml into the reports folder and --alluredir elsewhere: pytest and allure write
    them, and publishing neither replaces nor removes them."""
    reports = project / "reports"
    reports.mkdir()
    (reports / "junit.xml").write_text("an earlier job's")
    proc = subprocess.run(_argv(project, f"--junitxml={reports / 'junit.xml'}",
                                f"--alluredir={project / 'mine'}"),
                          cwd=project, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "RUN_TAG": "A"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "<testsuite" in (reports / "junit.xml").read_text()
    assert _allure_tags(project / "mine") == {"A"}
    assert not (reports / "allure-results").exists()
    ((_run_id, own),) = _run_ids(project)
    assert json.loads((reports / "verdict.json").read_text()) == own


# -- the run folders themselves ----------------------------------------------------------------

def _made(reports: Path, files: dict[str, str]) -> runs.RunFolder:
    run = runs.new_run(reports)
    for name, text in files.items():
        (run.path / name).parent.mkdir(parents=True, exist_ok=True)
        (run.path / name).write_text(text)
    return run


def test_publishing_replaces_the_published_files_and_removes_what_the_run_lacks(
        tmp_path: Path) -> None:
    old = _made(tmp_path, {"verdict.json": "old", "junit.xml": "old",
                           "allure-results/a-result.json": "old", "live/results.json": "old"})
    assert runs.publish(old) == []
    new = _made(tmp_path, {"verdict.json": "new", "allure-results/b-result.json": "new"})
    assert runs.publish(new) == []
    assert (tmp_path / "verdict.json").read_text() == "new"
    assert sorted(p.name for p in (tmp_path / "allure-results").iterdir()) == ["b-result.json"]
    assert not (tmp_path / "junit.xml").exists()
    assert not (tmp_path / "live").exists()
    # The run folders keep their own files; no staging folder is left behind.
    assert (old.path / "allure-results" / "a-result.json").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".specgate")) == [
        "allure-results", "runs", "verdict.json"]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == sorted(
        [old.id, new.id, runs.LATEST_FILE])
    # What is published, and which run it is, are taken together.
    assert runs.published_run(tmp_path) == new.id
    (tmp_path / "copy").mkdir()
    copy, run_id = runs.snapshot(tmp_path, "allure-results", tmp_path / "copy")
    assert run_id == new.id
    assert copy is not None
    assert sorted(p.name for p in copy.iterdir()) == ["b-result.json"]


def test_prune_keeps_the_newest_runs_and_the_current_one(tmp_path: Path) -> None:
    import datetime as dt

    base = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    made = [runs.new_run(tmp_path, now=base + dt.timedelta(minutes=i)) for i in range(6)]
    removed = runs.prune(tmp_path, keep=3, spare=made[0].id)
    assert removed == [made[1].id, made[2].id]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == sorted(
        [made[0].id] + [r.id for r in made[3:]])


def test_a_run_folder_belongs_to_its_reports_folder(tmp_path: Path) -> None:
    run = runs.new_run(tmp_path)
    assert runs.reports_root(run.path) == tmp_path
    assert runs.reports_root(tmp_path) == tmp_path
    (tmp_path / "runs" / "not-a-run").mkdir()
    assert runs.reports_root(tmp_path / "runs" / "not-a-run") == tmp_path / "runs" / "not-a-run"
