"""Check a launch command with SGLang's own argument parser before spending minutes on a launch."""

from __future__ import annotations

import dataclasses
import itertools
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from specgate.core.redact import Redactor

PreflightStatus = Literal["ok", "rejected", "unavailable"]
_MARK = "SPECGATE_PREFLIGHT "

# Runs in the interpreter that will run SGLang, so the parser is the one the server will use.
# prepare_server_args (0.5.x) builds argparse.ArgumentParser(prog="sglang serve"), registers
# ServerArgs.add_cli_args, merges --config YAML and builds ServerArgs; resolve_once() (model
# config, device, speculative defaults) needs transformers, the model files and a GPU, so it
# is not run here.
_SCRIPT = r"""
import contextlib, io, json, sys
MARK = "SPECGATE_PREFLIGHT "
def say(status, message, version=None):
    print(MARK + json.dumps({"status": status, "message": message, "version": version}))
    sys.exit(0)
try:
    import sglang
    from sglang.srt import server_args as sa
except BaseException as exc:
    say("unavailable", f"sglang.srt.server_args cannot be imported ({type(exc).__name__}: {exc})")
version = getattr(sglang, "__version__", None)
err = io.StringIO()
try:
    with contextlib.redirect_stderr(err):
        if hasattr(sa, "prepare_server_args"):
            sa.prepare_server_args(sys.argv[1:])
        else:
            import argparse
            parser = argparse.ArgumentParser(prog="sglang serve")
            sa.ServerArgs.add_cli_args(parser)
            sa.ServerArgs.from_cli_args(parser.parse_args(sys.argv[1:]))
except SystemExit:
    lines = err.getvalue().strip().splitlines()
    said = [l for l in lines if "error:" in l] or lines[-3:]
    say("rejected", "\n".join(said), version)
except Exception as exc:
    say("rejected", f"{type(exc).__name__}: {exc}", version)
say("ok", "accepted by SGLang's argument parser", version)
"""

_HINTS = {
    "--cuda-graph-max-bs": "--cuda-graph-max-bs was removed after SGLang 0.5.14; use "
                           "--cuda-graph-max-bs-decode",
}


@dataclasses.dataclass(frozen=True)
class PreflightResult:
    status: PreflightStatus
    message: str
    version: str | None = None
    python: str | None = None


def preflight(argv: Sequence[str], *, python: str | None = None, timeout_s: float = 120.0,
              redactor: Redactor | None = None) -> PreflightResult:
    """Parse SGLang flags (argv after the launcher) with SGLang's parser in `python`."""
    exe = python or sys.executable
    redactor = redactor or Redactor()
    for flag, value in itertools.pairwise(argv):
        if flag in ("--api-key", "--admin-api-key"):
            redactor.add(value)  # argparse echoes bad values back, keys included
    try:
        done = subprocess.run([exe, "-c", _SCRIPT, *argv], capture_output=True, text=True,
                              timeout=timeout_s, check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return PreflightResult("unavailable", f"{exe}: importing sglang took over "
                               f"{timeout_s:.0f} s; preflight skipped", python=exe)
    except OSError as exc:
        return PreflightResult("unavailable", f"{exe} cannot be run: {exc}", python=exe)
    line = next((ln for ln in reversed(done.stdout.splitlines()) if ln.startswith(_MARK)), None)
    if line is None:
        tail = redactor.redact((done.stdout + done.stderr).strip()[-400:])
        return PreflightResult("unavailable", f"{exe} exited with code {done.returncode} "
                               f"without a verdict: {tail}", python=exe)
    said = json.loads(line[len(_MARK):])
    status: PreflightStatus = said["status"]
    message = redactor.redact(str(said["message"]))
    version = said.get("version")
    if status == "rejected":
        hints = [h for flag, h in _HINTS.items() if flag in message]
        message = (f"SGLang {version or '?'} rejects the launch command: {message}"
                   + "".join(f"\n hint: {h}" for h in hints))
    return PreflightResult(status, message, version, exe)


def launcher_python(prefix: list[str]) -> str:
    """The interpreter behind a local launcher: `python ...` itself, or the one beside `sglang`."""
    if prefix:
        first = Path(prefix[0])
        if first.name.startswith("python"):
            return prefix[0]
        if first.name == "sglang":
            sibling = first.parent / "python"
            if sibling.exists():
                return str(sibling)
    return sys.executable
