"""Tests for specgate.serving.preflight: a stand-in sglang always, the real one if installed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specgate.core.profile import parse_profile
from specgate.serving.launch import build_command
from specgate.serving.preflight import launcher_python, preflight
from specgate.serving.server import preflight_spec

# The shape of sglang 0.5.23's parser: prepare_server_args with argparse's abbreviations on,
# where --cuda-graph-max-bs is a prefix of two flags.
FAKE_SERVER_ARGS = '''
import argparse
class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path", required=True)
        parser.add_argument("--port", type=int, default=30000)
        parser.add_argument("--api-key")
        parser.add_argument("--cuda-graph-max-bs-decode", type=int)
        parser.add_argument("--cuda-graph-max-bs-prefill", type=int)
def prepare_server_args(argv):
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    ns = parser.parse_args(argv)
    if ns.port == 1:
        raise ValueError("port 1 is reserved")
    return ns
'''

# SPECGATE_SGLANG_PYTHON names an interpreter with sglang (e.g. /tmp/sgvenv/bin/python).
SGLANG_PYTHON = os.environ.get("SPECGATE_SGLANG_PYTHON", sys.executable)


def _has_sglang(python: str) -> bool:
    try:
        done = subprocess.run([python, "-c", "import sglang.srt.server_args"],
                              capture_output=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@pytest.fixture
def fake_sglang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    pkg = tmp_path / "site" / "sglang"
    (pkg / "srt").mkdir(parents=True)
    (pkg / "__init__.py").write_text('__version__ = "0.0.fake"\n')
    (pkg / "srt" / "__init__.py").write_text("")
    (pkg / "srt" / "server_args.py").write_text(FAKE_SERVER_ARGS)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    return pkg


@pytest.mark.usefixtures("fake_sglang")
def test_rejected_flag_gets_sglangs_own_words_and_a_hint() -> None:
    result = preflight(["--model-path", "/m", "--cuda-graph-max-bs", "8",
                        "--api-key", "sk-secret-123456"])
    assert result.status == "rejected"
    assert "ambiguous option: --cuda-graph-max-bs could match" in result.message
    assert "use --cuda-graph-max-bs-decode" in result.message
    assert result.version == "0.0.fake"


@pytest.mark.usefixtures("fake_sglang")
def test_accepted_and_validation_errors() -> None:
    assert preflight(["--model-path", "/m", "--cuda-graph-max-bs-decode", "8"]).status == "ok"
    bad = preflight(["--model-path", "/m", "--port", "1"])
    assert bad.status == "rejected"
    assert "ValueError: port 1 is reserved" in bad.message


@pytest.mark.usefixtures("fake_sglang")
def test_secrets_in_sglangs_message_are_masked() -> None:
    result = preflight(["--model-path", "/m", "--api-key", "sk-secret-123456",
                        "--port", "sk-secret-123456"])
    assert result.status == "rejected"
    assert "sk-secret-123456" not in result.message


def test_without_sglang_it_is_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # nothing named sglang there
    result = preflight(["--model-path", "/m"], python=sys.executable)
    if _has_sglang(sys.executable):
        pytest.skip("sglang is installed in this interpreter")
    assert result.status == "unavailable"
    assert "cannot be imported" in result.message


def test_broken_interpreter_is_unavailable(tmp_path: Path) -> None:
    assert preflight(["--x"], python=str(tmp_path / "no-python")).status == "unavailable"


def test_remote_and_launcher_interpreters(tmp_path: Path) -> None:
    p = parse_profile({"name": "t", "target": {"path": "/t"},
                       "server": {"launcher": "ssh gpu-box python -m sglang.launch_server"}})
    result = preflight_spec(build_command(p, "baseline"))
    assert result.status == "unavailable"
    assert "remote launcher" in result.message
    assert launcher_python(["/opt/venv/bin/python3", "-m", "sglang.launch_server"]) == \
        "/opt/venv/bin/python3"
    (tmp_path / "sglang").touch()
    (tmp_path / "python").touch()
    assert launcher_python([str(tmp_path / "sglang"), "serve"]) == str(tmp_path / "python")


@pytest.mark.slow
@pytest.mark.skipif(not _has_sglang(SGLANG_PYTHON),
                    reason="sglang is not importable (set SPECGATE_SGLANG_PYTHON to an "
                           "interpreter that has it, e.g. /tmp/sgvenv/bin/python)")
def test_real_sglang_rejects_removed_flag_and_accepts_profile_command() -> None:
    p = parse_profile({"name": "t", "target": {"path": "/t"}, "drafter": {"path": "/d"},
                       "server": {"launcher": [SGLANG_PYTHON, "-m", "sglang.launch_server"],
                                  "tp": 8, "args": ["--trust-remote-code"]},
                       "speculative": {"num_steps": 2, "eagle_topk": 1, "num_draft_tokens": 3}})
    ok = preflight_spec(build_command(p, "speculative"))
    assert ok.status == "ok", ok.message
    bad = preflight([*build_command(p, "baseline").server_args, "--cuda-graph-max-bs", "8"],
                    python=SGLANG_PYTHON)
    assert bad.status == "rejected"
    assert "ambiguous option" in bad.message


def test_nothing_to_check_is_not_a_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    from specgate.cli.preflight import main_preflight
    from specgate.core import profile as profile_mod

    monkeypatch.setattr(profile_mod, "default_profile_path", lambda: tmp_path / "demo.toml")
    assert main_preflight([]) == 2
    assert "no profile to check" in capsys.readouterr().err


def test_a_local_launcher_without_sglang_is_not_launched(tmp_path: Path) -> None:
    from specgate.core.errors import ServerError
    from specgate.serving import server
    from specgate.serving.launch import LaunchSettings, plan_server

    if subprocess.run([sys.executable, "-c", "import sglang"], capture_output=True).returncode == 0:
        pytest.skip("sglang is installed here: the launch would go ahead")
    profile = parse_profile({"name": "t", "target": {"path": str(tmp_path)},
                             "drafter": {"path": str(tmp_path)},
                             "server": {"launcher": ["python", "-m", "sglang.launch_server"],
                                        "port": 0}})
    said: list[str] = []
    with pytest.raises(ServerError, match=r"not launched: .*No module named 'sglang'"), \
            server.serve(plan_server(LaunchSettings.of(profile), "baseline", tmp_path / "log"),
                         said.append):
        pass
    assert not any("launching" in line for line in said)


def _multi_gpu_profile(launcher: list[str]) -> object:
    return parse_profile({"name": "t", "target": {"path": "/t"}, "drafter": {"path": "/d"},
                          "server": {"launcher": launcher, "tp": 2, "gpus": [0, 1],
                                     "baseline_gpus": [2, 3], "parallel_launch": True,
                                     "env": {"NCCL_PROTO": "Simple"},
                                     "args": ["--trust-remote-code", "--gpu-id-step", "1"],
                                     "baseline_args": ["--base-gpu-id", "0"]},
                          "speculative": {"num_steps": 2, "eagle_topk": 1,
                                          "num_draft_tokens": 3}})


def test_multi_gpu_commands_pass_the_simulators_parser() -> None:
    from specgate.testing.simulator import args as sim_args

    p = _multi_gpu_profile([sys.executable, "-m", "specgate.testing.simulator"])
    for config in ("baseline", "speculative"):
        parsed = sim_args.build_parser().parse_args(build_command(p, config).server_args)
        assert parsed.tp_size == 2
        assert parsed.gpu_id_step == 1


@pytest.mark.slow
@pytest.mark.skipif(not _has_sglang(SGLANG_PYTHON),
                    reason="sglang is not importable (set SPECGATE_SGLANG_PYTHON to an "
                           "interpreter that has it, e.g. /tmp/sgvenv/bin/python)")
def test_real_sglang_accepts_tp_and_gpu_set_commands() -> None:
    p = _multi_gpu_profile([SGLANG_PYTHON, "-m", "sglang.launch_server"])
    for config in ("baseline", "speculative"):
        spec = build_command(p, config)
        assert spec.env["CUDA_VISIBLE_DEVICES"] == ("2,3" if config == "baseline" else "0,1")
        checked = preflight_spec(spec)
        assert checked.status == "ok", checked.message
