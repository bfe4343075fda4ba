"""`specgate report`: the pinned Allure 3, its config, and a real report built from results."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from allure_support import CLAIM_IDS, embedded_files, make_results

from specgate.cli.report import main_report
from specgate.io.runs import PUBLISH_LOCK
from specgate.report import allure_meta
from specgate.report import build as report
from specgate.report.build import ReportError

HAVE_NODE = shutil.which("node") is not None and shutil.which("npm") is not None


def _fake_tool(folder: Path, name: str, script: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n" + script + "\n", encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_the_pin_is_the_last_allure_whose_quality_gate_runs_on_node_20() -> None:
    assert report.allure_version() == "3.14.3"
    data = Path(__file__).resolve().parents[2] / "specgate" / "data" / "allure"
    lock = json.loads((data / "package-lock.json").read_text(encoding="utf-8"))
    assert lock["packages"][""]["dependencies"]["allure"] == "3.14.3"
    assert lock["packages"]["node_modules/allure"]["version"] == "3.14.3"
    assert lock["packages"]["node_modules/@allurereport/plugin-awesome"]["version"] == "3.14.3"


def test_cache_dir_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECGATE_NPM_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert report.cache_dir() == tmp_path / "xdg" / "specgate" / "allure-3.14.3"
    monkeypatch.setenv("SPECGATE_NPM_CACHE", str(tmp_path / "npm"))
    assert report.cache_dir() == tmp_path / "npm" / "allure-3.14.3"


def test_config_makes_one_single_file_report_with_categories_and_history(tmp_path: Path) -> None:
    doc = report.allure_config(tmp_path / "out", tmp_path / "h.jsonl", name="specgate — demo")
    assert doc["output"] == str(tmp_path / "out")
    assert doc["historyPath"] == str(tmp_path / "h.jsonl")
    assert list(doc["plugins"]) == ["awesome"]
    assert doc["plugins"]["awesome"]["options"]["singleFile"] is True
    assert [c["name"] for c in doc["categories"]] == [c.name for c in allure_meta.CATEGORIES]


def test_strip_analytics_removes_the_tag_manager(tmp_path: Path) -> None:
    page = tmp_path / "index.html"
    page.write_text(
        '<body><div id="app"></div>\n'
        '    <script async src="https://www.googletagmanager.com/gtag/js?id=G-X"></script>\n'
        "    <script>\n        window.dataLayer = window.dataLayer || [];\n"
        "        gtag('config', 'G-X', {});\n    </script>\n"
        "    <script>window.keep = 1;</script></body>", encoding="utf-8")
    assert report.strip_analytics(page) is True
    text = page.read_text(encoding="utf-8")
    assert "googletagmanager" not in text
    assert "dataLayer" not in text
    assert "window.keep = 1" in text
    assert report.strip_analytics(page) is False


@pytest.mark.parametrize(("stats", "shown"), [
    ({"total": 6, "passed": 1, "failed": 2, "broken": 2, "skipped": 1}, "20%"),
    ({"total": 27, "passed": 25, "skipped": 2}, "100%"),
    ({"total": 3, "passed": 2, "failed": 1}, "66.66%"),
    ({"total": 4, "broken": 2, "skipped": 2}, "0"),
    ({"total": 2, "skipped": 2}, "n/a"),
    ({}, None),
    ({"total": "x"}, None),
], ids=["mixed", "all-judged-passed", "no-skips", "none-passed", "all-skipped", "empty",
        "not-stats"])
def test_the_ring_scores_the_claims_judged(stats: dict[str, object], shown: str | None) -> None:
    assert report.ring_score(stats) == shown


def test_the_ring_and_the_error_boxes_are_styled_once(tmp_path: Path) -> None:
    page = tmp_path / "index.html"
    page.write_text("<html><head></head><body></body></html>", encoding="utf-8")
    stats = {"total": 6, "passed": 1, "skipped": 1}
    assert report.ring_without_skips(page, stats) is True
    assert report.wrap_errors(page) is True
    assert report.ring_without_skips(page, stats) is False
    assert report.wrap_errors(page) is False
    text = page.read_text(encoding="utf-8")
    assert text.count('content:"20%"') == 1
    assert text.count("white-space:pre-wrap") == 1
    assert text.index("</style></head>") < text.index("<body>")


def test_missing_node_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report.shutil, "which", lambda name: None)
    with pytest.raises(ReportError, match=r"needs Node\.js 20\+ with npm.*node and npm is not"):
        report.find_node()


def test_old_node_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_tool(tmp_path, "node", "echo v18.19.0")
    _fake_tool(tmp_path, "npm", "exit 0")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ReportError, match=r"is Node\.js v18\.19\.0.*needs Node\.js 20"):
        report.find_node()


def test_failed_npm_ci_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tools = tmp_path / "bin"
    _fake_tool(tools, "node", "echo v20.20.2")
    _fake_tool(tools, "npm", "echo 'npm error code ENOTFOUND registry.npmjs.org' >&2; exit 1")
    monkeypatch.setenv("PATH", str(tools))
    with pytest.raises(ReportError, match=r"(?s)npm ci.*exit 1.*SPECGATE_NPM_CACHE.*ENOTFOUND"):
        report.ensure_allure(tmp_path / "cache" / "allure-3.14.3")
    assert list((tmp_path / "cache").iterdir()) == [tmp_path / "cache" / "allure-3.14.3.lock"]


def test_no_results_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match=r"no Allure results in .*allure-results: run the claims"):
        report.build_report(tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_NODE, reason="node and npm are needed to run Allure Report 3")
def test_a_real_report_across_two_runs(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    results = make_results(tmp_path / "run1", reports / "allure-results", round_=1)
    allure_meta.write_environment(results, {"profile": "démo", "server": "simulated",
                                            "sglang.version": "0.5.4"})
    allure_meta.write_executor(results, env={})
    (reports / "verdict.json").write_text('{"profile": "démo"}', encoding="utf-8")

    first = report.build(reports)
    assert first.index == reports / "allure-report" / "index.html"
    assert first.history_appended
    assert first.summary["stats"] == {"total": 6, "new": 6, "failed": 2, "passed": 1,
                                      "skipped": 1, "broken": 2}
    assert first.summary["name"] == "specgate — démo"
    html = first.index.read_text(encoding="utf-8")
    assert "googletagmanager" not in html
    files = embedded_files(first.index)
    results_by_name = {}
    for name, body in files.items():
        if name.startswith("data/test-results/"):
            doc = json.loads(body)
            results_by_name[doc["name"]] = doc
    assert sorted(results_by_name) == sorted(CLAIM_IDS)
    category = {n: [c["name"] for c in d.get("categories") or []]
                for n, d in results_by_name.items()}
    assert category["vocab.d2t_match"] == ["Checkpoint incompatible"]
    assert category["spec.breakeven"] == ["Below break-even"]
    assert category["perf.baseline_tps"] == ["Server failed"]
    assert category["finetune.progress"] == ["Harness error"]
    environment = json.loads(files["widgets/allure_environment.json"])
    assert {"name": "profile", "values": ["démo"]} in environment
    history_file = reports / "history" / report.ALLURE_HISTORY_FILE
    assert len(history_file.read_text(encoding="utf-8").splitlines()) == 1

    again = report.build(reports)
    assert not again.history_appended
    assert len(history_file.read_text(encoding="utf-8").splitlines()) == 1

    shutil.rmtree(reports / "allure-results")
    make_results(tmp_path / "run2", reports / "allure-results", round_=2)
    second = report.build(reports)
    assert second.history_appended
    assert len(history_file.read_text(encoding="utf-8").splitlines()) == 2
    assert second.summary["stats"].get("new", 0) == 0  # the same six claims as before
    assert second.summary["stats"]["failed"] == 1
    charts = json.loads(embedded_files(second.index)["widgets/charts.json"])["general"]
    by_type = {c["type"]: c for c in charts.values()}
    assert len(by_type["statusDynamics"]["data"]) == 2  # the trend spans both runs
    assert by_type["statusTransitions"]["data"][-1]["fixed"] == 1  # vocab.d2t_match
    # No scratch folder is left behind (the publish lock file stays, as every lock file does).
    assert sorted(p.name for p in reports.iterdir() if p.name != PUBLISH_LOCK) == [
        "allure-report", "allure-results", "history", "verdict.json"]


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_NODE, reason="node and npm are needed to run Allure Report 3")
def test_a_report_of_one_run_folder_keeps_the_reports_folders_history(tmp_path: Path) -> None:
    from specgate.io import runs

    reports = tmp_path / "reports"
    run = runs.new_run(reports)
    make_results(tmp_path / "run1", run.path / "allure-results", round_=1)
    built = report.build(run.path)
    assert built.index == run.path / "allure-report" / "index.html"
    assert built.history_appended
    assert (reports / "history" / report.ALLURE_HISTORY_FILE).exists()
    assert not (run.path / "history").exists()


def test_summary_line_counts_what_ran() -> None:
    summary = {"stats": {"total": 6, "failed": 2, "passed": 1, "skipped": 1, "broken": 2}}
    assert report.summary_line(summary) == "6 claims: 1 passed, 2 failed, 2 broken, 1 skipped"
    assert report.summary_line({}) == "0 claims: none ran"


def test_main_report_without_results_raises_for_the_cli(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="no Allure results"):
        main_report(["--reports", str(tmp_path)])


def test_the_report_title_is_that_of_the_run_it_shows(tmp_path: Path) -> None:
    """While a later run goes, verdict.json is its interim one; the published results, and so
    the title, are still the last finished run's."""
    from specgate.io import runs

    shown = runs.new_run(tmp_path)
    (shown.path / "verdict.json").write_text(json.dumps({"profile": "finished"}))
    (tmp_path / "verdict.json").write_text(json.dumps({"profile": "going", "interim": True}))
    assert report._report_name(tmp_path, shown.id) == "specgate — finished"
    assert report._report_name(tmp_path, None) == "specgate — going"


