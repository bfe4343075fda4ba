"""The local launcher: the server runs on this machine, a child of this process, with the
profile's `[server] env` in its environment."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import IO, ClassVar

from specgate.core.redact import Redactor
from specgate.serving.launchers.base import Command, Launcher, Started, popen
from specgate.serving.preflight import PreflightResult, launcher_python, preflight


class LocalLauncher(Launcher):
    """`python -m sglang.launch_server`, `sglang serve`, a site wrapper: any argv prefix whose
    first word no other launcher claims."""

    name: ClassVar[str] = "local"

    @classmethod
    def handles(cls, argv: Sequence[str]) -> bool:
        return True  # the fallback: launchers/__init__.py asks it last

    def server_path(self, written: str | None, resolved: Path | None) -> str | None:
        return str(resolved) if resolved else None

    def reads_local_files(self) -> bool:
        return True

    def command(self, flags: Sequence[str], env: Mapping[str, str]) -> Command:
        return Command(argv=(*self.argv, *flags), env=dict(env), prefix_len=len(self.argv))

    def start(self, argv: Sequence[str], env: Mapping[str, str], log: IO[bytes], *,
              stop_timeout_s: float) -> Started:
        return Started(popen(argv, env, log, stdin=subprocess.DEVNULL))

    def preflight(self, server_args: Sequence[str], prefix: Sequence[str],
                  redactor: Redactor, *, timeout_s: float = 120.0) -> PreflightResult:
        return preflight(server_args, python=launcher_python(list(prefix)), timeout_s=timeout_s,
                         redactor=redactor)

    def sglang_version(self, prefix: Sequence[str]) -> str | None:
        """This interpreter's SGLang, when the launcher runs this interpreter."""
        if not prefix or prefix[0] != sys.executable:
            return None
        try:
            return metadata.version("sglang")
        except metadata.PackageNotFoundError:
            return "not installed here"
