"""environment.properties, executor.json and categories for Allure."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specgate.claims.result import ClaimResult, Status
from specgate.core.profile import parse_profile
from specgate.report import allure_meta

# (status, status message as allure-pytest writes it) → the one category it belongs in.
CASES = [
    ("failed", "Failed: vocab.d2t_match: d2t: 252 of 32000 draft positions match",
     "Checkpoint incompatible"),
    ("failed", "Failed: config.hidden_size: config.json has hidden_size 4096, expected 7168",
     "Checkpoint incompatible"),
    ("failed", "Failed: weights.layout: fc.weight has shape [7168, 7168]\nmore lines",
     "Checkpoint incompatible"),
    ("failed", "Failed: finetune.vocab_alignment: 12 of 32000 positions agree",
     "Checkpoint incompatible"),
    ("failed", "Failed: spec.breakeven: accept length 1.90 is below break-even 2.46",
     "Below break-even"),
    ("failed", "Failed: spec.speedup: 0.73x, CI [0.70, 0.76]", "Below break-even"),
    ("failed", "Failed: eval.live_agreement: offline prediction 1.569 vs measured 1.195",
     "Offline prediction off"),
    ("failed", "Failed: regress.accept_len: accept length 2.1 against 2.6",
     "Regressed since last pass"),
    ("broken", "specgate.core.errors.ServerError: GET http://127.0.0.1:30000/health: no answer",
     "Server failed"),
    ("broken", "fixtures.plugin.ClaimBroken: perf.baseline_tps: the baseline measurement could "
     "not be made: start: exited 1\n--- last lines of the server log ---\nCUDA OOM",
     "Server failed"),
    ("broken", "fixtures.plugin.ClaimBroken: spec.accept_len: POST "
     "http://127.0.0.1:30001/generate: the stream ended without any message", "Server failed"),
    ("broken", "fixtures.plugin.ClaimBroken: finetune.progress: metrics.jsonl line 3: no field "
     "'accuracy'", "Harness error"),
    ("broken", "KeyError: 'hidden_size'", "Harness error"),
    # The plain sentences the results carry once the run has tidied them (no exception name).
    ("failed", "vocab.d2t_match: d2t: 252 of 32000 draft positions match",
     "Checkpoint incompatible"),
    ("failed", "spec.speedup: 0.73x, CI [0.70, 0.76]", "Below break-even"),
    ("broken", "perf.baseline_tps: the baseline measurement could not be made: the baseline "
     "server did not start", "Server failed"),
    ("broken", "env.server_env: no server started, so its environment could not be read: the "
     "speculative server did not start", "Server failed"),
    ("broken", "env.server_env: no server could be used, so its environment could not be "
     "read: the speculative server could not be reached or attached to (attach mode: specgate "
     "launched nothing)", "Server failed"),
    ("broken", "GET http://127.0.0.1:30000/health: no answer", "Server failed"),
    ("broken", "finetune.progress: metrics.jsonl line 3: no field 'accuracy'", "Harness error"),
]


def _allure2_matches(status: str, message: str) -> list[str]:
    """Every categories.json rule that matches, the way Allure 2 does (whole-message match)."""
    return [
        c["name"] for c in allure_meta.categories_json()
        if status in c["matchedStatuses"] and re.fullmatch(c["messageRegex"], message)
    ]


@pytest.mark.parametrize(("status", "message", "expected"), CASES)
def test_categories_json_puts_each_message_in_exactly_one_category(
    status: str, message: str, expected: str
) -> None:
    assert _allure2_matches(status, message) == [expected]
    # Allure 3 searches instead of matching whole: the anchors keep the answer the same.
    searched = [c["name"] for c in allure_meta.categories_json()
                if status in c["matchedStatuses"] and re.search(c["messageRegex"], message)]
    assert searched == [expected]


def test_failed_claims_of_other_families_fall_to_the_default_category() -> None:
    assert _allure2_matches("failed", "Failed: perf.baseline_tps: 61.0 tok/s < 82") == []
    assert _allure2_matches("failed", "Failed: env.gpu_clean: pid 4242 holds GPU 0") == []
    assert _allure2_matches("failed", "Failed: eval.teacher_forced: step-0 loss 18.7") == []


@given(st.text(max_size=200))
def test_every_broken_message_lands_in_one_category(message: str) -> None:
    assert len(_allure2_matches("broken", "fixtures.plugin.ClaimBroken: " + message)) == 1


def _awesome_category(status: str, message: str, story: str | None) -> str | None:
    """The first awesome category that matches, as Allure 3's matchObjectMatcher decides."""
    for category in allure_meta.awesome_categories():
        for m in category["matchers"]:
            if status not in m["statuses"]:
                continue
            if "labels" in m and not (story and re.search(m["labels"]["story"], story)):
                continue
            if "message" in m and not re.search(m["message"], message):
                continue
            if "trace" in m and not re.search(m["trace"], ""):
                continue
            return str(category["name"])
    return None


