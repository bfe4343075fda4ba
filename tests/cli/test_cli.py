"""The `specgate` command: its version, its subcommands' arguments in one package, and the
profile names every subcommand accepts."""

from __future__ import annotations

import ast
import importlib.metadata
from pathlib import Path

import pytest

from specgate import cli
from specgate.cli.preflight import main_preflight

SPECGATE = Path(cli.__file__).resolve().parent.parent
# Programs of their own, not `specgate` subcommands: the simulator is launched as
# `python -m specgate.testing.simulator`, and preflight's script runs SGLang's parser.
OWN_PROGRAMS = {"testing/simulator/args.py"}


def test_version_is_the_installed_distribution(capsys: pytest.CaptureFixture[str]) -> None:
    for flag in ("--version", "-V"):
        assert cli.main([flag]) == 0
        assert capsys.readouterr().out.strip() == (
            f"specgate {importlib.metadata.version('specgate')}")
    assert "--version" in cli.USAGE


def test_every_subcommand_parses_its_arguments_in_the_cli_package() -> None:
    parsing = []
    for path in sorted(SPECGATE.rglob("*.py")):
        rel = path.relative_to(SPECGATE).as_posix()
        if rel.startswith("cli/") or rel in OWN_PROGRAMS:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if "argparse" in names:
                parsing.append(rel)
    assert parsing == [], f"argument parsing outside specgate/cli/: {parsing}"
    for name in cli.COMMANDS:
        module = {"remap-vocab": "remap", "profile-doc": "profile_doc",
                  "calibrate-simulator": "calibrate_simulator"}.get(name, name)
        assert (SPECGATE / "cli" / f"{module}.py").is_file(), name


def test_preflight_takes_a_shipped_profile_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    # SGLang is not installed here: the command stops at "unavailable" (2), after it has found
    # the profile, as pytest's --profile demo does.
    code = main_preflight(["demo"])
    out = capsys.readouterr().out
    assert "not found" not in out, out
    assert "demo.toml baseline" in out, out
    assert code == 2


def test_the_command_runs_as_a_module(tmp_path: Path) -> None:
    """`python -m specgate.cli` (what scripts on a GPU box call) is the same command."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "specgate.cli", "--version"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("specgate ")


@pytest.mark.parametrize(("content", "said"), [
    (None, "no such file; give a live session's results.json"),
    ("folder", "cannot be read (Is a directory)"),
    ("{not json", "not a live session's results.json (not JSON: "),
    ("{}", "not a live session's results.json (no 'profile' key)"),
    ("[1, 2]", "not a live session's results.json (its contents have another shape)"),
], ids=["missing", "a-folder", "not-json", "no-keys", "a-list"])
def test_calibrate_simulator_names_a_results_file_it_cannot_use(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None,
        said: str) -> None:
    from specgate.cli.calibrate_simulator import main_calibrate_simulator

    path = tmp_path / "results.json"
    if content == "folder":
        path.mkdir()
    elif content is not None:
        path.write_text(content)
    assert main_calibrate_simulator([str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"specgate calibrate-simulator: {path}: {said}"), err
    assert err.count("\n") == 1, err
    assert "Errno" not in err
