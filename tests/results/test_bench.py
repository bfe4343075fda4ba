"""Tests for specgate.results.bench: end to end against the simulator, held to its truth."""

import dataclasses
import json
import math

import pytest
import sim_support

from specgate.measure import passes
from specgate.results import bench, prompts
from specgate.serving.client import SGLangClient
from specgate.testing.simulator import model

# Its tests share a costly fixture: one xdist worker runs them all (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("test_bench")

STEPS = 2
ACCEPTANCE = [0.8, 0.6]


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    root = tmp_path_factory.mktemp("sim")
    target, draft = sim_support.model_dirs(
        root, {"decode_ms": 1.0, "verify_ms": 1.75, "draft_step_ms": 0.125}, ACCEPTANCE)
    base_proc, base_url = sim_support.start(["--model-path", str(target)], root / "base.log",
                                            root / "base-truth.jsonl")
    spec_proc, spec_url = sim_support.start(sim_support.spec_args(target, draft, STEPS),
                                            root / "spec.log", root / "spec-truth.jsonl")
    params = model.load_params(target, draft, speculative=True, num_steps=STEPS, eagle_topk=1,
                               num_draft_tokens=STEPS + 1)
    yield {"base": base_url, "spec": spec_url, "truth": model.truth(params), "params": params,
           "base_log": root / "base-truth.jsonl", "spec_log": root / "spec-truth.jsonl"}
    for proc in (base_proc, spec_proc):
        sim_support.stop(proc)


def _measure(url, config, **bench_kw):
    b = bench.Sampling(**{"max_new_tokens": 64, "warmup": 1, "repeats": 2, **bench_kw})
    # Every prompt: the simulator's acceptance is exact per request only to within one token
    # per depth, so tau is within 1 % only over a few dozen requests.
    chosen = prompts.PromptSet.rendered(prompts.load_builtin(),
                                        prompts.template_named("chatml", "test"))
    with SGLangClient(url) as client:
        return passes.measure(client, b, chosen, config=config)


def _plans(sim, max_new_tokens):
    """The simulator's own plans for every built-in prompt, as _measure renders them."""
    chosen = prompts.PromptSet.rendered(prompts.load_builtin(),
                                        prompts.template_named("chatml", "test"))
    return [model.plan_request(sim["params"], text, max_new_tokens) for text in chosen.texts]


def _measure_against_the_log(sim, server, config):
    """A measurement, and the simulator's own record of each request it timed (matched by
    request id: warm-ups and a stream sent again after a burst are in the log too)."""
    log = sim[f"{server}_log"]
    before = len(sim_support.served(log))
    m = _measure(sim[server], config)
    records = sim_support.served(log)[before:]
    served = [r for r in records if r.rid in {s.request_id for s in m.samples}]
    assert len(served) == len(m.samples)
    return m, served


