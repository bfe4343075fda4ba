"""Close the loop on real SGLang: train a drafter, serve it, probe it, compare with the prediction.

Called by loop.sh once SGLang and specgate are in place (see README.md):

    python3 loop.py --work WORK --out OUT --root ROOT --launcher "python3 -m ..." \
        --deadline EPOCH [--sim] [--train-args "..."] [--steps N|sN-kK-dD | --from-tune JSON]
        [--skip-probe] [--skip-phase1] [--warm-up] [--tag T]

1. train_drafter.py builds the tiny target (saved weights), dumps its hidden states, trains a
   1-layer EAGLE-3 drafter with specgate's own forward and predicts its accept length on the
   probe's prompts (WORK/model/prediction.json). Skipped when WORK/model holds a trained model
   and no --train-args are given (with them, the old model is removed and a new one trained).
   --warm-up starts and stops one SGLang server meanwhile (SGLang compiles its kernels at the
   first start on a machine).
2. `pytest -m probe` launches SGLang with that target and drafter (baseline, then EAGLE-3) and
   judges every Phase 0 claim, accept length against break-even (not with --skip-probe). All
   probes share WORK/reports: a stored baseline (tune's or an earlier probe's) is reused, and
   regress.* compares with the last passing probe of the same served flags.
3. `pytest -m "phase1 or phase2"` judges the fine-tune and data claims on the same files (not
   with --skip-phase1).
4. The predicted accept length is set against the measured one, overall and per category.

Writes OUT/loop.log (via loop.sh), OUT/loop_summary{T}.json, OUT/loop_summary{T}.md,
OUT/verdict{T}.json (the probe's verdict), OUT/train.log, OUT/summary.json and
OUT/prediction.json (when it trained), OUT/loop{T}.tar.gz
(verdicts, live results, stored baselines, history, the run's training and warm-up logs,
prediction, profile) and OUT/model.tar.gz (drafter and held-out dump, without the target's
weights).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.common import json_object, with_root
from benchmarks.real_sglang import suite  # the real-SGLang suite's profile writer and server flags
from benchmarks.servers import free_port

HERE = Path(__file__).resolve().parent


def log(message: str) -> None:
    print(f"[loop {time.strftime('%H:%M:%S')}] {message}", flush=True)


def served_key(steps: int) -> str:
    return f"steps{steps}_topk1_draft{steps + 1}"


# A stored baseline younger than this is reused by a later probe or tune of the same fingerprint
# (specgate/measure/reuse.py): the loop's runs share one reports folder, so a tune's baseline
# serves the probe after it, and a second probe launches only the speculative server.
BASELINE_MAX_AGE_H = 2.0
# train_drafter.py's deadline comes this long before the loop's own time bound on it.
TRAIN_DEADLINE_MARGIN_S = 10.0
# On the simulator (--sim) the training runs at tiny shapes on the CPU in seconds, whatever the
# run's --train-args ask for: these flags come after them and win. The target's depth, the
# prompt mix and the drafter's options stay as asked.
SIM_TRAIN_ARGS = ("--size", "tiny", "--device", "cpu", "--threads", "1", "--train-prompts", "9",
                  "--train-tokens", "24", "--gen-batch", "16", "--scratch-seconds", "0",
                  "--finetune-seconds", "0.01", "--min-epochs", "1")


@dataclasses.dataclass(frozen=True)
class Served:
    """The speculative configuration the probe serves: steps, topk, draft tokens (0: a chain's
    steps + 1). Checked as specgate checks a profile's [speculative] section."""

    steps: int
    topk: int = 1
    draft_tokens: int = 0

    def __post_init__(self) -> None:
        if self.draft_tokens == 0:
            object.__setattr__(self, "draft_tokens", self.steps + 1)
        from pydantic import ValidationError

        from specgate.core.profile import SpeculativeSection

        try:
            SpeculativeSection(algorithm="EAGLE3", num_steps=self.steps, eagle_topk=self.topk,
                               num_draft_tokens=self.draft_tokens)
        except ValidationError as exc:
            problems = "; ".join(e["msg"] for e in exc.errors())
            raise ValueError(f"not a configuration SGLang serves: {self.key} ({problems})") \
                from None

    @property
    def key(self) -> str:
        return f"s{self.steps}-k{self.topk}-d{self.draft_tokens}"

    @classmethod
    def parse(cls, text: str) -> Served:
        """'3' (a chain of 3 steps) or a tune key such as 's3-k1-d4'."""
        m = re.fullmatch(r"([1-9]\d*)|s([1-9]\d*)-k([1-9]\d*)-d([1-9]\d*)", text.strip())
        if not m:
            raise ValueError(f"not a served configuration: {text!r} (want N or sN-kK-dD, "
                             "numbers from 1)")
        if m.group(1):
            return cls(int(m.group(1)))
        return cls(int(m.group(2)), int(m.group(3)), int(m.group(4)))

    @classmethod
    def from_tune(cls, path: Path) -> tuple[Served, str]:
        """The best configuration of a `specgate tune` result (tune.json), and what it says."""
        doc = json_object(path, "a tune result")
        best = doc.get("best")
        if best is None:
            raise ValueError(f"{path}: tune recommends nothing ({doc.get('stop_reason')})")
        if not isinstance(best, str):
            raise ValueError(f"{path}: 'best' is {best!r}, not a key such as 's3-k1-d4'")
        return cls.parse(best), f"{path}: best {best} ({doc.get('stop_reason')})"


