"""Launchers whose server runs on a far side (another machine, a container): the command reaches
it through a prefix (`ssh gpu-box`, `pct exec 101 --`, `docker exec -i gpu`), a sh wrapper there
owns the server's process group, and a sweep through the same prefix stops what is left.

ssh.py, pct.py and docker.py subclass FarSideLauncher; each says which programs it is for, how
its prefix keeps the command's standard input open, and whether its far side re-parses the
command through a shell.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
import shlex
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, ClassVar

from specgate.core.errors import ProfileError
from specgate.core.profile import SIMULATOR_MODULE
from specgate.core.redact import Redactor
from specgate.serving import gpu
from specgate.serving.launchers.base import (
    TAG_VAR,
    Command,
    FarSideStop,
    Launcher,
    Started,
    StopOrder,
    popen,
    port_in_use,
    read_head,
    read_tail,
)
from specgate.serving.preflight import PreflightResult

# Killing a local `ssh` (or `pct exec`, `docker exec`) does not stop what it started on the far
# side: no signal crosses the connection. What does cross is the end of the command's standard
# input, whether specgate closes it, its launcher is killed, or the connection drops (sshd closes
# the session's pipes). So the wrapper starts the server with `setsid`, tags it with TAG_VAR
# (every descendant inherits it), reports pid and process group on its first line, and waits;
# when its standard input ends (or it gets TERM, HUP or INT) it sends TERM to the group and to
# every tagged process, then KILL after the grace period. When the server exits by itself the
# wrapper stops what is left of its tree and exits with the server's exit code. The sweep is the
# second path: a fresh command through the launcher prefix that TERMs, then KILLs, every process
# still carrying the tag (one that left the group too) and says what it found. Both need only a
# POSIX sh, `setsid`, `grep`, `kill` and /proc on the far side.
WRAPPER_NAME = "specgate-remote"
SWEEP_NAME = "specgate-sweep"

# Shared by both scripts: say LINE (a write to a dropped connection must not kill the shell, so
# printf runs in a subshell), the tagged pids, and the poll step for the grace period.
_COMMON = rf"""
say() {{ (printf '%s: %s\n' "$me" "$*") 2>/dev/null; }}
tagged() {{
  out=
  for f in $(grep -ls "{TAG_VAR}=$tag" /proc/[0-9]*/environ 2>/dev/null); do
    p=${{f#/proc/}}
    out="$out${{out:+ }}${{p%/environ}}"
  done
  printf '%s' "$out"
}}
if sleep 0.1 2>/dev/null; then step=0.2 ticks=$((grace * 5)); else step=1 ticks=$grace; fi
"""

WRAPPER = rf"""me={WRAPPER_NAME} tag=$1 grace=$2
shift 2
{_COMMON}
if ! command -v setsid >/dev/null 2>&1; then
  say "setsid is not installed here (util-linux or busybox has it); the server was not started"
  exit 127
fi
# A zombie still belongs to its process group, so `kill -0 -$pg` answers for it; one whose
# parent ended waits for the far side's PID 1 to reap it, which an application running as PID 1
# of a container never does. So the group runs while one of its processes is not a zombie: the
# state and group fields of /proc/PID/stat, after the command name in parentheses.
running() {{
  for f in /proc/$pg/stat /proc/[0-9]*/stat; do
    IFS= read -r s <"$f" || continue
    set -- ${{s##*) }}
    [ "$1" = Z ] || [ "$3" != "$pg" ] || return 0
  done
  return 1
}}
alive() {{ {{ kill -0 -$pg && running; }} 2>/dev/null || [ -n "$(tagged)" ]; }}
stop_tree() {{
  left=$(tagged)
  kill -0 -$pg 2>/dev/null || [ -n "$left" ] || return 0
  say "$1: TERM to process group $pg${{left:+, tagged pids $left}}"
  kill -TERM -$pg 2>/dev/null
  [ -z "$left" ] || kill -TERM $left 2>/dev/null
  n=0
  while [ $n -lt $ticks ] && alive; do sleep $step; n=$((n + 1)); done
  if alive; then
    left=$(tagged)
    say "still running $grace s after TERM: KILL to process group $pg${{left:+, tagged pids $left}}"
    kill -KILL -$pg 2>/dev/null
    [ -z "$left" ] || kill -KILL $left 2>/dev/null
    n=0
    while [ $n -lt 25 ] && alive; do sleep $step; n=$((n + 1)); done
  else
    say "process group $pg ended after TERM"
  fi
}}
why=
trap 'why="standard input closed"' USR1
trap 'why="SIGTERM"' TERM
trap 'why="SIGHUP"' HUP
trap 'why="SIGINT"' INT
exec 3<&0 </dev/null
{TAG_VAR}=$tag setsid "$@" 3<&- &
pg=$!
say "started pid=$pg pgid=$pg tag=$tag"
(while IFS= read -r _; do :; done <&3; kill -USR1 $$ 2>/dev/null) >/dev/null 2>&1 &
watcher=$!
exec 3<&-
while :; do
  wait $pg
  code=$?
  [ -n "$why" ] || break
  stop_tree "$why"
  why=
done
stop_tree "the server exited with code $code"
kill $watcher 2>/dev/null
exit $code
"""

SWEEP = rf"""me={SWEEP_NAME} tag=$1 grace=$2
{_COMMON}
left=$(tagged)
if [ -z "$left" ]; then say "no process tagged $tag is left"; exit 0; fi
say "TERM to tagged pids $left"
kill -TERM $left 2>/dev/null
n=0
while [ $n -lt $ticks ] && [ -n "$(tagged)" ]; do sleep $step; n=$((n + 1)); done
left=$(tagged)
if [ -n "$left" ]; then
  say "still running $grace s after TERM: KILL to tagged pids $left"
  kill -KILL $left 2>/dev/null
  sleep 1
fi
left=$(tagged)
say "left: ${{left:-none}}"
"""

_STARTED = re.compile(rf"^{WRAPPER_NAME}: started pid=(\d+) pgid=(\d+) tag=([0-9a-f]+)\s*$",
                      re.MULTILINE)
_SAID = re.compile(rf"^{WRAPPER_NAME}: (.*?)\s*$", re.MULTILINE)
_SWEPT = re.compile(rf"^{SWEEP_NAME}: (.*?)\s*$", re.MULTILINE)
_LEFT = re.compile(rf"^{SWEEP_NAME}: left: (.*?)\s*$", re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class FarSide:
    """The server as the wrapper started it on the far side."""

    pid: int
    pgid: int
    tag: str


def grace_s(stop_timeout_s: float) -> int:
    """The wrapper's grace period between TERM and KILL, whole seconds."""
    return max(1, math.ceil(stop_timeout_s))


def started(log_text: str) -> FarSide | None:
    """The wrapper's first line: the server's pid and process group on the far side."""
    found = _STARTED.search(log_text)
    if found is None:
        return None
    return FarSide(pid=int(found.group(1)), pgid=int(found.group(2)), tag=found.group(3))


def wrapper_said(log_text: str) -> list[str]:
    """What the wrapper reported after the start: how it stopped the group."""
    return [m.group(1) for m in _SAID.finditer(log_text)
            if not m.group(1).startswith("started ")]


def sweep_said(output: str) -> list[str]:
    return [m.group(1) for m in _SWEPT.finditer(output)]


def sweep_left(output: str) -> tuple[int, ...] | None:
    """The tagged pids the sweep still saw at its end; None when it did not say."""
    if re.search(rf"^{SWEEP_NAME}: no process tagged \S+ is left", output, re.MULTILINE):
        return ()
    found = list(_LEFT.finditer(output))
    if not found:
        return None
    text = found[-1].group(1)
    return () if text == "none" else tuple(int(p) for p in text.split() if p.isdigit())


_REMOTE_PROGRAM_NAMES = ("sglang", "uv", "conda")
# How long the wrapper may take past its grace period to end, and the sweep to report.
_WRAPPER_EXIT_S = 5.0
_SWEEP_EXTRA_S = 60.0
_STOP_COMMAND_S = 60.0


class FarSideLauncher(Launcher):
    """A launcher whose server runs beyond this machine: the profile's env travels on the
    command line as `env K=V`, its paths are the far side's, and the server is stopped there
    by the wrapper and the sweep."""

    port_release_s: ClassVar[float] = 15.0
    # Whether the far side joins the words after the prefix and re-parses them through a shell
    # (ssh); otherwise the argv passes as it is (pct exec, docker exec).
    through_shell: ClassVar[bool] = False
    # Each far-side launcher by program, so a prefix that chains several (`ssh gpu-box docker
    # exec ctr`) keeps standard input open through each of them.
    _by_program: ClassVar[dict[str, type[FarSideLauncher]]] = {}

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__()
        for program in cls.programs:
            FarSideLauncher._by_program[program] = cls

    @classmethod
    def keep_stdin(cls, words: list[str], source: str) -> list[str]:
        """The words of this program's hop (words[0] is the program) with the command's
        standard input kept open through it."""
        return words

    def quote(self, word: str) -> str:
        """One word of the far side's command as the prefix hands it on."""
        return shlex.quote(word) if self.through_shell else word

    def server_path(self, written: str | None, resolved: Path | None) -> str | None:
        return written  # the path lives on the GPU host; resolved here it would be wrong there

    def reads_local_files(self) -> bool:
        return False

    def gpu_snapshot(self) -> gpu.GpuSnapshot | None:
        """The far side's GPUs, listed by nvidia-smi run through the launcher's prefix."""
        return gpu.snapshot(prefix=self.reach())

    def attached_gpus_unlisted(self, url: str) -> str | None:
        return None  # the prefix reaches the machine the profile's servers run on

    def gpu_host(self) -> str:
        return f"the GPU host ({shlex.join(self.argv[:remote_command_start(list(self.argv))])})"

    def reach(self) -> list[str]:
        """The prefix that reaches the far side, standard input kept open through every hop."""
        out = list(self.argv[:remote_command_start(list(self.argv))])
        i = 0
        while i < len(out):
            hop = FarSideLauncher._by_program.get(Path(out[i]).name)
            if hop is not None:
                out[i:] = hop.keep_stdin(out[i:], self.source)
            i += 1
        return out

    def command(self, flags: Sequence[str], env: Mapping[str, str]) -> Command:
        argv = list(self.argv)
        cut = remote_command_start(argv)
        reach = self.reach()
        carriage = ["env", *(f"{k}={self.quote(v)}" for k, v in env.items())]
        head = reach + (carriage if env else [])
        return Command(argv=(*head, *argv[cut:], *(self.quote(f) for f in flags)), env={},
                       prefix_len=len(head) + len(argv) - cut, remote_at=len(reach))

    def server_args(self, args: Sequence[str]) -> list[str]:
        return [_unquote(a) for a in args]

    def port_taken(self, host: str, port: int, url: str) -> bool:
        # The port is bound on the far side: only a listener there can be seen from here.
        return port_in_use(host, port, url, check_bind=False)

    def start(self, argv: Sequence[str], env: Mapping[str, str], log: IO[bytes], *,
              stop_timeout_s: float) -> Started:
        tag = uuid.uuid4().hex
        log.write(f"# specgate: run on the far side by a wrapper that stops the server's "
                  f"process group when this launcher ends ({TAG_VAR}={tag})\n".encode())
        log.flush()
        wrapped = self.wrap(argv, tag, stop_timeout_s)
        return Started(popen(wrapped, env, log, stdin=subprocess.PIPE), tag)

    def wrap(self, argv: Sequence[str], tag: str, stop_timeout_s: float) -> list[str]:
        """A built command with the wrapper inserted where the far side's command starts."""
        at = len(self.reach())
        return [*argv[:at], *self._script(WRAPPER, WRAPPER_NAME, tag, grace_s(stop_timeout_s)),
                *argv[at:]]

    def sweep_argv(self, tag: str, stop_timeout_s: float) -> list[str]:
        """The sweep of every process tagged `tag`, run through the launcher prefix."""
        return [*self.reach(), *self._script(SWEEP, SWEEP_NAME, tag, grace_s(stop_timeout_s))]

    def _script(self, text: str, name: str, tag: str, grace: int) -> list[str]:
        return [self.quote(w) for w in ("sh", "-c", text, name, tag, str(grace))]

    def preflight(self, server_args: Sequence[str], prefix: Sequence[str],
                  redactor: Redactor, *, timeout_s: float = 120.0) -> PreflightResult:
        return PreflightResult("unavailable", "remote launcher: SGLang is installed on the GPU "
                               "host, not here; the command is checked when it starts")

    def env_unreadable(self) -> str | None:
        return ("remote launcher: the server's environment lives on the GPU host; the profile "
                "env was passed as `env K=V` on its command line")

    def ranks_unreadable(self) -> str | None:
        return "remote launcher: the TP ranks run on the GPU host"

    def port_left_note(self, url: str, stop_command: tuple[str, ...] | None) -> str | None:
        return (f"{url} still answers after the far side was stopped: "
                + ("[server] stop_command did not stop what holds the port" if stop_command
                   else "something the wrapper did not start holds the port"))

    def stop_far_side(self, order: StopOrder) -> FarSideStop:
        """Both paths that stop the server on the far side.

        First the wrapper's: its standard input ends, so it TERMs the server's process group
        (KILL after the grace period) and exits, and the local launcher with it. Then the
        second: a sweep of every process carrying the tag, through the same launcher prefix,
        or the user's [server] stop_command in its place.
        """
        proc = order.proc
        grace = grace_s(order.stop_timeout_s)
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        # The wrapper exits once the group is gone (TERM, grace, KILL), and the launcher with
        # it. One that does not (the wrapper itself was killed, its output pipe is held) is
        # left to the sweep, then to the local teardown of the handle.
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace + _WRAPPER_EXIT_S)
        head = read_head(order.log_path) if order.log_path else ""
        found = started(head)
        found = found if found is not None and found.tag == order.tag else None
        said = tuple(wrapper_said(read_tail(order.log_path))) if order.log_path else ()
        if order.stop_command:
            second, left = " ".join(_run_stop_command(order.stop_command, order.redactor)), None
        else:
            second, left = self.sweep(order.tag, order.stop_timeout_s, order.redactor)
        return FarSideStop(tag=order.tag, pid=found.pid if found else None, wrapper=said,
                           second_path=second, left=left)

    def sweep(self, tag: str, stop_timeout_s: float,
              redactor: Redactor) -> tuple[str, tuple[int, ...] | None]:
        """Run the sweep through the launcher prefix: what it said, and the tagged pids it
        still saw at its end (None when it could not tell)."""
        through = shlex.join(redactor.redact(w) for w in self.reach())
        try:
            done = subprocess.run(self.sweep_argv(tag, stop_timeout_s), capture_output=True,
                                  text=True, stdin=subprocess.DEVNULL,
                                  timeout=grace_s(stop_timeout_s) + _SWEEP_EXTRA_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"sweep through `{through}` failed: {exc}", None
        said = sweep_said(done.stdout)
        left = sweep_left(done.stdout)
        if left is None:
            err = redactor.redact((done.stdout + done.stderr).strip())[-300:]
            return (f"sweep through `{through}` could not tell what is left (exit "
                    f"{done.returncode}{': ' + err if err else ''})"), None
        return f"sweep through `{through}`: " + "; ".join(said), left


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


def _run_stop_command(stop_command: tuple[str, ...], redactor: Redactor) -> list[str]:
    try:
        done = subprocess.run(list(stop_command), capture_output=True, text=True,
                              timeout=_STOP_COMMAND_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"[server] stop_command failed: {exc}"]
    said = redactor.redact((done.stdout + done.stderr).strip())[-300:]
    return [f"[server] stop_command exited with code {done.returncode}"
            + (f": {said}" if said else "")]


def _unquote(arg: str) -> str:
    parts = shlex.split(arg)
    return parts[0] if len(parts) == 1 else arg
