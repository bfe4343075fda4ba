"""The real-SGLang suite's driver: specgate's probe and fault cases against a live SGLang server.

Called by run_suite.sh once SGLang, specgate and the tiny models are in place (see README.md). Each
run is a real `pytest -m probe` session (or a direct use of specgate's launch API) whose exit code,
verdict and per-claim status are recorded with what it left behind: processes of the server tree
and GPU memory. Runs go in order of importance and are skipped, with a note, when the deadline
would not leave them time.

    python3 suite.py --work WORK --out OUT --tiny WORK/tiny --deadline EPOCH [--sim]

Writes OUT/summary.json, OUT/summary.md, OUT/verdicts/<run>.json and OUT/live/<run>.json (each
run's verdict and live results), and OUT/runs.tar.gz (pytest output, verdict.json, results.json,
server logs and profiles of every run).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from benchmarks.servers import Started, free_port, start, until_healthy

# ---- names the harness may rename: change them here, and only here --------------------------
# pytest options of specgate's plugin (`--profile` may be renamed: it collides with
# pytest-profiling), the marker of the quick probe, and the module of specgate's simulator.
OPTIONS = {
    "profile": "--profile",
    "reports": "--reports",
    "server_url": "--server-url",
    "baseline_url": "--baseline-url",
}
PROBE_MARK = "probe"
SIM_MODULE = "specgate.testing.simulator"

# ---- the deployment under test ----------------------------------------------------------------
SGLANG_VERSION = "0.5.17"
# The flags that work with SGLang 0.5.17 on the H200 (no CUDA graphs, Triton attention, no
# grammar backend); see docs/real-sglang.md.
SERVER_FLAGS = [
    "--attention-backend", "triton", "--speculative-draft-attention-backend", "triton",
    "--sampling-backend", "pytorch", "--grammar-backend", "none",
    "--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled",
    "--dtype", "bfloat16", "--context-length", "2048", "--mem-fraction-static", "0.3",
    "--max-total-tokens", "65536",
]
# Flags the simulator does not know (it exits 2 on them, as SGLang's argparse does), with the
# number of values each takes: dropped for the dry run.
SIM_UNKNOWN_FLAGS = {"--grammar-backend": 1, "--cuda-graph-backend-decode": 1,
                     "--cuda-graph-backend-prefill": 1, "--cuda-graph-max-bs-decode": 1}
# RS_CUDA_GRAPHS=1 (or force, env.sh): decode runs in CUDA graphs (SGLang's default backend) for
# batch sizes up to this, as a deployment would; prefill stays eager. Both servers of a probe get
# the same flags.
CUDA_GRAPH_MAX_BS = "4"
WRONG_FLAG = ["--speculative-num-stepz", "3"]  # a typo neither SGLang nor its abbreviations know
SERVER_ENV = {"SPECGATE_SUITE": "real-sglang"}  # exercised by env.server_env

# Server-like processes, whoever started them (the suite's own files are named real_sglang).
SERVER_CMD = re.compile(r"sglang\.launch_server|sglang::|sglang\.srt|sglang serve|"
                        + re.escape(SIM_MODULE))
SCHEDULER = re.compile(r"sched", re.IGNORECASE)
GENERATE_LINE = re.compile(r'"POST /generate HTTP')
SPEC_CLAIMS = ("spec.accept_len", "spec.breakeven", "spec.speedup")


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def say(message: str) -> None:
    print(f"[suite {time.strftime('%H:%M:%S')}] {message}", flush=True)


# ---- the profile ------------------------------------------------------------------------------

def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(v)}"
                                for k, v in value.items()) + " }"
    raise TypeError(f"no TOML for {value!r}")


def toml(doc: dict[str, Any]) -> str:
    """Top-level scalars first, then one [table] (or [table.sub]) per dict of dicts."""
    lines = [f"{k} = {toml_value(v)}" for k, v in doc.items() if not isinstance(v, dict)]

    def table(name: str, body: dict[str, Any]) -> None:
        lines.append(f"\n[{name}]")
        lines.extend(f"{json.dumps(k) if '.' in k else k} = {toml_value(v)}"
                     for k, v in body.items() if not (isinstance(v, dict) and k in SUBTABLES))
        for k, v in body.items():
            if isinstance(v, dict) and k in SUBTABLES:
                table(f"{name}.{k}", v)

    for k, v in doc.items():
        if isinstance(v, dict):
            table(k, v)
    return "\n".join(lines) + "\n"


SUBTABLES = {"expect"}  # written as [drafter.expect]; other dicts (env) are inline tables


def server_flags(sim: bool, cuda_graphs: bool | None = None) -> list[str]:
    if cuda_graphs is None:
        cuda_graphs = os.environ.get("RS_CUDA_GRAPHS") in ("1", "force")
    flags = list(SERVER_FLAGS)
    if cuda_graphs:
        at = flags.index("--cuda-graph-backend-decode")
        flags[at:at + 2] = ["--cuda-graph-max-bs-decode", CUDA_GRAPH_MAX_BS]
    if not sim:
        return flags
    out, skip = [], 0
    for flag in flags:
        if skip:
            skip -= 1
            continue
        if flag in SIM_UNKNOWN_FLAGS:
            skip = SIM_UNKNOWN_FLAGS[flag]
            continue
        out.append(flag)
    return out


def profile_doc(ctx: Ctx, *, fault: bool = False, port: int = 0,
                extra_args: list[str] | None = None, target: str = "target",
                drafter: str = "draft", mem_fraction: float = 0.3) -> dict[str, Any]:
    tiny = ctx.tiny
    flags = server_flags(ctx.sim)
    flags[flags.index("--mem-fraction-static") + 1] = str(mem_fraction)
    return {
        "name": f"real-sglang-{SGLANG_VERSION}-tiny" + ("-sim" if ctx.sim else ""),
        "description": (f"SGLang {SGLANG_VERSION} on one H200: tiny random 4-layer Llama target, "
                        "1-layer EAGLE-3 drafter (steps 3, topk 1, 4 draft tokens)"
                        + (" [dry run on specgate's simulator]" if ctx.sim else "")),
        "target": {"path": str(tiny / target)},
        "drafter": {
            "path": str(tiny / drafter),
            "reference": str(tiny / "draft_ref"),
            "expect": {
                "architectures": ["LlamaForCausalLMEagle3"],
                "hidden_size": 256, "intermediate_size": 704, "num_attention_heads": 4,
                "num_key_value_heads": 2, "vocab_size": 1024, "draft_vocab_size": 1024,
                "max_position_embeddings": 2048,
                "eagle_config.eagle_aux_hidden_state_layer_ids": [0, 1, 2],
            },
        },
        "server": {
            "launcher": ctx.launcher, "host": "127.0.0.1", "port": port, "tp": 1,
            # The first start compiles kernels (2-3 min); later ones take 46-61 s.
            "startup_timeout_s": 480.0 if not fault else 300.0,
            "stop_timeout_s": 30.0 if not fault else 15.0,
            "args": flags + list(extra_args or []),
            "env": dict(SERVER_ENV),
        },
        "speculative": {"algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1,
                        "num_draft_tokens": 4},
        "bench": {
            "prompts": "builtin", "prompts_per_category": 2, "chat_template": "plain",
            "max_new_tokens": 64, "temperature": 0.0, "warmup": 1, "repeats": 2,
            "max_repeats": 3 if not fault else 2,
            "request_timeout_s": 60.0 if not fault else 20.0,
        },
        # A tiny random model: ~230 tok/s without speculation, accept length ~1.2 with a random
        # drafter, so spec.breakeven and spec.speedup are expected to fail (not to break).
        "thresholds": {"baseline_tps_min": 100.0, "accept_len_min": 1.0,
                       "d2t_match_min": 0.99, "tps_targets": [150.0, 200.0]},
    }


def write_profile(ctx: Ctx, name: str, **kw: Any) -> Path:
    path = ctx.work / "profiles" / f"{name}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(toml(profile_doc(ctx, **kw)), encoding="utf-8")
    return path


# ---- processes and GPU memory -----------------------------------------------------------------

class Sampler:
    """Remembers every descendant of `root` seen while it runs (children re-parent once their
    parent dies, so the tree must be recorded as it grows)."""

    def __init__(self, root: int, every_s: float = 0.3) -> None:
        self.root = root
        self.every_s = every_s
        self.seen: dict[int, psutil.Process] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.sample()
        self._stop.set()
        self._thread.join(2.0)

    def sample(self) -> None:
        with contextlib.suppress(psutil.Error):
            for p in psutil.Process(self.root).children(recursive=True):
                self.seen.setdefault(p.pid, p)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.every_s)

    def alive(self, exclude: set[int] = frozenset()) -> list[psutil.Process]:  # type: ignore[assignment]
        return [p for pid, p in self.seen.items() if pid not in exclude and running(p)]


def running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def describe(p: psutil.Process) -> dict[str, Any]:
    try:
        return {"pid": p.pid, "name": p.name(), "cmdline": " ".join(p.cmdline())[:160]}
    except psutil.Error:
        return {"pid": p.pid, "name": "?", "cmdline": ""}


def server_like(model_dir: Path) -> list[psutil.Process]:
    """Running SGLang or simulator processes serving the suite's model (by its path on their
    command line), whoever started them; other servers on the machine are none of ours."""
    found = []
    for p in psutil.process_iter():
        if p.pid == os.getpid():
            continue
        try:
            text = p.name() + " " + " ".join(p.cmdline())
        except psutil.Error:
            continue
        if SERVER_CMD.search(text) and str(model_dir) in text and running(p):
            found.append(p)
    return found


def nvidia_smi_rows(query: str) -> list[list[str]] | None:
    """nvidia-smi's answer to a --query-...=fields flag: one row of stripped fields a line (None
    without nvidia-smi, or when it does not answer)."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        done = subprocess.run(["nvidia-smi", query, "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return [[x.strip() for x in line.split(",")] for line in done.stdout.splitlines()]