def profile(model: Path, launcher: list[str], sim: bool, max_new_tokens: int,
            steps: int = 3, served: Served | None = None,
            name_config: bool = True, reuse_baseline: bool = True,
            concurrency: list[int] | None = None) -> dict[str, Any]:
    """The loop's profile. With name_config the served configuration is part of the name, so
    regress.* (history per profile name) compares a probe only with probes of the same flags.
    Without reuse_baseline the profile sets no baseline_max_age_h: every probe launches its own
    baseline right before its speculative server (on a machine whose speed drifts between
    starts, the two measurements of one speed-up then sit minutes apart, not hours).
    concurrency sets [bench] concurrency (the gate decides at its smallest level)."""
    cfg = served or Served(steps)
    name = "real-sglang-0.5.17-trained" + (f"-{cfg.key}" if name_config else "")
    return {
        "name": name + ("-sim" if sim else ""),
        "description": "tiny Llama target served by SGLang with a drafter trained by specgate",
        "target": {"path": str(model / "target")},
        # The from-scratch drafter is the reference of the vocab and shape-parity claims; a
        # model brought back without it (a model.tar.gz made without one) is served without a
        # reference.
        "drafter": {"path": str(model / "drafter"),
                    **({"reference": str(model / "scratch")} if (model / "scratch").is_dir()
                       else {})},
        "server": {"launcher": launcher, "host": "127.0.0.1", "port": 0, "tp": 1,
                   "startup_timeout_s": 480.0, "stop_timeout_s": 30.0,
                   "args": suite.server_flags(sim)},
        "speculative": {"algorithm": "EAGLE3", "num_steps": cfg.steps,
                        "eagle_topk": cfg.topk, "num_draft_tokens": cfg.draft_tokens},
        # All 42 built-in prompts, as the held-out dump the prediction was made on.
        "bench": {"prompts": "builtin", "prompts_per_category": 6,
                  "max_new_tokens": max_new_tokens, "temperature": 0.0, "warmup": 1,
                  "repeats": 1, "max_repeats": 2, "request_timeout_s": 60.0,
                  **({"baseline_max_age_h": BASELINE_MAX_AGE_H} if reuse_baseline else {}),
                  **({"concurrency": concurrency} if concurrency else {})},
        "thresholds": {"baseline_tps_min": 100.0, "accept_len_min": "breakeven",
                       "d2t_match_min": 0.99},
        "finetune": {"init": str(model / "scratch"), "log": str(model / "logs/finetune.jsonl"),
                     "reference_log": str(model / "logs/scratch.jsonl"),
                     "hidden_states": str(model / "dump/train"),
                     "vocab_map": str(model / "vocab_map.safetensors")},
        "data": {"path": str(model / "dump/train")},
        # eval.live_agreement: the offline prediction on the probe's own prompts (the held-out
        # dump: the target's greedy continuations from a plain torch forward) against the probe.
        # Both offline evaluations on the GPU when there is one (the training dump is large).
        "eval": {"hidden_states": str(model / "dump/heldout"), "device": "auto"},
    }


