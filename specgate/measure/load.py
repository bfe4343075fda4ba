"""Closed-loop load: exactly N requests in flight, one connection per stream, the tail held.

N streams each own an SGLangClient (its own requests.Session, so its own keep-alive connection)
and take the next request the moment their last one ends, so N requests are in flight from the
first send to the last. Both ends are held with fillers, requests that are not measured: the
loop opens with one filler per stream, so the measured requests start one by one as those end
and meet a running batch (not the server's ramp from idle, which a deployment under steady load
never sees); and once every measured request has been sent, a stream whose request ends starts
another filler, until the last measured request has finished. Every measured request thus runs
with N in flight from its send to its last token. A filler is a text of the set with
FILLER_MARK in front, so no measured request finds its prompt's prefix cached by one; the
fillers' answers are dropped, and the loop returns only when they have finished too (a cache
flush needs an idle server).

"In flight" is the client's count: sent and not yet fully read. Between one request's last
message and the next one's send there is a gap of microseconds, so each measured request
carries the time-weighted count over its decode window and the seconds of that window spent
short of N: the measurement says how well the load was held rather than assume it.

A stream that stalls (no data within the read timeout) or is cut is reported with the prompt it
was running, never dropped: no new request starts after the first failure, the streams still
running finish (or fail in turn), and the loop raises LoadFailed naming every failed stream.
"""

from __future__ import annotations

import bisect
import dataclasses
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from specgate.core.errors import ServerError, SpecgateError
from specgate.serving.client import Generation, SGLangClient

Clock = Callable[[], float]
FILLER_MARK = "[load] "
Progress = Callable[[str], None]
_JOIN_POLL_S = 0.25  # the main thread wakes this often, so Ctrl-C is not held up by a join


@dataclasses.dataclass(frozen=True)
class Served:
    """One measured request of a loop: the stream that ran it, when, and what came back."""

    index: int  # position in the measured texts
    stream: int  # 0-based stream (client connection) that ran it
    generation: Generation
    start_s: float  # when it was sent, seconds from the loop's start
    in_flight: float  # requests in flight, time-weighted over its decode window
    short_s: float  # seconds of its decode window with fewer than N requests in flight


@dataclasses.dataclass(frozen=True)
class StreamFailure:
    """A request that did not finish: which stream, which text, and what happened."""

    stream: int
    label: str
    filler: bool
    message: str
    after_s: float  # seconds from its send to the failure

    def describe(self) -> str:
        what = f"filler {self.label}" if self.filler else self.label
        return f"stream {self.stream + 1} ({what}, after {self.after_s:.1f} s): {self.message}"


@dataclasses.dataclass(frozen=True)
class Loop:
    """A finished closed loop: the measured requests in order, and how the load was held."""

    concurrency: int
    served: tuple[Served, ...]
    fillers: int  # unmeasured requests started to hold N in flight at both ends
    wall_s: float  # first send to the last measured request's end


class LoadFailed(ServerError):
    """One or more streams of a closed loop stalled or were cut; `failures` lists each."""

    def __init__(self, message: str, failures: Sequence[StreamFailure], finished: int,
                 expected: int, fillers: int = 0) -> None:
        super().__init__(message)
        self.failures = tuple(failures)
        self.finished = finished  # measured requests that finished
        self.expected = expected
        self.fillers = fillers  # filler requests started (and not failed) before the stop


@dataclasses.dataclass
class _Shared:
    """The loop's state, shared by its stream threads under `lock`."""

    texts: Sequence[str]
    hold: bool
    concurrency: int
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    sent: int = 0  # measured requests sent so far
    outstanding: int = 0  # measured requests sent and not yet ended
    fillers: int = 0
    stopped: bool = False
    spans: list[tuple[float, float]] = dataclasses.field(default_factory=list)
    done: dict[int, tuple[int, Generation, float]] = dataclasses.field(default_factory=dict)
    failures: list[StreamFailure] = dataclasses.field(default_factory=list)
    crash: str | None = None

    def take(self) -> tuple[int, bool] | None:
        """The next text to send (its index, and whether it is a filler), or None: stop."""
        with self.lock:
            if self.stopped:
                return None
            if self.hold and self.fillers < self.concurrency and self.sent == 0:
                self.fillers += 1  # the opening: one filler per stream, from the last text
                return -self.fillers % len(self.texts), True
            if self.sent < len(self.texts):
                self.sent += 1
                self.outstanding += 1
                return self.sent - 1, False
            if self.hold and self.outstanding > 0:
                self.fillers += 1
                return (self.fillers - 1 - self.concurrency) % len(self.texts), True
            return None


