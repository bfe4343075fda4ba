"""Tests for specgate.measure.load: the closed loop against the batching simulator, held to the
simulator's truth log (every request it served, timed on its own clock)."""

import math
import re

import pytest
import sim_support as sim

from specgate.measure import load, passes
from specgate.results import bench, prompts
from specgate.serving.client import SGLangClient

STEPS = 2
# A slope that makes batching visible: a decode step of 16 sequences is 4 times one's.
TIMING = {"decode_ms": 2.0, "verify_ms": 2.5, "draft_step_ms": 0.25,
          "batch_ms_per_token": 0.4, "draft_batch_ms_per_token": 0.0}
PARAMS = {"max_new_tokens": 24, "temperature": 0.0}
# Where how well the load was held is judged: answers long enough that the client's turnaround
# between one request and its stream's next (the only time a stream is short) is a small part
# of every decode window, on a busy machine too.
HELD = {**PARAMS, "max_new_tokens": 64}


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("load")
    return root, *sim.model_dirs(root, TIMING, [0.8, 0.6])


def _prompt_set() -> prompts.PromptSet:
    return prompts.PromptSet.rendered(prompts.load_builtin(),
                                      prompts.template_named("chatml", "test"))


@pytest.fixture
def serve(dirs, request):
    """Starts a speculative simulator with a fault (SPECGATE_SIM_FAULT); (URL, truth log)."""
    root, target, draft = dirs
    procs = []

    def start(fault: str = "", args: tuple[str, ...] = ()):
        name = f"{request.node.name}-{len(procs)}"
        truth = root / f"{name}.jsonl"
        proc, url = sim.start([*sim.spec_args(target, draft, STEPS), *args],
                              root / f"{name}.log", truth, env={"SPECGATE_SIM_FAULT": fault})
        procs.append(proc)
        return url, truth

    yield start
    for proc in procs:
        sim.stop(proc)


def test_in_flight_over_a_window_is_time_weighted():
    counter = load.InFlight([(0.0, 10.0), (0.0, 4.0), (5.0, 10.0), (2.0, 3.0)])
    # [2, 8]: 3 in flight for 1 s (2-3), 2 for 1 s (3-4), 1 for 1 s (4-5), 2 for 3 s (5-8).
    mean, short = counter.over(2.0, 8.0, 2)
    assert mean == pytest.approx((3 + 2 + 1 + 2 * 3) / 6)
    assert short == pytest.approx(1.0)
    assert counter.at(4.5) == 1
    assert counter.over(3.0, 3.0, 5) == (2.0, 0.0)


