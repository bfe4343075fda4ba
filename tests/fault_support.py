"""For the fault matrix: tmp profiles on the simulator, probe runs, process counts."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent
# Every server a case launches carries this variable, so its processes can be found afterwards.
MARKER_VAR = "SPECGATE_FAULT_MARKER"
# Where a session of the fault matrix appends one JSON line per case (docs/fault-matrix.md).
RECORD_VAR = "SPECGATE_FAULT_RECORD"


def _toml(value: Any) -> str:
    return json.dumps(value)  # JSON strings, numbers and arrays are valid TOML


def write_profile(folder: Path, assets: Path, *, fault: str = "", marker: str | None = None,
                  port: int = 0, startup_timeout_s: float = 20.0, request_timeout_s: float = 10.0,
                  launcher: list[str] | None = None, api_key_env: str | None = None,
                  extra_env: dict[str, str] | None = None, max_new_tokens: int = 32,
                  prompts_per_category: int = 1,
                  host: str = "127.0.0.1", name: str = "profile.toml",
                  target: Path | None = None, server_args: list[str] | None = None,
                  stop_timeout_s: float = 5.0,
                  thresholds: dict[str, float] | None = None) -> tuple[Path, str]:
    """A fast Phase 0 profile on the simulator (with fault) in folder; returns (path, marker).
    Answers of 32 tokens: long enough that a busy machine does not make a stream look like one
    burst (which the timed claims would refuse)."""
    marker = marker or uuid.uuid4().hex
    folder.mkdir(parents=True, exist_ok=True)
    # A quick start and health check (the demo's take 1.5 s a launch): these cases are about
    # what a fault does, not how long SGLang takes to get ready.
    env = {MARKER_VAR: marker, "SPECGATE_SIM_START_DELAY_S": "0.1",
           "SPECGATE_SIM_HEALTH_GENERATE_S": "0.05", **(extra_env or {})}
    if fault:
        env["SPECGATE_SIM_FAULT"] = fault
    env_items = ", ".join(f"{k} = {_toml(v)}" for k, v in env.items())
    launcher = launcher or ["python", "-m", "specgate.testing.simulator"]
    lines = [
        f'name = "fault-{marker[:8]}"',
        "simulated = true",
        "[demo]", f"assets = {_toml(str(assets))}",
        "[target]", f"path = {_toml(str(target or assets / 'target'))}",
        "[drafter]", f"path = {_toml(str(assets / 'drafter'))}",
        f"reference = {_toml(str(assets / 'reference'))}",
        "[server]", f"launcher = {_toml(launcher)}", f"host = {_toml(host)}", f"port = {port}",
        "tp = 1", f"startup_timeout_s = {startup_timeout_s}", f"stop_timeout_s = {stop_timeout_s}",
        f"env = {{ {env_items} }}",
        *([f"args = {_toml(server_args)}"] if server_args else []),
        *([f"api_key_env = {_toml(api_key_env)}"] if api_key_env else []),
        "[speculative]", 'algorithm = "EAGLE3"', "num_steps = 2", "eagle_topk = 1",
        "num_draft_tokens = 3",
        "[bench]", 'prompts = "builtin"', f"prompts_per_category = {prompts_per_category}",
        'categories = ["chat"]',
        'chat_template = "chatml"', f"max_new_tokens = {max_new_tokens}", "warmup = 0",
        "repeats = 1", "max_repeats = 1", f"request_timeout_s = {request_timeout_s}",
        "[thresholds]",
        *(f"{k} = {v}" for k, v in {"baseline_tps_min": 1.0, "accept_len_min": 1.0,
                                    "speedup_min": 0.01, **(thresholds or {})}.items()),
    ]
    path = folder / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, marker


@dataclasses.dataclass
class ProbeRun:
    """One pytest session run as a subprocess, and what it left behind."""

    returncode: int
    output: str
    seconds: float
    reports: Path
    timed_out: bool = False

    @property
    def verdict(self) -> dict[str, Any]:
        return dict(json.loads((self.reports / "verdict.json").read_text(encoding="utf-8")))

    def claims(self) -> dict[str, dict[str, Any]]:
        return {c["id"]: c for c in self.verdict["claims"]}

    def causes_of(self, claim_id: str) -> list[str]:
        """The verdict's causes that name claim_id (a broken claim has at most one)."""
        return [str(c["message"]) for c in self.verdict.get("causes", [])
                if claim_id in c["claims"]]

    def allure_statuses(self) -> dict[str, str]:
        """Allure's status per claim id (label `claim`) from allure-results/*-result.json."""
        out: dict[str, str] = {}
        for path in (self.reports / "allure-results").glob("*-result.json"):
            doc = json.loads(path.read_text(encoding="utf-8"))
            claim = [lab["value"] for lab in doc.get("labels", []) if lab["name"] == "claim"]
            if claim:
                out[claim[0]] = doc["status"]
        return out