@pytest.mark.slow
def test_measurement_matches_simulator_truth(sim):
    base, base_served = _measure_against_the_log(sim, "base", "baseline")
    spec, spec_served = _measure_against_the_log(sim, "spec", "speculative")
    n_prompts = len(prompts.load_builtin())
    assert base.repeats == 2
    assert len(base.samples) == 2 * n_prompts
    assert base.spec_fields_missing == len(base.samples)
    assert "accept_len" not in base.stats
    assert spec.spec_fields_missing == 0
    # Counts: exactly the simulator's.
    assert spec.stats["accept_len"].mean == pytest.approx(
        model.accept_length_of(spec_served), rel=1e-12)
    verifies = sum(r.verify_ct for r in spec_served)
    tau_served = sum(r.completion_tokens - 1 for r in spec_served) / verifies
    assert spec.stats["tau_decode"].mean == pytest.approx(tau_served, rel=1e-12)
    # The acceptance model holds in the answers (counts, not timing): every cycle but each
    # answer's last (cut at its EOS) runs at the drafter's tau, within 1 % over every prompt,
    # as per request it is exact only to within one token per depth.
    plans = _plans(sim, 64)
    full = sum(p.verify_ct - 1 for p in plans)
    tau_full = sum(p.completion_tokens - 1 - p.tokens_per_event[-1] for p in plans) / full
    assert abs(tau_full / sim["truth"].tau - 1) < 0.01
    assert tau_served == pytest.approx(sum(p.completion_tokens - 1 for p in plans)
                                       / sum(p.verify_ct for p in plans), rel=1e-12)
    # Time: the simulator's own clock, whatever speed this machine ran it at.
    base_time = sim_support.timed_as_served(base, base_served)
    spec_time = sim_support.timed_as_served(spec, spec_served)
    assert model.decode_tps_of(spec_served) == pytest.approx(spec_time.tps)
    base_tps, spec_tps = base.stats["tps"].mean, spec.stats["tps"].mean
    cycle_ms = 1000.0 * spec.stats["tau_decode"].mean / spec_tps
    assert spec.stats["cycle_ms"].mean == pytest.approx(cycle_ms, rel=1e-9)
    # The schedule the simulator kept is its timing model's: a 1 ms decode step, and a verify
    # cycle per release after the first message (which carries the first cycle's tokens).
    assert base_time.due_tps == pytest.approx(sim["truth"].baseline_tps, rel=1e-6)
    cycles = sum(r.verify_ct - 1 for r in spec_served)
    assert spec_time.due_seconds == pytest.approx(cycles * sim["truth"].cycle_ms / 1000,
                                                  rel=1e-6)
    print(f"baseline tok/s {base_tps:.1f} (served {base_time.tps:.1f}, slack "
          f"{base_time.slack:.2%}); speculative {spec_tps:.1f} (served {spec_time.tps:.1f}, "
          f"slack {spec_time.slack:.2%}); "
          f"tau {spec.stats['tau_decode'].mean:.4f} vs model {sim['truth'].tau:.4f}")
    # Σcompletion/Σverify also counts the prefill token: above tau by about one per request.
    per_request = len(spec.samples) / sum(s.spec_verify_ct or 0 for s in spec.samples)
    assert spec.stats["accept_len"].mean == pytest.approx(
        spec.stats["tau_decode"].mean + per_request, rel=1e-9)
    assert set(spec.per_category_accept_len) == {p.category for p in prompts.load_builtin()}
    back = bench.Measurement.from_json(json.loads(json.dumps(spec.to_json())))
    assert back.stats["accept_len"].mean == spec.stats["accept_len"].mean
    assert back.samples == spec.samples
    assert all(len(s.output_ids) == s.completion_tokens for s in spec.samples)
    assert "output_ids" not in spec.samples_csv().splitlines()[0]
    assert spec.samples_csv().count("\n") == len(spec.samples) + 1
    assert "accept_len" in spec.stats_table()


def test_sequential_repeats_stop_at_max_and_say_why(sim):
    b = bench.Sampling(max_new_tokens=16, warmup=0, repeats=1, max_repeats=3)
    chosen = prompts.PromptSet.rendered(prompts.load_builtin()[:2],
                                        prompts.template_named("plain", "test"))
    calls = []

    def keep_going(m):
        calls.append(m.repeats)
        return "the tps interval straddles 1"

    with SGLangClient(sim["base"]) as client:
        m = passes.measure(client, b, chosen, config="baseline", keep_going=keep_going)
    assert calls == [1, 2, 3]
    assert m.repeats == 3
    assert m.stop_reason == "3 repeats (max_repeats) and still the tps interval straddles 1"


def test_keep_going_none_stops_after_configured_repeats(sim):
    b = bench.Sampling(max_new_tokens=8, warmup=0, repeats=2, max_repeats=5)
    one = prompts.PromptSet.rendered(prompts.load_builtin()[:1],
                                     prompts.template_named("plain", "t"))
    with SGLangClient(sim["spec"]) as client:
        m = passes.measure(client, b, one, config="speculative", keep_going=lambda m: None)
    assert m.repeats == 2
    assert m.stats["accept_len"].n == 1  # one prompt: the interval is over prompts
    assert not math.isnan(m.stats["accept_len"].mean)


