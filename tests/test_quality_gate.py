"""The report's Quality Gates tab (specgate/report/quality_gate.py, specgate/data/allure/
generate.mjs): the verdict's outcome and the claims that decided it, as the pinned Allure 3
shows them, for a claims run that fails and one that passes."""

from __future__ import annotations

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
CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))
                 if p), None)
ROOT = Path(__file__).resolve().parent.parent
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

def _claims_run(folder: Path, *, hidden_size: int) -> tuple[int, Path]:
    """`pytest -m "probe and not live"` on the demo profile, its drafter expected to have
    `hidden_size` (256 matches the demo drafter), in a fresh folder with its own cache."""
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
    assert (folder / "reports" / "verdict.json").is_file(), proc.stdout + proc.stderr
    return proc.returncode, folder / "reports"


def _tab(index: Path, probe: str = "") -> str:
    """The page as the browser shows it with the Quality Gates tab open, after `probe` ran."""
    page = index.with_name("probed.html")
    page.write_text(index.read_text(encoding="utf-8").replace(
        "</body>", f"<script>setTimeout(() => {{ {probe} }}, 4000)</script></body>", 1),
        encoding="utf-8")
    assert CHROMIUM is not None
    proc = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=8000",
         "--dump-dom", f"{page.as_uri()}#/qualityGate"],
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_NODE, reason="node and npm are needed to run Allure Report 3")
def test_a_failing_runs_report_shows_a_failed_gate_with_its_claims(tmp_path: Path) -> None:
    code, reports = _claims_run(tmp_path / "failing", hidden_size=999)
    doc = json.loads((reports / "verdict.json").read_text(encoding="utf-8"))
    assert code == 1
    assert doc["outcome"] == "failed"
    built = report.build(reports)
    widget = json.loads(embedded_files(built.index)["widgets/quality-gate.json"])
    shown = [r for env in widget.values() for r in env]
    assert [(r["rule"], r["actual"], r["success"]) for r in shown] == [
        ("specgate verdict", "failed", False), ("config.hidden_size", "failed", False)]
    assert shown[1]["message"].endswith("hidden_size is 256, expected 999")
    html = built.index.read_text(encoding="utf-8")
    assert 'data-specgate="quality-gate"' not in html
    if CHROMIUM is None:
        return
    dom = _tab(built.index)
    (counter,) = re.findall(r'data-testid="nav-tab-qualityGate"[^>]*>.*?(<small[^>]*>\d+</small>)',
                            dom)
    assert "status-failed" in counter
    assert counter.endswith(">2</small>")
    assert re.findall(r'data-testid="quality-gate-result-rule"[^>]*>([^<]*)<', dom) == [
        "specgate verdict", "config.hidden_size"]
    assert "FAILED (15 passed, 1 failed): the gate fails the job" in dom


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_NODE, reason="node and npm are needed to run Allure Report 3")
def test_a_passing_runs_report_says_the_gate_passed(tmp_path: Path) -> None:
    code, reports = _claims_run(tmp_path / "passing", hidden_size=256)
    doc = json.loads((reports / "verdict.json").read_text(encoding="utf-8"))
    assert code == 0
    assert doc["outcome"] == "passed"
    built = report.build(reports)
    widget = json.loads(embedded_files(built.index)["widgets/quality-gate.json"])
    assert [r for env in widget.values() for r in env] == []
    note = quality_gate.passed_note(doc)
    assert note is not None
    assert note in built.index.read_text(encoding="utf-8")
    if CHROMIUM is None:
        return
    # The note is drawn by the stylesheet: read it from the element the tab shows it on.
    dom = _tab(built.index, probe=(
        f"const el = document.querySelector({json.dumps(report._EMPTY_GATE_TAB)}); "
        "document.body.dataset.note = el ? el.textContent + ' | ' + "
        "getComputedStyle(el, '::after').content : 'no such element';"))
    (counter,) = re.findall(r'data-testid="nav-tab-qualityGate"[^>]*>.*?(<small[^>]*>\d+</small>)',
                            dom)
    assert "status-failed" not in counter
    assert counter.endswith(">0</small>")
    (said,) = re.findall(r'<body[^>]*data-note="([^"]*)"', dom)
    text = said.replace("&quot;", '"').replace("&amp;", "&")
    assert text == f'No quality gate results available | "{note}"'