@pytest.mark.slow
def test_sixteen_in_flight_lose_nothing_and_match_the_truth_log(serve):
    """At the highest level every measured request is one the server finished, with its
    counts and its decode window as served; the load was held at 16 from the first send to
    the last measured token, and the server batched what the client held in flight."""
    url, truth = serve()
    chosen = _prompt_set()
    n = 16
    log = truth.with_suffix(".log")
    with SGLangClient(url) as client:
        client.flush_cache()
        loop = load.closed_loop(client, chosen.texts, HELD, n,
                                labels=[p.id for p in chosen.prompts])
    assert [s.index for s in loop.served] == list(range(len(chosen.texts)))
    assert {s.stream for s in loop.served} == set(range(n))
    # One connection per stream: the server's access log saw 16 client ports send /generate.
    ports = set(re.findall(r'INFO: +127\.0\.0\.1:(\d+) - "POST /generate', log.read_text()))
    assert len(ports) == n, ports
    assert loop.fillers > 0  # the tail was held
    records = sim.served(truth)
    assert all(r.outcome == "finished" for r in records)
    assert len(records) == len(chosen.texts) + loop.fillers  # and nothing else was sent
    by_rid = {r.rid: r for r in records}
    eps = 1e-6
    for s in loop.served:
        gen = s.generation
        record = by_rid[gen.meta_info["id"]]
        assert (gen.completion_tokens, gen.first_tokens, gen.spec_verify_ct or 0) == (
            record.completion_tokens, record.first_message_tokens, record.verify_ct)
        assert record.t_first_sent is not None
        assert record.t_final_sent is not None
        # The client sees each message after the server sent it: its decode window differs
        # from the server's by no more than the slack on either side.
        slack_first = gen.ttft_s - (record.t_first_sent - record.t_received)
        slack_final = gen.e2e_s - (record.t_final_sent - record.t_received)
        assert slack_first >= -eps
        assert slack_final >= -eps
        decode = gen.e2e_s - gen.ttft_s
        assert -slack_first - eps <= decode - (record.decode_s or 0.0) <= slack_final + eps
    decode_s = math.fsum(s.generation.e2e_s - s.generation.ttft_s for s in loop.served)
    short = math.fsum(s.short_s for s in loop.served)
    assert short / decode_s < 0.05, f"16 in flight for only {1 - short / decode_s:.1%}"
    in_flight = sorted(s.in_flight for s in loop.served)
    assert in_flight[len(in_flight) // 2] > n - 0.1, in_flight
    # What the client held, the server batched, less the slots of requests between their
    # last token and their successor's prefill (a step or two of each request's ~20).
    batches = [by_rid[s.generation.meta_info["id"]].batch or 0.0 for s in loop.served]
    assert min(batches) > n / 2, batches
    assert sum(batches) / len(batches) > 0.75 * n, batches


@pytest.mark.slow
def test_a_measurement_at_a_level_says_how_the_load_was_held(serve):
    url, _ = serve()
    chosen = prompts.PromptSet(prompts.load_builtin()[:10], _prompt_set().texts[:10],
                               "builtin", prompts.template_named("chatml", "test"))
    sampling = bench.Sampling(max_new_tokens=HELD["max_new_tokens"], warmup=1, repeats=2,
                              max_repeats=2)
    with SGLangClient(url) as client:
        m = passes.measure(client, sampling, chosen, config="speculative", concurrency=4)
    assert m.concurrency == 4
    assert len(m.samples) == 20
    assert m.fillers > 0
    assert m.held > 0.95
    assert {s.stream for s in m.samples} == {0, 1, 2, 3}
    assert all(s.request_id for s in m.samples)
    # Little's law: the server's output is 4 × Σ tokens / Σ request time.
    tokens = sum(s.completion_tokens for s in m.samples)
    seconds = math.fsum(s.e2e_s for s in m.samples)
    assert m.stats["total_tps"].mean == pytest.approx(4 * tokens / seconds)
    assert "4 in flight" in m.load_text()
    back = bench.Measurement.from_json(m.to_json())
    assert (back.concurrency, back.fillers, back.samples) == (4, m.fillers, m.samples)


def test_requests_beyond_max_running_requests_wait_in_the_queue(serve):
    """As SGLang's scheduler, the simulator runs at most --max-running-requests at once: at 8
    in flight with a cap of 3, every request is served, none in a batch larger than 3, and
    a request that arrived before another's run got its first token only after that run ended."""
    url, truth = serve(args=("--max-running-requests", "3"))
    chosen = _prompt_set()
    with SGLangClient(url) as client:
        assert client.server_info()["max_running_requests"] == 3
        loop = load.closed_loop(client, chosen.texts[:16], PARAMS, 8,
                                labels=[p.id for p in chosen.prompts[:16]])
    records = sim.served(truth)
    assert all(r.outcome == "finished" for r in records)
    assert len(loop.served) == 16
    batches = [r.batch for r in records if r.batch is not None]
    assert batches
    assert max(batches) <= 3
    assert max(batches) > 2  # the three slots were used
    # on the scheduler's schedule: a request that waited through another's whole run (without
    # the cap none does: each is prefilled at the next step)
    waited = [r for r in records for q in records
              if r is not q and None not in (q.t_first_due, q.t_final_due, r.t_first_due)
              and r.t_received <= q.t_first_due and q.t_final_due <= r.t_first_due]
    assert waited


@pytest.mark.slow
def test_a_stream_that_stalls_is_reported_not_dropped(serve):
    url, truth = serve("stall_request:6")
    chosen = _prompt_set()
    with SGLangClient(url, timeout_s=1.5) as client, pytest.raises(load.LoadFailed) as info:
        load.closed_loop(client, chosen.texts[:12], PARAMS, 4,
                         labels=[p.id for p in chosen.prompts[:12]])
    exc = info.value
    assert len(exc.failures) == 1
    failure = exc.failures[0]
    assert "stalled" in failure.message
    assert 0 <= failure.stream < 4
    assert failure.label in {p.id for p in chosen.prompts[:12]}
    assert failure.after_s >= 1.4  # it waited for the read timeout
    assert f"stream {failure.stream + 1} ({failure.label}" in str(exc)
    assert "1 of 4 streams failed at 4 in flight" in str(exc)
    records = sim.served(truth)
    assert [r.outcome for r in records].count("stalled") == 1
    # Every request the server finished, the client counted (fillers held the load until the
    # read timeout said the stream had stalled; none started after that).
    assert exc.finished + exc.fillers == sum(r.outcome == "finished" for r in records)
    assert exc.finished == 11
    assert exc.expected == 12


@pytest.mark.slow
def test_a_stream_that_is_cut_is_reported(serve):
    url, truth = serve("drop_request:3")
    chosen = _prompt_set()
    with SGLangClient(url, timeout_s=5) as client, pytest.raises(load.LoadFailed) as info:
        load.closed_loop(client, chosen.texts[:8], PARAMS, 4)
    failure, = info.value.failures
    assert "stalled" not in failure.message
    assert "cut" in failure.message or "without a finished message" in failure.message
    assert [r.outcome for r in sim.served(truth)].count("dropped") == 1


def test_a_loop_needs_streams_and_texts():
    with SGLangClient("http://127.0.0.1:9") as client:
        with pytest.raises(ValueError, match="at least 1"):
            load.closed_loop(client, ["a"], PARAMS, 0)
        with pytest.raises(ValueError, match="no texts"):
            load.closed_loop(client, [], PARAMS, 2)
