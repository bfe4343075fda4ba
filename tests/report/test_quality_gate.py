"""The report's Quality Gates tab (specgate/report/quality_gate.py, specgate/data/allure/
generate.mjs): the verdict's outcome and the claims that decided it, as the pinned Allure 3
shows them, for a claims run that fails and one that passes."""

from __future__ import annotations

import dataclasses
import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from allure_support import embedded_files

from specgate.claims import result as claims
from specgate.claims import verdict
from specgate.report import build as report
from specgate.report import quality_gate

HAVE_NODE = shutil.which("node") is not None and shutil.which("npm") is not None
# CHROMIUM_PATH (tox passes it through) wins over whatever is on PATH.
CHROMIUM = os.environ.get("CHROMIUM_PATH") or next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "specgate" / "profiles" / "demo.toml"


def _doc(*results: claims.ClaimResult, outcome: str | None = None, **extra: Any) -> dict[str, Any]:
    found = list(results)
    return verdict.build(found, profile="p", drafter=None,
                         outcome=outcome or verdict.outcome_of(found), extra=extra or None)


def _by_name(rules: list[quality_gate.GateRule]) -> dict[str, quality_gate.GateRule]:
    return {r.rule: r for r in rules}


def test_a_failed_verdict_fails_the_gate_and_lists_the_claims_that_decided_it() -> None:
    doc = _doc(
        claims.passed("config.hidden_size", "phase0", "hidden_size is 256"),
        claims.failed("spec.breakeven", "phase0", "accept length 1.90 is below break-even 2.46"),
        claims.broken("vocab.d2t_match", "phase0", "d2t.safetensors: not a safetensors file"),
        claims.broken("perf.baseline_tps", "phase0", "server exited", cause="server exited: OOM"),
        claims.broken("spec.speedup", "phase0", "server exited", cause="server exited: OOM"),
        claims.skipped("eval.teacher_forced", "phase1", "no [finetune] hidden_states"))
    assert doc["outcome"] == "failed"
    rules = quality_gate.gate_rules(doc, Path("verdict.json"))
    assert [r.rule for r in rules] == [
        "specgate verdict", "spec.breakeven", "vocab.d2t_match", "perf.baseline_tps, spec.speedup"]
    assert not any(r.success for r in rules)
    head = rules[0]
    assert (head.expected, head.actual) == ("passed", "failed")
    assert head.message == ("FAILED (1 passed, 1 failed, 3 broken, 1 skipped): the gate fails "
                            "the job, for the claims listed below")
    named = _by_name(rules)
    assert named["spec.breakeven"].message == (
        "FAILED: accept length 1.90 is below break-even 2.46")
    assert named["vocab.d2t_match"].actual == "broken"
    assert named["perf.baseline_tps, spec.speedup"].message == (
        "BROKEN (2 claims by one cause): server exited: OOM")
    assert quality_gate.passed_note(doc) is None


def test_a_passed_verdict_passes_every_rule_and_the_tab_says_so() -> None:
    doc = _doc(claims.passed("config.hidden_size", "phase0", "hidden_size is 256"),
               claims.skipped("eval.teacher_forced", "phase1", "no [finetune] hidden_states"))
    rules = quality_gate.gate_rules(doc, Path("verdict.json"))
    assert [(r.rule, r.actual, r.success) for r in rules] == [
        ("specgate verdict", "passed", True)]
    note = quality_gate.passed_note(doc)
    assert note is not None
    assert note.startswith("specgate verdict: PASSED (1 passed, 1 skipped): the gate passes "
                           "the job.")


@pytest.mark.parametrize("doc", [None, {"profile": "p"}, {"outcome": "passed"}],
                         ids=["no-verdict", "no-outcome", "no-claims"])
def test_no_verdict_is_a_gate_that_cannot_pass(doc: dict[str, Any] | None) -> None:
    (rule,) = quality_gate.gate_rules(doc, Path("/r/verdict.json"))
    assert (rule.rule, rule.actual, rule.success) == ("specgate verdict", "unknown", False)
    assert rule.message.startswith("UNKNOWN: /r/verdict.json ")
    assert quality_gate.passed_note(doc) is None


