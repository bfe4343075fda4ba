"""A drafter trained to earn the gate on real text, then judged: data, SpecForge training, tune,
two probes and the served data-size curve, on one GPU with SGLang 0.5.17.

    python3 -m benchmarks.real_model.earn --target TARGET --work WORK \
        --specforge UNPACKED_SPECFORGE_0.2.0 [--answer-tokens 10000000] [--epochs 1]

1. Prompts of the probe's seven kinds, never the probe's own (prompts.py): family "written"
   (the instruct model writes requests of each kind, or the passage a summarization,
   extraction or translation request wraps; sampled at --write-temperature, so that one ask
   gives many different requests) and family "tasks" (templates). The model writes them on the
   generation servers.
2. Answers: --gen-servers SGLang servers configured for throughput (decode CUDA graphs up to
   --gen-batch, that many requests running, a large KV pool; started one after another, see
   gen_memory_fraction) answer greedily until --answer-tokens answer tokens are in; their tok/s
   is recorded. The probe's 42 prompts, rendered as the probe renders them, are answered too:
   the held-out dump (transformers' forward, capture.py) that the prediction and
   eval.live_agreement replay.
3. Draft vocabularies (vocab.py, SpecForge's construction) of each data size.
4. Drafters (sf_train.py: SpecForge 0.2.0's training code, --epochs over the data, seeded),
   as many at a time as the GPU's memory holds (--train-parallel; --trainings): "trained" (all
   the data), "third" and "ninth" (the first third and ninth of the data's seeded order, the
   same epochs), and NAME-again, NAME's
   own command run a second time: its sha256 must match NAME's. Stage "again" runs the --again
   trainings later, alone on the GPU, when the time left allows one (a box with a time limit
   trains the verdict's drafters first). While they train, one baseline server starts, answers
   once and stops (Earn.warm_up, --no-warm-up): the later starts find SGLang's kernels compiled.
5. `specgate tune` on the judged drafter (--judge: "trained" unless told) picks the chain
   (--steps, --tune-launches).
6. All at once: two baselines and two speculative servers of the judged drafter at the tuned
   chain (two launches of each), and each other drafter trained at that chain (each with
   --mem-fraction-static --serve-mem-fraction, to start beside the others); where the GPU
   cannot hold them all (--pairs), one probe's pair at a time, then each other size alone.
   `pytest -m probe` attached to each pair (probe-1, probe-2, sharing one history, so
   probe-2's regress.* compare with probe-1 when it passed); then the served accept length of
   every data size trained. A smaller size judged (--judge ninth) measures a chain's cycle
   and break-even for the price of its short training.
--serve-target: the tune and the probes serve another folder than --target, the one the
data, the trainings and the held-out dump use: a deployment of the same model, such as
pad_target.py's GPU-bound one (earn.sh --pad-gb).
WORK/earn.json records every figure and time; WORK/out holds what a result keeps.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import gzip
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import with_root
from benchmarks.real_model import (
    gen,
    profiles,
    prompts,
    serve,
    vocab,
)
from benchmarks.servers import free_ports

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

DRAFT_VOCAB = 16384
SIZES = {"third": 3, "ninth": 9}
TRAININGS = ("trained", "trained-again", "third", "ninth")
AGAIN = "-again"
# of the generation's time, at most, for writing requests (the rest: answers). On an H200 with
# SmolLM2-135M the writing ran at about 21,000 tok/s (sampled; one server for about its first
# 70 s, two for the next 75 s, then three) and the answers at 68,000 tok/s; 10 M answer tokens
# need about 52,000 asks (189 answer tokens a prompt, 89 % of the written requests usable): a
# little over half of the time.
WRITE_SHARE = 0.55
GRACE_S = 120.0  # a training's time to save and end after SIGTERM
# GPU memory one training holds at 64 samples an update: 31-41 GiB of an H200 (nvidia-smi, the
# longest batches highest); two at once need a GPU of over 84 GiB.
TRAIN_GIB = 42.0
# SGLang's --mem-fraction-static counts against the memory free when each server starts: it
# keeps (1 - fraction) of the whole GPU for everything else. A server started beside a training
# (31-41 GiB) or beside five other servers must keep less for the others; the KV pool stays the
# probe's 65,536 tokens (--max-total-tokens caps it), so speed is unchanged.
WARM_UP_MEM_FRACTION = 0.85
SERVE_MEM_FRACTION = 0.6
WARM_UP_TIMEOUT_S = 420.0
GROUP_START_S = 90.0  # a group of the serve stage started, about (a widened target's pair)
PROBE_MIN_S = 60.0  # the least time left in which a probe is attached
TUNE_STOP_GRACE_S = 90.0  # the tune's time to stop its server and write tune.json after SIGTERM

def base_name(name: str) -> str:
    """The training whose command NAME runs: "trained-again" runs "trained"'s."""
    return name[:-len(AGAIN)] if name.endswith(AGAIN) else name


def names_arg(text: str) -> list[str]:
    """--trainings / --again: drafter names, each a size or a size's second run."""
    names = [x.strip() for x in text.split(",") if x.strip()]
    sizes = ("trained", *SIZES)
    for n in names:
        if base_name(n) not in sizes:
            raise argparse.ArgumentTypeError(
                f"{n!r}: a training is one of {', '.join(sizes)}, or one of them + {AGAIN!r}")
    return names


class Fleet:
    """Generation servers started one after another in a thread of their own (each sizes its KV
    pool from the memory free when it starts, gen_memory_fraction): generation starts on the
    first while the others come up. `urls` grows as they become ready."""

    def __init__(self, servers: list[tuple[Any, Path]]) -> None:
        self.lock = threading.Lock()
        # (index asked, handle, start-to-ready s, ready at)
        self.started: list[tuple[int, Any, float, float]] = []
        self.failed: list[str] = []
        self.halt = threading.Event()
        self.first = threading.Event()
        self.thread = threading.Thread(target=self._start_all, args=(servers,), daemon=True)
        self.thread.start()

    def _start_all(self, servers: list[tuple[Any, Path]]) -> None:
        try:
            for index, (prof, log_path) in enumerate(servers):
                if self.halt.is_set():
                    return
                try:  # the port is picked just before it is bound
                    handle, ready = serve.start(prof, "baseline", log_path,
                                                free_ports(1)[0])
                except Exception as exc:  # the others carry on without it
                    with self.lock:
                        self.failed.append(f"{log_path.name}: {str(exc)[:1000]}")
                    log(f"generation server {index + 1} failed to start: {str(exc)[:300]}")
                    continue
                with self.lock:
                    self.started.append((index, handle, ready, time.monotonic()))
                log(f"generation server {index + 1} ready after {ready:.0f} s")
                self.first.set()
        finally:
            self.first.set()

    def urls(self) -> list[str]:
        with self.lock:
            return [h.url for _, h, _, _ in self.started]

    def wait_first(self) -> str:
        """The first ready server's URL; RuntimeError naming why when none started."""
        self.first.wait()
        got = self.urls()
        if not got:
            self.thread.join()
            raise RuntimeError("no generation server started: " + "; ".join(self.failed))
        return got[0]

    def stop(self) -> list[tuple[int, Any, float, float]]:
        """Starts no more servers, waits for a start in progress (at most its startup timeout:
        a server half started cannot be stopped cleanly), then stops every server."""
        self.halt.set()
        self.thread.join()
        for _, h, _, _ in self.started:
            try:
                h.stop()
            except Exception as exc:
                log(f"generation server {h.url}: stop failed: {exc}")
        return list(self.started)


