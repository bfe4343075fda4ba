"""Tests for specgate.serving.launch: the argv, env, URL and key of a launch command."""

from __future__ import annotations

import shlex
import string
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from specgate.core.errors import ProfileError
from specgate.core.profile import Profile, parse_profile
from specgate.serving.launch import build_command, server_url
from specgate.serving.launchers.remote import remote_command_start
from specgate.serving.launchers.ssh import SshLauncher

SPEC_FLAGS = ["--speculative-num-steps", "2", "--speculative-eagle-topk", "1",
              "--speculative-num-draft-tokens", "3"]


def _profile(tmp_path: Path, **server: Any) -> Profile:
    return parse_profile({
        "name": "t",
        "target": {"path": str(tmp_path / "target")},
        "drafter": {"path": str(tmp_path / "drafter")},
        "server": {"port": 30000, "tp": 8, **server},
        "speculative": {"num_steps": 2, "eagle_topk": 1, "num_draft_tokens": 3},
    })


def test_baseline_and_speculative_commands(tmp_path: Path) -> None:
    p = _profile(tmp_path, args=["--trust-remote-code"], baseline_args=["--enable-metrics"],
                 env={"NCCL_PROTO": "Simple"})
    base = build_command(p, "baseline")
    spec = build_command(p, "speculative")
    assert base.argv[:3] == (sys.executable, "-m", "sglang.launch_server")
    assert base.server_args == ["--model-path", str(tmp_path / "target"), "--host", "127.0.0.1",
                                "--port", "30000", "--tp-size", "8", "--trust-remote-code",
                                "--enable-metrics"]
    assert spec.server_args == [
        "--model-path", str(tmp_path / "target"), "--host", "127.0.0.1", "--port", "30000",
        "--tp-size", "8", "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", str(tmp_path / "drafter"), *SPEC_FLAGS,
        "--trust-remote-code"]
    assert dict(base.env) == {"NCCL_PROTO": "Simple"}
    assert base.url == "http://127.0.0.1:30000"
    assert base.api_key is None
    assert (base.config, spec.config) == ("baseline", "speculative")


def test_step_flags_left_to_sglang_when_not_given(tmp_path: Path) -> None:
    p = parse_profile({"name": "t", "target": {"path": "/t"}, "drafter": {"path": "/d"}})
    assert not any(a.startswith("--speculative-num") for a in build_command(p, "speculative").argv)


