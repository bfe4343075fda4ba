"""The SGLang launch command for a profile: argv, added environment, URL and API key.

A local launcher gets the profile's `[server] env` through the child's environment. A remote
launcher (ssh, pct, docker, kubectl) does not carry the local environment, so the same variables
travel on the command line as `env K=V ...` inserted where the remote command starts, and every
argument the harness adds is shell-quoted for ssh, whose remote side re-parses the command
through a shell.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from specgate.core.errors import ProfileError
from specgate.core.profile import SIMULATOR_MODULE, Profile
from specgate.core.redact import Redactor, secrets_from_env

Config = Literal["baseline", "speculative"]

REMOTE_PROGRAMS = frozenset({"ssh", "pct", "docker", "podman", "kubectl", "lxc-attach"})
_REMOTE_PROGRAM_NAMES = ("sglang", "uv", "conda")
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})
LOOPBACK_HOSTS = frozenset({"localhost", "::1", "[::1]"})
# Flags the harness sets from the profile; repeating them in [server] args would fight it.
MANAGED_FLAGS = frozenset({
    "--model-path", "--model", "--host", "--port", "--tp-size", "--tp",
    "--tensor-parallel-size", "--api-key", "--speculative-algorithm",
    "--speculative-draft-model-path", "--speculative-draft-model", "--speculative-num-steps",
    "--speculative-eagle-topk", "--speculative-num-draft-tokens",
})


@dataclasses.dataclass(frozen=True)
class LaunchSpec:
    """Everything needed to start one server and to talk to it."""

    argv: tuple[str, ...]
    env: Mapping[str, str]  # additions to os.environ for a local launcher
    url: str
    api_key: str | None
    config: Config
    host: str
    port: int
    prefix_len: int  # argv[:prefix_len] is the launcher (with any `env K=V` carriage)
    remote: bool
    simulated: bool
    stop_command: tuple[str, ...] | None = None
    secrets: tuple[str, ...] = dataclasses.field(default=(), repr=False)

    def __repr__(self) -> str:
        return f"LaunchSpec({self.config}, {self.url}, {self.display()!r})"

    @property
    def server_args(self) -> list[str]:
        """The SGLang flags alone, as its own parser sees them."""
        args = list(self.argv[self.prefix_len:])
        return [_unquote(a) for a in args] if self.remote else args

    def redactor(self) -> Redactor:
        return Redactor([self.api_key, *self.secrets])

    @property
    def redacted_argv(self) -> list[str]:
        return self.redactor().redact_argv(self.argv)

    def display(self) -> str:
        """The command as a shell line a person can read, with every secret as ***."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        line = shlex.join(self.redacted_argv)
        return self.redactor().redact(f"{env} {line}" if env else line)


def build_command(profile: Profile, config: Config, *, port: int | None = None) -> LaunchSpec:
    """The launch command for the baseline or speculative server of a profile."""
    server = profile.server
    launcher = profile.launcher_argv()
    remote = is_remote(launcher)
    simulated = profile.is_simulated
    chosen_port = server.port if port is None else port
    if chosen_port == 0:
        chosen_port = free_port(server.host)

    flags = ["--model-path", _path(profile, profile.target.path, "[target] path", remote),
             "--host", server.host, "--port", str(chosen_port), "--tp-size", str(server.tp)]
    if config == "speculative":
        spec = profile.speculative
        flags += ["--speculative-algorithm", spec.algorithm,
                  "--speculative-draft-model-path",
                  _path(profile, profile.drafter.path, "[drafter] path", remote)]
        if spec.num_steps is not None:
            flags += ["--speculative-num-steps", str(spec.num_steps),
                      "--speculative-eagle-topk", str(spec.eagle_topk),
                      "--speculative-num-draft-tokens", str(spec.num_draft_tokens)]
    _check_no_managed(server.args, "[server] args")
    _check_no_managed(server.baseline_args, "[server] baseline_args")
    flags += list(server.args)
    if config == "baseline":
        flags += list(server.baseline_args)

    api_key = read_api_key(server.api_key_env)
    if api_key is not None:
        flags += ["--api-key", api_key]

    env = server.server_env()
    if remote:
        flags = [shlex.quote(f) for f in flags] if _is_ssh(launcher) else flags
        cut = remote_command_start(launcher)
        carriage = ["env", *(f"{k}={_remote_quote(launcher, v)}" for k, v in env.items())]
        head = launcher[:cut] + (carriage if env else [])
        argv = head + launcher[cut:] + flags
        prefix_len = len(head) + len(launcher) - cut
        env = {}
    else:
        argv = launcher + flags
        prefix_len = len(launcher)

    return LaunchSpec(
        argv=tuple(argv),
        env=env,
        url=server_url(server.host, chosen_port),
        api_key=api_key,
        config=config,
        host=server.host,
        port=chosen_port,
        prefix_len=prefix_len,
        remote=remote,
        simulated=simulated,
        stop_command=tuple(server.stop_command) if server.stop_command else None,
        secrets=tuple(secrets_from_env(server.env)),
    )