def test_a_run_where_nothing_ran_or_that_stopped_says_why() -> None:
    none_ran = _doc(nothing_ran="no test matched -m 'gate and nothing'", complete=False)
    (rule,) = quality_gate.gate_rules(none_ran, Path("verdict.json"))
    assert (rule.actual, rule.success) == ("error", False)
    assert rule.message == (
        "ERROR: the gate fails the job. No claim ran: no test matched -m 'gate and nothing'. "
        "This verdict is not complete: the run stopped before every selected claim reported, or "
        "ended in a usage or internal error")
    stopped = _doc(claims.passed("config.hidden_size", "phase0", "ok"), outcome="interrupted")
    (rule,) = quality_gate.gate_rules(stopped, Path("verdict.json"))
    assert (rule.actual, rule.success) == ("interrupted", False)
    assert rule.message == "INTERRUPTED (1 passed): the gate fails the job"


def test_a_matrix_names_each_claim_with_its_checkpoint_once() -> None:
    speedup = claims.failed("spec.speedup", "phase0", "1.02× is not above 1.05")
    doc = verdict.build_matrix([("ckpt-a", speedup), ("ckpt-b", speedup)], [], profile="p",
                               outcome="failed")
    doc["claims"].append(dict(doc["claims"][0]))  # the same claim of the same checkpoint again
    names = [r.rule for r in quality_gate.gate_rules(doc, Path("verdict.json"))]
    assert names == ["specgate verdict", "[ckpt-a] spec.speedup", "[ckpt-b] spec.speedup",
                     "[ckpt-a] spec.speedup (2)"]


# -- the tab in a report the pinned Allure builds from a real claims run ------------------------
# One failing and one passing claims run, each with its report, shared by the tests below (one
# xdist worker runs them: tests/conftest.py).
REPORTS = "test_quality_gate_reports"
needs_node = pytest.mark.skipif(not HAVE_NODE, reason="node and npm are needed to run Allure 3")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH and no "
                                    "CHROMIUM_PATH (Debian: apt-get install -y chromium)")


@dataclasses.dataclass(frozen=True)
class Built:
    returncode: int
    verdict: dict[str, Any]
    index: Path

    def gate_widget(self) -> list[dict[str, Any]]:
        """The quality-gate results the report carries, over all its environments."""
        widget = json.loads(embedded_files(self.index)["widgets/quality-gate.json"])
        return [r for env in widget.values() for r in env]


def _claims_run(folder: Path, *, hidden_size: int) -> Built:
    """`pytest -m "probe and not live"` on the demo profile, its drafter expected to have
    `hidden_size` (256 matches the demo drafter), in a fresh folder with its own cache; then
    `specgate report`."""
    folder.mkdir(parents=True)
    profile = folder / "demo-checked.toml"
    text = DEMO.read_text(encoding="utf-8")
    assert "\nhidden_size = 256\n" in text
    profile.write_text(text.replace("\nhidden_size = 256\n", f"\nhidden_size = {hidden_size}\n"),
                       encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SPECGATE_"))}
    env["SPECGATE_CACHE"] = str(folder / "cache")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-m", "probe and not live",
         "--specgate-profile", str(profile)],
        cwd=folder, env=env, capture_output=True, text=True, timeout=600, check=False)
    reports = folder / "reports"
    assert (reports / "verdict.json").is_file(), proc.stdout + proc.stderr
    doc = json.loads((reports / "verdict.json").read_text(encoding="utf-8"))
    return Built(proc.returncode, doc, report.build(reports).index)


@pytest.fixture(scope="module")
def failing(tmp_path_factory: pytest.TempPathFactory) -> Built:
    if not HAVE_NODE:
        pytest.skip("node and npm are needed to run Allure 3")
    return _claims_run(tmp_path_factory.mktemp("gate") / "failing", hidden_size=999)