def test_the_report_title_says_simulated(tmp_path: Path) -> None:
    # The title is the first thing the report shows; the environment list hides most lines.
    verdict = tmp_path / "verdict.json"
    verdict.write_text(json.dumps({"profile": "demo", "simulated": True}), encoding="utf-8")
    assert report._report_name(tmp_path) == "specgate — demo (simulated server)"
    verdict.write_text(json.dumps({"profile": "k25", "simulated": False}), encoding="utf-8")
    assert report._report_name(tmp_path) == "specgate — k25"


# A stand-in for the script that runs Allure's `generate` (specgate/data/allure/generate.mjs),
# doing to the history what Allure 3.14 does: it reads the history file it is pointed at for the
# trend charts, then appends this run's line. It logs which lines it saw, so a test can read the
# trend data each report got.
FAKE_ALLURE = '''
import json, os, pathlib, sys
_, results, config, _ = sys.argv[1:5]
doc = json.loads(pathlib.Path(config).read_text())
history = pathlib.Path(doc["historyPath"])
seen = history.read_text().splitlines() if history.exists() else []
with open(os.environ["FAKE_ALLURE_LOG"], "a") as log:
    log.write(json.dumps(seen) + "\\n")
run = sorted(p.name.split("-")[0] for p in pathlib.Path(results).glob("*-result.json"))
with open(history, "a") as fh:
    fh.write(json.dumps(run) + "\\n")
out = pathlib.Path(doc["output"])
out.mkdir(parents=True)
(out / "index.html").write_text("<html></html>")
if os.environ.get("FAKE_ALLURE_SUMMARY_FIFO"):
    os.mkfifo(out / "summary.json")
else:
    (out / "summary.json").write_text(json.dumps({"stats": {"total": len(run)}}))
'''