def exposure_warning(profile: Profile) -> str | None:
    """A warning when a server the harness launches listens beyond loopback."""
    server = profile.server
    if server.url and server.baseline_url:
        return None  # attached to both: the harness binds nothing
    host = server.host
    if host in LOOPBACK_HOSTS or host.startswith("127."):
        return None
    key = ("" if server.api_key_env else
           " and no [server] api_key_env is set, so it answers anyone")
    return (f"[server] host = {host!r}: the launched servers listen beyond loopback, reachable "
            f"from other machines{key}; set host = \"127.0.0.1\" unless they must be reached "
            "from elsewhere")


def is_remote(launcher: list[str]) -> bool:
    return bool(launcher) and Path(launcher[0]).name in REMOTE_PROGRAMS


def remote_command_start(launcher: list[str]) -> int:
    """Index in a remote launcher where the command run on the far side begins."""
    for i, arg in enumerate(launcher[1:], start=1):
        name = Path(arg).name
        if name.startswith("python") or name in _REMOTE_PROGRAM_NAMES or SIMULATOR_MODULE in arg:
            return i
    if "--" in launcher:
        return len(launcher) - launcher[::-1].index("--")
    raise ProfileError(
        f"[server] launcher {shlex.join(launcher)!r}: cannot tell where the remote command "
        "starts (looked for python, sglang, uv, conda or a '--'), so [server] env cannot be "
        "carried to it; write the launcher as e.g. 'ssh gpu-box python -m sglang.launch_server'"
    )


def server_url(host: str, port: int) -> str:
    """The URL a client uses: a wildcard bind address is reached through loopback."""
    if host in WILDCARD_HOSTS:
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def free_port(host: str = "127.0.0.1") -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host if host not in WILDCARD_HOSTS else "127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _path(profile: Profile, value: str | None, key: str, remote: bool) -> str:
    if not value:
        raise ProfileError(f"{profile.source or '<profile>'}: {key} is required to launch a "
                           "server; set it in the profile or pass it on the command line")
    if remote:
        # The path lives on the GPU host; resolving it here would make it wrong there.
        return value
    return str(profile.resolve(value))


def read_api_key(env_name: str | None) -> str | None:
    if env_name is None:
        return None
    value = os.environ.get(env_name)
    if not value:
        raise ProfileError(
            f"[server] api_key_env = {env_name!r}, but the environment variable {env_name} is "
            f"{'empty' if value == '' else 'not set'}; export it before running, or remove "
            "api_key_env from the profile"
        )
    return value


def _check_no_managed(args: list[str], key: str) -> None:
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in MANAGED_FLAGS:
            raise ProfileError(
                f"{key} contains {flag}, which specgate sets itself from the profile "
                "([target] path, [drafter] path, [server] host/port/tp/api_key_env, "
                "[speculative]); remove it from {key} and set the profile key instead"
                .replace("{key}", key)
            )


def _is_ssh(launcher: list[str]) -> bool:
    return Path(launcher[0]).name == "ssh"


def _remote_quote(launcher: list[str], value: str) -> str:
    return shlex.quote(value) if _is_ssh(launcher) else value


def _unquote(arg: str) -> str:
    parts = shlex.split(arg)
    return parts[0] if len(parts) == 1 else arg
