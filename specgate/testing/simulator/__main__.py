"""`python -m specgate.testing.simulator <SGLang flags>`: SGLang-like start-up and teardown."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import FrameType

from specgate.testing import fake_gpus
from specgate.testing.simulator import args as sim_args
from specgate.testing.simulator import model
from specgate.testing.simulator.faults import Faults, faults_from_env
from specgate.testing.simulator.server import close_connections, make_server
from specgate.testing.simulator.state import (
    SGLANG_VERSION,
    STARTUP_AVAILABLE_GB,
    SimState,
    log,
)

# Children poll their parent and leave when it is gone, like SGLang's scheduler and detokenizer
# (which watch the parent with a watchdog); the harness must still kill the whole tree. A child
# told to outlive it (the rank_ignores_term fault) ignores SIGTERM and waits to be killed.
_CHILD_CODE = (
    "import os, signal, sys, time\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "if sys.argv[3] == 'stuck':\n"
    "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "    os.setsid()\n"
    "    while True:\n"
    "        time.sleep(0.2)\n"
    "parent = int(sys.argv[2])\n"
    "while os.getppid() == parent:\n"
    "    time.sleep(0.2)\n"
)


def _spawn_children(tp_size: int, placed: Sequence[int | None], env: Mapping[str, str],
                    faults: Faults) -> list[subprocess.Popen[bytes]]:
    """One process per TP rank (`sglang::scheduler_TP<r>`, on its GPU) and the detokenizer,
    each with the server's environment, as SGLang's workers inherit it."""
    stuck = "stuck" if "rank_ignores_term" in faults else "polite"
    children = []
    for rank in range(tp_size):
        child_env = dict(env)
        if rank > 0 and "rank_env_dropped" in faults:
            child_env = {k: v for k, v in env.items() if not k.startswith("NCCL_")}
        gpu = placed[rank]
        name = f"sglang::scheduler_TP{rank}" + (f" gpu={gpu}" if gpu is not None else "")
        child = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _CHILD_CODE, name, str(os.getpid()), stuck],
            stdin=subprocess.DEVNULL, env=child_env)
        fake_gpus.record(env, child.pid, gpu)
        children.append(child)
    children.append(subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _CHILD_CODE, "sglang::detokenizer",
         str(os.getpid()), "polite"], stdin=subprocess.DEVNULL))
    return children


class _TermSignal:
    """SIGTERM as something the main thread waits for, and the stop it starts done in the main
    thread's own flow, once.

    A signal handler runs in the main thread wherever that thread is, and a TERM may come more
    than once (the far-side wrapper sends it to the server's process group and then to every
    tagged pid), the second while the stop the first began is under way. So the handler does
    nothing that could wait on what the code it interrupted holds (a lock, an event's
    condition, a child's waitpid lock): the C-level handler writes the signal's number to a
    non-blocking pipe (signal.set_wakeup_fd), and the main thread waits on that pipe."""

    def __init__(self) -> None:
        self._read, write = os.pipe()
        os.set_blocking(write, False)
        self._received = False
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)  # full: a TERM is in it
        signal.signal(signal.SIGTERM, self._on_term)

    @staticmethod
    def _on_term(signum: int, frame: FrameType | None) -> None:
        """Nothing: its byte is already in the pipe."""

    def wait(self, timeout_s: float) -> bool:
        """Whether SIGTERM has come, waiting up to timeout_s for it (0: a look)."""
        if not self._received:
            ready, _, _ = select.select([self._read], [], [], timeout_s)
            if ready:
                self._received = signal.SIGTERM in os.read(self._read, 512)
        return self._received


def _kill_children(children: Sequence[subprocess.Popen[bytes]]) -> None:
    for child in children:
        if child.poll() is None:
            child.kill()
    for child in children:
        try:
            child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _fail(text: str) -> int:
    print("Traceback (most recent call last):", file=sys.stderr)
    print('  File "<specgate simulator>", in launch_server',
          file=sys.stderr)
    print(text, file=sys.stderr, flush=True)
    return 1


def _launch(env: Mapping[str, str], speculative: bool) -> model.LaunchTruth:
    """This launch's speed factor, drawn as SPECGATE_SIM_LAUNCH_SPREAD/_SEED say, and appended
    to the truth log (numbered there, under a lock, so every launch of a seed draws anew)."""
    spread = model.launch_spread(env)
    seed = env.get(model.ENV_LAUNCH_SEED) or None
    role = "speculative" if speculative else "baseline"
    path = env.get(model.ENV_TRUTH)
    if not path:
        speed = model.launch_speed(spread, None if seed is None else f"{seed}/{role}")
        return model.LaunchTruth(0, role, speed, spread, seed, os.getpid(), time.monotonic())
    with open(path, "a+", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        number = sum(1 for line in fh if line.startswith('{"launch"'))
        speed = model.launch_speed(spread, None if seed is None else f"{seed}/{number}/{role}")
        launch = model.LaunchTruth(number, role, speed, spread, seed, os.getpid(),
                                   time.monotonic())
        fh.write(json.dumps(launch.to_json(), separators=(",", ":")) + "\n")
        fh.flush()
    return launch


def _note_ready(env: Mapping[str, str], launch: model.LaunchTruth) -> None:
    """The truth log's record of when this launch got ready (its loads overlap another's
    when that one started before this time)."""
    path = env.get(model.ENV_TRUTH)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.write(json.dumps({"ready": launch.launch, "role": launch.role,
                             "t": time.monotonic()}, separators=(",", ":")) + "\n")


def _start_up(state: SimState, model_path: str, host: str, port: int,
              termed: Callable[[float], bool]) -> None:
    """The loading lines SGLang prints, spread over the start delay, then readiness; cut short
    when termed(seconds), the wait between them, says SIGTERM came."""
    faults, resolved = state.faults, state.resolved
    delay = faults.slow_start_s if faults.slow_start_s is not None else (
        resolved.params.timing.start_delay_s
    )
    log(f"Load weight begin. avail mem={STARTUP_AVAILABLE_GB:.2f} GB (model {model_path})")
    if resolved.params.speculative:
        log(f"Load draft weight begin. draft model {resolved.args['speculative_draft_model_path']}")
    began = time.perf_counter()
    if termed(delay / 2):
        return
    loaded = time.perf_counter()
    log(f"Load weight end. type={resolved.architectures[0]}, dtype=torch.bfloat16, "
        "avail mem=40.00 GB")
    log("Capture cuda graph begin. This can take up to several minutes. avail mem=39.00 GB")
    if termed(delay / 2):
        return
    captured = time.perf_counter()
    log(f"Capture cuda graph end. Time elapsed: {delay / 2:.2f} s. mem usage=1.00 GB.")
    # As SGLang's /server_info: the durations of this launch's start, timed as it went.
    graphs = ("prefill", "decode", "target_verify", "draft_prefill", "draft_decode",
              "draft_extend")
    state.startup_time = {
        "load_weight": loaded - began, "kv_cache_allocation": 0.0,
        "scheduler_e2e": captured - began,
        "cuda_graph": {g: (captured - loaded if g == "decode" else 0.0) for g in graphs},
        "tokenizer_e2e": time.perf_counter() - state.began}
    print(f"INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)",
          file=sys.stderr, flush=True)
    if "never_ready" not in faults:
        state.ready.set()
        log("The server is fired up and ready to roll!")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ)
    namespace = sim_args.build_parser().parse_args(argv)  # exits 2 on a bad flag, like SGLang
    try:
        faults = faults_from_env(env)
    except ValueError as exc:
        return _fail(f"ValueError: {exc}")
    try:
        resolved = sim_args.resolve(namespace, env)
    except sim_args.StartupError as exc:
        log(f"server_args={sim_args.server_args_repr(vars(namespace))}")
        return _fail(str(exc))
    try:
        launch = _launch(env, resolved.params.speculative)
    except (ValueError, OSError) as exc:
        return _fail(f"{type(exc).__name__}: {exc}")
    resolved = dataclasses.replace(resolved, params=model.at_speed(resolved.params, launch.speed))
    log(f"specgate SGLang simulator (simulated: no model, no GPU), SGLang API {SGLANG_VERSION}")
    if launch.spread > 0:
        log(f"launch {launch.launch}: speed factor {launch.speed:.4f} "
            f"({model.ENV_LAUNCH_SPREAD}={launch.spread:g})")
    for warning in resolved.warnings:
        log(warning)
    log(f"server_args={sim_args.server_args_repr(resolved.args)}")
    if "exit_at_start" in faults:
        log("Load weight begin. avail mem=79.10 GB")
        return _fail(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.75 GiB. GPU 0 has a "
            "total capacity of 79.19 GiB of which 1.02 GiB is free. (simulated fault exit_at_start)"
        )

    tp_size = max(1, namespace.tp_size)
    try:
        placed = fake_gpus.place(env, tp_size, namespace.base_gpu_id, namespace.gpu_id_step)
    except (fake_gpus.PlacementError, OSError, ValueError) as exc:
        return _fail(str(exc))
    if any(gpu is not None for gpu in placed):
        log(f"TP ranks on GPUs {placed} (simulated)")
    state = SimState(resolved, faults, argv, launch_speed=launch.speed)
    try:
        httpd = make_server(state, namespace.host, namespace.port)
    except OSError as exc:
        return _fail(f"OSError: {exc} (address {namespace.host}:{namespace.port})")
    children = _spawn_children(tp_size, placed, env, faults)
    # The ranks a stuck server leaves behind are not its to stop.
    stoppable = children[-1:] if "rank_ignores_term" in faults else children

    def die() -> None:
        _kill_children(stoppable)
        os._exit(1)

    state.on_die = die
    term = _TermSignal()
    threading.Thread(target=httpd.serve_forever, name="http", daemon=True).start()

    try:
        _start_up(state, namespace.model_path, namespace.host, namespace.port, term.wait)
        if state.ready.is_set():
            _note_ready(env, launch)
        while not term.wait(0.5):
            # Ranks ended by a TERM sent to the whole group are no unexpected exit: that TERM
            # reached this process before their exit could be seen here.
            if any(child.poll() is not None for child in children) and not term.wait(0):
                log("Subprocess exited unexpectedly; the server shuts down.")
                die()
    except KeyboardInterrupt:
        _kill_children(stoppable)
        return 0
    # As SGLang under uvicorn: stop accepting, drain, then close the open keep-alive connections
    # from the server's side (their TIME_WAIT stays on this port; a new server binds it anyway,
    # with SO_REUSEADDR like uvicorn).
    log("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
    httpd.shutdown()
    httpd.server_close()
    remaining = close_connections(state)
    log(f"Gracefully exiting... Remaining number of requests {remaining}.")
    _kill_children(stoppable)
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
