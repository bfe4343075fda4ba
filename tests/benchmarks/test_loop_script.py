"""benchmarks/real_sglang/loop.py: the served configuration, the tune hand-off, and the warm-up
server's clean-up (the parts of the GPU-machine loop that can be checked without a GPU)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
from script_support import REAL_SGLANG as HERE
from script_support import load_script

from benchmarks.common import with_root


@pytest.fixture(scope="module")
def loop() -> ModuleType:
    return load_script("loop")


def test_served_parses_a_chain_and_a_tune_key_and_refuses_what_sglang_would(
        loop: ModuleType) -> None:
    assert loop.Served.parse("6").key == "s6-k1-d7"
    tree = loop.Served.parse("s3-k4-d8")
    assert (tree.steps, tree.topk, tree.draft_tokens) == (3, 4, 8)
    for bad in ("0", "s3-k1-d0", "x", "s3-k1"):
        with pytest.raises(ValueError, match="not a served configuration"):
            loop.Served.parse(bad)
    # A chain serves steps + 1 draft tokens: specgate's profile check says so here, not later
    # inside pytest.
    with pytest.raises(ValueError, match="s3-k1-d6"):
        loop.Served.parse("s3-k1-d6")


def test_the_profile_name_carries_the_served_flags_so_regress_compares_like_with_like(
        loop: ModuleType, tmp_path: Path) -> None:
    six = loop.profile(tmp_path, ["python3"], False, 128, served=loop.Served(6))
    three = loop.profile(tmp_path, ["python3"], False, 128, served=loop.Served(3))
    assert six["name"] != three["name"]
    assert six["name"].endswith("s6-k1-d7")
    assert loop.profile(tmp_path, ["python3"], False, 128, 6, name_config=False)["name"] == (
        "real-sglang-0.5.17-trained")
    # Everything the baseline's fingerprint reads is the same: a stored baseline serves both.
    for key in ("target", "server", "bench"):
        assert six[key] == three[key]
    assert six["bench"]["baseline_max_age_h"] > 0


def test_fresh_baseline_profile_turns_reuse_off_and_still_parses(loop: ModuleType,
                                                                 tmp_path: Path) -> None:
    from specgate.core.profile import parse_profile

    for model in ("target", "drafter", "scratch"):
        (tmp_path / model).mkdir()
    reusing = loop.profile(tmp_path, ["python3"], False, 128, served=loop.Served(10))
    fresh = loop.profile(tmp_path, ["python3"], False, 128, served=loop.Served(10),
                         reuse_baseline=False)
    assert parse_profile(reusing).bench.baseline_max_age_h == loop.BASELINE_MAX_AGE_H
    assert parse_profile(fresh).bench.baseline_max_age_h is None
    # Nothing else in [bench] changes. (Without baseline_max_age_h specgate neither reuses a
    # stored baseline nor stores the one it launches: specgate/measure/live.py.)
    assert {k: v for k, v in reusing["bench"].items() if k != "baseline_max_age_h"} == (
        fresh["bench"])


def test_from_tune_reads_the_best_key_that_specgate_tune_writes(loop: ModuleType,
                                                                 tmp_path: Path) -> None:
    from specgate.measure import tune

    doc = tmp_path / "tune.json"
    best = tune.Candidate(5)
    doc.write_text(json.dumps({"best": best.key, "stop_reason": "done"}))
    served, why = loop.Served.from_tune(doc)
    assert served.key == best.key == "s5-k1-d6"
    assert "best s5-k1-d6 (done)" in why
    for text, message in (('{"best": null, "stop_reason": "the first launch failed"}',
                           "recommends nothing (the first launch failed)"),
                          ('{"best": {"steps": 5}}', "not a key"),
                          ("[1, 2]", "not a tune result"),
                          ("{", "cannot read")):
        doc.write_text(text)
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            loop.Served.from_tune(doc)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie has exited: read its state
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_finish_stops_the_whole_group_even_when_the_leader_is_gone(loop: ModuleType,
                                                                     tmp_path: Path) -> None:
    import subprocess

    # A launcher that starts a child (as SGLang starts its scheduler) and exits at once: the
    # child keeps the group alive and ignores SIGTERM, so only SIGKILL of the group stops it.
    child_pid = tmp_path / "child.pid"
    child = ("import os, signal, time\n"
             "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"  # before it says it is there
             f"open({str(child_pid)!r}, 'w').write(str(os.getpid()))\n"
             "time.sleep(600)\n")
    script = f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {child!r}])\n"
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    deadline = time.monotonic() + 20
    while not child_pid.exists() or not child_pid.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.wait(timeout=20)
    pid = int(child_pid.read_text())
    assert _alive(pid)
    warm = loop.WarmUp(proc, tmp_path / "warm-up.log", 9, "started")
    warm.TERM_GRACE_S = 1.0
    try:
        result = warm.finish(0.0)
        survived = _alive(pid)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not survived
    # The thread saw the leader exit before it was ready; finish's word is the last one.
    assert "exited with code 0 before it was ready" in result["note"]


def test_a_server_still_starting_is_reported_as_stopped(loop: ModuleType,
                                                        tmp_path: Path) -> None:
    import subprocess

    # Never ready (nothing listens on the port), slow to die on SIGTERM.
    proc = subprocess.Popen(
        [sys.executable, "-c", "import signal, time\n"
         "signal.signal(signal.SIGTERM, lambda *a: (time.sleep(1), exit(0)))\ntime.sleep(600)"],
        start_new_session=True)
    warm = loop.WarmUp(proc, tmp_path / "warm-up.log", 9, "started")
    result = warm.finish(0.5)
    assert proc.poll() is not None
    assert result["note"].startswith("still starting after")
    assert result["note"].endswith("stopped")


TRAINING_NEEDS_TORCH = ("benchmarks/real_sglang/train_drafter.py imports torch before it reads "
                        "its flags")


def _run_loop(work: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.real_sglang.loop", "--work", str(work),
         "--out", str(out),
         "--root", str(HERE.parent.parent), "--launcher",
         f"{sys.executable} -m specgate.testing.simulator", "--sim",
         "--deadline", str(time.time() + 300), *extra],
        capture_output=True, text=True, timeout=240, check=False, env=with_root())


def test_no_probe_when_training_left_no_drafter(tmp_path: Path) -> None:
    """A training run that ends without a drafter (here: a bad flag) is said as such; the probe
    is not started against a profile whose drafter is missing, and the run fails."""
    pytest.importorskip("torch", reason=TRAINING_NEEDS_TORCH)
    work, out = tmp_path / "work", tmp_path / "out"
    done = _run_loop(work, out, "--skip-phase1", "--train-args=--no-such-flag")
    assert done.returncode == 1, done.stdout + done.stderr
    # The training was given the loop's deadline (train_drafter.py then rejected the bad flag).
    assert "-m benchmarks.real_sglang.train_drafter " in done.stdout
    assert " --deadline " in done.stdout
    summary = json.loads((out / "loop_summary.json").read_text())
    assert summary["steps"]["train"]["exit"] == 2
    assert summary["steps"]["probe"]["note"] == f"not run: no drafter in {work / 'model'}"
    assert "phase1" not in summary["steps"]
    assert not (work / "probe.log").exists()
    assert "training did not finish" in done.stdout
    assert f"- not run: no drafter in {work / 'model'}" in (out / "loop_summary.md").read_text()
    assert not (out / "model.tar.gz").exists()


def test_a_run_that_finds_no_drafter_judges_nothing_and_fails(tmp_path: Path) -> None:
    """A later run (no training: prediction.json is there) on a model without a drafter: neither
    the probe nor the Phase 1/2 claims run, and the exit says so, whatever was skipped."""
    work, out = tmp_path / "work", tmp_path / "out"
    (work / "model").mkdir(parents=True)
    (work / "model" / "prediction.json").write_text("{}")
    for extra in ((), ("--skip-phase1",), ("--skip-probe",)):
        done = _run_loop(work, out, *extra)
        assert done.returncode == 1, (extra, done.stdout + done.stderr)
        assert "and this run did not train one" in done.stdout
        steps = json.loads((out / "loop_summary.json").read_text())["steps"]
        assert "train" not in steps
        expected = {"probe", "phase1"} - {x.removeprefix("--skip-") for x in extra}
        assert set(steps) == expected
        assert all(steps[s]["note"].startswith("not run: no drafter") for s in expected)
        assert not (work / "phase1.log").exists()
        assert not (work / "probe.log").exists()


def test_training_flags_train_again_over_an_earlier_model(tmp_path: Path) -> None:
    """A run that names --train-args asked for a new drafter: it trains even where an earlier
    run left a model, rather than serve the old one again."""
    pytest.importorskip("torch", reason=TRAINING_NEEDS_TORCH)
    work, out = tmp_path / "work", tmp_path / "out"
    (work / "model" / "drafter").mkdir(parents=True)
    (work / "model" / "prediction.json").write_text("{}")
    (work / "model" / "drafter" / "config.json").write_text("{}")  # the old drafter
    done = _run_loop(work, out, "--skip-phase1", "--train-args=--no-such-flag")
    assert f"training again in {work / 'model'}: --train-args was given" in done.stdout
    summary = json.loads((out / "loop_summary.json").read_text())
    assert summary["steps"]["train"]["exit"] == 2  # train_drafter.py ran (and refused the flag)
    # The refused training left no drafter, and the old one is not probed in its place.
    assert summary["steps"]["probe"]["note"] == f"not run: no drafter in {work / 'model'}"
    assert done.returncode == 1


def test_a_run_keeps_its_verdict_and_training_log_beside_the_summary(tmp_path: Path) -> None:
    """What a result keeps lands in OUT beside loop_summary: the probe's verdict under the run's
    tag, and after training the training log, the model's summary and the prediction."""
    pytest.importorskip("transformers")
    work, out = tmp_path / "work", tmp_path / "out"
    done = _run_loop(work, out, "--skip-phase1", "--tag=-t", "--train-args=--size tiny "
                     "--device cpu --threads 1 --train-prompts 6 --train-tokens 16 "
                     "--heldout-prompts 3 --heldout-tokens 12 --scratch-seconds 0 "
                     "--finetune-seconds 0 --max-steps 2")
    assert (out / "loop_summary-t.json").is_file(), done.stdout + done.stderr
    verdict = json.loads((out / "verdict-t.json").read_text())
    assert verdict == json.loads((work / "reports" / "verdict.json").read_text())
    assert verdict["claims"], verdict
    for name in ("summary.json", "prediction.json"):
        assert (out / name).read_bytes() == (work / "model" / name).read_bytes()
    assert (out / "train.log").read_text() == (work / "train.log").read_text()
    # a later run that only probes leaves the training's files as they were
    (out / "train.log").write_text("kept")
    _run_loop(work, out, "--skip-phase1", "--tag=-u", "--steps=2")
    assert (out / "verdict-u.json").is_file()
    assert (out / "train.log").read_text() == "kept"


