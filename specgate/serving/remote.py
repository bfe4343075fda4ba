"""The far side of a remote launch: a sh wrapper owning the server's process group, and a sweep."""

from __future__ import annotations

import dataclasses
import math
import re
import shlex
from pathlib import Path

from specgate.serving.launch import LaunchSpec

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
TAG_VAR = "SPECGATE_REMOTE_TAG"
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
alive() {{ kill -0 -$pg 2>/dev/null || [ -n "$(tagged)" ]; }}
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


def wrap(spec: LaunchSpec, tag: str, stop_timeout_s: float) -> list[str]:
    """spec's argv with the wrapper inserted where the far side's command starts."""
    argv = list(spec.argv)
    at = spec.remote_at
    return argv[:at] + _script(spec, WRAPPER, WRAPPER_NAME, tag,
                               grace_s(stop_timeout_s)) + argv[at:]


def sweep(spec: LaunchSpec, tag: str, stop_timeout_s: float) -> list[str]:
    """The sweep of every process tagged `tag`, run through spec's launcher prefix."""
    return list(spec.argv[:spec.remote_at]) + _script(spec, SWEEP, SWEEP_NAME, tag,
                                                      grace_s(stop_timeout_s))


def _script(spec: LaunchSpec, text: str, name: str, tag: str, grace: int) -> list[str]:
    # ssh joins the words after the destination and the remote login shell splits them again;
    # pct exec and docker exec pass their argv on as it is.
    words = ["sh", "-c", text, name, tag, str(grace)]
    return [shlex.quote(w) for w in words] if is_ssh(spec.argv) else words


def is_ssh(argv: tuple[str, ...] | list[str]) -> bool:
    return bool(argv) and Path(argv[0]).name == "ssh"


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