def gpu_apps() -> list[dict[str, int]] | None:
    """Compute processes holding GPU memory (None without nvidia-smi)."""
    rows = nvidia_smi_rows("--query-compute-apps=pid,used_memory")
    if rows is None:
        return None
    return [{"pid": int(parts[0]), "used_mib": int(parts[1]) if parts[1].isdigit() else -1}
            for parts in rows if len(parts) >= 2 and parts[0].isdigit()]


def gpu_memory() -> dict[str, Any] | None:
    """The GPU's memory in use and in all, and its compute processes, as nvidia-smi reports them
    (None without nvidia-smi)."""
    rows = nvidia_smi_rows("--query-gpu=memory.used,memory.total")
    if rows is None:
        return None
    first = (rows or [[""]])[0]
    used, total = ((int(x) if x.isdigit() else None) for x in [*first, "", ""][:2])
    return {"at": now_iso(), "used_mib": used, "total_mib": total, "apps": gpu_apps()}


def leftovers(ctx: Ctx, sampler: Sampler | None, *, wait_s: float = 15.0) -> dict[str, Any]:
    """What outlived a run, besides the suite's own attach-mode servers: processes of the tree
    the run started, any other server of the suite's model, GPU memory held. Waits up to wait_s
    for a dying tree to go; then kills what is left of the run's own tree (never anything it
    did not start) so the next run starts clean, and says so."""
    keep = ctx.attach_pids()
    deadline = time.monotonic() + wait_s
    while True:
        tree = sampler.alive(keep) if sampler else []
        others = [p for p in server_like(ctx.tiny) if p.pid not in keep
                  and p.pid not in {q.pid for q in tree}]
        gpu = gpu_apps()
        # A GPU pid this pid namespace does not know (nvidia-smi in a container may list host
        # pids) cannot be told from the suite's own servers while those run.
        gpu_left = [g for g in gpu or [] if g["pid"] not in keep
                    and (psutil.pid_exists(g["pid"]) or not keep)]
        if (not tree and not others and not gpu_left) or time.monotonic() >= deadline:
            break
        time.sleep(1.0)
    out = {"processes": [describe(p) for p in tree], "other_server_processes":
           [describe(p) for p in others], "gpu": gpu_left, "gpu_all": gpu,
           "gpu_checked": gpu is not None, "waited_s": round(wait_s - max(
               0.0, deadline - time.monotonic()), 1)}
    out["clean"] = not tree and not others and not gpu_left
    if tree:
        killed = kill_all(tree)
        out["cleanup"] = f"the suite killed pids {killed} of the run's tree"
    return out


def kill_all(procs: list[psutil.Process]) -> list[int]:
    killed = []
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.send_signal(signal.SIGCONT)
            p.kill()
            killed.append(p.pid)
    psutil.wait_procs(procs, timeout=10)
    return killed


BOTH, BASE, NONE = ("baseline", "speculative"), ("baseline",), ()


# ---- the suite's own servers (attach mode) ----------------------------------------------------

class OwnServer(Started):
    """One of the suite's attach-mode servers, its process tree sampled once a second."""

    def __init__(self, started: Started, sampler: Sampler) -> None:
        super().__init__(started.config, started.proc, started.port, started.log, started.argv)
        self.sampler = sampler

    def pids(self) -> set[int]:
        self.sampler.sample()
        return {self.proc.pid, *self.sampler.seen}

    def root(self) -> psutil.Process | None:
        try:
            return psutil.Process(self.proc.pid)
        except psutil.Error:
            return None