def test_pass_rates_from_samples():
    s = [bench.RequestSample(1, "a", "x", 5, 11, 5, 0.01, 0.11, 0.1, "stop", 6),
         bench.RequestSample(1, "b", "y", 5, 21, None, 0.02, 0.22, 0.2, "length", 9)]
    p = bench.PassResult.of(1, s)
    assert p.decode_tokens == 30
    assert p.tps == pytest.approx(30 / 0.30)
    assert p.verify_ct is None
    assert p.accept_len is None
    p = bench.PassResult.of(1, s[:1])
    assert p.accept_len == pytest.approx(11 / 5)
    assert p.tau_decode == pytest.approx(10 / 5)
    assert p.cycle_ms == pytest.approx(100 / 5)


def test_straddles():
    from specgate.results.stats import summarize

    s = summarize([1.0, 2.0, 3.0])
    assert bench.straddles(s, 2.0, "x") is not None
    assert bench.straddles(s, 100.0, "x") is None
    assert bench.straddles(None, 1.0, "x") is None
    assert bench.straddles(s, None, "x") is None


@pytest.mark.slow
def test_acceptance_per_position_matches_the_simulator(sim):
    """Draft k is accepted in the share of verify passes the simulator's own plans give (each
    pass that accepted at least k drafts), near a_1·…·a_k of the drafter's conditional rates
    (each answer's last pass, cut at its EOS, accepts fewer)."""
    m = _measure(sim["spec"], "speculative")
    found = bench.position_acceptance(m)
    totals = [0] * (STEPS + 1)
    for plan in _plans(sim, 64):
        for j, count in enumerate(plan.histogram):
            totals[j] += count
    expected = [sum(totals[k:]) / sum(totals) for k in range(1, STEPS + 1)]
    assert [s.mean for s in found] == pytest.approx(expected, rel=1e-12)
    rates = sim["truth"].acceptance
    assert [s.mean for s in found] == pytest.approx(
        [math.prod(rates[:k]) for k in range(1, STEPS + 1)], abs=0.03)
    assert sum(s.mean for s in found) == pytest.approx(m.stats["tau_decode"].mean - 1,
                                                       rel=1e-9)


def _hist_sample(prompt, histogram):
    return bench.RequestSample(
        repeat=1, prompt_id=prompt, category="c", prompt_tokens=5, completion_tokens=10,
        spec_verify_ct=sum(histogram), ttft_s=0.1, e2e_s=1.0, server_e2e_s=1.0,
        finish_reason="stop", chunks=5, drafts_histogram=tuple(histogram))


def test_acceptance_per_position_counts_trimmed_histograms():
    """SGLang trims a histogram after its last non-zero count; a position past it accepted
    nothing in that request, and the chain's length comes from the server's settings."""
    samples = [_hist_sample("a", [1, 2, 3]), _hist_sample("b", [4]), _hist_sample("c", [0, 0, 2])]
    m = bench.build_measurement(config="speculative", url="u",
                                template=prompts.template_named("chatml", "test"),
                                sampling=bench.Sampling(), samples=samples,
                                server_spec={"speculative_num_steps": 3})
    found = bench.position_acceptance(m)
    passes_ = 1 + 2 + 3 + 4 + 2
    assert [s.mean for s in found] == pytest.approx([(2 + 3 + 2) / passes_, (3 + 2) / passes_,
                                                     0.0])
    assert bench.draft_positions(dataclasses.replace(m, server_spec={})) == 2
    no_hist = dataclasses.replace(m, samples=tuple(dataclasses.replace(s, drafts_histogram=None)
                                                   for s in samples))
    assert bench.position_acceptance(no_hist) == ()


def test_passes_stop_as_configured_once_the_interval_clears_or_at_max_repeats():
    sampling = bench.Sampling(repeats=2, max_repeats=4)

    def run(reasons):
        ran, said = [], []
        left = iter(reasons)
        why = passes.repeated(sampling, ran.append, (lambda: next(left)) if reasons else None,
                              "repeats", "baseline", said.append)
        return why, ran, said

    assert run([]) == ("2 repeats as configured", [1, 2], [])
    assert run([None]) == ("2 repeats as configured", [1, 2], [])
    assert run(["wide", None]) == ("3 repeats: the interval cleared the threshold", [1, 2, 3],
                                   ["baseline: another repeat because wide"])
    why, ran, said = run(["wide", "wider", "widest"])
    assert (why, ran) == ("4 repeats (max_repeats) and still widest", [1, 2, 3, 4])
    assert len(said) == 2