@pytest.fixture
def fake_allure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import sys

    cli = tmp_path / "fake-allure" / "cli.py"
    cli.parent.mkdir()
    cli.write_text(FAKE_ALLURE, encoding="utf-8")
    log = tmp_path / "fake-allure" / "seen.jsonl"
    monkeypatch.setenv("FAKE_ALLURE_LOG", str(log))
    monkeypatch.setattr(report, "find_node", lambda: (Path(sys.executable), Path("npm")))
    monkeypatch.setattr(report, "ensure_allure", lambda *a, **k: cli)
    monkeypatch.setattr(report, "generate_script", lambda: cli)
    return log


def _results(reports: Path, run: str) -> None:
    results = reports / "allure-results"
    if results.exists():
        shutil.rmtree(results)
    results.mkdir(parents=True)
    (results / f"{run}-result.json").write_text("{}", encoding="utf-8")


def test_each_report_gets_the_runs_before_it_as_its_trend(tmp_path: Path,
                                                          fake_allure: Path) -> None:
    reports = tmp_path / "reports"
    history_file = reports / "history" / report.ALLURE_HISTORY_FILE
    built = []
    for run in ("run1", "run1", "run2", "run2", "run3"):  # each run's report built twice
        _results(reports, run)
        built.append(report.build(reports).history_appended)
    seen = [json.loads(line) for line in fake_allure.read_text().splitlines()]
    one, two = '["run1"]', '["run2"]'
    # A rebuild sees what the first build of that run saw: the earlier runs, each once.
    assert seen == [[], [], [one], [one], [one, two]]
    assert built == [True, False, True, False, True]
    assert history_file.read_text().splitlines() == [one, two, '["run3"]']