def closed_loop(client: SGLangClient, texts: Sequence[str], params: dict[str, Any],
                concurrency: int, *, labels: Sequence[str] | None = None, hold: bool = True,
                progress: Progress | None = None, clock: Clock = time.perf_counter) -> Loop:
    """Send every text once with exactly `concurrency` requests in flight (see the module).

    hold=False lets the tail drain (a warm-up needs no held load). Raises LoadFailed when a
    stream stalls or is cut, after the other streams have ended.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    if not texts:
        raise ValueError("no texts to send")
    names = list(labels) if labels is not None else [f"text {i + 1}" for i in range(len(texts))]
    shared = _Shared(texts, hold, concurrency)
    # Every stream has its client before any sends, so the first N go out together.
    ready = threading.Barrier(concurrency)
    t0 = clock()

    def stream(number: int) -> None:
        own = client.clone()
        try:
            ready.wait()
            while (job := shared.take()) is not None:
                index, filler = job
                start = clock()
                try:
                    gen = own.generate(FILLER_MARK + texts[index] if filler else texts[index],
                                       params, stream=True)
                except SpecgateError as exc:
                    now = clock()
                    with shared.lock:
                        shared.stopped = True
                        shared.spans.append((start, now))
                        shared.failures.append(StreamFailure(number, names[index], filler,
                                                             str(exc), now - start))
                        if not filler:
                            shared.outstanding -= 1
                    return
                end = clock()
                with shared.lock:
                    shared.spans.append((start, end))
                    if not filler:
                        shared.outstanding -= 1
                        shared.done[index] = (number, gen, start)
                        finished = len(shared.done)
                if not filler and progress is not None and (
                        finished % 10 == 0 or finished == len(texts)):
                    progress(f"{finished}/{len(texts)} requests, {concurrency} in flight")
        except Exception as exc:  # a bug must not vanish with its thread
            with shared.lock:
                shared.stopped = True
                shared.crash = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        finally:
            own.close()

    threads = [threading.Thread(target=stream, args=(n,), name=f"specgate-stream-{n + 1}",
                                daemon=True) for n in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(_JOIN_POLL_S)
    if shared.crash is not None:
        raise RuntimeError(f"a stream of the {concurrency}-stream load crashed: {shared.crash}")
    if shared.failures:
        raise LoadFailed(_failure_message(shared, concurrency), shared.failures,
                         len(shared.done), len(texts),
                         shared.fillers - sum(f.filler for f in shared.failures))
    return Loop(concurrency, _served(shared, concurrency, t0), shared.fillers,
                max(start + gen.e2e_s for _, gen, start in shared.done.values()) - t0)


def _failure_message(shared: _Shared, concurrency: int) -> str:
    failed = sorted(shared.failures, key=lambda f: f.stream)
    listed = "; ".join(f.describe() for f in failed)
    return (f"{len(failed)} of {concurrency} streams failed at {concurrency} in flight: {listed}. "
            f"{len(shared.done)} of {len(shared.texts)} measured requests had finished; no "
            "request was started after the first failure")


def _served(shared: _Shared, concurrency: int, t0: float) -> tuple[Served, ...]:
    counter = InFlight(shared.spans)
    out = []
    for index in range(len(shared.texts)):
        stream, gen, start = shared.done[index]
        low, high = start + gen.ttft_s, start + gen.e2e_s
        mean, short = counter.over(low, high, concurrency)
        out.append(Served(index, stream, gen, start - t0, mean, short))
    return tuple(out)


class InFlight:
    """The number of requests in flight over time, from every request's (start, end) span."""

    def __init__(self, spans: Sequence[tuple[float, float]]) -> None:
        events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
        self.times = [t for t, _ in events]
        self.counts: list[int] = []  # in flight just after each event
        count = 0
        for _, step in events:
            count += step
            self.counts.append(count)

    def at(self, t: float) -> int:
        i = bisect.bisect_right(self.times, t)
        return self.counts[i - 1] if i else 0

    def over(self, low: float, high: float, wanted: int) -> tuple[float, float]:
        """(time-weighted requests in flight over [low, high], seconds with fewer than wanted);
        an empty window gives the count at low and no shortfall."""
        if high <= low:
            return float(self.at(low)), 0.0
        i = bisect.bisect_right(self.times, low)
        t, count = low, self.counts[i - 1] if i else 0
        area = short = 0.0
        while i < len(self.times) and self.times[i] < high:
            area += count * (self.times[i] - t)
            short += (self.times[i] - t) if count < wanted else 0.0
            t, count = self.times[i], self.counts[i]
            i += 1
        area += count * (high - t)
        short += (high - t) if count < wanted else 0.0
        return area / (high - low), short