class WarmUp:
    """One SGLang start, in the background while the drafter trains: the first launch on a fresh
    machine compiles SGLang's kernels (minutes); later launches of the same shapes find them
    cached. Serves make_tiny.py's model (same architecture as the trained one) as EAGLE-3, sends
    one request, and stops the server; its log is WORK/warm-up.log. `finish` always stops the
    server's whole process group (SIGTERM, then SIGKILL), whatever the thread got to."""

    READY_LIMIT_S = 900.0
    TERM_GRACE_S = 30.0  # SIGTERM to SIGKILL

    def __init__(self, proc: subprocess.Popen[bytes] | None, log_file: Path, port: int,
                 note: str) -> None:
        self.proc, self.log_file, self.port = proc, log_file, port
        self.started = time.monotonic()
        self.ready_s: float | None = None
        self._note = note
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.thread = threading.Thread(target=self._drive, daemon=True)
        if proc is not None:
            self.thread.start()

    def _say(self, note: str) -> None:
        """The thread's outcome, unless finish() has already taken over."""
        with self._lock:
            if not self._stopping.is_set():
                self._note = note

    @classmethod
    def start(cls, work: Path, launcher: list[str], root: Path, sim: bool) -> WarmUp:
        log_file = work / "warm-up.log"
        tiny = work / "warm-tiny"
        if not (tiny / "draft" / "model.safetensors").exists():
            made = subprocess.run([sys.executable, "-m", "benchmarks.real_sglang.make_tiny",
                                   str(tiny), *(["--no-tokenizer"] if sim else [])],
                                  capture_output=True, text=True, check=False, cwd=root,
                                  env=with_root())
            if made.returncode != 0:
                return cls(None, log_file, 0, "not started: make_tiny.py failed: "
                           + (made.stderr.strip().splitlines() or ["?"])[-1])
        port = free_port()
        argv = [*launcher, "--model-path", str(tiny / "target"), "--host", "127.0.0.1",
                "--port", str(port), "--speculative-algorithm", "EAGLE3",
                "--speculative-draft-model-path", str(tiny / "draft"),
                "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                "--speculative-num-draft-tokens", "4", *suite.server_flags(sim)]
        with log_file.open("wb") as fh:
            fh.write(("# " + " ".join(shlex.quote(a) for a in argv) + "\n").encode())
            fh.flush()
            proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, cwd=root,
                                    start_new_session=True)
        log(f"warm-up: SGLang started (pid {proc.pid}, port {port}); log {log_file}")
        return cls(proc, log_file, port, "started")

    def _drive(self) -> None:
        import http.client

        assert self.proc is not None
        url = f"http://127.0.0.1:{self.port}"
        while not self._stopping.is_set():
            if self.proc.poll() is not None:
                self._say(f"the server exited with code {self.proc.returncode} before it was "
                          "ready")
                return
            if time.monotonic() - self.started > self.READY_LIMIT_S:
                self._say(f"not ready after {self.READY_LIMIT_S:.0f} s")
                return
            try:
                with urllib.request.urlopen(url + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except (OSError, http.client.HTTPException):
                pass
            self._stopping.wait(2.0)
        else:
            return
        self.ready_s = round(time.monotonic() - self.started, 1)
        body = json.dumps({"text": "Hello world number 7.", "sampling_params": {
            "max_new_tokens": 32, "temperature": 0.0}}).encode()
        try:
            req = urllib.request.Request(url + "/generate", data=body,
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=120) as r:
                r.read()
            self._say(f"ready after {self.ready_s} s; one request served")
        except (OSError, http.client.HTTPException) as exc:
            self._say(f"ready after {self.ready_s} s; the request failed ({exc})")

    def _group_alive(self) -> bool:
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def _signal_group(self, sig: int) -> None:
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _wait_group(self, seconds: float) -> bool:
        """Reap the leader and wait for the group to go; True when it is gone."""
        assert self.proc is not None
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None and not self._group_alive():
                return True
            time.sleep(0.2)
        return self.proc.poll() is not None and not self._group_alive()

    def finish(self, wait_s: float) -> dict[str, Any]:
        """Wait (bounded) for the warm-up to finish, then stop the server's process group."""
        if self.proc is None:
            return {"note": self._note}
        self.thread.join(timeout=max(wait_s, 0.0))
        with self._lock:
            self._stopping.set()
            if self.thread.is_alive():
                self._note = (f"still starting after {time.monotonic() - self.started:.0f} s; "
                              "stopped")
        self._signal_group(signal.SIGTERM)
        if not self._wait_group(self.TERM_GRACE_S):
            self._signal_group(signal.SIGKILL)
            if not self._wait_group(10.0):
                self._note += "; some of its processes outlived SIGKILL"
        self.thread.join(timeout=10.0)
        log(f"warm-up: {self._note}")
        return {"note": self._note, "ready_s": self.ready_s,
                "seconds": round(time.monotonic() - self.started, 1)}


def run(argv: list[str], log_file: Path, timeout_s: float, cwd: Path) -> tuple[int, float]:
    log(" ".join(shlex.quote(a) for a in argv) + f"  (timeout {timeout_s:.0f} s)")
    started = time.monotonic()
    with log_file.open("w") as fh:
        try:
            done = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, cwd=cwd,
                                  env=with_root(), timeout=max(timeout_s, 1.0), check=False)
            code = done.returncode
        except subprocess.TimeoutExpired:
            code = 124
    took = time.monotonic() - started
    log(f"exit {code} after {took:.0f} s; log {log_file}")
    return code, took