def start_server(ctx: Ctx, config: str, port: int) -> OwnServer:
    """One server outside specgate's control, started from specgate's own launch command."""
    from specgate.core.profile import load_profile
    from specgate.serving.launch import build_command

    profile = load_profile(write_profile(ctx, f"attach-{config}"))
    spec = build_command(profile, config, port=port)  # type: ignore[arg-type]
    started = start(config, spec.argv, port, ctx.work / "attach" / f"{config}-{port}.log",
                    env=spec.env, tag="suite")
    sampler = Sampler(started.proc.pid, every_s=1.0).__enter__()
    say(f"attach server {config} starting on port {port} (pid {started.proc.pid})")
    return OwnServer(started, sampler)


def stop_server(srv: OwnServer, timeout_s: float = 20.0) -> dict[str, Any]:
    family = [p for p in srv.sampler.seen.values() if running(p)]
    root = srv.root()
    if root is not None:
        family.append(root)
    for p in family:
        with contextlib.suppress(psutil.Error):
            p.send_signal(signal.SIGCONT)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(srv.proc.pid, signal.SIGTERM)
    _, alive = psutil.wait_procs(family, timeout=timeout_s)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(srv.proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        srv.proc.wait(10)
    srv.sampler.__exit__()
    return {"config": srv.config, "sigkilled": [p.pid for p in alive],
            "exit_code": srv.proc.returncode}


# ---- fault injection --------------------------------------------------------------------------

def scheduler_of(root: psutil.Process, sim: bool) -> tuple[psutil.Process, str]:
    """SGLang's scheduler: a child of the launch_server process (setproctitle names it
    sglang::scheduler). The simulator's children are stand-ins that only watch their parent, so
    in a dry run the server process itself takes the fault."""
    if sim:
        return root, "simulator: the server process itself (its children are stand-ins)"
    try:
        kids = root.children(recursive=True)
    except psutil.Error:
        kids = []
    for p in kids:
        with contextlib.suppress(psutil.Error):
            if SCHEDULER.search(p.name() + " " + " ".join(p.cmdline())):
                return p, "named scheduler"
    gpu = {g["pid"] for g in gpu_apps() or []}
    for p in kids:
        if p.pid in gpu:
            return p, "child holding GPU memory"
    for p in kids:
        with contextlib.suppress(psutil.Error):
            if "detok" not in " ".join(p.cmdline()).lower() and "resource_tracker" not in \
                    " ".join(p.cmdline()):
                return p, "first child that is not the detokenizer"
    return root, "no child process: the server process itself"


class Watcher:
    """A fault sent from a thread while pytest runs: `start`, then `finish` (before leftovers
    are read: a resumed orphan could exit on its own), then `resume` whatever it stopped."""

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._t0 = time.monotonic()

    def _run(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self._thread.start()

    def finish(self) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def resume(self) -> None:
        pass


class Injector(Watcher):
    """Waits until a server has begun answering /generate (n requests seen in its log after
    arming), then sends `sig` to its scheduler; SIGCONTs a stopped one when closed."""

    def __init__(self, find_root: Callable[[], psutil.Process | None],
                 find_log: Callable[[], Path | None], sig: int, *, sim: bool,
                 after_requests: int = 2, delay_s: float = 1.0) -> None:
        self.sim = sim
        self.find_root, self.find_log, self.sig = find_root, find_log, sig
        self.after_requests, self.delay_s = after_requests, delay_s
        super().__init__({"signal": signal.Signals(sig).name, "sent": False})
        self._target: psutil.Process | None = None
        self._armed_at = self._count()

    def _count(self) -> int:
        log = self.find_log()
        try:
            return len(GENERATE_LINE.findall(log.read_text(errors="replace"))) if log else 0
        except OSError:
            return 0

    def resume(self) -> None:
        if self._target is not None and self.sig == signal.SIGSTOP and running(self._target):
            with contextlib.suppress(psutil.Error):
                self._target.send_signal(signal.SIGCONT)
                self.record["resumed"] = "SIGCONT sent after the run"

    def _run(self) -> None:
        while not self._stop.is_set():
            root = self.find_root()
            log = self.find_log()
            if root is not None and log is not None:
                if self._armed_at and not log.exists():
                    self._armed_at = 0
                if self._count() - self._armed_at >= self.after_requests:
                    break
            self._stop.wait(0.2)
        else:
            return
        self._stop.wait(self.delay_s)
        if self._stop.is_set():
            return
        root = self.find_root()
        if root is None:
            self.record["error"] = "the server process was gone before the fault"
            return
        target, why = scheduler_of(root, self.sim)
        self.record.update(describe(target), chosen=why, server_pid=root.pid,
                           at_s=round(time.monotonic() - self._t0, 1))
        try:
            target.send_signal(self.sig)
            self.record.update(sent=True, sent_wall=time.time())
            self._target = target
            say(f"fault: {self.record['signal']} -> pid {target.pid} ({why})")
        except psutil.Error as exc:
            self.record["error"] = f"{exc.__class__.__name__}: {exc}"


def running_log(reports: Path, config: str) -> Path | None:
    """The server log of a run in progress: it lives in the run's own folder
    (reports/runs/<id>/live/) until the run publishes it."""
    found = sorted(reports.glob(f"runs/*/live/{config}-server.log"),
                   key=lambda p: p.stat().st_mtime if p.exists() else 0.0)
    return found[-1] if found else None


def launched_server(pytest_pid: int, config: str) -> Callable[[], psutil.Process | None]:
    """The server process specgate launched from the pytest process, for one configuration."""
    def find() -> psutil.Process | None:
        try:
            kids = psutil.Process(pytest_pid).children(recursive=True)
        except psutil.Error:
            return None
        for p in kids:
            with contextlib.suppress(psutil.Error):
                cmd = " ".join(p.cmdline())
                if re.search(r"sglang\.launch_server|sglang serve|" + re.escape(SIM_MODULE),
                             cmd) and ("--speculative-algorithm" in cmd) == (
                        config == "speculative"):
                    return p
        return None
    return find


# ---- runs -------------------------------------------------------------------------------------

@dataclasses.dataclass
class Ctx:
    work: Path
    out: Path
    tiny: Path
    root: Path
    python: str
    launcher: list[str]
    sim: bool
    deadline: float
    reserve_s: float = 25.0
    attach: dict[str, OwnServer] = dataclasses.field(default_factory=dict)
    runs: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    keep: set[int] = dataclasses.field(default_factory=set)  # the suite's own other processes

    def left(self) -> float:
        return self.deadline - time.time() - self.reserve_s

    def attach_pids(self) -> set[int]:
        pids: set[int] = set(self.keep)
        for srv in self.attach.values():
            if srv.proc.poll() is None or srv.sampler.alive():
                pids |= srv.pids()
        return pids

    def scale(self, seconds: float) -> float:
        return seconds / 10 if self.sim else seconds


def read_verdict(reports: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads((reports / "verdict.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return {
        "outcome": doc.get("outcome"), "complete": doc.get("complete"),
        "simulated": doc.get("simulated"), "sglang_version": doc.get("sglang_version"),
        "counts": doc.get("counts"),
        "claims": [{"id": c.get("id"), "status": c.get("status"), "observed": c.get("observed"),
                    "expected": c.get("expected"), "unit": c.get("unit"),
                    "message": str(c.get("message") or "")[:400],
                    **({"failure": str(c["details"]["failure"])[:400]}
                       if isinstance(c.get("details"), dict) and c["details"].get("failure")
                       else {})}
                   for c in doc.get("claims", [])],
        # a reason several claims share (a server's, with its log tail) is said once, here
        "causes": [{"message": str(c.get("message") or "")[:2000],
                    "claims": list(c.get("claims") or [])} for c in doc.get("causes") or []],
    }


def live_summary(reports: Path) -> dict[str, Any] | None:
    """The live session's own account: failure stage/message and stop report per config."""
    try:
        doc = json.loads((reports / "live" / "results.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    out = {}
    for config in ("baseline", "speculative"):
        run = doc.get(config) or {}
        fail = run.get("failure") or {}
        out[config] = {"attached": run.get("attached"), "url": run.get("url"),
                       "failure": (f"{fail.get('stage')}: {str(fail.get('message'))[:300]}"
                                   if fail else None),
                       "stop": run.get("stop"),
                       "server_version": (run.get("server_info") or {}).get("version")}
    return out


def run_pytest(ctx: Ctx, name: str, profile: Path, *, urls: dict[str, str] | None = None,
               timeout_s: float,
               inject: Callable[[int, Path], Injector | SignalDuringLaunch] | None = None,
               ) -> dict[str, Any]:
    run_dir = ctx.work / "runs" / name
    shutil.rmtree(run_dir, ignore_errors=True)
    reports = run_dir / "reports"
    reports.mkdir(parents=True)
    argv = [ctx.python, "-m", "pytest", "-m", PROBE_MARK, f"{OPTIONS['profile']}={profile}",
            f"{OPTIONS['reports']}={reports}"]
    for key, url in (urls or {}).items():
        argv.append(f"{OPTIONS[key]}={url}")
    say(f"{name}: {shlex.join(argv)} (timeout {timeout_s:.0f} s)")
    gpu_before = gpu_memory()
    started = time.monotonic()
    started_wall = time.time()
    out_path = run_dir / "pytest.txt"
    with out_path.open("wb") as fh:
        proc = subprocess.Popen(argv, cwd=ctx.root, stdout=fh, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        timed_out = False
        injector = inject(proc.pid, reports) if inject else None
        with Sampler(proc.pid) as sampler:
            if injector is not None:
                injector.start()
            try:
                code = proc.wait(timeout=max(5.0, timeout_s))
            except subprocess.TimeoutExpired:
                timed_out = True
                say(f"{name}: over {timeout_s:.0f} s, sending SIGTERM to pytest")
                proc.send_signal(signal.SIGTERM)  # specgate stops its servers on SIGTERM
                try:
                    code = proc.wait(timeout=45)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    code = proc.wait()
            finally:
                if injector is not None:
                    injector.finish()
        seconds = round(time.monotonic() - started, 1)
        left = leftovers(ctx, sampler)
        if injector is not None:
            injector.resume()
    tail = out_path.read_text(errors="replace").splitlines()[-6:]
    result = {
        "name": name, "kind": "pytest", "command": shlex.join(argv), "exit_code": code,
        "timed_out": timed_out, "seconds": seconds, "verdict": read_verdict(reports),
        "live": live_summary(reports), "leftovers": left, "pytest_tail": tail,
        "gpu_before": gpu_before, "gpu_after": gpu_memory(),
    }
    # When the published verdict was last written, from pytest's start and from the fault.
    with contextlib.suppress(OSError):
        written = (reports / "verdict.json").stat().st_mtime
        result["verdict_written_s"] = round(written - started_wall, 1)
    if injector is not None:
        result["fault"] = injector.record
        sent_at = injector.record.get("sent_wall")
        if sent_at is not None and "verdict_written_s" in result:
            result["verdict_after_fault_s"] = round(
                started_wall + result["verdict_written_s"] - sent_at, 1)
    return result


def claims_by_id(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    verdict = result.get("verdict") or {}
    return {c["id"]: c for c in verdict.get("claims", [])}


def claim_text(result: dict[str, Any], claim: dict[str, Any]) -> str:
    """What the verdict says of a claim: its message, the failure in its details, and the cause
    it shares with others (a server's whole reason and log tail is said once, as a cause)."""
    causes = (result.get("verdict") or {}).get("causes") or []
    return " ".join([str(claim.get("message", "")), str(claim.get("failure") or ""),
                     *(str(c.get("message", "")) for c in causes
                       if claim.get("id") in (c.get("claims") or []))])


def check(result: dict[str, Any], expectations: list[tuple[str, bool]]) -> None:
    result["checks"] = [{"what": what, "ok": bool(ok)} for what, ok in expectations]
    result["ok"] = all(ok for _, ok in expectations)


def no_broken(result: dict[str, Any]) -> bool:
    claims = claims_by_id(result)
    return bool(claims) and not any(c["status"] == "broken" for c in claims.values())


def spec_broken(result: dict[str, Any], *words: str) -> bool:
    claims = claims_by_id(result)
    found = [claims.get(i) for i in SPEC_CLAIMS]
    if not all(c and c["status"] == "broken" for c in found):
        return False
    if not words:
        return True
    text = " ".join(claim_text(result, c) for c in found if c).lower()
    return any(w in text for w in words)


def status_of(result: dict[str, Any], claim: str) -> str | None:
    c = claims_by_id(result).get(claim)
    return c["status"] if c else None


# -- a: launch mode ------------------------------------------------------------------------------

def run_a(ctx: Ctx) -> dict[str, Any]:
    profile = write_profile(ctx, "launch")
    r = run_pytest(ctx, "a_launch", profile, timeout_s=ctx.left())
    check(r, [("pytest exit code 0 or 1 (claims evaluated)", r["exit_code"] in (0, 1)),
              ("no claim broken", no_broken(r)),
              ("nothing left behind", r["leftovers"]["clean"])])
    return r


# -- b: attach mode ------------------------------------------------------------------------------

def ensure_attach(ctx: Ctx, configs: tuple[str, ...] = BOTH) -> str | None:
    """Start the suite's own servers (together) unless they run and answer /health_generate."""
    needed = [c for c in configs if c not in ctx.attach or not ctx.attach[c].answers()]
    for config in needed:
        if config in ctx.attach:
            stop_server(ctx.attach.pop(config))
        ctx.attach[config] = start_server(ctx, config, free_port())
    if not needed:
        return None
    started = time.monotonic()
    why = until_healthy([ctx.attach[c] for c in needed], ctx.deadline - ctx.reserve_s)
    say(f"attach servers {needed}: {'ready' if why is None else why} after "
        f"{time.monotonic() - started:.0f} s")
    return why


def attach_urls(ctx: Ctx) -> dict[str, str]:
    return {"server_url": ctx.attach["speculative"].url,
            "baseline_url": ctx.attach["baseline"].url}


def run_b(ctx: Ctx) -> dict[str, Any]:
    started = time.monotonic()
    why = ensure_attach(ctx)
    if why is not None:
        return {"name": "b_attach", "kind": "pytest", "exit_code": None, "ok": False,
                "error": f"the attach-mode servers did not come up: {why}",
                "seconds": round(time.monotonic() - started, 1)}
    start_s = round(time.monotonic() - started, 1)
    profile = write_profile(ctx, "attach")
    r = run_pytest(ctx, "b_attach", profile, urls=attach_urls(ctx), timeout_s=ctx.left())
    r["servers_start_s"] = start_s
    alive = all(s.proc.poll() is None for s in ctx.attach.values())
    check(r, [("pytest exit code 0 or 1", r["exit_code"] in (0, 1)),
              ("no claim broken", no_broken(r)),
              ("attached servers left running", alive),
              ("nothing else left behind", r["leftovers"]["clean"])])
    return r


# -- c: faults -------------------------------------------------------------------------------------

def run_port_taken(ctx: Ctx) -> dict[str, Any]:
    """Launch the speculative server on the port where the suite's speculative server listens."""
    taken = ctx.attach["speculative"].port
    profile = write_profile(ctx, "port-taken", fault=True, port=taken)
    r = run_pytest(ctx, "c_port_taken", profile,
                   urls={"baseline_url": ctx.attach["baseline"].url},
                   timeout_s=min(ctx.left(), 180))
    r["taken_port"] = taken
    check(r, [("spec.* broken, saying the port is in use", spec_broken(r, "in use")),
              ("perf.baseline_tps not broken", status_of(r, "perf.baseline_tps")
               not in (None, "broken")),
              ("the suite's server on that port still runs",
               ctx.attach["speculative"].proc.poll() is None),
              ("nothing left behind", r["leftovers"]["clean"])])
    return r


def run_wrong_flag(ctx: Ctx) -> dict[str, Any]:
    """A launch command SGLang's argparse rejects: through pytest (specgate's preflight should
    catch it before the launch) and through specgate.serving.server.launch directly (the server
    exits 2 before it is ready)."""
    profile = write_profile(ctx, "wrong-flag", fault=True, extra_args=WRONG_FLAG)
    r = run_pytest(ctx, "c_wrong_flag", profile,
                   urls={"baseline_url": ctx.attach["baseline"].url},
                   timeout_s=min(ctx.left(), 240))
    r["direct_launch"] = direct_launch(ctx, profile)
    d = r["direct_launch"]
    check(r, [("spec.* broken, naming the rejected flag or SGLang's parser",
               spec_broken(r, "stepz", "unrecognized", "rejects", "code 2")),
              ("perf.baseline_tps not broken", status_of(r, "perf.baseline_tps")
               not in (None, "broken")),
              ("direct launch: ServerError", d.get("error_type") == "ServerError"),
              ("direct launch: exit code 2 reported", "code 2" in str(d.get("message"))),
              ("direct launch: nothing left behind", d["leftovers"]["clean"]),
              ("nothing left behind", r["leftovers"]["clean"])])
    return r


def direct_launch(ctx: Ctx, profile_path: Path) -> dict[str, Any]:
    from specgate.core.profile import load_profile
    from specgate.serving import server
    from specgate.serving.launch import build_command

    spec = build_command(load_profile(profile_path), "speculative")
    log = ctx.work / "runs" / "c_wrong_flag" / "direct-launch.log"
    out: dict[str, Any] = {"command": spec.display}
    started = time.monotonic()
    with Sampler(os.getpid()) as sampler:
        try:
            handle = server.launch(spec, log, startup_timeout_s=min(180.0, max(10.0, ctx.left())),
                                   stop_timeout_s=15.0)
        except Exception as exc:
            out.update(error_type=type(exc).__name__, message=str(exc)[:500],
                       log_tail=str(getattr(exc, "log_tail", ""))[-600:])
        else:
            out.update(error_type=None, message="the server started despite the wrong flag")
            out["stop"] = repr(handle.stop())
        out["seconds"] = round(time.monotonic() - started, 1)
        for srv in ctx.attach.values():
            srv.sampler.sample()
        out["leftovers"] = leftovers(ctx, sampler)
    return out


def fault_attached(ctx: Ctx, name: str, sig: int) -> dict[str, Any]:
    """SIGSTOP or SIGKILL the scheduler of the suite's own speculative server while specgate
    measures it in attach mode."""
    srv = ctx.attach["speculative"]
    profile = write_profile(ctx, name.replace("_", "-"), fault=True)

    def inject(_pid: int, _reports: Path) -> Injector:
        return Injector(srv.root, lambda: srv.log, sig, sim=ctx.sim)

    r = run_pytest(ctx, name, profile, urls=attach_urls(ctx), timeout_s=min(ctx.left(), 240),
                   inject=inject)
    words = (("timed out", "timeout", "time-out", "no answer", "hang", "stall", "did not")
             if sig == signal.SIGSTOP else ())
    checks = [("the fault was injected", r.get("fault", {}).get("sent")),
              ("spec.* broken", spec_broken(r)),
              ("perf.baseline_tps not broken", status_of(r, "perf.baseline_tps")
               not in (None, "broken")),
              ("verdict within request_timeout_s + 60 s of the fault", r["seconds"] < 200),
              ("nothing left behind (besides the suite's own servers)",
               r["leftovers"]["clean"])]
    if words:
        # A hang must not be reported as a server that closed or died.
        checks.insert(2, ("the message says the server stopped answering",
                          spec_broken(r, *words)))
        checks.insert(3, ("the message does not say the server died or closed the connection",
                          spec_broken(r) and not spec_broken(r, "died", "has exited",
                                                              "closed the connection")))
    check(r, checks)
    r["speculative_server_after"] = ("running" if srv.proc.poll() is None
                                     else f"exited with code {srv.proc.returncode}")
    if sig == signal.SIGKILL:
        # What SGLang itself does when its scheduler dies: does the rest of the tree go?
        srv.sampler.sample()
        r["speculative_tree_after_kill"] = [describe(p) for p in srv.sampler.alive()]
        r["speculative_server_stop"] = stop_server(ctx.attach.pop("speculative"))
    return r


def fault_launched(ctx: Ctx, name: str, sig: int) -> dict[str, Any]:
    """SIGKILL or SIGSTOP the scheduler of the speculative server specgate launched itself
    (baseline attached to the suite's server, so one server start per case)."""
    profile = write_profile(ctx, name.replace("_", "-"), fault=True)

    def inject(pid: int, reports: Path) -> Injector:
        return Injector(launched_server(pid, "speculative"),
                        lambda: running_log(reports, "speculative"), sig, sim=ctx.sim)

    r = run_pytest(ctx, name, profile, urls={"baseline_url": ctx.attach["baseline"].url},
                   timeout_s=min(ctx.left(), 420), inject=inject)
    checks = [("the fault was injected", r.get("fault", {}).get("sent")),
              ("spec.* broken", spec_broken(r)),
              ("perf.baseline_tps not broken", status_of(r, "perf.baseline_tps")
               not in (None, "broken")),
              ("specgate's stop left no process and no GPU memory", r["leftovers"]["clean"])]
    if sig == signal.SIGSTOP:
        checks.insert(2, ("the message does not say the server died or closed the connection",
                          spec_broken(r) and not spec_broken(r, "died", "has exited",
                                                              "closed the connection")))
    check(r, checks)
    return r


class SignalDuringLaunch(Watcher):
    """Sends `sig` to pytest itself once the server it launches for `config` has run for
    `after_s` seconds (still loading: the user's Ctrl-C, or a CI job's SIGTERM, mid-launch)."""

    def __init__(self, pytest_pid: int, config: str, sig: int, after_s: float) -> None:
        self.pytest_pid, self.sig, self.after_s = pytest_pid, sig, after_s
        self.find = launched_server(pytest_pid, config)
        super().__init__({"signal": signal.Signals(sig).name, "sent": False, "to": "pytest",
                          "during": f"{config} launch"})

    def _run(self) -> None:
        seen: float | None = None
        while not self._stop.wait(0.2):
            server = self.find()
            if server is None:
                continue
            seen = seen if seen is not None else time.monotonic()
            if time.monotonic() - seen < self.after_s:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pytest_pid, self.sig)
                self.record.update(sent=True, sent_wall=time.time(), server_pid=server.pid,
                                   at_s=round(
                    time.monotonic() - self._t0, 1), server_age_s=self.after_s)
            return


def signal_during_launch(ctx: Ctx, name: str, sig: int) -> dict[str, Any]:
    """Ctrl-C (SIGINT) or SIGTERM to pytest while the baseline server is still loading: the
    verdict must say interrupted and no process or GPU memory may be left."""
    profile = write_profile(ctx, name.replace("_", "-"), fault=True)

    def inject(pid: int, _reports: Path) -> SignalDuringLaunch:
        return SignalDuringLaunch(pid, "baseline", sig, ctx.scale(8.0))

    r = run_pytest(ctx, name, profile, timeout_s=min(ctx.left(), 150),
                   inject=inject)
    verdict = r.get("verdict") or {}
    check(r, [("the signal reached pytest during the launch", r.get("fault", {}).get("sent")),
              ("pytest ended on it (no time-out)", not r["timed_out"]),
              ("the verdict is written and says interrupted",
               verdict.get("outcome") == "interrupted"),
              ("nothing left behind", r["leftovers"]["clean"])])
    return r


def run_drafter_narrow_in(ctx: Ctx) -> dict[str, Any]:
    """A drafter of hidden size 512 that reads the 256-wide target's aux states and carries no
    embed_tokens: SGLang keeps the drafter's own, unloaded embedding (it shares the target's
    only when the widths agree). weights.layout must say so offline; what SGLang does with it
    is recorded."""
    profile = write_profile(ctx, "drafter-narrow-in", fault=True, drafter="draft_narrow_in")
    r = run_pytest(ctx, "c_drafter_narrow_in", profile,
                   urls={"baseline_url": ctx.attach["baseline"].url},
                   timeout_s=min(ctx.left(), 300))
    claims = claims_by_id(r)
    r["accept_length"] = claims.get("spec.accept_len", {}).get("observed")
    check(r, [("weights.layout failed offline, naming embed_tokens",
               status_of(r, "weights.layout") == "failed"
               and "embed_tokens" in str(claims.get("weights.layout", {}).get("message"))),
              ("perf.baseline_tps not broken", status_of(r, "perf.baseline_tps")
               not in (None, "broken")),
              ("nothing left behind (besides the suite's own servers)",
               r["leftovers"]["clean"]),
              *gpu_check(ctx, r)])
    return r




def gpu_check(ctx: Ctx, r: dict[str, Any]) -> list[tuple[str, bool]]:
    """The GPU check of a run on a GPU (the simulator holds none: nothing to check there)."""
    if ctx.sim:
        return []
    return [("the GPU is back where it was (nvidia-smi before and after)", gpu_released(r))]


def gpu_released(r: dict[str, Any]) -> bool:
    """No compute process on the GPU after the run that was not there before it, and the memory
    in use back within 1 GiB of where it was."""
    before, after = r.get("gpu_before"), r.get("gpu_after")
    if not before or not after or before.get("used_mib") is None or after.get("used_mib") is None:
        return False
    new_apps = {a["pid"] for a in after.get("apps") or []} - {
        a["pid"] for a in before.get("apps") or []}
    return not new_apps and after["used_mib"] <= before["used_mib"] + 1024


def log_says(r: dict[str, Any], *words: str) -> bool:
    """Any of `words` in the live claims' messages or the live session's failure (the server's
    log tail travels in both)."""
    text = " ".join(claim_text(r, c) for c in claims_by_id(r).values())
    for run in (r.get("live") or {}).values():
        text += " " + str((run or {}).get("failure") or "")
    return any(w.lower() in text.lower() for w in words)


def run_drafter_wide(ctx: Ctx) -> dict[str, Any]:
    """A drafter of hidden size 512 for the 256-wide target (its config and weights agree with
    each other, not with the target): SGLang gives the drafter the target's embedding, and the
    speculative server must not come up. Baseline attached, one launch."""
    profile = write_profile(ctx, "drafter-wide", fault=True, drafter="draft_wide")
    r = run_pytest(ctx, "c_drafter_wide", profile,
                   urls={"baseline_url": ctx.attach["baseline"].url},
                   timeout_s=min(ctx.left(), 300))
    check(r, [("config.target_compat failed offline",
               status_of(r, "config.target_compat") == "failed"),
              ("spec.* broken", spec_broken(r)),
              ("the speculative server's failure says it did not come up, with SGLang's error",
               log_says(r, "before it was ready") and log_says(r, "RuntimeError")),
              ("perf.baseline_tps not broken", status_of(r, "perf.baseline_tps")
               not in (None, "broken")),
              ("nothing left behind (besides the suite's own servers)",
               r["leftovers"]["clean"]),
              *gpu_check(ctx, r)])
    return r


GPU_HOLDER = """
import sys, time, torch
free, total = torch.cuda.mem_get_info()
held = torch.empty(int(free) - int(sys.argv[1]) * 2**20, dtype=torch.uint8, device="cuda")
print(f"holding {held.numel() / 2**30:.1f} GiB of {total / 2**30:.1f} GiB", flush=True)
time.sleep(3600)
"""
MEMORY_WORDS = ("out of memory", "outofmemory", "not enough memory", "cuda error: out of",
                "mem-fraction-static", "oom")


def run_oom_fraction(ctx: Ctx) -> dict[str, Any]:
    """The target with Llama-3-8B's shapes (13.9 GB of weights, `--load-format dummy`) launched
    with `--mem-fraction-static 0.05` (7 GB of the H200): SGLang cannot fit the weights and a KV
    pool, and refuses to start. Both launches must be broken with SGLang's own memory error, and
    the GPU left as it was."""
    if ctx.sim:
        return {"name": "c_oom_fraction", "skipped": "the simulator holds no GPU memory"}
    profile = write_profile(ctx, "oom-fraction", fault=True, target="big", mem_fraction=0.05,
                            extra_args=["--load-format", "dummy"])
    r = run_pytest(ctx, "c_oom_fraction", profile, timeout_s=min(ctx.left(), 300))
    check(r, [("perf.baseline_tps broken", status_of(r, "perf.baseline_tps") == "broken"),
              ("spec.* broken", spec_broken(r)),
              ("SGLang's own memory error reaches the claims", log_says(r, *MEMORY_WORDS)),
              ("nothing left behind", r["leftovers"]["clean"]),
              *gpu_check(ctx, r)])
    return r


def run_oom_holder(ctx: Ctx) -> dict[str, Any]:
    """Another process holds all but 6 GiB of the GPU (a stale server, another job) and the
    8B-shaped target (13.9 GB) is launched: it runs out of memory while loading. env.gpu_clean
    must name the holder, the live claims must carry SGLang's own error, and specgate must
    leave nothing of its own behind."""
    if ctx.sim:
        return {"name": "c_oom_holder", "skipped": "the simulator holds no GPU memory"}
    holder = subprocess.Popen([ctx.python, "-c", GPU_HOLDER, "6144"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        first = holder.stdout.readline().strip() if holder.stdout else ""
        ctx.keep.add(holder.pid)
        profile = write_profile(ctx, "oom-holder", fault=True, target="big",
                                extra_args=["--load-format", "dummy"])
        r = run_pytest(ctx, "c_oom_holder", profile, timeout_s=min(ctx.left(), 300))
    finally:
        holder.kill()
        holder.wait(10)
        ctx.keep.discard(holder.pid)
    r["holder"] = {"pid": holder.pid, "said": first}
    r["gpu_after_holder"] = gpu_memory()
    claims = claims_by_id(r)
    check(r, [("the holder took the GPU", first.startswith("holding")),
              ("env.gpu_clean failed, naming the holder",
               status_of(r, "env.gpu_clean") == "failed"
               and str(holder.pid) in str(claims.get("env.gpu_clean", {}).get("message"))),
              ("perf.baseline_tps broken", status_of(r, "perf.baseline_tps") == "broken"),
              ("spec.* broken", spec_broken(r)),
              ("SGLang's own memory error reaches the claims", log_says(r, *MEMORY_WORDS)),
              ("nothing left behind (besides the holder)", r["leftovers"]["clean"]),
              ("no specgate process on the GPU after the run (only the holder)",
               {a["pid"] for a in (r.get("gpu_after") or {}).get("apps") or []}
               <= {holder.pid} | {a["pid"] for a in (r.get("gpu_before") or {}).get("apps")
                                  or []})])
    return r


Run = tuple[str, float, tuple[str, ...], Callable[[Ctx], dict[str, Any]]]


def signalled(name: str, seconds: float, servers: tuple[str, ...],
              fault: Callable[[Ctx, str, int], dict[str, Any]], sig: int) -> Run:
    """A fault run that sends `sig` (fault_attached, fault_launched, signal_during_launch)."""
    return name, seconds, servers, lambda c: fault(c, name, sig)


RUNS: list[Run] = [
    # name, estimated seconds on the H200, the suite's attach-mode servers it needs, function
    ("a_launch", 300, NONE, run_a),
    ("b_attach", 130, NONE, run_b),
    ("c_port_taken", 30, BOTH, run_port_taken),
    ("c_wrong_flag", 60, BASE, run_wrong_flag),
    signalled("c_sigstop_attached", 60, BOTH, fault_attached, signal.SIGSTOP),
    signalled("c_kill_attached", 40, BOTH, fault_attached, signal.SIGKILL),
    signalled("c_kill_launched", 100, BASE, fault_launched, signal.SIGKILL),
    signalled("c_sigstop_launched", 110, BASE, fault_launched, signal.SIGSTOP),
    signalled("c_sigint_launch", 40, NONE, signal_during_launch, signal.SIGINT),
    signalled("c_sigterm_launch", 40, NONE, signal_during_launch, signal.SIGTERM),
    ("c_drafter_wide", 90, BASE, run_drafter_wide),
    ("c_oom_fraction", 90, NONE, run_oom_fraction),
    ("c_oom_holder", 90, NONE, run_oom_holder),
    ("c_drafter_narrow_in", 90, BASE, run_drafter_narrow_in),
]
ATTACH_START_S = 90  # both attach-mode servers, started together, on a warm machine


# ---- summary ----------------------------------------------------------------------------------

def write_summary(ctx: Ctx, meta: dict[str, Any]) -> None:
    doc = {**meta, "finished": now_iso(), "runs": ctx.runs}
    (ctx.out / "summary.json").write_text(json.dumps(doc, indent=1, default=str) + "\n",
                                          encoding="utf-8")
    lines = [f"# Real-SGLang suite: {meta['mode']}", "",
             f"- SGLang {meta.get('sglang_version') or '?'} ({meta['launcher']}), "
             f"started {meta['started']}, finished {doc['finished']}",
             f"- runs: {', '.join(meta['selected'])}", "",
             "| run | exit | s | verdict written at s (after the fault) | outcome | ok | "
             "left behind | GPU MiB used before → after | notes |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in ctx.runs:
        if r.get("skipped"):
            lines.append(f"| {r['name']} | — | — | — | skipped | — | — | — | {r['skipped']} |")
            continue
        verdict = r.get("verdict") or {}
        left = r.get("leftovers") or {}
        if left:
            gone = ("none" if left.get("clean") else
                    f"{len(left['processes']) + len(left['other_server_processes'])} procs, "
                    f"{len(left['gpu'])} GPU")
            gone += "" if left.get("gpu_checked") else " (GPU not checked)"
        else:
            gone = "?"
        failed = [c["what"] for c in r.get("checks", []) if not c["ok"]]
        note = (("timed out: pytest got SIGTERM; " if r.get("timed_out") else "")
                + ("; ".join(failed) if failed else "")
                + (f" {r['error']}" if r.get("error") else ""))
        written = str(r.get("verdict_written_s", "—"))
        if "verdict_after_fault_s" in r:
            written += f" ({r['verdict_after_fault_s']})"
        mem = "—"
        if r.get("gpu_before") and r.get("gpu_after"):
            mem = f"{r['gpu_before'].get('used_mib')} → {r['gpu_after'].get('used_mib')}"
        lines.append(f"| {r['name']} | {r.get('exit_code')} | {r.get('seconds')} | {written} | "
                     f"{verdict.get('outcome')} | {'yes' if r.get('ok') else 'NO'} | {gone} | "
                     f"{mem} | {note.strip() or '—'} |")
    lines.append("")
    for r in ctx.runs:
        if r.get("skipped") or not r.get("verdict"):
            continue
        lines += [f"## {r['name']}", "", f"`{r.get('command', '')}`", ""]
        if r.get("fault"):
            lines.append(f"- fault: {json.dumps(r['fault'])}")
        for c in r.get("checks", []):
            lines.append(f"- [{'x' if c['ok'] else ' '}] {c['what']}")
        lines += ["", "| claim | status | observed | message |", "|---|---|---|---|"]
        for c in r["verdict"]["claims"]:
            msg = c["message"].replace("\n", " ").replace("|", "/")[:160]
            lines.append(f"| {c['id']} | {c['status']} | {c['observed']} | {msg} |")
        lines.append("")
    (ctx.out / "summary.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def archive(ctx: Ctx) -> None:
    """What a result keeps of each run beside the summary (OUT/verdicts/<run>.json, its verdict;
    OUT/live/<run>.json, its live session's per-request figures), and every run's files in
    OUT/runs.tar.gz."""
    made = {r["name"] for r in ctx.runs if not r.get("skipped")}
    for run in sorted((ctx.work / "runs").glob("*")):
        if run.name not in made:  # an earlier invocation's
            continue
        for src, dst in ((run / "reports" / "verdict.json", ctx.out / "verdicts"),
                         (run / "reports" / "live" / "results.json", ctx.out / "live")):
            if src.is_file():
                dst.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst / f"{run.name}.json")
    path = ctx.out / "runs.tar.gz"

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if "allure-results" in info.name or info.name.endswith((".safetensors", ".lock")):
            return None
        return info

    with tarfile.open(path, "w:gz") as tar:
        for sub in ("runs", "attach", "profiles"):
            if (ctx.work / sub).exists():
                tar.add(ctx.work / sub, arcname=sub, filter=keep)


# ---- main -------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tiny", type=Path, required=True)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2])
    parser.add_argument("--launcher", default="python3 -m sglang.launch_server")
    parser.add_argument("--sim", action="store_true",
                        help="dry run on specgate's simulator (drops the flags it lacks)")
    parser.add_argument("--deadline", type=float, default=time.time() + 570,
                        help="Unix time by which the summary must be written")
    parser.add_argument("--runs", default="all",
                        help=f"comma-separated subset of: {', '.join(n for n, *_ in RUNS)}")
    args = parser.parse_args(argv)
    launcher = shlex.split(args.launcher)
    ctx = Ctx(work=args.work, out=args.out, tiny=args.tiny, root=args.root,
              python=sys.executable, launcher=launcher, sim=args.sim, deadline=args.deadline)
    ctx.work.mkdir(parents=True, exist_ok=True)
    ctx.out.mkdir(parents=True, exist_ok=True)
    selected = [n for n, *_ in RUNS] if args.runs == "all" else args.runs.split(",")
    unknown = set(selected) - {n for n, *_ in RUNS}
    if unknown:
        parser.error(f"unknown runs {sorted(unknown)}")
    version = None
    if not ctx.sim:
        with contextlib.suppress(Exception):
            import importlib.metadata as md
            version = md.version("sglang")
    meta = {"mode": "simulator dry run" if ctx.sim else f"real SGLang {version}",
            "sglang_version": version, "launcher": shlex.join(launcher), "started": now_iso(),
            "selected": selected, "deadline": dt.datetime.fromtimestamp(
                args.deadline, dt.UTC).isoformat(timespec="seconds"),
            "python": sys.version.split()[0], "host": socket.gethostname(),
            "gpu_apps_at_start": gpu_apps()}
    say(f"{meta['mode']}: runs {selected}, {ctx.left():.0f} s usable")
    try:
        for name, estimate, needs, fn in RUNS:
            if name not in selected:
                continue
            need = ctx.scale(estimate)
            if any(c not in ctx.attach or ctx.attach[c].proc.poll() is not None for c in needs):
                need += ctx.scale(ATTACH_START_S)
            if ctx.left() < need:
                note = f"skipped: {max(0, ctx.left()):.0f} s left, needs about {need:.0f} s"
                say(f"{name}: {note}")
                ctx.runs.append({"name": name, "skipped": note})
                continue
            if needs:
                why = ensure_attach(ctx, needs)
                if why is not None:
                    ctx.runs.append({"name": name, "skipped":
                                     f"skipped: the attach-mode servers are not up: {why}"})
                    continue
            try:
                result = fn(ctx)
            except Exception as exc:  # one broken run must not lose the others
                import traceback
                result = {"name": name, "ok": False,
                          "error": "".join(traceback.format_exception_only(type(exc), exc))
                          .strip(), "traceback": traceback.format_exc()[-2000:]}
            say(f"{name}: exit {result.get('exit_code')}, outcome "
                f"{(result.get('verdict') or {}).get('outcome')}, ok {result.get('ok')}")
            ctx.runs.append(result)
            write_summary(ctx, meta)
    finally:
        stops = [stop_server(srv) for srv in ctx.attach.values()]
        meta["attach_servers_stopped"] = stops
        meta["final_leftovers"] = leftovers(ctx, None)
        write_summary(ctx, meta)
        archive(ctx)
    bad = [r["name"] for r in ctx.runs if not r.get("skipped") and not r.get("ok")]
    say(f"done: {len(ctx.runs)} runs, not ok: {bad or 'none'}; summary in {ctx.out}")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
