"""benchmarks/real_model/regress.py: a smaller data size's training command derived from the
judged drafter's recorded one, and the probe profile with only the drafter changed; a work folder
without them is named, not a traceback."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from script_support import load_real_model_script

from benchmarks.common import with_root


@pytest.fixture(scope="module")
def regress() -> ModuleType:
    return load_real_model_script("regress")


def earn_work(work: Path, judged: str | None = "trained", samples: int = 48220) -> Path:
    """A work folder as earn.sh leaves it: earn.json's record of the judged drafter's training
    and the probes' profile."""
    name = judged or "trained"
    cmd = ["sf_train.py", "--data", f"{work}/answers.jsonl.gz", "--target", f"{work}/target",
           "--specforge", "/tmp/sf", "--epochs", "1", "--seed", "0", "--batch-rows", "64",
           "--vocab-map", f"{work}/maps/{name}.safetensors", "--out", f"{work}/drafters/{name}"]
    rec = {"train_commands": {name: cmd}, "drafters": {name: {"samples": samples}}}
    if judged:
        rec["judged"] = judged
    (work / "profiles").mkdir(parents=True)
    (work / "earn.json").write_text(json.dumps(rec))
    (work / "profiles" / "probe.toml").write_text(
        f'name = "smollm2-135m-instruct-{name}-s4-k1-d5"\n\n[target]\npath = "{work}/target"\n\n'
        f'[drafter]\npath = "{work}/drafters/{name}"\n\n[eval]\n'
        f'hidden_states = "{work}/dumps/heldout"\n')
    return work


def test_a_size_trains_with_the_judged_drafters_command_on_its_share_of_the_data(
        regress: ModuleType, tmp_path: Path) -> None:
    work = earn_work(tmp_path)
    argv = regress.size_command(work, "ninth")
    flags = dict(zip(argv[::2], argv[1::2], strict=True))
    assert flags["--rows"] == str(48220 // 9)
    assert flags["--vocab-map"] == f"{work}/maps/ninth.safetensors"
    assert flags["--out"] == f"{work}/drafters/ninth"
    assert "--specforge" not in flags  # the caller's own
    # everything else as the judged drafter trained
    assert {k: flags[k] for k in ("--data", "--target", "--epochs", "--seed", "--batch-rows")} \
        == {"--data": f"{work}/answers.jsonl.gz", "--target": f"{work}/target", "--epochs": "1",
            "--seed": "0", "--batch-rows": "64"}
    assert dict(zip(*[iter(regress.size_command(work, "third"))] * 2, strict=True))["--rows"] \
        == str(48220 // 3)


def test_the_profile_changes_only_the_drafter(regress: ModuleType, tmp_path: Path) -> None:
    work = earn_work(tmp_path)
    before = (work / "profiles" / "probe.toml").read_text()
    after = regress.size_profile(work, "ninth")
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines(), strict=True)
               if a != b]
    assert changed == [(f'path = "{work}/drafters/trained"', f'path = "{work}/drafters/ninth"')]
    assert after.startswith('name = "smollm2-135m-instruct-trained-s4-k1-d5"')  # one history


def test_a_size_takes_the_rows_earn_gave_it_where_the_record_has_them(
        regress: ModuleType, tmp_path: Path) -> None:
    work = earn_work(tmp_path)
    rec = json.loads((work / "earn.json").read_text())
    rec["maps"] = {"ninth": {"samples": 5300}}  # rows without an answer left out by the map
    (work / "earn.json").write_text(json.dumps(rec))
    argv = regress.size_command(work, "ninth")
    assert argv[argv.index("--rows") + 1] == "5300"


def test_a_record_of_an_older_run_without_judged_means_trained(regress: ModuleType,
                                                               tmp_path: Path) -> None:
    work = earn_work(tmp_path, judged=None)
    assert "--rows" in regress.size_command(work, "ninth")


@pytest.mark.parametrize(("breaks", "says", "code"), [
    ("no-record", "earn.json: not readable", 3),
    ("no-command", "no training command of trained over all the data", 3),
    ("already-a-size", "no training command of trained over all the data", 3),
    ("profile-elsewhere", "names the drafter", 3),
    ("bad-size", "--size half: one of third, ninth", 3),
])
def test_a_work_folder_it_cannot_use_is_named(tmp_path: Path, breaks: str, says: str,
                                               code: int) -> None:
    work = earn_work(tmp_path)
    size = "ninth"
    rec = json.loads((work / "earn.json").read_text())
    if breaks == "no-record":
        (work / "earn.json").unlink()
    elif breaks == "no-command":
        del rec["train_commands"]
    elif breaks == "already-a-size":
        rec["train_commands"]["trained"] += ["--rows", "100"]
    elif breaks == "profile-elsewhere":
        prof = work / "profiles" / "probe.toml"
        prof.write_text(prof.read_text().replace("drafters/trained", "elsewhere/trained"))
    elif breaks == "bad-size":
        size = "half"
    if breaks in ("no-command", "already-a-size"):
        (work / "earn.json").write_text(json.dumps(rec))
    verb = ["profile", str(work), size, str(tmp_path / "p.toml")] \
        if breaks == "profile-elsewhere" else ["command", str(work), size]
    done = subprocess.run([sys.executable, "-m", "benchmarks.real_model.regress", *verb],
                          capture_output=True, text=True, timeout=600, check=False,
                          env=with_root())
    assert done.returncode == code, done.stderr
    assert says in done.stderr
    assert "Traceback" not in done.stderr


def test_the_command_line_prints_flags_the_shell_can_split(tmp_path: Path) -> None:
    work = earn_work(tmp_path / "a work folder")
    done = subprocess.run([sys.executable, "-m", "benchmarks.real_model.regress", "command",
                           str(work), "ninth"], capture_output=True, text=True, timeout=600,
                          check=True, env=with_root())
    argv = shlex.split(done.stdout)
    assert argv[argv.index("--out") + 1] == f"{work}/drafters/ninth"