def probe_command(profile: Path, reports: Path, *args: str, select: str = "probe") -> list[str]:
    # `--opt=value`: pytest picks its rootdir (and so pyproject.toml) before the plugin's options
    # are known, and would take a separate `--profile /tmp/x.toml` value for a test path.
    return [sys.executable, "-m", "pytest", "-m", select, f"--profile={profile}",
            f"--reports={reports}", *args]


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "SPECGATE_SIM_")) and k != MARKER_VAR}
    env.update(extra)
    return env


def as_foreground_job() -> None:
    """preexec_fn: Ctrl-C's default action, as a terminal's foreground job has it. A shell that
    runs the suite in the background starts it with SIGINT ignored, and every child inherits
    that (Python then installs no KeyboardInterrupt handler at all)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_probe(profile: Path, reports: Path, *args: str, timeout_s: float = 60.0,
              env: dict[str, str] | None = None, select: str = "probe") -> ProbeRun:
    """`python -m pytest -m probe --profile P --reports R ARGS` from the repo, bounded in time."""
    started = time.monotonic()
    proc = subprocess.Popen(probe_command(profile, reports, *args, select=select), cwd=REPO,
                            env=env or child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=as_foreground_job)
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_group(proc.pid)
        out, _ = proc.communicate()
    return ProbeRun(proc.returncode, out, round(time.monotonic() - started, 2), reports,
                    timed_out)


def start_probe(profile: Path, reports: Path, *args: str,
                env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """The probe in its own process group, like a terminal's foreground job."""
    return subprocess.Popen(probe_command(profile, reports, *args), cwd=REPO,
                            env=env or child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=as_foreground_job)


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def wait_for(predicate: Callable[[], bool], timeout_s: float, poll_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll_s)
    return predicate()


def file_contains(path: Path, text: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return text in path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return False
    return check


def run_file_contains(reports: Path, relative: str, text: str) -> Callable[[], bool]:
    """file_contains for a file of the run in progress, in the run folder its interim verdict
    names (reports/verdict.json's run.folder)."""
    def check() -> bool:
        try:
            doc = json.loads((reports / "verdict.json").read_text(encoding="utf-8"))
            folder = doc["run"]["folder"]
        except (OSError, ValueError, KeyError, TypeError):
            return False
        return file_contains(reports / folder / relative, text)()
    return check


def marked_processes(marker: str) -> list[psutil.Process]:
    """Live processes whose environment carries this case's marker (servers and their children)."""
    found = []
    needle = f"{MARKER_VAR}={marker}".encode()
    for proc in psutil.process_iter(["pid"]):
        try:
            data = Path(f"/proc/{proc.pid}/environ").read_bytes()
            if needle in data.split(b"\0") and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (OSError, psutil.Error):
            continue
    return found


def orphans(marker: str, grace_s: float = 3.0) -> list[psutil.Process]:
    """Marked processes still alive after a grace period (children poll their parent)."""
    wait_for(lambda: not marked_processes(marker), grace_s, poll_s=0.1)
    return marked_processes(marker)


def reap(procs: Iterable[psutil.Process]) -> None:
    """Kill what a failed case left behind (only processes carrying our marker)."""
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass


def record(case: str, run: ProbeRun, *, held: bool, orphans_found: int, secrets: int = 0,
           note: str = "") -> None:
    """Append a case's figures to $SPECGATE_FAULT_RECORD (when set) for docs/fault-matrix.md."""
    target = os.environ.get(RECORD_VAR)
    if not target:
        return
    outcome = None
    try:
        outcome = run.verdict.get("outcome")
    except (OSError, ValueError):
        pass
    line = {"case": case, "held": held, "seconds": run.seconds, "exit": run.returncode,
            "outcome": outcome, "orphans": orphans_found, "secrets": secrets, "note": note}
    with open(target, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")