def test_api_key_from_env_is_passed_and_redacted(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SG_KEY", "sk-live-0123456789")
    spec = build_command(_profile(tmp_path, api_key_env="SG_KEY"), "speculative")
    i = spec.argv.index("--api-key")
    assert spec.argv[i + 1] == "sk-live-0123456789"
    assert spec.api_key == "sk-live-0123456789"
    assert "sk-live-0123456789" not in spec.display
    assert "sk-live-0123456789" not in " ".join(spec.redacted_argv)
    assert "sk-live-0123456789" not in repr(spec)


def test_missing_api_key_variable_is_a_clear_error(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SG_KEY", raising=False)
    with pytest.raises(ProfileError, match=r"api_key_env = 'SG_KEY'.*SG_KEY is not set"):
        build_command(_profile(tmp_path, api_key_env="SG_KEY"), "baseline")


def test_missing_drafter_path_names_the_key() -> None:
    p = parse_profile({"name": "t", "target": {"path": "/t"}})
    assert build_command(p, "baseline").argv  # the baseline needs no drafter
    with pytest.raises(ProfileError, match=r"\[drafter\] path is required"):
        build_command(p, "speculative")


@pytest.mark.parametrize("flag", ["--port", "--tp", "--api-key=x", "--speculative-num-steps"])
def test_managed_flags_in_args_are_refused(tmp_path: Path, flag: str) -> None:
    with pytest.raises(ProfileError, match=r"\[server\] args contains"):
        build_command(_profile(tmp_path, args=[flag, "1"]), "baseline")


def test_port_zero_picks_a_free_port_and_override_wins(tmp_path: Path) -> None:
    p = _profile(tmp_path, port=0)
    spec = build_command(p, "baseline")
    assert spec.port > 0
    assert spec.url.endswith(f":{spec.port}")
    assert build_command(p, "baseline", port=31234).port == 31234


def test_ssh_launcher_carries_env_and_quotes_for_the_remote_shell(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SG_KEY", "sk-remote-987654321")
    p = parse_profile({
        "name": "t", "target": {"path": "/data/models/Kimi K2.5"}, "drafter": {"path": "/d"},
        "server": {"launcher": "ssh gpu-box python -m sglang.launch_server", "host": "10.0.0.5",
                   "env": {"NCCL_PROTO": "Simple", "HF_TOKEN": "hf_abcdefghij"},
                   "api_key_env": "SG_KEY"}})
    spec = build_command(p, "speculative")
    assert isinstance(spec.launcher, SshLauncher)
    assert dict(spec.env) == {}
    assert list(spec.argv[:5]) == ["ssh", "gpu-box", "env", "NCCL_PROTO=Simple",
                                   "HF_TOKEN=hf_abcdefghij"]
    assert list(spec.argv[5:8]) == ["python", "-m", "sglang.launch_server"]
    # The remote shell re-splits the joined words into exactly the intended argv.
    remote = shlex.split(" ".join(spec.argv[2:]))
    assert remote[remote.index("--model-path") + 1] == "/data/models/Kimi K2.5"
    assert spec.server_args[1] == "/data/models/Kimi K2.5"
    assert spec.url == "http://10.0.0.5:30000"
    shown = spec.display
    assert "hf_abcdefghij" not in shown
    assert "sk-remote-987654321" not in shown


def test_pct_launcher_inserts_env_after_the_double_dash() -> None:
    launcher = ["ssh", "host", "pct", "exec", "129", "--", "python", "-m", "sglang.launch_server"]
    assert remote_command_start(launcher) == 6
    assert remote_command_start(["pct", "exec", "129", "--", "/opt/run-sglang"]) == 4
    with pytest.raises(ProfileError, match="cannot tell where the remote command starts"):
        remote_command_start(["ssh", "gpu-box", "/opt/run-sglang"])


@pytest.mark.parametrize(("reach", "kept"), [
    (["docker", "exec", "ctr"], ["docker", "exec", "-i", "ctr"]),
    (["docker", "exec", "-it", "ctr"], ["docker", "exec", "-it", "ctr"]),
    (["podman", "exec", "--interactive", "ctr"], ["podman", "exec", "--interactive", "ctr"]),
    (["ssh", "-o", "User=n", "gpu-box", "docker", "exec", "-e", "A=1", "ctr"],
     ["ssh", "-o", "User=n", "gpu-box", "docker", "exec", "-i", "-e", "A=1", "ctr"]),
    (["ssh", "-p", "2222", "gpu-box"], ["ssh", "-p", "2222", "gpu-box"]),
    (["pct", "exec", "101", "--"], ["pct", "exec", "101", "--"]),
])
def test_remote_command_keeps_its_standard_input(reach: list[str], kept: list[str]) -> None:
    # The far side's wrapper stops the server when its standard input ends: `docker exec`
    # attaches it only with -i.
    p = parse_profile({"name": "t", "target": {"path": "/t"},
                       "server": {"launcher": [*reach, "python", "-m", "sglang.launch_server"]}})
    spec = build_command(p, "baseline")
    assert list(spec.argv[:spec.remote_at]) == kept
    assert spec.argv[spec.remote_at] == "python"


@pytest.mark.parametrize("flags", [["-n"], ["-Tn"], ["-fN"], ["-p", "22", "-n"]])
def test_ssh_without_standard_input_is_refused(flags: list[str]) -> None:
    p = parse_profile({"name": "t", "target": {"path": "/t"},
                       "server": {"launcher": ["ssh", *flags, "gpu-box", "python", "-m",
                                               "sglang.launch_server"]}})
    with pytest.raises(ProfileError, match=r"uses ssh -[nf]+, which leaves the remote command "
                                           r"without standard input"):
        build_command(p, "baseline")


def test_server_url_reaches_wildcards_through_loopback() -> None:
    assert server_url("0.0.0.0", 1) == "http://127.0.0.1:1"
    assert server_url("::1", 2) == "http://[::1]:2"
    assert server_url("gpu-box", 3) == "http://gpu-box:3"


@given(key=st.text(string.ascii_letters + string.digits + "-_.~+/=", min_size=8, max_size=48))
@example(key="--api-ke")  # a piece of the flag that carries it
@example(key="sglang.l")  # a piece of the launcher
def test_key_never_shown(key: str) -> None:
    import os

    def command(secret: str) -> Any:
        os.environ["SPECGATE_TEST_KEY"] = secret
        try:
            p = parse_profile({"name": "t", "target": {"path": "/t"}, "drafter": {"path": "/d"},
                               "server": {"api_key_env": "SPECGATE_TEST_KEY"}})
            return build_command(p, "speculative")
        finally:
            del os.environ["SPECGATE_TEST_KEY"]

    spec = command(key)
    other = command("0" * 8 if key != "0" * 8 else "1" * 8)
    assert key in spec.argv
    # the key shows nowhere, unless it is also a piece of the command's own text (a key
    # "--api-ke" is in "--api-key" whatever the key): then only there
    for shown, elsewhere in ((spec.display, other.display),
                             (" ".join(spec.redacted_argv), " ".join(other.redacted_argv))):
        assert key not in shown or key in elsewhere
    assert spec.redacted_argv[spec.argv.index(key)] == "***"
    assert "--api-key '***'" in spec.display or "--api-key ***" in spec.display
