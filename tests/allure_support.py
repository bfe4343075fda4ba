"""A tiny pytest session with allure-pytest, labelled like specgate's claims, for report tests."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

# Labelled the way specgate/plugin/session.py labels claims: epic = phase title, feature = family,
# story = claim id; failed claims call pytest.fail, broken ones raise a non-assertion error,
# both with "<claim id>: <message>".
_SAMPLE = '''
import allure
import pytest

from specgate.claims.result import PHASE_TITLES, family_of

ROUND = {round}


class ClaimBroken(Exception):
    pass


def claim(claim_id, phase="phase0", critical=True):
    allure.dynamic.epic(PHASE_TITLES[phase])
    allure.dynamic.feature(family_of(claim_id))
    allure.dynamic.story(claim_id)
    allure.dynamic.title(claim_id)
    if critical:
        allure.dynamic.severity(allure.severity_level.CRITICAL)
    allure.dynamic.parameter("profile", "demo")


def test_config_hidden_size():
    claim("config.hidden_size")
    allure.dynamic.description("config.json carries hidden_size = 7168")


def test_vocab_d2t_match():
    claim("vocab.d2t_match")
    if ROUND == 1:
        pytest.fail("vocab.d2t_match: d2t: 252 of 32000 draft positions map to the same "
                    "target token as the reference", pytrace=False)


def test_spec_breakeven():
    claim("spec.breakeven")
    allure.attach(b"tau,tps\\n1.9,60.2\\n", name="targets",
                  attachment_type=allure.attachment_type.CSV)
    pytest.fail("spec.breakeven: accept length 1.90 is below break-even 2.46 "
                "(30 ms x 82 tok/s)", pytrace=False)


def test_perf_baseline_tps():
    claim("perf.baseline_tps")
    raise ClaimBroken("perf.baseline_tps: the baseline measurement could not be made: start: "
                      "server exited with code 1\\n--- last lines of the server log ---\\nOOM")


def test_finetune_progress():
    claim("finetune.progress", "phase1", critical=False)
    raise ClaimBroken("finetune.progress: /runs/ft/metrics.jsonl line 3: no field 'accuracy'")


def test_eval_teacher_forced():
    claim("eval.teacher_forced", "phase1", critical=False)
    pytest.skip("eval.teacher_forced: no [finetune] hidden_states in the profile")
'''

CLAIM_IDS = (
    "config.hidden_size", "vocab.d2t_match", "spec.breakeven", "perf.baseline_tps",
    "finetune.progress", "eval.teacher_forced",
)


def make_results(workdir: Path, results_dir: Path, *, round_: int = 1) -> Path:
    """Run the sample session into results_dir; round 2 turns vocab.d2t_match into a pass."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (workdir / "test_claims_sample.py").write_text(
        textwrap.dedent(_SAMPLE).format(round=round_), encoding="utf-8"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "--rootdir", str(workdir), "-c", str(workdir / "pytest.ini"),
         "--alluredir", str(results_dir), str(workdir / "test_claims_sample.py")],
        cwd=workdir, capture_output=True, text=True, timeout=120, check=False,
    )
    # 1 = some tests failed, which the sample means to do; anything else is a broken setup.
    if proc.returncode != 1 or not list(results_dir.glob("*-result.json")):
        raise RuntimeError(f"sample session exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    return results_dir


def embedded_files(index_html: Path) -> dict[str, bytes]:
    """The data files a single-file Allure 3 report carries as base64 inside index.html."""
    import base64
    import re

    text = index_html.read_text(encoding="utf-8")
    return {name: base64.b64decode(body)
            for name, body in re.findall(r'd\("([^"]+)","([A-Za-z0-9+/=]*)"\)', text)}