# `specgate report` with the stand-in Allure, in a process of its own: a build that blocks on a
# named pipe ends at the ceiling instead of holding the test run.
BUILD_WITH_FAKE_ALLURE = '''
import sys
from pathlib import Path
from specgate.cli import main
from specgate.report import build as report
report.find_node = lambda: (Path(sys.executable), Path("npm"))
report.ensure_allure = lambda *a, **k: Path(sys.argv[2])
report.generate_script = lambda: Path(sys.argv[2])
sys.exit(main(["report", "--reports", sys.argv[1]]))
'''


def _report_in_child(tmp_path: Path, reports: Path,
                     **env: str) -> subprocess.CompletedProcess[str]:
    cli = tmp_path / "fake-allure.py"
    cli.write_text(FAKE_ALLURE, encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-c", BUILD_WITH_FAKE_ALLURE, str(reports), str(cli)],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "FAKE_ALLURE_LOG": str(tmp_path / "seen.jsonl"), **env})


@pytest.mark.parametrize("where", ["verdict.json", "history/allure-history.jsonl",
                                   "history/.allure-appended"])
def test_a_named_pipe_in_the_reports_folder_is_named_not_waited_on(tmp_path: Path,
                                                                    where: str) -> None:
    reports = tmp_path / "reports"
    _results(reports, "run1")
    assert _report_in_child(tmp_path, reports).returncode == 0  # a history and its mark
    (reports / where).unlink(missing_ok=True)
    os.mkfifo(reports / where)
    done = _report_in_child(tmp_path, reports)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.strip() == (
        f"specgate report: {reports / where}: is a FIFO (named pipe), not a regular file; "
        "move it aside and build the report again"), done.stderr


def test_a_named_pipe_for_allures_summary_is_named_not_waited_on(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    _results(reports, "run1")
    done = _report_in_child(tmp_path, reports, FAKE_ALLURE_SUMMARY_FIFO="1")
    assert done.returncode == 1, done.stdout + done.stderr
    summary = reports / "allure-report" / "summary.json"
    assert done.stderr.strip() == (
        f"specgate report: {summary}: is a FIFO (named pipe), not a regular file; "
        "move it aside and build the report again"), done.stderr
