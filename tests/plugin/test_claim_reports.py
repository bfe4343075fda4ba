"""What a claims run tells its reader: every claim's Allure description and plain status
message, named teardown steps, skip reasons at the claim, and a shared cause said once."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import suite_support as ss

# Its tests share a costly fixture: one xdist worker runs them all (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("test_claim_reports")

SUITE = ss.suite(
    """
@pytest.fixture(scope="session")
def server():
    raise ServerError("the speculative server exited with code 1 before it was ready",
                      "RuntimeError: CUDA error: the drafter weights are gone")
""",
    ss.passing(), ss.FAILING, ss.broken("/x/model.safetensors: header too long"), ss.SKIPPED,
    ss.claim("live_a", fixtures=("server",)),
    ss.claim("live_b", fixtures=("server",)),
    # Two claims a drafter folder broke: one says only the cause, one a message of its own.
    ss.claim("folder_a", 'check(claims.broken("demo.folder_a", "phase0", EMPTY, cause=EMPTY))'),
    ss.claim("folder_b", 'check(claims.broken("demo.folder_b", "phase0", '
                         '"the speculative server did not start", cause=EMPTY))'),
    imports="from specgate.core.errors import ServerError\n"
            "EMPTY = '/d: the folder is empty; expected config.json and *.safetensors weights'")
LOG_LINE = "CUDA error: the drafter weights are gone"
SERVER_FAILED = "the speculative server exited with code 1 before it was ready"
EMPTY = "/d: the folder is empty"
SAID_ONCE = "its cause is said once, with every claim it broke, in the specgate verdict below"
BROKEN = ["demo.broken", "demo.folder_a", "demo.folder_b", "demo.live_a", "demo.live_b"]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    project = ss.project(tmp_path_factory.mktemp("claims"), SUITE, name="reports",
                         drafter=False)
    # pytest expands the variable in --junitxml's path: the claims' junit.xml is that file.
    proc = subprocess.run([sys.executable, "-m", "pytest", "--profile", "p.toml",
                           "--junitxml=${JUNIT_DIR}/junit.xml"], cwd=project,
                          env={**os.environ, "JUNIT_DIR": "ci"},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return project, proc


def _results(project: Path) -> dict[str, dict]:
    out = {}
    for path in (project / "reports" / "allure-results").glob("*-result.json"):
        doc = json.loads(path.read_text(encoding="utf-8"))
        claim = [lab["value"] for lab in doc["labels"] if lab["name"] == "claim"]
        out[claim[0]] = doc
    return out


def test_every_claim_has_its_description_passed_or_not(run) -> None:
    project, _ = run
    results = _results(project)
    assert sorted(results) == sorted([*BROKEN, "demo.fail", "demo.pass", "demo.skip"])
    assert results["demo.pass"]["status"] == "passed"
    # Observed and expected first: a long message never pushes them below the fold.
    assert results["demo.pass"]["description"] == "Observed 3; expected >= 2.\n\nfine"
    assert results["demo.fail"]["description"] == (
        "Observed 252 positions; expected >= 31680 positions.\n\n252 of 32000 positions match")
    assert results["demo.broken"]["description"] == "/x/model.safetensors: header too long"
    assert results["demo.skip"]["description"] == "no reference drafter given"
    for cid in ("demo.live_a", "demo.live_b"):  # broken by a fixture: no check() ran
        assert "exited with code 1 before it was ready" in results[cid]["description"], cid


def test_status_messages_are_the_plain_sentence(run) -> None:
    project, _ = run
    results = _results(project)
    messages = {cid: doc.get("statusDetails", {}).get("message") for cid, doc in results.items()}
    assert messages["demo.fail"] == "demo.fail: 252 of 32000 positions match"
    assert messages["demo.broken"] == "demo.broken: /x/model.safetensors: header too long"
    assert messages["demo.skip"] == "demo.skip: no reference drafter given"
    assert messages["demo.live_a"].startswith("the speculative server exited with code 1")
    for message in messages.values():
        assert not message or not re.match(r"[\w.]*(ClaimBroken|Failed|Skipped|Error): ",
                                           message), message


def test_teardown_steps_have_names(run) -> None:
    project, _ = run
    names = [after["name"]
             for path in (project / "reports" / "allure-results").glob("*-container.json")
             for after in json.loads(path.read_text(encoding="utf-8")).get("afters", [])]
    # pytest 9 ends each fixture's teardown with a finalizer of its own, which allure-pytest
    # records as a step; pytest 8 calls the same hook directly, and records none.
    assert names or pytest.version_tuple < (9,), "no fixture teardown was recorded"
    assert not [n for n in names if "<lambda>" in n], names
    # The suite's own fixtures are named after themselves; the harness's (check, profile) are
    # not reported as steps of the claim at all.
    assert all(n.endswith("::teardown") for n in names), names
    assert not [n for n in names if n.split("::")[0] in ("check", "profile", "reports_dir")]


def test_teardown_steps_have_a_status(run) -> None:
    """Every fixture step, set-up and teardown, ends with a status (Allure shows a step
    without one as "?")."""
    project, _ = run
    steps = [(kind, step)
             for path in (project / "reports" / "allure-results").glob("*-container.json")
             for kind in ("befores", "afters")
             for step in json.loads(path.read_text(encoding="utf-8")).get(kind, [])]
    assert [s for kind, s in steps if kind == "afters"] or pytest.version_tuple < (9,), steps
    unfinished = [(kind, s["name"]) for kind, s in steps
                  if s.get("status") not in ("passed", "failed", "broken", "skipped")
                  or "stop" not in s]
    assert not unfinished, unfinished


def test_skips_are_listed_at_the_claim_without_a_config_asking(run) -> None:
    _, proc = run
    skips = [line for line in proc.stdout.splitlines() if line.startswith("SKIPPED")]
    # At the claim's own test (its claim marker), not at the plugin's line that raised the skip.
    assert skips == [f"SKIPPED [1] suites/test_claims.py:{_line_of('demo.skip')}: "
                     "demo.skip: no reference drafter given"], proc.stdout
    assert any(line.startswith("FAILED suites/test_claims.py::test_fail")
               for line in proc.stdout.splitlines()), proc.stdout


def test_a_shared_cause_is_said_once_with_the_claims_it_broke(run) -> None:
    project, proc = run
    for said in (LOG_LINE, SERVER_FAILED, EMPTY):
        assert proc.stdout.count(said) == 1, (said, proc.stdout)
    block = proc.stdout[proc.stdout.index("specgate verdict"):]
    assert f"BROKEN  2 claims by one cause: {SERVER_FAILED}" in block
    assert "broke: demo.live_a, demo.live_b" in block
    assert f"BROKEN  2 claims by one cause: {EMPTY}" in block
    assert "broke: demo.folder_a, demo.folder_b" in block
    # Each claim's own report is short and points at the cause.
    for claim_id in ("demo.live_a", "demo.live_b", "demo.folder_a"):
        assert f"BROKEN {claim_id}: {SAID_ONCE}\n" in proc.stdout, claim_id
    assert (f"BROKEN demo.folder_b: the speculative server did not start; {SAID_ONCE}\n"
            in proc.stdout)
    doc = json.loads((project / "reports" / "verdict.json").read_text())
    assert [c["claims"] for c in doc["causes"]] == [["demo.live_a", "demo.live_b"],
                                                    ["demo.folder_a", "demo.folder_b"]]
    assert LOG_LINE in doc["causes"][0]["message"]
    messages = {claim["id"]: claim["message"] for claim in doc["claims"]}
    assert messages["demo.live_a"] == SERVER_FAILED
    assert messages["demo.folder_b"] == "the speculative server did not start"
    for claim in doc["claims"]:
        assert LOG_LINE not in claim["message"], claim
        assert "cause" not in claim


def test_broken_claims_are_errors_in_pytests_counts_as_in_the_verdict(run) -> None:
    project, proc = run
    counts = json.loads((project / "reports" / "verdict.json").read_text())["counts"]
    assert counts == {"passed": 1, "failed": 1, "broken": 5, "skipped": 1}
    last = proc.stdout.strip().splitlines()[-1]
    said = dict((word, int(n)) for n, word in re.findall(r"(\d+) (\w+)", last.split(" in ")[0]))
    assert said == {"passed": 1, "failed": 1, "errors": 5, "skipped": 1}, last
    errors = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("ERROR ")]
    assert sorted(e.rsplit("::test_", 1)[1] for e in errors) == sorted(
        c.removeprefix("demo.") for c in BROKEN)


def test_junit_names_each_testcase_by_its_claim_and_a_broken_claim_is_an_error(run) -> None:
    import xml.etree.ElementTree as ET

    project, _ = run
    suite = ET.parse(project / "ci" / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert sorted(cases) == sorted([*BROKEN, "demo.fail", "demo.pass", "demo.skip"])
    outcomes = {name: [child.tag for child in case if child.tag != "properties"]
                for name, case in cases.items()}
    assert outcomes == {**{cid: ["error"] for cid in BROKEN}, "demo.fail": ["failure"],
                        "demo.pass": [], "demo.skip": ["skipped"]}
    assert (suite.get("errors"), suite.get("failures")) == ("5", "1")
    # Read alone in a CI dashboard, an error says the claim's message and its whole cause.
    live = cases["demo.live_a"].find("error")
    assert live is not None
    assert live.get("message") == f"demo.live_a: {SERVER_FAILED}"
    assert LOG_LINE in (live.text or "")
    folder = cases["demo.folder_b"].find("error")
    assert folder is not None
    assert folder.get("message") == "demo.folder_b: the speculative server did not start"
    assert EMPTY in (folder.text or "")


def _line_of(claim_id: str) -> int:
    return next(i for i, line in enumerate(SUITE.splitlines(), start=1)
                if line == f'@pytest.mark.claim("{claim_id}")')


def test_under_xdist_broken_claims_are_errors_and_junit_is_by_claim_too(
        tmp_path: Path) -> None:
    """With -n, the reports reach pytest's summary and junit.xml through the xdist controller."""
    import xml.etree.ElementTree as ET

    project = ss.project(tmp_path, SUITE, name="reports", drafter=False)
    proc = subprocess.run([sys.executable, "-m", "pytest", "--profile", "p.toml", "-n", "2"],
                          cwd=project, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    said = dict((word, int(n)) for n, word in re.findall(r"(\d+) (\w+)", last.split(" in ")[0]))
    assert said == {"passed": 1, "failed": 1, "errors": 5, "skipped": 1}, last
    doc = json.loads((project / "reports" / "verdict.json").read_text())
    assert {c["id"]: c["message"] for c in doc["claims"]}["demo.live_a"] == SERVER_FAILED
    suite = ET.parse(project / "reports" / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    errors = sorted(str(case.get("name")) for case in suite.iter("testcase")
                    if case.find("error") is not None)
    assert errors == sorted(BROKEN)
