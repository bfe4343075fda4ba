"""Simulator servers for the harness's tests: model folders, a started server, its truth log."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import requests
from ckpt_support import tiny_drafter

from specgate.serving.launch import free_port
from specgate.testing.simulator import model

T = TypeVar("T")


def target_and_drafter(root: Path, config: Mapping[str, Any] | None = None,
                       positions: int = 8192) -> tuple[Path, Path]:
    """A target folder (with this config.json when given) and a whole tiny drafter of
    `positions` positions (SGLang will not start on a drafter's config alone)."""
    target, draft = root / "target", root / "draft"
    target.mkdir(parents=True)
    if config is not None:
        (target / "config.json").write_text(json.dumps(dict(config)))
    tiny_drafter(draft, config_overrides={"max_position_embeddings": positions})
    return target, draft


def model_dirs(root: Path, timing: Mapping[str, Any], acceptance: list[float]
               ) -> tuple[Path, Path]:
    """A target folder with the simulator's timing and a whole drafter with its acceptance."""
    target, draft = target_and_drafter(root)
    (target / model.SIM_FILE).write_text(json.dumps(dict(timing)))
    (draft / model.SIM_FILE).write_text(json.dumps({"acceptance": acceptance}))
    return target, draft


def spec_args(target: Path, draft: Path, steps: int) -> list[str]:
    return ["--model-path", str(target), "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", str(draft), "--speculative-num-steps", str(steps),
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(steps + 1)]


def start(argv: list[str], log: Path, truth: Path, env: Mapping[str, str] | None = None
          ) -> tuple[subprocess.Popen[bytes], str]:
    """A simulator that logs every request it serves to `truth`; (process, URL) once ready."""
    port = free_port()
    fh = open(log, "wb")  # the child writes to it for its whole life
    proc = subprocess.Popen([sys.executable, "-m", "specgate.testing.simulator", *argv,
                             "--port", str(port)], stdout=fh, stderr=subprocess.STDOUT,
                            env={**os.environ, model.ENV_TRUTH: str(truth),
                                 "SPECGATE_SIM_START_DELAY_S": "0.1",
                                 "SPECGATE_SIM_HEALTH_GENERATE_S": "0.05", **(env or {})})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            if requests.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except requests.ConnectionError:
            pass
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("simulator did not get ready:\n" + log.read_text())


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait(10)


def served(truth: Path) -> list[model.RequestTruth]:
    return model.read_truth(truth) if truth.exists() else []


# Float rounding of clock readings taken in two processes.
CLOCK_EPS_S = 1e-6


@dataclasses.dataclass(frozen=True)
class Served:
    """The simulator's own record of the requests a measurement timed, matched by request id:
    their decode tokens and seconds on its clock, as sent and as scheduled, and the slack the
    client's side of each request adds.

    The client and the simulator read one clock (CLOCK_MONOTONIC). The client starts timing
    before the simulator receives a request and sees each message after it was sent, so per
    request the client's decode window differs from the simulator's by at most what it can
    see: ttft − (first sent − received) on one side (early), e2e − (final sent − received) on
    the other (late). However busy the machine, a harness that times decode from the first
    message to the last lands inside [low, high]; one that timed decode from the request's
    start, or counted the first message's tokens, lands outside.
    """

    tokens: int
    seconds: float  # Σ (t_final_sent − t_first_sent)
    due_seconds: float  # Σ (t_final_due − t_first_due): the schedule the timing model kept
    early: float
    late: float
    requests: int

    @property
    def tps(self) -> float:
        return self.tokens / self.seconds

    @property
    def low(self) -> float:
        return self.tokens / (self.seconds + self.late + CLOCK_EPS_S)

    @property
    def high(self) -> float:
        return self.tokens / (self.seconds - self.early - CLOCK_EPS_S)

    @property
    def due_tps(self) -> float:
        return self.tokens / self.due_seconds

    @property
    def slack(self) -> float:
        """The client's share of the window: (early + late) / seconds."""
        return (self.early + self.late) / self.seconds


def served_for(samples: Sequence[Any], records: Iterable[model.RequestTruth]) -> Served:
    """The records of these samples (bench.RequestSample, by request_id), each checked against
    its sample: the same counts, and the client's times after the server's on either side."""
    by_rid = {r.rid: r for r in records}
    tokens, requests = 0, 0
    seconds = due = early = late = 0.0
    for sample in samples:
        record = by_rid[sample.request_id]
        assert record.outcome == "finished", record
        assert (sample.completion_tokens, sample.first_tokens, sample.spec_verify_ct or 0) == (
            record.completion_tokens, record.first_message_tokens, record.verify_ct)
        assert record.t_first_sent is not None
        assert record.t_final_sent is not None
        assert record.due_decode_s is not None
        # Never early: a message leaves at its step's end or later.
        assert record.t_first_sent >= (record.t_first_due or math.inf) - CLOCK_EPS_S
        assert record.t_final_sent >= (record.t_final_due or math.inf) - CLOCK_EPS_S
        slack_first = sample.ttft_s - (record.t_first_sent - record.t_received)
        slack_final = sample.e2e_s - (record.t_final_sent - record.t_received)
        assert slack_first >= -CLOCK_EPS_S, (sample, record)
        assert slack_final >= -CLOCK_EPS_S, (sample, record)
        window = sample.e2e_s - sample.ttft_s
        assert (-slack_first - CLOCK_EPS_S <= window - (record.decode_s or 0.0)
                <= slack_final + CLOCK_EPS_S), (sample, record)
        tokens += record.decode_tokens
        seconds += record.decode_s or 0.0
        due += record.due_decode_s
        early += slack_first
        late += slack_final
        requests += 1
    assert sum(s.decode_tokens for s in samples) == tokens
    return Served(tokens, seconds, due, early, late, requests)


def timed_as_served(measurement: Any, records: Iterable[model.RequestTruth]) -> Served:
    """The harness's decode tok/s for a measurement lies inside what the simulator's clock
    allows (Served); returns the served figures."""
    served = served_for(measurement.samples, records)
    tps = measurement.stats["tps"].mean
    assert served.low <= tps <= served.high, (tps, served)
    return served


def ratio_bounds(num: Served, den: Served) -> tuple[float, float]:
    """What the harness can find for num's tok/s over den's, given both sides' slack."""
    return num.low / den.high, num.high / den.low


# -- was the machine quiet enough? ---------------------------------------------------------------
#
# The simulator serves on the wall clock: on a machine that stops its processes for a moment (a
# burst of disk writes, a neighbour's load) a message goes out, or is read, well after the
# simulator's scheduler said it was due. A probe measured across such a stall measures the
# machine, not the timing model, so a test of the harness's verdicts runs it again. The truth
# log says when: each measured request's decode window as the client timed it against the one
# the scheduler kept.

# A measurement (one server at one concurrency level) whose requests' client-side decode windows
# are off the scheduled ones by more than this share of their sum was held up by the machine: a
# busy 2-core machine puts them off by about 1 %, a stall of a second in a 42-request measurement
# by 18 %. A single request late by tens of milliseconds among many is noise the intervals hold.
SLIP_SHARE = 0.05


def _measurements(node: object) -> Iterable[list[Mapping[str, Any]]]:
    """The sample lists of a live results document (one per server and level)."""
    if isinstance(node, Mapping):
        for value in node.values():
            yield from _measurements(value)
    elif isinstance(node, list):
        samples = [v for v in node if isinstance(v, Mapping)
                   and {"request_id", "ttft_s", "e2e_s"} <= v.keys()]
        if samples:
            yield samples
        else:
            for value in node:
                yield from _measurements(value)


def held_up(reports: Path, truth: Path, share: float = SLIP_SHARE) -> list[str]:
    """The measurements of a probe (reports/live/results.json) the machine held up: summed over
    a measurement's requests, the decode windows the client timed are off the ones the
    simulator's scheduler kept by more than `share` of theirs. Empty when the run measured
    nothing to compare."""
    results = reports / "live" / "results.json"
    if not results.exists() or not truth.exists():
        return []
    records = {r.rid: r for r in model.read_truth(truth)}
    out = []
    for samples in _measurements(json.loads(results.read_text(encoding="utf-8"))):
        off = scheduled = worst = 0.0
        for sample in samples:
            record = records.get(str(sample["request_id"]))
            due = record.due_decode_s if record is not None else None
            if due is None or due <= 0:
                continue
            slip = abs(float(sample["e2e_s"]) - float(sample["ttft_s"]) - due)
            off, scheduled, worst = off + slip, scheduled + due, max(worst, slip)
        if scheduled > 0 and off > share * scheduled:
            out.append(f"{len(samples)} requests timed {off * 1000:.0f} ms off a schedule of "
                       f"{scheduled * 1000:.0f} ms (one by {worst * 1000:.0f} ms)")
    return out


def on_schedule(run: Callable[[Path, Path], T], root: Path, *, tries: int = 3
                ) -> tuple[T, Path, Path]:
    """run(reports, truth) until no measured request was held up by the machine (held_up), at
    most `tries` times; (its result, reports, truth). A probe that was held up every time fails
    the test, saying so: what it measured is the machine's, not the harness's."""
    why: list[str] = []
    for attempt in range(tries):
        reports, truth = root / f"reports-{attempt}", root / f"truth-{attempt}.jsonl"
        result = run(reports, truth)
        why = held_up(reports, truth)
        if not why:
            return result, reports, truth
    raise AssertionError(f"the machine held up the simulated servers in each of {tries} probes "
                         f"(last: {'; '.join(why[:3])})")


# The simulator's timing for a live run in the tests: 2 ms decode steps, a 4 ms speculative cycle
# at two draft steps, servers ready in a tenth of a second.
LIVE_TIMING = {"decode_ms": 2.0, "verify_ms": 3.5, "draft_step_ms": 0.25, "start_delay_s": 0.1,
               "health_generate_s": 0.05}


def sim_profile(root: Path, *, name: str, drafter_sim: str, env: Mapping[str, str],
                bench: Mapping[str, Any], thresholds: Mapping[str, Any]) -> Any:
    """A profile that launches the simulator on ROOT/target (LIVE_TIMING) and ROOT/draft (a whole
    tiny drafter; its simulator file holds DRAFTER_SIM as written), two draft steps, with BENCH
    and THRESHOLDS as given. Made again on the same ROOT, the drafter is kept."""
    from specgate.core.profile import parse_profile

    target, draft = root / "target", root / "draft"
    target.mkdir(exist_ok=True)
    draft.mkdir(exist_ok=True)
    if not (draft / "config.json").exists():  # SGLang starts only on a whole drafter
        tiny_drafter(draft, config_overrides={"max_position_embeddings": 8192})
    (target / model.SIM_FILE).write_text(json.dumps(LIVE_TIMING))
    (draft / model.SIM_FILE).write_text(drafter_sim)
    raw = {
        "name": name,
        "target": {"path": str(target)},
        "drafter": {"path": str(draft)},
        "server": {"launcher": [sys.executable, "-m", "specgate.testing.simulator"], "port": 0,
                   "startup_timeout_s": 30, "env": dict(env)},
        "speculative": {"algorithm": "EAGLE3", "num_steps": 2, "eagle_topk": 1,
                        "num_draft_tokens": 3},
        "bench": dict(bench),
        "thresholds": dict(thresholds),
    }
    return parse_profile(raw, source=root / "profile.toml")