def claims(reports: Path) -> list[dict[str, Any]]:
    try:
        doc = json.loads((reports / "verdict.json").read_text())
    except (OSError, ValueError):
        return []
    return [{k: c.get(k) for k in ("id", "status", "observed", "expected", "message")}
            for c in doc.get("claims", [])]


def outcome(reports: Path) -> str | None:
    """The verdict's outcome ("passed", "failed", "interrupted", ...), None without one."""
    try:
        value = json.loads((reports / "verdict.json").read_text()).get("outcome")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def passed(step: dict[str, Any]) -> bool:
    """A pytest step passed: it exited 0 and its verdict says passed, over claims that all
    passed or were skipped. A run killed at its time limit (exit 124) wrote a verdict of the
    claims it finished, all of which may have passed: it is interrupted, not passed."""
    got = step.get("claims") or []
    return (step.get("exit") == 0 and step.get("outcome") == "passed" and bool(got)
            and all(c["status"] in ("passed", "skipped") for c in got))


def compare(model: Path, reports: Path, served: Served) -> dict[str, Any]:
    """Predicted (offline, teacher-forced on the held-out dump) against measured (live) accept
    length, in SGLang's per-request form Σcompletion/Σverify, overall and per category.
    Chains only: the offline walk predicts no topk > 1 tree (predicted stays None)."""
    key = served_key(served.steps) if served.topk == 1 and \
        served.draft_tokens == served.steps + 1 else "(a tree: not predicted)"
    try:
        pred = json.loads((model / "prediction.json").read_text())
        live = json.loads((reports / "live" / "results.json").read_text())
    except (OSError, ValueError) as exc:
        return {"error": f"cannot compare: {exc}"}
    m = (live.get("speculative") or {}).get("measurement") or {}
    samples = m.get("samples") or []
    out: dict[str, Any] = {"groups": {}}
    by: dict[str, list[dict[str, Any]]] = {"all": samples}
    for s in samples:
        by.setdefault(str(s.get("category")), []).append(s)
    for name, chosen in by.items():
        comp = sum(int(s.get("completion_tokens") or 0) for s in chosen)
        verify = sum(int(s.get("spec_verify_ct") or 0) for s in chosen)
        group = (pred.get("groups") or {}).get(name) or {}
        predicted = (group.get("predicted_per_request") or {}).get(key)
        out["groups"][name] = {
            "requests": len(chosen), "measured_accept_len": comp / verify if verify else None,
            "predicted_accept_len": predicted,
            "predicted_per_verify": (group.get("predicted") or {}).get(key)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--root", type=Path, required=True)
    ap.add_argument("--launcher", required=True)
    ap.add_argument("--deadline", type=float, required=True)
    ap.add_argument("--sim", action="store_true")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--train-args", default="")
    ap.add_argument("--steps", default="3",
                    help="served configuration: N (a chain: --speculative-num-steps N, topk 1, "
                         "N + 1 draft tokens) or a tune key sN-kK-dD")
    ap.add_argument("--from-tune", type=Path,
                    help="serve the best configuration of this tune.json instead of --steps")
    ap.add_argument("--skip-phase1", action="store_true",
                    help="judge only the probe (the Phase 1/2 claims ran in an earlier run)")
    ap.add_argument("--skip-probe", action="store_true",
                    help="train (if needed) and judge the Phase 1/2 claims only")
    ap.add_argument("--warm-up", action="store_true",
                    help="while training, start and stop one SGLang server of make_tiny.py's "
                         "model, so SGLang's kernels are compiled before the probe's launches")
    ap.add_argument("--fresh-baseline", action="store_true",
                    help="launch the baseline in this run, never reuse a stored one")
    ap.add_argument("--tag", default="", help="suffix of the summary's file names")
    ap.add_argument("--concurrency", default="",
                    help="[bench] concurrency of the probe, e.g. 1,4,16: each level holds that "
                         "many requests in flight; the gate decides at the smallest")
    args = ap.parse_args()
    # A SIGTERM (a time bound) unwinds like Ctrl-C: the warm-up server is stopped and the
    # running step's process killed by subprocess.run on the way out.
    signal.signal(signal.SIGTERM, lambda _sig, _frame: sys.exit(143))
    try:
        if args.from_tune is not None:
            served, why = Served.from_tune(args.from_tune)
            log(f"serving {served.key}, from {why}")
        else:
            served = Served.parse(args.steps)
    except (OSError, ValueError) as exc:
        log(f"cannot choose the served configuration: {exc}")
        return 2
    try:
        levels = [int(n) for n in args.concurrency.split(",") if n.strip()]
    except ValueError:
        log(f"--concurrency {args.concurrency!r}: want whole numbers, e.g. 1,4,16")
        return 2
    py = sys.executable
    work, out = args.work, args.out
    model = work / "model"
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "steps": {}}

    def left() -> float:
        return args.deadline - time.time()

    # A model from an earlier run is served as it is, unless this run names training flags:
    # then it asked for a new drafter (train_drafter.py clears the old one's files first).
    present = (model / "prediction.json").exists()
    trained = not present or bool(args.train_args.strip())
    if trained and present:
        log(f"training again in {model}: --train-args was given (a run without it serves "
            "the model that is there); the old model is removed first")
        # Before train_drafter.py runs: if it refuses its flags, the old drafter must not be
        # left behind to be probed and judged as the new one.
        shutil.rmtree(model)
    if trained:
        warm = WarmUp.start(work, shlex.split(args.launcher), args.root, args.sim) \
            if args.warm_up else None
        # What must fit after training: the probe (about 4 min) and/or the Phase 1/2 claims
        # (about 4 min on a 500k-token dump); nothing when both are skipped.
        reserve = 30 if args.skip_probe and args.skip_phase1 else 240
        budget = left() - reserve
        if not args.skip_probe:
            budget = min(budget, 300)
        try:
            # The deadline lets train_drafter.py shrink its training to what is left once the
            # data is made (a deep target's data takes minutes), rather than be killed unsaved.
            code, took = run([py, "-m", "benchmarks.real_sglang.train_drafter", str(model),
                              "--heldout-tokens", str(args.max_new_tokens), "--max-steps", "8",
                              "--deadline", f"{time.time() + budget - TRAIN_DEADLINE_MARGIN_S:.0f}",
                              *shlex.split(args.train_args),
                              *(SIM_TRAIN_ARGS if args.sim else ())],
                             work / "train.log", budget, args.root)
            summary["steps"]["train"] = {"exit": code, "seconds": round(took, 1)}
        finally:
            if warm is not None:
                summary["warm_up"] = warm.finish(min(max(left() - 30, 5), 240))
    elif args.warm_up:
        log(f"warm-up: skipped, {model} is trained already (no start while training)")
    if (not trained and (model / "drafter").is_dir() and (model / "target").is_dir()
            and not (model / "target" / "model.safetensors").exists()):
        # A model brought back in model.tar.gz has no target weights: make them from the seed,
        # checked against the held-out dump, or serve nothing.
        code, took = run([py, "-m", "benchmarks.real_sglang.rebuild_target", str(model)],
                         work / "rebuild.log", min(180.0, max(left() - 60, 10)), args.root)
        summary["steps"]["rebuild_target"] = {"exit": code, "seconds": round(took, 1)}
        if code != 0:
            log(f"the target's weights could not be made again (exit {code}); see "
                f"{work / 'rebuild.log'}")
            (out / f"loop_summary{args.tag}.json").write_text(json.dumps(summary, indent=1) + "\n")
            return 1
    for name in ("summary.json", "prediction.json"):
        path = model / name
        if path.exists():
            summary[f"train_{name}"] = json.loads(path.read_text())
    tag = args.tag
    prof = work / f"trained{tag}.toml"
    prof.write_text(suite.toml(profile(model, shlex.split(args.launcher), args.sim,
                                       args.max_new_tokens, served=served,
                                       reuse_baseline=not args.fresh_baseline,
                                       concurrency=levels or None)))
    # One reports folder for every run: the stored baselines (reuse) and the run history
    # (regress.*) carry from one probe, or tune, to the next; each run's files are packed below.
    reports = work / "reports"
    # No drafter (training did not finish, or never ran): nothing is judged, the run fails.
    no_drafter = not (model / "drafter" / "config.json").exists()
    if no_drafter:
        why = (f"training did not finish: see {work / 'train.log'}" if trained
               else "and this run did not train one")
        log(f"no drafter in {model} ({why}); nothing to probe or judge")
        for step in ("probe", "phase1"):
            if not getattr(args, f"skip_{step}"):
                summary["steps"][step] = {"exit": 3, "seconds": 0.0, "claims": [],
                                          "note": f"not run: no drafter in {model}"}
    if not args.skip_probe and not no_drafter:
        for stale in (reports / "verdict.json", reports / "live"):
            if stale.is_dir():
                shutil.rmtree(stale)
            elif stale.exists():
                stale.unlink()
        code, took = run([py, "-m", "pytest", "-m", "probe", f"--profile={prof}",
                          f"--reports={reports}", "-p", "no:cacheprovider"],
                         work / f"probe{tag}.log", left() - (10 if args.skip_phase1 else 40),
                         args.root)
        summary["steps"]["probe"] = {"exit": code, "seconds": round(took, 1),
                                     "outcome": outcome(reports), "claims": claims(reports)}
    reports1 = work / "reports-phase1"
    if not args.skip_phase1 and not no_drafter:
        (reports1 / "verdict.json").unlink(missing_ok=True)  # never report an earlier run's
        code, took = run([py, "-m", "pytest", "-m", "phase1 or phase2", f"--profile={prof}",
                          f"--reports={reports1}", "-p", "no:cacheprovider"],
                         work / "phase1.log", left() - 10, args.root)
        summary["steps"]["phase1"] = {"exit": code, "seconds": round(took, 1),
                                      "outcome": outcome(reports1), "claims": claims(reports1)}
    summary["served"] = {"steps": served.steps, "topk": served.topk,
                         "draft_tokens": served.draft_tokens,
                         "server_args": suite.server_flags(args.sim)}
    if not args.skip_probe and not no_drafter:
        summary["predicted_vs_measured"] = compare(model, reports, served)
    (out / f"loop_summary{tag}.json").write_text(json.dumps(summary, indent=1) + "\n")
    lines = ["# Closing the loop on real SGLang" + (" (simulator dry run)" if args.sim else ""),
             ""]
    if "warm_up" in summary:
        lines += [f"## warm-up: {summary['warm_up'].get('note')}", ""]
    for step, info in summary["steps"].items():
        verdict = f", verdict {info['outcome']}" if info.get("outcome") else ""
        lines.append(f"## {step}: exit {info['exit']}, {info['seconds']} s{verdict}")
        if info.get("note"):
            lines.append(f"- {info['note']}")
        for c in info.get("claims", []):
            lines.append(f"- {c['id']}: **{c['status']}** — {str(c['message'])[:300]}")
        lines.append("")
    pvm = summary.get("predicted_vs_measured") or {}
    if pvm:
        lines.append(f"## predicted vs measured accept length (served: steps {served.steps}, "
                     f"topk {served.topk}, {served.draft_tokens} drafts)")
    if "error" in pvm:
        lines.append(f"- {pvm['error']}")
    for name, g in (pvm.get("groups") or {}).items():
        lines.append(f"- {name}: measured {g['measured_accept_len']}, predicted "
                     f"{g['predicted_accept_len']} ({g['requests']} requests)")
    (out / f"loop_summary{tag}.md").write_text("\n".join(lines) + "\n")
    # What a result keeps beside the summary: the probe's verdict; when it trained, the
    # training log, the model's summary and the offline prediction.
    if not args.skip_probe and not no_drafter and (reports / "verdict.json").is_file():
        shutil.copyfile(reports / "verdict.json", out / f"verdict{tag}.json")
    if trained:
        for path in (work / "train.log", model / "summary.json", model / "prediction.json"):
            if path.is_file():
                shutil.copyfile(path, out / path.name)
    with tarfile.open(out / f"loop{tag}.tar.gz", "w:gz") as tar:
        phase1: tuple[Path, ...] = () if args.skip_phase1 or no_drafter else (
            work / "phase1.log", reports1 / "verdict.json")
        probe: tuple[Path, ...] = () if args.skip_probe or no_drafter else (
            work / f"probe{tag}.log", reports / "verdict.json", reports / "live",
            reports / "baselines", reports / "history")
        made = (work / "train.log", work / "warm-up.log") if trained else (
            (work / "rebuild.log",) if "rebuild_target" in summary["steps"] else ())
        for path in (prof, *made, *probe, *phase1,
                     model / "summary.json", model / "prediction.json", model / "logs",
                     model / "drafter" / "config.json"):
            if path.exists():
                tar.add(path, arcname=str(path.relative_to(work)))
    # The trained drafter and the held-out dump too (about 15 MB), so the offline prediction can
    # be re-run on another machine (`specgate eval --served-steps`).
    if not no_drafter and not (out / "model.tar.gz").exists():
        with tarfile.open(out / "model.tar.gz", "w:gz") as tar:
            # Everything but the target's weights (95 MB for 64 layers) and the training dump:
            # rebuild_target.py makes the weights again from the seed on another machine.
            for path in (model / "drafter", model / "scratch", model / "target" / "config.json",
                         model / "target" / "tokenizer.json",
                         model / "target" / "tokenizer_config.json",
                         model / "target" / "generation_config.json", model / "dump" / "heldout",
                         model / "vocab_map.safetensors", model / "summary.json",
                         model / "prediction.json", model / "logs"):
                if path.exists():
                    tar.add(path, arcname=str(path.relative_to(work)))
    if no_drafter:
        log(f"no drafter, nothing judged; summary in {out}")
        return 1
    judged = "phase1" if args.skip_probe else "probe"
    if args.skip_probe and args.skip_phase1:  # a training run: its exit decides
        ok = summary["steps"].get("train", {}).get("exit", 0) == 0
        log(f"trained {'ok' if ok else 'with errors'}; nothing judged; summary in {out}")
        return 0 if ok else 1
    step = summary["steps"].get(judged, {})
    ok = passed(step)
    log(f"{judged} {'PASSED' if ok else 'not passed'} (exit {step.get('exit')}, verdict "
        f"{step.get('outcome')}); summary in {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