@pytest.fixture(scope="module")
def passing(tmp_path_factory: pytest.TempPathFactory) -> Built:
    if not HAVE_NODE:
        pytest.skip("node and npm are needed to run Allure 3")
    return _claims_run(tmp_path_factory.mktemp("gate") / "passing", hidden_size=256)


def _tab(index: Path, probe: str = "") -> str:
    """The page as headless Chromium shows it, offline, with the Quality Gates tab open, after
    the script `probe` ran in it."""
    page = index.with_name("probed.html")
    page.write_text(index.read_text(encoding="utf-8").replace(
        "</body>", f"<script>setTimeout(() => {{ {probe} }}, 4000)</script></body>", 1),
        encoding="utf-8")
    assert CHROMIUM is not None
    proc = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=8000",
         f"--user-data-dir={index.parent / 'chromium-profile'}",
         "--dump-dom", f"{page.as_uri()}#/qualityGate"],
        capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _counter(dom: str) -> str:
    (counter,) = re.findall(
        r'data-testid="nav-tab-qualityGate"[^>]*>.*?(<small[^>]*>\d+</small>)', dom)
    return counter


@pytest.mark.slow
@needs_node
@pytest.mark.xdist_group(REPORTS)
def test_a_failing_runs_report_carries_a_failed_gate_with_its_claims(failing: Built) -> None:
    assert failing.returncode == 1
    assert failing.verdict["outcome"] == "failed"
    shown = failing.gate_widget()
    assert [(r["rule"], r["actual"], r["success"]) for r in shown] == [
        ("specgate verdict", "failed", False), ("config.hidden_size", "failed", False)]
    assert shown[0]["message"] == (
        "FAILED (15 passed, 1 failed): the gate fails the job, for the claims listed below")
    assert shown[1]["message"].endswith("hidden_size is 256, expected 999")
    assert 'data-specgate="quality-gate"' not in failing.index.read_text(encoding="utf-8")


@pytest.mark.slow
@needs_node
@needs_chromium
@pytest.mark.xdist_group(REPORTS)
def test_a_failing_runs_tab_shows_the_gate_failed(failing: Built) -> None:
    dom = _tab(failing.index)
    counter = _counter(dom)
    assert "status-failed" in counter
    assert counter.endswith(">2</small>")
    assert re.findall(r'data-testid="quality-gate-result-rule"[^>]*>([^<]*)<', dom) == [
        "specgate verdict", "config.hidden_size"]
    assert "FAILED (15 passed, 1 failed): the gate fails the job" in dom


@pytest.mark.slow
@needs_node
@pytest.mark.xdist_group(REPORTS)
def test_a_passing_runs_report_carries_no_failed_rule_and_says_it_passed(passing: Built) -> None:
    assert passing.returncode == 0
    assert passing.verdict["outcome"] == "passed"
    assert passing.gate_widget() == []
    note = quality_gate.passed_note(passing.verdict)
    assert note is not None
    assert note in passing.index.read_text(encoding="utf-8")


@pytest.mark.slow
@needs_node
@needs_chromium
@pytest.mark.xdist_group(REPORTS)
def test_a_passing_runs_tab_says_the_gate_passed(passing: Built) -> None:
    # The stylesheet draws the sentence: read it from the element the tab shows it on.
    dom = _tab(passing.index, probe=(
        f"const el = document.querySelector({json.dumps(report._EMPTY_GATE_TAB)}); "
        "document.body.dataset.note = el ? el.textContent + ' | ' + "
        "getComputedStyle(el, '::after').content : 'no such element';"))
    counter = _counter(dom)
    assert "status-failed" not in counter
    assert counter.endswith(">0</small>")
    (said,) = re.findall(r'<body[^>]*data-note="([^"]*)"', dom)
    note = quality_gate.passed_note(passing.verdict)
    assert html.unescape(said) == f'No quality gate results available | "{note}"'