@pytest.mark.parametrize(("status", "message", "expected"), CASES)
def test_awesome_categories_agree_with_categories_json(
    status: str, message: str, expected: str
) -> None:
    assert _awesome_category(status, message, story=None) == expected


def test_awesome_categories_match_the_claim_label_even_without_the_id_in_the_message() -> None:
    assert _awesome_category("failed", "Failed: 252 of 32000", "vocab.d2t_match") == (
        "Checkpoint incompatible")
    assert _awesome_category("failed", "AssertionError", "spec.accept_len") == "Below break-even"
    assert _awesome_category("failed", "Failed: off", "eval.live_agreement") == (
        "Offline prediction off")
    assert _awesome_category("failed", "Failed: slow", "perf.baseline_tps") is None


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not on PATH")
def test_every_regex_compiles_in_javascript() -> None:
    """Allure 3 runs the patterns through JavaScript's RegExp, which lacks Python's (?s) etc."""
    patterns = [c["messageRegex"] for c in allure_meta.categories_json()]
    for category in allure_meta.awesome_categories():
        for m in category["matchers"]:
            patterns += [v for k, v in m.items() if k in ("message", "trace")]
            patterns += list(m.get("labels", {}).values())
    script = "for (const p of JSON.parse(process.argv[1])) new RegExp(p);"
    node = shutil.which("node")
    assert node is not None
    proc = subprocess.run([node, "-e", script, json.dumps(patterns)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr


def test_write_categories_writes_the_json(tmp_path: Path) -> None:
    path = allure_meta.write_categories(tmp_path / "allure-results")
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert [c["name"] for c in doc] == [c.name for c in allure_meta.CATEGORIES]
    assert all(c["matchedStatuses"] and c["messageRegex"] for c in doc)


def test_status_message_puts_the_claim_id_first() -> None:
    result = ClaimResult("vocab.d2t_match", "phase0", Status.FAILED, "252 of 32000")
    text = "Failed: " + allure_meta.status_message(result)
    assert _allure2_matches("failed", text) == ["Checkpoint incompatible"]


def _read_properties(text: str) -> dict[str, str]:
    """The escapes write_environment uses, decoded the way Java's Properties.load does."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, i, cur = "", 0, []
        in_key = True
        while i < len(line):
            ch = line[i]
            if ch == "\\":
                nxt = line[i + 1]
                if nxt == "u":
                    cur.append(chr(int(line[i + 2:i + 6], 16)))
                    i += 6
                    continue
                cur.append({"n": "\n", "r": "\r", "t": "\t"}.get(nxt, nxt))
                i += 2
                continue
            if in_key and ch == "=":
                key, cur, in_key = "".join(cur), [], False
            else:
                cur.append(ch)
            i += 1
        out[_pairs(key)] = _pairs("".join(cur))
    return out


def _pairs(text: str) -> str:
    """Join UTF-16 surrogate pairs that \\u escapes produced one half at a time."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16")


@given(st.dictionaries(st.text(min_size=1, max_size=20).filter(
    lambda k: not re.search("key|token|secret|password|authorization", k, re.I)),
    st.text(max_size=40), max_size=5))
def test_environment_round_trips_any_text(info: dict[str, str]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = allure_meta.write_environment(Path(tmp), info, detect=False)
        raw = path.read_bytes()
    assert raw.isascii()
    assert _read_properties(raw.decode("ascii")) == info


def test_environment_carries_given_and_detected_values(tmp_path: Path) -> None:
    path = allure_meta.write_environment(tmp_path, {
        "profile": "kimi-k2.5", "drafter": "/data/eagle3/k25 drafter", "target": None,
        "server": "simulated", "sglang.version": "0.5.4", "server.api_key": "sk-123",
        "gpus": ["H200", "H200"],
    })
    props = _read_properties(path.read_text(encoding="ascii"))
    assert props["profile"] == "kimi-k2.5"
    assert props["drafter"] == "/data/eagle3/k25 drafter"
    assert "target" not in props
    assert props["server"] == "simulated"
    assert props["server.api_key"] == allure_meta.REDACTED
    assert "sk-123" not in path.read_text(encoding="ascii")
    assert props["gpus"] == "H200, H200"
    assert props["specgate.version"]
    assert props["python.version"].count(".") == 2


def test_gpus_come_from_nvidia_smi_when_it_exists(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\nfor i in 0 1; do echo 'NVIDIA H200, 570.86.15'; done\n"
                    "echo 'NVIDIA RTX PRO 6000, 570.86.15'\n", encoding="utf-8")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    info = allure_meta.detect_environment()
    assert info["gpu"] == "NVIDIA H200 x2, NVIDIA RTX PRO 6000"
    assert info["gpu.driver"] == "570.86.15"


def test_no_gpu_keys_without_nvidia_smi(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allure_meta.shutil, "which", lambda name: None)
    assert not {"gpu", "gpu.driver"} & set(allure_meta.detect_environment())


def test_executor_names_the_github_run() -> None:
    env = {"GITHUB_ACTIONS": "true", "GITHUB_RUN_ID": "77", "GITHUB_RUN_NUMBER": "12",
           "GITHUB_REPOSITORY": "acme/drafters", "GITHUB_SERVER_URL": "https://github.com",
           "GITHUB_WORKFLOW": "gate"}
    doc = allure_meta.executor_info(env, report_name="specgate — demo")
    assert doc["name"] == "specgate"
    assert doc["buildUrl"] == "https://github.com/acme/drafters/actions/runs/77"
    assert doc["buildName"] == "gate #12"
    assert doc["buildOrder"] == 12
    assert doc["reportName"] == "specgate — demo"


@pytest.mark.parametrize(("env", "url"), [
    ({"GITLAB_CI": "true", "CI_JOB_URL": "https://gl/j/5", "CI_JOB_NAME": "gate"}, "https://gl/j/5"),
    ({"JENKINS_URL": "https://ci", "BUILD_URL": "https://ci/job/g/9/", "BUILD_NUMBER": "9"},
     "https://ci/job/g/9/"),
    ({"BUILDKITE_BUILD_URL": "https://bk/b/3", "BUILDKITE_BUILD_NUMBER": "3"}, "https://bk/b/3"),
])
def test_executor_names_other_ci_builds(env: dict[str, str], url: str) -> None:
    assert allure_meta.executor_info(env)["buildUrl"] == url


def test_executor_outside_ci_is_just_specgate(tmp_path: Path) -> None:
    path = allure_meta.write_executor(tmp_path, env={})
    assert json.loads(path.read_text(encoding="utf-8")) == {"name": "specgate", "type": "specgate"}


def test_write_all_describes_the_run(tmp_path: Path) -> None:
    profile = parse_profile({"name": "kimi-k2.5", "server": {"tp": 8},
                             "speculative": {"num_steps": 2, "eagle_topk": 1,
                                             "num_draft_tokens": 3}})
    doc = {"profile": "kimi-k2.5", "drafter": "/d/k25", "reference": None, "target": "/m/k25",
           "simulated": False, "outcome": "failed", "sglang_version": "0.5.4"}
    allure_meta.write_all(tmp_path, profile, doc)
    props = _read_properties((tmp_path / "environment.properties").read_text(encoding="ascii"))
    assert props["profile"] == "kimi-k2.5"
    assert props["server"] == "real"
    assert props["server.tp"] == "8"
    assert props["sglang.version"] == "0.5.4"
    assert props["speculative"] == "algorithm=EAGLE3 num_steps=2 eagle_topk=1 num_draft_tokens=3"
    assert "reference_drafter" not in props
    executor = json.loads((tmp_path / "executor.json").read_text(encoding="utf-8"))
    assert executor["reportName"] == "specgate — kimi-k2.5"
    assert (tmp_path / "categories.json").exists()


def test_the_outcome_and_key_figures_lead_the_environment(tmp_path: Path) -> None:
    figure = {"label": "speed-up", "claim": "spec.speedup", "value": 1.5595, "unit": "x",
              "ci_low": 1.5036, "ci_high": 1.6154, "confidence": 0.9833}
    base = {"label": "baseline", "claim": "perf.baseline_tps", "value": 817.43,
            "unit": "tok/s", "ci_low": None, "ci_high": None, "confidence": None}
    doc = {"profile": "demo", "simulated": True, "outcome": "passed",
           "figures": {"baseline_tps": base, "speedup": figure}}
    allure_meta.write_all(tmp_path, None, doc)
    lines = (tmp_path / "environment.properties").read_text(encoding="ascii").splitlines()
    assert [_read_properties(line) for line in lines[:4]] == [
        {"outcome": "passed"}, {"baseline tok/s": "817.4 tok/s"},
        {"speed-up": "1.560× [1.504, 1.615]"}, {"intervals": "98.33 % confidence"}]