@pytest.fixture(scope="module")
def returned_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny trained model as model.tar.gz brings it back: everything but the target's
    weights."""
    pytest.importorskip("transformers")
    work = tmp_path_factory.mktemp("returned")
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.real_sglang.train_drafter", str(work / "model"),
         "--size", "tiny",
         "--device", "cpu", "--threads", "1", "--train-prompts", "6", "--train-tokens", "16",
         "--heldout-prompts", "3", "--heldout-tokens", "12", "--scratch-seconds", "0",
         "--finetune-seconds", "0", "--max-steps", "2"],
        capture_output=True, text=True, timeout=600, check=False, env=with_root())
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (work / "model" / "target" / "model.safetensors").unlink()
    return work


def test_a_returned_model_gets_its_target_weights_made_again_from_the_seed(
        returned_model: Path, tmp_path: Path) -> None:
    import shutil

    work = tmp_path / "work"
    shutil.copytree(returned_model, work)
    done = _run_loop(work, tmp_path / "out", "--skip-probe", "--skip-phase1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "benchmarks.real_sglang.rebuild_target" in done.stdout
    assert (work / "model" / "target" / "model.safetensors").is_file()
    assert not (work / "model" / "target.rebuild").exists()
    log = (work / "rebuild.log").read_text()
    assert "(100.00%)" in log, log[-1000:]
    steps = json.loads((tmp_path / "out" / "loop_summary.json").read_text())["steps"]
    assert steps["rebuild_target"]["exit"] == 0


def test_weights_from_another_seed_are_refused(returned_model: Path, tmp_path: Path) -> None:
    import shutil

    model = tmp_path / "model"
    shutil.copytree(returned_model / "model", model)
    done = subprocess.run([sys.executable, "-m", "benchmarks.real_sglang.rebuild_target",
                           str(model),
                           "--seed", "1", "--device", "cpu"],
                          capture_output=True, text=True, timeout=300, check=False,
                          env=with_root())
    assert done.returncode == 1, done.stdout + done.stderr
    assert "these are not the weights the dump was made with" in done.stderr
    # refused weights are not left where the next run would find and serve them
    assert not (model / "target" / "model.safetensors").exists()
    assert not (model / "target.rebuild").exists()
    # the seed train_drafter.py recorded is the default
    assert json.loads((model / "summary.json").read_text())["seed"] == 0
    (model / "target" / "config.json").write_text('{"hidden_size": "wide"}')
    bad = subprocess.run([sys.executable, "-m", "benchmarks.real_sglang.rebuild_target",
                          str(model)],
                         capture_output=True, text=True, timeout=300, check=False,
                         env=with_root())
    assert bad.returncode == 2
    assert f"{model / 'target' / 'config.json'}: config.json: hidden_size is 'wide'" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_a_probe_killed_at_its_time_limit_is_not_a_pass(loop: ModuleType, tmp_path: Path) -> None:
    """A probe cut off at its time limit (on a fresh machine the speculative server can still be
    compiling) may leave a verdict with one finished, passed claim: that is not a pass."""
    ok = [{"id": "config.target_compat", "status": "passed"}]
    assert loop.passed({"exit": 0, "outcome": "passed", "claims": ok})
    assert not loop.passed({"exit": 124, "outcome": "interrupted", "claims": ok})
    assert not loop.passed({"exit": 0, "outcome": "interrupted", "claims": ok})
    assert not loop.passed({"exit": 124, "outcome": "passed", "claims": ok})
    assert not loop.passed({"exit": 0, "outcome": "passed", "claims": []})
    assert not loop.passed({"exit": 1, "outcome": "failed",
                            "claims": [*ok, {"id": "spec.speedup", "status": "failed"}]})
    (tmp_path / "verdict.json").write_text('{"outcome": "interrupted", "claims": []}')
    assert loop.outcome(tmp_path) == "interrupted"
    (tmp_path / "verdict.json").write_text("[1, 2]")
    assert loop.outcome(tmp_path) is None
    assert loop.outcome(tmp_path / "nowhere") is None


@pytest.mark.parametrize(("env", "code", "says"), [
    # wheels for a box without network: a folder that holds none is named
    ("RS_WHEELS=/nonexistent", 4, "RS_WHEELS: no wheels in /nonexistent"),
    # SGLang installed (no RS_WHEELS): nothing installed, the imports checked (here SGLang is
    # missing), and the message says what to do
    ("", 5, "No module named"),
    ("RS_CUDA_GRAPHS=yes", 4, "RS_CUDA_GRAPHS=yes: set 0, 1 or force"),
])
def test_env_checks_what_it_is_told_before_anything_runs(
        tmp_path: Path, env: str, code: int, says: str) -> None:
    script = (f'{env} OUT={tmp_path}/out RS_WORK={tmp_path}/work RS_PYTHON={sys.executable}; '
              f'RS_LOG=env.log; . benchmarks/real_sglang/env.sh; echo "rc=$?"')
    done = subprocess.run(["bash", "-c", script], cwd=HERE.parent.parent, capture_output=True,
                          text=True, timeout=120, check=False)
    assert f"rc={code}" in done.stdout, done.stdout + done.stderr
    assert says in done.stdout + done.stderr
    # everything the harness printed is in its log as well
    assert says in (tmp_path / "out" / "env.log").read_text()


def test_the_loops_concurrency_reaches_the_profile(loop: ModuleType, tmp_path: Path) -> None:
    from specgate.core.profile import parse_profile

    for model in ("target", "drafter", "scratch"):
        (tmp_path / model).mkdir(exist_ok=True)
    levels = parse_profile(loop.profile(tmp_path, ["python3"], False, 128,
                                        concurrency=[1, 4, 16]))
    assert levels.bench.concurrency == [1, 4, 16]
    assert levels.gate_concurrency == 1
    assert "concurrency" not in loop.profile(tmp_path, ["python3"], False, 128)["bench"]
