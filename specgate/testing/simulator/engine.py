"""The simulator's scheduler: continuous batching, one step for every running request at once.

As SGLang's scheduler does, it prefills the requests that arrived (together, in one step that
holds up decoding) before it decodes, and each decode step (or speculative cycle) advances every
running request together; the step's time comes from model.step_ms for the batch it carries.
At most max_running requests run at once (SGLang's max_running_requests: 48 for speculative
decoding unless --max-running-requests is given); the rest wait, in arrival order, for a
running one to finish.
Request handlers wait on their sequence's events and stream a message as each one happens.
"""

from __future__ import annotations

import threading
import time

from specgate.testing.simulator import model


class Seq:
    """One request in the scheduler: its plan, the prompt tokens its prefill computes, and when
    each of its events happened (event 0: the prefill's token; event k: the k-th step)."""

    def __init__(self, plan: model.RequestPlan, prefill_tokens: int) -> None:
        self.plan = plan
        self.prefill_tokens = prefill_tokens
        self.events: list[float] = []  # time.monotonic() of each event so far
        self.batches: list[int] = []  # the batch each decode event was computed in
        self.aborted = False

    @property
    def finished(self) -> bool:
        return len(self.events) > len(self.plan.tokens_per_event)


class Engine:
    """The scheduler loop of one simulated server (a daemon thread)."""

    def __init__(self, params: model.SimParams, hung: threading.Event,
                 max_running: int | None = None) -> None:
        self.params = params
        self.hung = hung
        self.max_running = max_running
        self.cond = threading.Condition()
        self.waiting: list[Seq] = []  # submitted, to be prefilled
        self.running: list[Seq] = []  # prefilled, decoding
        self.steps = 0
        self._thread = threading.Thread(target=self._loop, name="scheduler", daemon=True)
        self._thread.start()

    # -- what handlers call ---------------------------------------------------------------

    def submit(self, plan: model.RequestPlan, prefill_tokens: int) -> Seq:
        seq = Seq(plan, prefill_tokens)
        with self.cond:
            self.waiting.append(seq)
            self.cond.notify_all()
        return seq

    def wait(self, seq: Seq, event: int) -> float:
        """When the sequence's event happens; blocks until it has (for ever, once hung)."""
        with self.cond:
            while len(seq.events) <= event:
                self.cond.wait()
            when = seq.events[event]
        _sleep_until(when)
        return when

    def abort(self, seq: Seq) -> None:
        """Drop a sequence at the next step (its client left, or its stream was cut)."""
        with self.cond:
            seq.aborted = True
            self.cond.notify_all()

    # -- the loop -------------------------------------------------------------------------
    #
    # Each step is decided, and its end published to the sequences it serves, a little before
    # the step before it ends (LEAD_S): the handlers then sleep until their own deadline and
    # write, as one request alone would, and the scheduler is never awake at that instant. A
    # request that arrives within that lead joins one step later.

    def _next(self, begin: float, *, block: bool) -> tuple[list[Seq], list[Seq], float] | None:
        """The next step (to prefill, to decode, when it ends), published, under the lock; None
        when there is nothing to do and block is False. Prefill first, as SGLang's scheduler
        does."""
        while True:
            self.waiting = [s for s in self.waiting if not s.aborted]
            self.running = [s for s in self.running if not s.aborted and not s.finished]
            if (self.waiting or self.running) and not self.hung.is_set():
                break
            if not block:
                return None
            self.cond.wait()
            begin = max(begin, time.monotonic())
        room = (len(self.waiting) if self.max_running is None
                else max(self.max_running - len(self.running), 0))
        if self.waiting and room:
            prefill = self.waiting[:room]
            del self.waiting[:room]
            tokens = sum(s.prefill_tokens for s in prefill)
            end = begin + model.prefill_ms(self.params.timing, tokens) / 1000.0
            for seq in prefill:
                seq.events.append(end)
            self.running += [s for s in prefill if not s.finished]
            self.cond.notify_all()
            return prefill, [], end
        batch = list(self.running)
        end = begin + model.step_ms(self.params, len(batch)) / 1000.0
        self.steps += 1
        for seq in batch:
            seq.events.append(end)
            seq.batches.append(len(batch))
        self.cond.notify_all()
        return [], batch, end

    def _loop(self) -> None:
        with self.cond:
            step = self._next(time.monotonic(), block=True)
        while True:
            assert step is not None
            begin, end = time.monotonic(), step[2]
            _sleep_until(end - min(LEAD_S, (end - begin) / 4))
            with self.cond:
                step = self._next(end, block=False)
            if step is None:
                _sleep_until(end)
                with self.cond:
                    step = self._next(time.monotonic(), block=True)


LEAD_S = 0.0003


def _sleep_until(deadline: float) -> None:
    remaining = deadline - time.monotonic()
    if remaining > 0:
        time.sleep(remaining)
