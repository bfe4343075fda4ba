"""How a server of a live session is reached: the SGLang launch command for a profile (argv,
added environment, URL and API key), or the URL of a server someone else runs.

The SGLang flags are the same whatever starts the server; the profile's `[server] launcher`
picks a launcher (serving/launchers/), once, and it makes the command line from them: a local
one passes `[server] env` through the child's environment, one that reaches a far side (ssh,
pct, docker) carries it on the command line as `env K=V ...`.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from specgate.core.errors import CheckpointError, ProfileError
from specgate.core.profile import Profile, ServerSection, SpeculativeSection
from specgate.core.redact import Redactor, secrets_from_env, show_command
from specgate.io import checkpoint
from specgate.serving import launchers
from specgate.serving.launchers.base import Launcher
from specgate.serving.launchers.remote import _unquote

Config = Literal["baseline", "speculative"]
# Where an attached server's URL comes from, by configuration, for messages that say what to fix.
ATTACH_OPTIONS: dict[str, str] = {"baseline": "--baseline-url / [server] baseline_url",
                                  "speculative": "--server-url / [server] url"}

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
    """Everything needed to start one server and to talk to it.

    The secrets (the API key, credential-like [server] env values) are masked once, here:
    redacted_argv and display are what any report, log or message shows of the command.
    """

    argv: tuple[str, ...]
    env: Mapping[str, str]  # additions to os.environ for a local launcher
    url: str
    api_key: str | None
    config: Config
    host: str
    port: int
    prefix_len: int  # argv[:prefix_len] is the launcher (with any `env K=V` carriage)
    launcher: Launcher  # what starts, probes and stops it (serving/launchers/)
    simulated: bool
    stop_command: tuple[str, ...] | None = None
    # A remote launcher: argv[:remote_at] reaches the far side (`ssh gpu-box`, `pct exec 101 --`);
    # the command run there starts at remote_at. 0 for a local launcher.
    remote_at: int = 0
    secrets: tuple[str, ...] = dataclasses.field(default=(), repr=False)
    # The drafter folder the speculative command serves, as this machine sees it (None for the
    # baseline, and where this machine cannot read it).
    local_drafter: Path | None = None
    redacted_argv: tuple[str, ...] = dataclasses.field(init=False, repr=False)
    redacted_env: Mapping[str, str] = dataclasses.field(init=False, repr=False)
    # The command as a shell line a person can read, with every secret as ***.
    display: str = dataclasses.field(init=False, repr=False)

    def __post_init__(self) -> None:
        shown = show_command(self.argv, self.env, [self.api_key, *self.secrets])
        object.__setattr__(self, "redacted_argv", shown.argv)
        object.__setattr__(self, "redacted_env", shown.env)
        object.__setattr__(self, "display", shown.line)

    def __repr__(self) -> str:
        return f"LaunchSpec({self.config}, {self.url}, {self.display!r})"

    @property
    def server_args(self) -> list[str]:
        """The SGLang flags alone, as its own parser sees them."""
        return self.launcher.server_args(self.argv[self.prefix_len:])

    def redactor(self) -> Redactor:
        return Redactor([self.api_key, *self.secrets])

    def on_port(self, port: int) -> LaunchSpec:
        """The same command listening on another port."""
        argv = list(self.argv)
        for i, arg in enumerate(argv[self.prefix_len:-1], start=self.prefix_len):
            if _unquote(arg) == "--port":
                argv[i + 1] = str(port)
        return dataclasses.replace(self, argv=tuple(argv), port=port,
                                   url=server_url(self.host, port))


@dataclasses.dataclass(frozen=True)
class ServerPlan:
    """One server of a live session: launched from `spec`, or attached at `url` (spec None)."""

    config: Config
    url: str
    api_key: str | None = dataclasses.field(repr=False)
    spec: LaunchSpec | None
    log_path: Path | None
    startup_timeout_s: float
    stop_timeout_s: float
    # What the server must start with ([server] env, CUDA_VISIBLE_DEVICES from [server] gpus)
    # and the GPUs it runs on (nvidia-smi indices, or CUDA_VISIBLE_DEVICES as written).
    env: Mapping[str, str]
    gpus: tuple[int, ...] | str
    # [server] port = 0: the planned port was free when planned; another free one is taken at
    # the launch if something took it since.
    any_port: bool = False
    tp: int = 1  # [server] tp: one rank process per GPU of `gpus`
    # The profile's launcher: an attached server's GPUs are listed through its prefix.
    launcher: Launcher | None = dataclasses.field(default=None, repr=False)


@dataclasses.dataclass(frozen=True)
class LaunchSettings:
    """The profile as a launch reads it, read once: launcher, paths, [server], [speculative]."""

    source: str  # the profile file, for messages
    launcher: Launcher  # picked once from [server] launcher
    simulated: bool
    # --model-path and --speculative-draft-model-path as the server reads them (the launcher's
    # server_path); None when not set.
    target: str | None
    drafter: str | None
    local_target: Path | None  # the target folder as this machine sees it
    local_drafter: Path | None  # the drafter folder as this machine sees it
    server: ServerSection
    speculative: SpeculativeSection
    env: Mapping[str, str]  # [server] env, with CUDA_VISIBLE_DEVICES from [server] gpus
    gpus: tuple[int, ...] | str  # nvidia-smi indices, or CUDA_VISIBLE_DEVICES as written
    api_key: str | None = dataclasses.field(repr=False)
    # The baseline's, where [server] baseline_gpus puts it on GPUs of its own.
    baseline_env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    baseline_gpus: tuple[int, ...] | str = ()

    def env_of(self, config: Config) -> Mapping[str, str]:
        return self.baseline_env if config == "baseline" else self.env

    def gpus_of(self, config: Config) -> tuple[int, ...] | str:
        return self.baseline_gpus if config == "baseline" else self.gpus

    @classmethod
    def of(cls, profile: Profile) -> LaunchSettings:
        """Raises ProfileError when [server] api_key_env names an unset variable."""
        server = profile.server
        source = profile.source or "<profile>"
        launcher = launchers.pick(profile.launcher_argv(), source)
        local_target = profile.target_path
        wanted = {config: server.server_gpus(config) for config in ("baseline", "speculative")}
        chosen = {config: g if isinstance(g, str) else tuple(g) for config, g in wanted.items()}
        return cls(source=source, launcher=launcher, simulated=profile.is_simulated,
                   target=launcher.server_path(profile.target.path, local_target) or None,
                   drafter=launcher.server_path(profile.drafter.path,
                                                profile.drafter_path) or None,
                   local_target=local_target, local_drafter=profile.drafter_path,
                   server=server, speculative=profile.speculative,
                   env=server.server_env("speculative"), gpus=chosen["speculative"],
                   baseline_env=server.server_env("baseline"), baseline_gpus=chosen["baseline"],
                   api_key=read_api_key(server.api_key_env))


def plan_server(settings: LaunchSettings, config: Config, log_path: Path) -> ServerPlan:
    """How the baseline or speculative server is reached: attached at its URL, or launched."""
    server = settings.server
    url = server.baseline_url if config == "baseline" else server.url
    drafter = settings.local_drafter
    if (config == "speculative" and not url and drafter is not None
            and settings.launcher.reads_local_files() and checkpoint.is_empty(drafter)):
        # What SGLang would refuse after its whole start, said before any launch, in the offline
        # claims' words.
        raise CheckpointError(checkpoint.empty_folder(drafter))
    spec = None if url else command(settings, config)
    return ServerPlan(
        config=config,
        url=spec.url if spec else str(url),
        api_key=settings.api_key,
        spec=spec,
        log_path=log_path if spec else None,
        startup_timeout_s=server.startup_timeout_s,
        stop_timeout_s=server.stop_timeout_s,
        env=settings.env_of(config),
        gpus=settings.gpus_of(config),
        any_port=spec is not None and server.port == 0,
        tp=server.tp,
        launcher=settings.launcher,
    )


def build_command(profile: Profile, config: Config, *, port: int | None = None) -> LaunchSpec:
    """The launch command for the baseline or speculative server of a profile."""
    return command(LaunchSettings.of(profile), config, port=port)


def command(settings: LaunchSettings, config: Config, *, port: int | None = None) -> LaunchSpec:
    """The launch command for the baseline or speculative server."""
    server = settings.server
    chosen_port = server.port if port is None else port
    if chosen_port == 0:
        chosen_port = free_port(server.host)

    flags = ["--model-path", _required(settings, settings.target, "[target] path"),
             "--host", server.host, "--port", str(chosen_port), "--tp-size", str(server.tp)]
    if config == "speculative":
        spec = settings.speculative
        flags += ["--speculative-algorithm", spec.algorithm,
                  "--speculative-draft-model-path",
                  _required(settings, settings.drafter, "[drafter] path")]
        if spec.num_steps is not None:
            flags += ["--speculative-num-steps", str(spec.num_steps),
                      "--speculative-eagle-topk", str(spec.eagle_topk),
                      "--speculative-num-draft-tokens", str(spec.num_draft_tokens)]
    _check_no_managed(server.args, "[server] args")
    _check_no_managed(server.baseline_args, "[server] baseline_args")
    flags += list(server.args)
    if config == "baseline":
        flags += list(server.baseline_args)

    api_key = settings.api_key
    if api_key is not None:
        flags += ["--api-key", api_key]

    built = settings.launcher.command(flags, settings.env_of(config))
    return LaunchSpec(
        argv=built.argv,
        env=built.env,
        url=server_url(server.host, chosen_port),
        api_key=api_key,
        config=config,
        host=server.host,
        port=chosen_port,
        prefix_len=built.prefix_len,
        launcher=settings.launcher,
        simulated=settings.simulated,
        stop_command=tuple(server.stop_command) if server.stop_command else None,
        remote_at=built.remote_at,
        local_drafter=settings.local_drafter if config == "speculative" else None,
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


def _required(settings: LaunchSettings, value: str | None, key: str) -> str:
    if not value:
        raise ProfileError(f"{settings.source}: {key} is required to launch a server; set it in "
                           "the profile or pass it on the command line")
    return value


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