def gen_stops(deadline: float | None, now: Callable[[], float] = time.time,
              share: float = WRITE_SHARE
              ) -> tuple[Callable[[], bool] | None, Callable[[], bool] | None]:
    """When the writing of requests and the answers stop handing out batches, given the
    generation's deadline (Unix time): the writing at `share` of the time left now, the
    answers at the deadline. (None, None) without one."""
    if deadline is None:
        return None, None
    start = now()
    write_end = start + max(deadline - start, 0.0) * share
    return (lambda: now() >= write_end), (lambda: now() >= deadline)


def gpu_memory_gib() -> float | None:
    """The first GPU's memory in GiB (nvidia-smi), or None where there is none."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=30, check=True).stdout
        return round(float(out.split()[0]) / 1024, 1)
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def host_state(smi: Callable[[list[str]], str] | None = None,
               window_s: float = 1.0) -> dict[str, Any]:
    """What else loads the machine: the load averages, the busiest processes' CPU share
    (psutil, over window_s) and the processes on the GPU with their memory (nvidia-smi).
    A timed figure that moved between two measurements can be read against it."""
    import psutil

    def run_smi(argv: list[str]) -> str:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30,
                              check=True).stdout

    state: dict[str, Any] = {"loadavg": [round(x, 2) for x in os.getloadavg()]}
    procs = list(psutil.process_iter(["pid", "name"]))
    for proc in procs:
        try:
            proc.cpu_percent(None)
        except psutil.Error:
            pass
    time.sleep(window_s)  # the window psutil's CPU shares are taken over
    busy = []
    for proc in procs:
        try:
            busy.append((proc.cpu_percent(None), proc.info["pid"], proc.info["name"]))
        except psutil.Error:
            pass
    state["busiest"] = [{"pid": pid, "name": name, "cpu_percent": round(pct, 1)}
                        for pct, pid, name in sorted(busy, reverse=True)[:5] if pct > 0]
    try:
        out = (smi or run_smi)(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                                "--format=csv,noheader,nounits"])
        state["gpu_apps"] = [{"pid": int(pid), "mib": int(mib)} for pid, mib in
                             (line.split(",") for line in out.splitlines() if line.strip())]
    except (OSError, subprocess.SubprocessError, ValueError):
        state["gpu_apps"] = None
    return state


def trainings_at_once(requested: int, gpu_gib: float | None, batch_rows: int) -> int:
    """How many trainings run at once: `requested` when above 0; else as many as the GPU's
    memory holds at TRAIN_GIB each (scaled with the batch), at most two (a second training
    beside the first added about a fifth to the samples per second; more were not measured);
    one where no GPU was found."""
    if requested > 0:
        return requested
    if gpu_gib is None:
        return 1
    per = TRAIN_GIB * batch_rows / 64
    return max(1, min(2, int(gpu_gib // per)))


def gen_memory_fraction(share: float, index: int) -> float:
    """--mem-fraction-static of generation server `index` (0-based) for each to hold `share` of
    the GPU when they start one after another. SGLang 0.5.17 keeps (1 - fraction) of the memory
    free when a server starts for everything else ("Loaded weights leave no GPU memory for the
    KV cache under --mem-fraction-static=0.25 ... minimum viable = 1 - available/pre"), so the
    fraction is of what the servers before it left: share / (1 - index x share)."""
    left = 1.0 - index * share
    if left <= share:
        raise ValueError(f"{index + 1} generation servers of {share} of the GPU each do not fit")
    return round(share / left, 4)


def run_pool(commands: dict[str, list[str]], parallel: int, limit: float | None,
             logs: Path, env: dict[str, str], say: Any = print,
             grace_s: float = 120.0) -> tuple[dict[str, int | None], dict[str, float]]:
    """Run `commands` (name -> argv), at most `parallel` at once, in their order; each writes
    logs/train-NAME.log. At Unix time `limit` the running ones get SIGTERM and together
    `grace_s` seconds to end (then SIGKILL); those not started stay so. Returns the exit codes
    (None: killed, or never started) and each one's seconds from start to end. Whatever runs
    when this function is left by an exception is stopped too."""
    pending = list(commands.items())
    running: dict[str, tuple[subprocess.Popen[bytes], Any, float]] = {}
    codes: dict[str, int | None] = {}
    wall: dict[str, float] = {}

    def end(name: str) -> None:
        p, fh, t0 = running.pop(name)
        codes.setdefault(name, p.returncode)
        wall[name] = round(time.monotonic() - t0, 1)
        fh.close()

    def stop_all(why: str) -> None:
        for name, (p, _, _) in running.items():
            p.terminate()
            say(f"training {name}: {why}")
        until = time.monotonic() + grace_s
        for name, (p, _, _) in list(running.items()):
            try:
                p.wait(timeout=max(until - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                codes[name] = None
            end(name)

    try:
        while pending or running:
            while pending and len(running) < max(parallel, 1) and (
                    limit is None or time.time() < limit):
                name, argv = pending.pop(0)
                fh = (logs / f"train-{name}.log").open("wb")
                try:
                    proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT,
                                            env=with_root(env))
                except BaseException:
                    fh.close()
                    raise
                running[name] = (proc, fh, time.monotonic())
            if not running:
                break
            ended = [n for n, (p, _, _) in running.items() if p.poll() is not None]
            for name in ended:
                end(name)
            if ended:
                continue
            if limit is not None and time.time() >= limit:
                stop_all("stopped at the deadline")
                continue
            try:  # the first of them to end, or the deadline
                next(iter(running.values()))[0].wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
    finally:
        if running:
            stop_all("stopped: the pool was interrupted")
    for name, _argv in pending:
        codes[name] = None
        say(f"training {name}: not started before the deadline")
    return codes, wall


def descendants(pid: int) -> list[Any]:
    """The processes below pid (psutil), those in sessions of their own included: specgate
    starts each SGLang server in a new session."""
    import psutil

    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return []


def run_until(argv: list[str], out: Any, cwd: Path, limit_s: float | None, grace_s: float,
              below: Callable[[int], list[Any]] = descendants) -> int:
    """Run argv for at most limit_s seconds (None: no limit), then SIGTERM and grace_s seconds
    to end (specgate tune then stops its server and writes what it measured), then SIGKILL for
    it and every process below it (a server it started would otherwise hold the GPU). Returns
    its exit status; 124 when it was stopped."""
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=cwd)

    def kill() -> None:
        family = below(proc.pid)
        proc.kill()
        for child in family:
            try:
                child.kill()
            except Exception:  # gone already
                pass
        proc.wait()

    try:
        return proc.wait(timeout=limit_s)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            kill()
        return 124
    finally:
        if proc.poll() is None:  # left by an exception
            kill()


def finished(summary: dict[str, Any]) -> bool:
    """Whether a training's summary says it did all its epochs."""
    return (summary.get("epochs_done") is not None
            and summary.get("epochs_done") == summary.get("epochs")
            and not summary.get("stopped") and summary.get("sha256") is not None)


def reproduced(summaries: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per NAME-again that ran: both sha256, and whether the second run wrote the same bytes
    (None when either run did not finish its epochs: nothing to compare)."""
    out: dict[str, dict[str, Any]] = {}
    for name, again in summaries.items():
        if not name.endswith(AGAIN) or base_name(name) not in summaries:
            continue
        one = summaries[base_name(name)]
        row: dict[str, Any] = {"first": one.get("sha256"), "again": again.get("sha256"),
                               "updates": [one.get("updates"), again.get("updates")]}
        done = [finished(s) for s in (one, again)]
        if not all(done):
            row["same"] = None
            row["why"] = ("not compared: " + " and ".join(
                n for n, d in zip((base_name(name), name), done, strict=True) if not d)
                + " did not finish its epochs")
        else:
            row["same"] = one.get("sha256") == again.get("sha256")
        out[base_name(name)] = row
    return out


def weights_bytes(target: Path) -> int:
    """The bytes of a target folder's safetensors files (what each server loads)."""
    return sum(f.stat().st_size for f in target.glob("*.safetensors"))


def serve_in_pairs(mode: str, servers: int, weights: int, gpu_gib: float | None,
                   fraction: float) -> bool:
    """--pairs on/off, or auto: pairs unless the GPU's --serve-mem-fraction holds every server's
    weights at once with 8 GB to spare (SGLang 0.5.17 sizes a server's KV pool from the memory
    left free less 1 - fraction of the GPU, so servers that start together must fit in that
    fraction). An unknown GPU (no nvidia-smi) serves all at once."""
    if mode != "auto":
        return mode == "on"
    if gpu_gib is None:
        return False
    return gpu_gib * 2**30 * fraction <= servers * weights + 8e9


def serve_groups(judge: str, others: list[str], pairs: bool) -> list[list[str]]:
    """The servers of the serve stage, in the groups started together: all at once, or
    (--pairs) each probe's pair, then each other size's server alone."""
    pair = [[f"baseline-{k}", f"spec-{judge}-{k}"] for k in (1, 2)]
    rest = [f"spec-{n}" for n in others]
    if not pairs:
        return [["baseline-1", "baseline-2", f"spec-{judge}-1", f"spec-{judge}-2", *rest]]
    return [*pair, *[[r] for r in rest]]


def served_target(path: Path) -> dict[str, Any]:
    """What the tune and the probes served: the folder, and pad_target.py's record when it
    widened it."""
    rec: dict[str, Any] = {"path": str(path)}
    try:
        cfg = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return rec
    if isinstance(cfg, dict) and isinstance(cfg.get("specgate_padding"), dict):
        rec["padding"] = cfg["specgate_padding"]
        rec["intermediate_size"] = cfg.get("intermediate_size")
    return rec


def log(msg: str) -> None:
    print(f"[earn {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Earn:
    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        self.work: Path = args.work
        self.target: Path = args.target
        # what the tune and the probes serve: the target itself, or a deployment of it
        # (pad_target.py's GPU-bound one); the data, the trainings and the held-out dump use
        # the target
        self.serve_target: Path = args.serve_target or args.target
        self.launcher = shlex.split(args.launcher)
        self.sim: bool = args.sim
        self.out = self.work / "out"
        self.out.mkdir(parents=True, exist_ok=True)
        (self.work / "logs").mkdir(parents=True, exist_ok=True)
        self.rec: dict[str, Any] = {"seed": args.seed, "seconds": {}}
        if "data" not in args.stages and (self.work / "earn.json").exists():
            self.rec = json.loads((self.work / "earn.json").read_text())  # the record so far
        self.rec.setdefault("seconds", {})
        if not isinstance(self.rec.get("errors"), dict):
            self.rec["errors"] = {}
        self.rec.setdefault("args", {})[",".join(args.stages)] = {
            k: str(v) for k, v in vars(args).items()}
        self.lap_t = time.monotonic()
        self.answers_path = self.work / "answers.jsonl.gz"
        self.heldout_dir = self.work / "dumps" / "heldout"
        self.now: Callable[[], float] = time.time  # the clock of the generation deadline

    def left(self) -> float:
        return float("inf") if self.a.deadline is None else self.a.deadline - time.time()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.rec["seconds"][name] = round(now - self.lap_t, 1)
        self.lap_t = now
        self.save()

    def save(self) -> None:
        text = json.dumps(self.rec, indent=1, default=str) + "\n"
        (self.work / "earn.json").write_text(text)
        (self.out / "earn.json").write_text(text)

    # --- 1-2: prompts, answers, held-out ---------------------------------------------------------

    def gen_profile(self, index: int = 0) -> Any:
        """Generation server `index` (0-based), started after the ones before it:
        --mem-fraction-static is gen_memory_fraction(index), its share of the memory they left."""
        over = {"--max-running-requests": str(self.a.gen_batch),
                "--max-total-tokens": str(self.a.gen_kv_tokens),
                "--mem-fraction-static": str(gen_memory_fraction(self.a.gen_mem_fraction,
                                                                 index))}
        if not self.sim:
            over["--cuda-graph-max-bs-decode"] = str(self.a.gen_batch)
        doc = profiles.base("generation", self.target, self.launcher, self.sim, over)
        return profiles.load(doc, self.work / "profiles" / f"generation-{index}.toml")

    def data(self) -> None:
        from transformers import AutoTokenizer

        from specgate.results import prompts as probe_prompts

        a = self.a
        tok: Any = AutoTokenizer.from_pretrained(str(self.target))
        keep = prompts.ProbeFilter(prompts.probe_texts())
        tasks, tasks_dropped = prompts.task_prompts(a.n_tasks, a.seed, keep)
        asks = prompts.written_requests(a.n_written, a.seed + 1)

        def chat(text: str) -> list[int]:
            got: Any = tok.apply_chat_template([{"role": "user", "content": text}],
                                               add_generation_prompt=True, tokenize=True)
            return [int(i) for i in (got["input_ids"] if hasattr(got, "keys") else got)]

        prof = self.gen_profile()
        template = probe_prompts.choose_template(prof.bench.chat_template, self.target)
        self.rec["heldout_template"] = {"name": template.name, "source": template.source}
        logs = self.work / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        t_fleet = time.monotonic()
        fleet = Fleet([(self.gen_profile(i), logs / f"generation-{i}.log")
                       for i in range(a.gen_servers)])
        try:
            first = fleet.wait_first()
            log(f"a first generation server of {a.gen_servers} ready after "
                f"{time.monotonic() - t_fleet:.0f} s; the others start one after another "
                "while it generates")
            self.lap("generation servers start")
            urls = fleet.urls
            probe = probe_prompts.load_builtin()
            texts = [template.render(p.text) for p in probe]
            held = gen.generate(first, texts, profiles.MAX_NEW_TOKENS, batch=8)
            self.heldout: list[tuple[str, str, list[int], list[int]]] = [
                (p.id, p.category, list(tok.encode(tx)), h["output_ids"])
                for p, tx, h in zip(probe, texts, held, strict=True)]
            (self.work / "heldout.json").write_text(json.dumps(
                [{"id": i, "category": c, "prompt_ids": p, "answer_ids": ans}
                 for i, c, p, ans in self.heldout]) + "\n")
            t = time.monotonic()
            write_stop, answer_stop = gen_stops(a.gen_deadline, now=self.now,
                                                share=a.write_share)
            # sampled, so that one ask gives many different requests; the answers are greedy
            written = self.spread(urls, [chat(r["prompt"]) for r in asks], a.write_tokens,
                                  sampling={"temperature": a.write_temperature,
                                            "top_p": a.write_top_p},
                                  max_servers=a.gen_servers, stop=write_stop)
            wrote_s = time.monotonic() - t
            if len(written) < len(asks):
                log(f"writing stopped at --gen-deadline's share: {len(written)} of {len(asks)} "
                    "asks written")
            texts_w = [tok.decode(w["output_ids"], skip_special_tokens=True) for w in written]
            wprompts, wdropped = prompts.written_prompts(asks[:len(written)], texts_w,
                                                         a.seed + 2, keep)
            self.rec["written"] = {
                "requests": len(asks), "written": len(written), "kept": len(wprompts),
                "dropped": wdropped,
                "tokens": sum(len(w["output_ids"]) for w in written),
                "seconds": round(wrote_s, 1),
                "per_kind": {k: sum(1 for p in wprompts if p["category"] == k)
                             for k in prompts.KINDS}}
            self.rec["tasks"] = {"prompts": len(tasks), "dropped": tasks_dropped}
            log(f"prompts: {len(wprompts)} written by the model ({wdropped}), {len(tasks)} "
                f"from templates")
            self.lap("held-out and written prompts")
            # interleave the two families so any prefix of the answers holds both
            rows: list[tuple[str, dict[str, str]]] = []
            for i in range(max(len(wprompts), len(tasks))):
                if i < len(wprompts):
                    rows.append(("written", wprompts[i]))
                if i < len(tasks):
                    rows.append(("tasks", tasks[i]))
            ids = [chat(r["prompt"]) for _, r in rows]
            t = time.monotonic()
            answers = self.spread(urls, ids, a.train_tokens, until_tokens=a.answer_tokens,
                                  max_servers=a.gen_servers, stop=answer_stop)
            gen_s = time.monotonic() - t
        finally:
            started = fleet.stop()
            self.rec["generation_servers"] = {
                "count": len(started), "asked": a.gen_servers,
                "started": [{"server": i + 1, "ready_s": round(r, 1),
                             "ready_after_s": round(at - t_fleet, 1),
                             "mem_fraction_static": gen_memory_fraction(a.gen_mem_fraction, i)}
                            for i, _, r, at in started],
                "failed": fleet.failed,
                "flags": list(prof.server.args)}
        n = len(answers)
        n_tok = sum(len(o["output_ids"]) for o in answers)
        if n == 0:
            raise RuntimeError("no answers: the generation servers answered none "
                               + ("before --gen-deadline" if a.gen_deadline else "of the prompts"))
        self.rec["answers"] = {
            "prompts": n, "answer_tokens": n_tok, "seconds": round(gen_s, 1),
            "tok_per_s": round(n_tok / max(gen_s, 1e-9)),
            "written": sum(1 for f, _ in rows[:n] if f == "written"),
            "tasks": sum(1 for f, _ in rows[:n] if f == "tasks"),
            "per_kind": {k: sum(1 for _f, r in rows[:n] if r["category"] == k)
                         for k in prompts.KINDS},
            "stopped_by_gen_deadline": bool(n_tok < a.answer_tokens and n < len(ids)),
            "finished_by_eos": sum(1 for o in answers
                                   if (o.get("finish") or {}).get("type") == "stop"),
            "max_new_tokens": a.train_tokens}
        log(f"answers: {n} prompts, {n_tok} tokens in {gen_s:.0f} s "
            f"({self.rec['answers']['tok_per_s']} tok/s)")
        path = self.answers_path
        with gzip.open(path, "wt", encoding="utf-8") as f:
            for (fam, r), p, o in zip(rows, ids, answers, strict=False):
                if o["output_ids"]:
                    f.write(json.dumps({"id": r["id"], "family": fam, "category": r["category"],
                                        "prompt": r["prompt"], "prompt_ids": p,
                                        "answer_ids": o["output_ids"]}) + "\n")
        prompts.write_jsonl([r for _, r in rows[:n]], self.out / "prompts-used.jsonl")
        self.lap("answers")

    def spread(self, urls: list[str] | Callable[[], list[str]], ids: list[list[int]],
               max_new: int,
               until_tokens: int | None = None,
               sampling: dict[str, float] | None = None,
               max_servers: int | None = None,
               stop: Callable[[], bool] | None = None) -> list[dict[str, Any]]:
        """Answers to every prompt (or, with until_tokens, to the first prompts until that many
        answer tokens are in; with `stop`, to those sent before it said True), batches handed
        out to all the servers at once; greedy unless `sampling` says otherwise. `urls`: the
        servers, or a callable that gives those ready now (a server that comes up meanwhile gets
        workers too; max_servers bounds how many)."""
        batch = gen.BATCH
        chunks = [ids[i:i + batch] for i in range(0, len(ids), batch)]
        results: list[list[dict[str, Any]] | None] = [None] * len(chunks)
        lock = threading.Lock()
        state = {"next": 0, "tokens": 0}
        params: dict[str, float] = {"temperature": 0.0, **(sampling or {}),
                                    "max_new_tokens": max_new}
        t0 = time.monotonic()

        def worker(url: str) -> None:
            while True:
                with lock:
                    k = state["next"]
                    if k >= len(chunks) or (until_tokens is not None
                                            and state["tokens"] >= until_tokens) or (
                            stop is not None and stop()):
                        return
                    state["next"] = k + 1
                out = gen.post(url, {"input_ids": chunks[k], "sampling_params": params})
                got = [{"output_ids": gen.answer_ids(item),
                        "finish": (item.get("meta_info") or {}).get("finish_reason")}
                       for item in out]
                with lock:
                    results[k] = got
                    state["tokens"] += sum(len(g["output_ids"]) for g in got)
                    if k % 50 == 0:
                        log(f"generate: {k + 1}/{len(chunks)} batches, {state['tokens']} tokens, "
                            f"{state['tokens'] / max(time.monotonic() - t0, 1e-9):.0f} tok/s")

        threads = gen.THREADS
        live = urls if callable(urls) else (lambda: list(urls))
        serving: set[str] = set()
        futs: list[cf.Future[None]] = []
        servers = max_servers if max_servers is not None else len(live())
        with cf.ThreadPoolExecutor(max_workers=max(threads * servers, 1)) as pool:
            while True:  # a server that comes up meanwhile gets workers too
                for u in live():
                    if u not in serving:
                        serving.add(u)
                        futs += [pool.submit(worker, u) for _ in range(threads)]
                done, running = cf.wait(futs, timeout=1.0)
                for f in done:
                    f.result()
                if not running:  # a worker ends only when nothing is left to hand out
                    break
        return gen.sent_in_order(results)

    def heldout_dump(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        from benchmarks.real_model import capture

        device = "cuda" if torch.cuda.is_available() else "cpu"
        model: Any = AutoModelForCausalLM.from_pretrained(str(self.target), dtype=torch.bfloat16)
        model = model.to(device).eval()
        layers = capture.sglang_capture_layers(None, model.config.num_hidden_layers)
        ids_cfg = capture.config_ids_for(layers)
        meta = {"format": "specgate.hidden_states", "version": 1,
                "aux_hidden_state_layer_ids": ids_cfg, "captured_layer_inputs": layers,
                "target_model_type": "llama", "target_hidden_size": model.config.hidden_size,
                "num_aux_hidden_states": 3, "dtype": "bfloat16",
                "generated_by": "benchmarks/real_model/earn.py (SGLang answers, transformers "
                                "forward)"}
        if not hasattr(self, "heldout"):  # the answers a data stage wrote
            self.heldout = [(r["id"], r["category"], r["prompt_ids"], r["answer_ids"])
                            for r in json.loads((self.work / "heldout.json").read_text())]
        seqs = [p + ans for _i, _c, p, ans in self.heldout]
        caps, stats = capture.capture(model, seqs, [len(p) for _i, _c, p, _a in self.heldout],
                                      device, ids_cfg)
        capture.write_samples(self.heldout_dir, [i for i, *_x in self.heldout], caps, full=True)
        capture.finish_dump(self.heldout_dir, model.model.embed_tokens.weight.detach(), dict(
            meta, **stats, chat_template=self.rec["heldout_template"]["name"],
            max_new_tokens=profiles.MAX_NEW_TOKENS,
            samples={i: {"category": c, "prompt_tokens": len(p), "tokens": len(p) + len(ans)}
                     for i, c, p, ans in self.heldout}))
        self.rec["capture_heldout"] = stats
        del model
        if device == "cuda":
            torch.cuda.empty_cache()
        self.lap("held-out dump")

    # --- 3-4: maps and training -------------------------------------------------------------------

    def maps(self) -> dict[str, Path]:
        import numpy as np
        from safetensors.numpy import save_file

        from benchmarks.real_model import sf_train

        rows = sf_train.read_rows(self.answers_path)
        order = sf_train.data_order(len(rows), self.a.seed)
        vocab_size = int(json.loads((self.target / "config.json").read_text())["vocab_size"])
        out: dict[str, Path] = {}
        self.rows_total = len(rows)
        for name, k in {"trained": 1, **SIZES}.items():
            part = order[:len(order) // k]
            samples = [(np.asarray(rows[i]["answer_ids"]), np.ones(len(rows[i]["answer_ids"]),
                                                                    dtype=np.uint8))
                       for i in part]
            counts = vocab.count_tokens(samples)
            d2t, t2d = vocab.mappings(counts, self.a.draft_vocab, vocab_size)
            path = self.work / "maps" / f"{name}.safetensors"
            path.parent.mkdir(parents=True, exist_ok=True)
            save_file({"d2t": d2t, "t2d": t2d}, str(path))
            out[name] = path
            self.rec.setdefault("maps", {})[name] = {
                "samples": len(part), "answer_tokens": int(sum(counts.values())),
                "distinct_tokens": len(counts),
                "coverage": round(vocab.coverage(counts, d2t), 5)}
        self.lap("maps")
        return out

    def train(self, maps: dict[str, Path], names: list[str], limit: float | None) -> None:
        """Train `names`, --train-parallel at once (each its own process), stopping them at
        Unix time `limit`."""
        a = self.a
        drafters = self.work / "drafters"
        for name in names:  # what an earlier run left under these names is not this run's
            shutil.rmtree(drafters / name, ignore_errors=True)
            shutil.rmtree(self.out / "drafters" / name, ignore_errors=True)
            (self.rec.get("drafters") or {}).pop(name, None)
        common = ["--data", str(self.answers_path), "--target", str(self.target),
                  "--specforge", str(a.specforge), "--epochs", str(a.epochs),
                  "--seed", str(a.seed), "--batch-rows", str(a.batch_rows), "--lr", str(a.lr),
                  "--heldout", str(self.heldout_dir)]
        if a.train_device:
            common += ["--device", a.train_device]
        commands: dict[str, list[str]] = {}
        for name in names:
            size = base_name(name)
            cmd = [*common, "--vocab-map", str(maps[size]), "--out", str(drafters / name)]
            if size in SIZES:
                cmd += ["--rows", str(self.rows_total // SIZES[size])]
            commands[name] = cmd
        self.rec.setdefault("train_commands", {}).update(
            {k: ["sf_train.py", *v] for k, v in commands.items()})
        logs = self.work / "logs"
        gib = None if a.train_parallel > 0 else gpu_memory_gib()
        at_once = trainings_at_once(a.train_parallel, gib, a.batch_rows)
        self.rec["train_parallel"] = {"at_once": at_once, "requested": a.train_parallel,
                                      "gpu_gib": gib}
        log(f"trainings {', '.join(names)}: {at_once} at a time"
            + ("" if a.train_parallel > 0 else f" ({gib} GiB of GPU memory)"))
        t = time.monotonic()
        env = dict(os.environ, OMP_NUM_THREADS=str(a.train_threads))
        codes, wall = run_pool({k: [sys.executable, "-m", "benchmarks.real_model.sf_train", *v]
                                for k, v in commands.items()}, at_once, limit, logs,
                               env, log, grace_s=GRACE_S)
        self.rec.setdefault("train_wall_s", {}).update(wall)
        self.rec.setdefault("train_stage_s", {})[",".join(names)] = round(
            time.monotonic() - t, 1)
        summaries: dict[str, Any] = {}
        for name in names:
            s = drafters / name / "summary.json"
            summaries[name] = json.loads(s.read_text()) if s.exists() else {
                "exit": codes.get(name)}
            self.keep_drafter(name)
        self.rec.setdefault("drafters", {}).update({k: {f: v.get(f) for f in (
            "sha256", "samples", "answer_tokens", "epochs", "epochs_done", "updates", "train_s",
            "answer_tokens_per_s", "batch_rows", "lr", "predicted", "stopped", "exit")}
            for k, v in summaries.items()})
        self.rec["sha256_reproduced"] = reproduced(self.rec["drafters"])
        log(f"trainings {', '.join(names)} done in {time.monotonic() - t:.0f} s; sha256 "
            f"reproduced: { {k: v['same'] for k, v in self.rec['sha256_reproduced'].items()} }")
        self.lap("training " + ",".join(names))

    def warm_up(self) -> tuple[threading.Thread, dict[str, Any]]:
        """One baseline server started while the trainings run, sent one request, then stopped:
        SGLang's first start on a machine compiles its kernels, and the tune's launches after
        the trainings find them compiled (on an H100 the tune's first speculative launch was
        ready after 118 s this way, against 179 s on a fresh machine). Its
        --mem-fraction-static lets it start beside a training. Returns the thread and the
        record it fills (read after join); nothing it meets stops the trainings."""
        rec: dict[str, Any] = {}

        def run() -> None:
            from specgate.serving.client import SGLangClient

            t = time.monotonic()
            handle = None
            try:
                doc = profiles.base("warm-up", self.target, self.launcher, self.sim,
                                    {"--mem-fraction-static": str(WARM_UP_MEM_FRACTION)})
                doc["server"]["startup_timeout_s"] = WARM_UP_TIMEOUT_S
                prof = profiles.load(doc, self.work / "profiles" / "warm-up.toml")
                handle, ready = serve.start(prof, "baseline", self.work / "logs" / "warm-up.log")
                rec["ready_s"] = round(ready, 1)
                with SGLangClient(handle.url, None, timeout_s=60.0) as client:
                    client.generate("Name three colours.", {"max_new_tokens": 16,
                                                            "temperature": 0.0})
                rec["answered"] = True
            except Exception as exc:  # the trainings go on; the tune then compiles
                rec["error"] = str(exc)[:1000]
            finally:
                try:
                    if handle is not None:
                        handle.stop()
                except Exception as exc:
                    rec["stop_error"] = str(exc)[:1000]
                rec["seconds"] = round(time.monotonic() - t, 1)

        thread = threading.Thread(target=run, name="warm-up", daemon=True)
        thread.start()
        return thread, rec

    def keep_drafter(self, name: str) -> None:
        """What a result keeps of drafter NAME: its summary, config, prediction and logs."""
        src, dst = self.work / "drafters" / name, self.out / "drafters" / name
        dst.mkdir(parents=True, exist_ok=True)
        for f in ("summary.json", "config.json", "prediction.json", "logs/train.jsonl"):
            if (src / f).exists():
                shutil.copy(src / f, dst / Path(f).name)
        log_path = self.work / "logs" / f"train-{name}.log"
        if log_path.exists():
            shutil.copy(log_path, dst / "train.log")

    def train_again(self) -> None:
        """The --again trainings, alone on the GPU, when the time left holds one: the estimate is
        the first run's own time from start to end (it shared the GPU), the stop's grace and a
        minute for the maps and the start. A second run of a first run that did not finish
        compares nothing: it is not started."""
        self.rec.pop("again_skipped", None)
        done = self.rec.get("drafters") or {}
        names, why = [], []
        for n in self.a.again:
            if not finished(done.get(base_name(n)) or {}):
                why.append(f"{n}: not started, {base_name(n)} did not finish its epochs")
            elif not finished(done.get(n) or {}):
                names.append(n)
        walls = self.rec.get("train_wall_s") or {}
        need = max([float(walls.get(base_name(n)) or 0.0) for n in names] or [0.0]) \
            + GRACE_S + 60.0
        if names and self.left() < need:
            why.append(f"{', '.join(names)}: not started, {self.left():.0f} s left of the "
                       f"--deadline and a run needs about {need:.0f} s (the first run's "
                       f"{need - GRACE_S - 60.0:.0f} s, sharing the GPU, + {GRACE_S:.0f} s to "
                       "stop + 60 s to start)")
            names = []
        if why:
            self.rec["again_skipped"] = "; ".join(why)
            log(self.rec["again_skipped"])
            self.save()
        if names:
            limit = None if self.a.deadline is None else self.a.deadline - GRACE_S - 10.0
            self.train(self.maps(), names, limit)

    # --- 5-6: tune, probes, served curve ----------------------------------------------------------

    def tune(self) -> None:
        a = self.a
        drafter = self.work / "drafters" / a.judge
        doc = profiles.probe(self.serve_target, drafter, self.heldout_dir, self.launcher,
                             self.sim, max(a.steps), label=a.judge)
        doc["name"] = f"{profiles.NAME}-{a.judge}-tune" + ("-sim" if self.sim else "")
        doc.pop("eval", None)
        doc["bench"].update({"prompts_per_category": a.tune_prompts,
                             "max_new_tokens": a.tune_tokens, "max_repeats": 3,
                             "request_timeout_s": 60.0})
        doc["tune"] = {"steps": list(a.steps), "max_launches": a.tune_launches,
                       "margin": 0.03, "repeats": 1}
        prof = profiles.write(doc, self.work / "profiles" / "tune.toml")
        reports = self.work / "reports" / "tune"
        t = time.monotonic()
        with (self.work / "logs" / "tune.log").open("w") as fh:
            code = run_until(
                [sys.executable, "-m", "specgate.cli", "tune", "--profile", str(prof),
                 "--reports", str(reports), "--no-baseline"], fh, self.work,
                max(self.left() - a.after_tune_s - TUNE_STOP_GRACE_S, 60.0), TUNE_STOP_GRACE_S)
        dst = self.out / "tune"
        dst.mkdir(parents=True, exist_ok=True)
        for f in ("tune.md", "tune.png", "recommended.toml", "tune.json"):
            if (reports / "tune" / f).exists():
                shutil.copy(reports / "tune" / f, dst / f)
        shutil.copy(self.work / "logs" / "tune.log", dst / "tune.log")
        shutil.copy(prof, dst / "profile.toml")
        best = None
        if (reports / "tune" / "tune.json").exists():
            tj = json.loads((reports / "tune" / "tune.json").read_text())
            b = tj.get("best")  # a chain's key, "s3-k1-d4"
            if isinstance(b, str) and b.startswith("s") and "-" in b:
                best = int(b[1:b.index("-")])
        self.rec["tune"] = {"exit": code, "seconds": round(time.monotonic() - t, 1),
                            "best_steps": best, "judge": a.judge,
                            "served_target": str(self.serve_target)}
        log(f"tune: exit {code}, best steps {best}")
        self.lap("tune")

    def chain(self) -> int:
        """The steps the probes serve: the tune's best for this --judge and --serve-target,
        else --fallback-steps (a tune of another drafter or target, or none, picks nothing)."""
        tune = self.rec.get("tune") or {}
        best = tune.get("best_steps")
        # a record without served_target is a tune of the target itself
        same_target = tune.get("served_target", str(self.target)) == str(self.serve_target)
        if best and tune.get("judge", "trained") == self.a.judge and same_target:
            return int(best)
        return int(self.a.fallback_steps)

    def serve(self, steps: int) -> None:
        a = self.a
        judge = a.judge
        drafters = self.work / "drafters"
        over = {"--mem-fraction-static": str(a.serve_mem_fraction)}
        probe_doc = profiles.probe(self.serve_target, drafters / judge, self.heldout_dir,
                                   self.launcher, self.sim, steps, label=judge,
                                   overrides=over)
        probe_toml = profiles.write(probe_doc, self.work / "profiles" / "probe.toml")
        prof = profiles.load(probe_doc, self.work / "profiles" / "probe-loaded.toml")
        # every other size trained is served once at the same chain, for the data-size curve
        others = [n for n in ("trained", *SIZES)
                  if n != judge and (drafters / n / "model.safetensors").exists()]
        size_profs = {judge: prof}
        for name in others:
            d = profiles.probe(self.serve_target, drafters / name, self.heldout_dir,
                               self.launcher, self.sim, steps, label=name, overrides=over)
            size_profs[name] = profiles.load(d, self.work / "profiles" / f"{name}.toml")
        self.rec["judged"] = judge
        self.rec["served_steps"] = steps
        jobs: dict[str, tuple[Any, str]] = {
            "baseline-1": (prof, "baseline"), "baseline-2": (prof, "baseline"),
            f"spec-{judge}-1": (prof, "speculative"), f"spec-{judge}-2": (prof, "speculative")}
        for name in others:
            jobs[f"spec-{name}"] = (size_profs[name], "speculative")
        # the two probes share one history (probe-2's regress.* compare with probe-1), and only
        # this run's
        shutil.rmtree(self.work / "reports" / "probe", ignore_errors=True)
        served_by = {n: f"spec-{judge}-1" if n == judge else f"spec-{n}"
                     for n in ("trained", *SIZES)}
        pairs = serve_in_pairs(a.pairs, len(jobs), weights_bytes(self.serve_target),
                               gpu_memory_gib(), a.serve_mem_fraction)
        self.rec["serve_pairs"] = pairs
        for group in serve_groups(judge, others, pairs):
            need = GROUP_START_S + (PROBE_MIN_S if group[0].startswith("baseline") else 30.0)
            if self.left() < need:  # a start that no probe or measurement could follow
                why = (f"not started: {self.left():.0f} s left of the --deadline, a start and "
                       f"what follows it need about {need:.0f} s")
                self.rec.setdefault("serve_skipped", {})[",".join(group)] = why
                log(f"{','.join(group)}: {why}")
                continue
            self.serve_group({k: jobs[k] for k in group}, served_by, size_profs, probe_toml,
                             pairs)
        self.lap("probes and served sizes")

    def serve_group(self, jobs: dict[str, tuple[Any, str]], served_by: dict[str, str],
                    size_profs: dict[str, Any], probe_toml: Path, pairs: bool) -> None:
        """Start JOBS' servers at once; attach each probe whose pair is among them; measure the
        served accept length of each size whose server is among them; stop them all."""
        a = self.a
        judge = a.judge
        logs = self.work / "logs"
        handles: dict[str, Any] = {}
        ready: dict[str, float] = {}
        t = time.monotonic()
        try:
            with cf.ThreadPoolExecutor(max_workers=len(jobs)) as pool:
                ports = free_ports(len(jobs))
                futs = {pool.submit(serve.start, p, cfg, logs / f"{name}.log", port): name
                        for (name, (p, cfg)), port in zip(jobs.items(), ports, strict=True)}
                for fut in cf.as_completed(futs):
                    name = futs[fut]
                    try:
                        handles[name], ready[name] = fut.result()
                        log(f"{name}: ready after {ready[name]:.1f} s at {handles[name].url}")
                    except Exception as exc:  # one server failing must not lose the others
                        self.rec.setdefault("failed", {})[name] = str(exc)[:2000]
                        log(f"{name}: FAILED to start: {str(exc)[:400]}")
            self.rec.setdefault("ready_s", {}).update({k: round(v, 1) for k, v in ready.items()})
            key = "servers start" + (f" {','.join(jobs)}" if pairs else "")
            self.rec["seconds"][key] = round(time.monotonic() - t, 1)
            self.save()
            for k in (1, 2):
                b, s = handles.get(f"baseline-{k}"), handles.get(f"spec-{judge}-{k}")
                if b is None or s is None:
                    continue
                if self.left() < PROBE_MIN_S:
                    self.rec[f"probe-{k}"] = {"skipped": f"{self.left():.0f} s left of the "
                                              "--deadline"}
                    log(f"probe-{k}: skipped, {self.left():.0f} s left")
                    continue
                t = time.monotonic()
                before = host_state()
                self.rec[f"probe-{k}"] = serve.pytest_probe(
                    self.work, probe_toml, f"probe-{k}",
                    [f"{profiles.OPTIONS['server_url']}={s.url}",
                     f"{profiles.OPTIONS['baseline_url']}={b.url}"],
                    min(a.probe_timeout, max(self.left() - 30, 60.0)),
                    reports=self.work / "reports" / "probe")
                self.rec["seconds"][f"probe-{k}"] = round(time.monotonic() - t, 1)
                self.rec.setdefault("host", {})[f"probe-{k}"] = {"before": before,
                                                                  "after": host_state()}
                self.save()
            # the served accept length of the data sizes (accept length does not depend on
            # speed: measured at once); the judged drafter's on its first probe's server
            names = [n for n in ("trained", *SIZES) if served_by[n] in handles]
            if names:
                t = time.monotonic()
                with cf.ThreadPoolExecutor(max_workers=len(names)) as pool:
                    futs2 = {pool.submit(serve.accept_length, handles[served_by[n]].url,
                                         size_profs[n]): n
                             for n in names}
                    for done in cf.as_completed(futs2):
                        n = futs2[done]
                        try:
                            self.rec.setdefault("served_sizes", {})[n] = done.result()
                            log(f"served accept length {n}: "
                                f"{self.rec['served_sizes'][n]['accept_len']}")
                        except Exception as exc:
                            self.rec.setdefault("served_sizes", {})[n] = {
                                "error": str(exc)[:1000]}
                skey = "served sizes" + (f" {','.join(names)}" if pairs else "")
                self.rec["seconds"][skey] = round(time.monotonic() - t, 1)
                self.save()
        finally:
            for name, h in handles.items():
                try:
                    h.stop()
                except Exception as exc:
                    log(f"{name}: stop failed: {exc}")
            for name in jobs:
                src = logs / f"{name}.log"
                if src.exists():
                    lines = src.read_text(errors="replace").splitlines()
                    dst = self.out / "servers"
                    dst.mkdir(parents=True, exist_ok=True)
                    (dst / f"{name}.log").write_text(
                        "\n".join([*lines[:60], "[...]", *lines[-60:]]) + "\n")

    def forget(self, keys: tuple[str, ...], paths: tuple[str, ...]) -> None:
        """An earlier run's results that a stage about to run replaces: record keys and paths
        under WORK (a reused WORK, or earn.sh --data)."""
        for k in keys:
            self.rec.pop(k, None)
        for rel in paths:
            for path in self.work.glob(rel):
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink()

    def train_limit(self) -> float | None:
        """When the trainings stop: --train-deadline, else --deadline less the tune's and the
        probes' time (--tune-s, --after-tune-s)."""
        a = self.a
        if a.train_deadline is not None:
            return float(a.train_deadline)
        return None if a.deadline is None else a.deadline - a.after_tune_s - a.tune_s

    def run(self) -> int:
        code = 0
        stages = self.a.stages
        key = ",".join(stages)
        self.rec["errors"].pop(key, None)
        served = ("tune", "served_steps", "probe-1", "probe-2", "served_sizes", "failed",
                  "ready_s", "host", "judged", "serve_skipped", "serve_pairs")
        try:
            if "data" in stages:
                self.forget((), ("out/*", "drafters", "reports", "dumps", "maps"))
                self.data()
                self.heldout_dump()
            if "heldout" in stages:
                self.heldout_dump()
            if "train" in stages:
                self.forget(("drafters", "sha256_reproduced", "again_skipped", "train_commands",
                             "train_wall_s", "train_stage_s", "warm_up", *served),
                            ("drafters", "out/drafters", "out/tune", "out/probe-*",
                             "out/servers", "reports"))
                warm = self.warm_up() if self.a.warm_up else None
                try:
                    self.train(self.maps(), self.a.trainings, self.train_limit())
                finally:
                    if warm is not None:
                        warm[0].join()
                        self.rec["warm_up"] = warm[1]
                        log(f"warm-up server: {warm[1]}")
            elif "tune" in stages:
                self.forget(served, ("out/tune", "out/probe-*", "out/servers", "reports"))
            elif "serve" in stages:
                self.forget(served[2:], ("out/probe-*", "out/servers", "reports/probe"))
            if {"tune", "serve"} & set(stages) and not (
                    self.work / "drafters" / self.a.judge / "model.safetensors").exists():
                log(f"no {self.a.judge} drafter (--judge): nothing to serve")
                return 3
            if "train" not in stages:  # drafters trained earlier (earn.sh --data)
                for d in sorted((self.work / "drafters").glob("*/summary.json")):
                    self.keep_drafter(d.parent.name)
            if {"tune", "serve"} & set(stages):
                self.rec["served_target"] = served_target(self.serve_target)
            if "tune" in stages:
                self.tune()
            if "serve" in stages:
                self.serve(self.chain())
            if "again" in stages:
                self.train_again()
        except Exception as exc:
            import traceback

            self.rec["errors"][key] = traceback.format_exc()[-4000:]
            log(f"stopped: {exc!r}")
            code = 2
        finally:
            self.save()
        return code


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--specforge", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--launcher", default="python3 -m sglang.launch_server")
    ap.add_argument("--sim", action="store_true", help="specgate's simulator serves (dry run)")
    ap.add_argument("--n-tasks", type=int, default=6000,
                    help="templated prompts (the templates give about 6,500 distinct ones)")
    ap.add_argument("--n-written", type=int, default=60000, help="asks the model writes from")
    ap.add_argument("--write-tokens", type=int, default=128)
    ap.add_argument("--write-temperature", type=float, default=0.7)
    ap.add_argument("--write-top-p", type=float, default=0.95)
    ap.add_argument("--train-tokens", type=int, default=384, help="max new tokens an answer")
    ap.add_argument("--answer-tokens", type=int, default=10_000_000)
    ap.add_argument("--gen-servers", type=int, default=3)
    ap.add_argument("--gen-batch", type=int, default=512)
    ap.add_argument("--gen-kv-tokens", type=int, default=800_000)
    ap.add_argument("--gen-mem-fraction", type=float, default=0.25)
    ap.add_argument("--gen-deadline", type=float,
                    help="Unix time by which generation ends: the writing of requests stops at "
                         "--write-share of the time left when it starts, the answers at the "
                         "deadline (fewer answer tokens than --answer-tokens)")
    ap.add_argument("--write-share", type=float, default=WRITE_SHARE,
                    help="the share of the generation's time the writing may take")
    ap.add_argument("--draft-vocab", type=int, default=DRAFT_VOCAB)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-rows", type=int, default=64,
                    help="samples an update (summary.json: tokens_per_update)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--train-device", help="sf_train.py's --device")
    ap.add_argument("--train-threads", type=int, default=4, help="CPU threads per training")
    ap.add_argument("--train-parallel", type=int, default=0,
                    help="trainings at once; 0: as many as the GPU's memory holds, at most two "
                         "(at 64 samples an update one held 31-41 GiB of an H200; a 32-sample "
                         "training beside a 64-sample one added about a fifth to the samples "
                         "per second)")
    ap.add_argument("--no-warm-up", dest="warm_up", action="store_false",
                    help="start no baseline server during the trainings (see Earn.warm_up)")
    ap.add_argument("--trainings", type=names_arg, default=list(TRAININGS),
                    help="the drafters the train stage trains")
    ap.add_argument("--again", type=names_arg, default=["trained-again"],
                    help="the second runs stage \"again\" trains, alone, if time allows")
    ap.add_argument("--judge", choices=("trained", *SIZES), default="trained",
                    help="the drafter the tune and the two probes serve; the other sizes "
                         "trained are served once at the chain they get")
    ap.add_argument("--steps", type=lambda s: [int(x) for x in s.split(",")],
                    default=[1, 2, 3, 4])
    ap.add_argument("--tune-launches", type=int, default=3)
    ap.add_argument("--tune-prompts", type=int, default=2, help="prompts per category")
    ap.add_argument("--tune-tokens", type=int, default=128)
    ap.add_argument("--fallback-steps", type=int, default=3,
                    help="the chain served when the tune recommends none")
    ap.add_argument("--probe-timeout", type=float, default=600.0)
    ap.add_argument("--serve-target", type=Path,
                    help="the target the tune and the probes serve (default --target): a "
                         "deployment of it, e.g. pad_target.py's GPU-bound one")
    ap.add_argument("--pairs", choices=("auto", "on", "off"), default="auto",
                    help="start the serve stage's servers one probe's pair at a time, then each "
                         "other size's alone (on), or all at once (off); auto: pairs when the "
                         "GPU's --serve-mem-fraction does not hold every server's weights at "
                         "once with 8 GB to spare")
    ap.add_argument("--serve-mem-fraction", type=float, default=SERVE_MEM_FRACTION,
                    help="the serve stage's --mem-fraction-static (default %(default)s)")
    ap.add_argument("--stages", type=lambda s: [x for x in s.split(",") if x],
                    default=["data", "train", "tune", "serve"],
                    help="which of data, train, tune, serve, again to run (a later stage "
                         "reads what the earlier ones left in WORK); heldout remakes the "
                         "held-out dump from WORK/heldout.json")
    ap.add_argument("--deadline", type=float, help="Unix time by which everything must end")
    ap.add_argument("--train-deadline", type=float,
                    help="Unix time by which the trainings must end (they are stopped then)")
    ap.add_argument("--after-tune-s", type=float, default=270.0,
                    help="seconds kept for the probes after the tune")
    ap.add_argument("--tune-s", type=float, default=240.0,
                    help="seconds kept for the tune after the trainings, when only --deadline "
                         "bounds them")
    args = ap.parse_args(argv)
    if "train" in args.stages and args.judge not in args.trainings:
        # the train stage forgets earlier drafters: the judged one must be among its trainings
        ap.error(f"--judge {args.judge}: not among --trainings {','.join(args.trainings)}")
    args.work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return Earn(args).run()


if __name__ == "__main__":
    random.seed(0)
    sys.exit(main())
