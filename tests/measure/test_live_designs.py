"""Tests of the live session's launch designs (measure/live.py, measure/interleave.py) and of the
launch log that teaches the spread (measure/launches.py), against the simulator."""

import dataclasses
import itertools
import json
import math

import pytest
import sim_support
from sim_support import sim_profile

from specgate.claims import spec as spec_claims
from specgate.core.profile import parse_profile
from specgate.io import launch_log
from specgate.measure import gate, launches, live, plan, resident, reuse
from specgate.results import drift
from specgate.results.bench import RequestSample, Sampling, build_measurement
from specgate.results.live import LiveResults
from specgate.results.prompts import template_named
from specgate.results.stats import Summary
from specgate.testing.simulator import model

PLAIN = template_named("plain", "test")


def _profile(tmp_path, *, design="ab", env=None, bench=None, drafter_sim=None):
    return sim_profile(
        tmp_path, name="designs", drafter_sim=drafter_sim or json.dumps({"acceptance": [0.9, 0.8]}),
        env=env or {},
        bench={"prompts_per_category": 1, "max_new_tokens": 32, "warmup": 1, "repeats": 2,
               "max_repeats": 2, "design": design, **(bench or {})},
        thresholds={"accept_len_min": 2.0})


def _drift_env(tmp_path, seed="5"):
    truth = tmp_path / "truth.jsonl"
    return truth, {model.ENV_LAUNCH_SPREAD: "0.2", model.ENV_LAUNCH_SEED: seed,
                   model.ENV_TRUTH: str(truth)}


@pytest.mark.slow
def test_aba_launches_the_baseline_again_and_pools_its_two_launches(tmp_path):
    truth, env = _drift_env(tmp_path)
    reports = tmp_path / "reports"
    # Answers long enough that the client's side of each request is a small part of its decode
    # window: the bracket is then held to the served clock within a few per cent.
    results = live.run_live(_profile(tmp_path, design="aba", env=env,
                                     bench={"max_new_tokens": 96}), reports)
    launches = model.read_launches(truth)
    assert [x.role for x in launches] == ["baseline", "speculative", "baseline"]
    after = results.baseline_after
    assert after is not None
    assert after.failure is None, after.failure
    pooled = results.baseline.measurement
    assert pooled.repeats == 4  # 2 passes in each launch
    assert "two launches" in pooled.stop_reason
    coverage = results.coverage
    assert coverage.design == "aba"
    assert coverage.baseline_launches == 2
    # The bracket is what the simulator's two baseline launches ran at, on its own clock (the
    # requests of each launch, by id; the client's slack bounds the harness's reading of them).
    records = model.read_truth(truth)
    first = sim_support.served_for([s for s in pooled.samples if s.repeat <= 2], records)
    again = sim_support.served_for(after.measurement.samples, records)
    assert first.low <= coverage.bracket.first_tps <= first.high
    assert again.low <= coverage.bracket.second_tps <= again.high
    low, high = sim_support.ratio_bounds(again, first)
    assert low - 1 <= coverage.bracket.moved <= high - 1, (coverage.bracket, low, high)
    # Each launch kept the schedule of its own speed: the second ran faster by their ratio.
    assert again.due_tps / first.due_tps == pytest.approx(launches[2].speed / launches[0].speed,
                                                          rel=1e-6)
    logged = launch_log.read(launch_log.log_file(reports))
    assert [r.config for r in logged] == ["baseline", "speculative", "baseline"]
    assert len({r.run for r in logged}) == 1
    assert logged[0].fingerprint == logged[2].fingerprint != logged[1].fingerprint
    assert logged[1].deployment == logged[0].fingerprint
    back = LiveResults.read(reports / "live" / "results.json")
    assert back.coverage == coverage
    assert back.baseline_after.measurement.repeats == 2
    claim = spec_claims.speedup_claim(_profile(tmp_path, design="aba"), back)
    assert "A–B–A" in claim.message
    assert "between its two launches in this run" in claim.message
    assert claim.details["launch_spread"]["baseline_launches"] == 2


@pytest.mark.slow
def test_interleaved_servers_are_resident_together_and_measured_one_request_at_a_time(
        tmp_path):
    truth, env = _drift_env(tmp_path, seed="9")
    results = live.run_live(_profile(tmp_path, design="interleaved", env=env),
                            tmp_path / "reports")
    assert results.baseline.failure is None, results.baseline.failure
    assert results.speculative.failure is None, results.speculative.failure
    assert results.baseline.url != results.speculative.url
    lines = [json.loads(line) for line in truth.read_text().splitlines()]
    lines = [d for d in lines if "ready" not in d]
    # Both launched before the first request.
    assert [("launch" in d) for d in lines[:2]] == [True, True]
    assert not any("launch" in d for d in lines[2:])
    # The streamed requests are the timed ones (spec.parity's evidence is sent plain, after).
    requests = sorted((r for r in model.read_truth(truth) if r.stream),
                      key=lambda r: r.t_received)
    servers = ["speculative" if r.verify_ct else "baseline" for r in requests
               if r.completion_tokens > 1]
    assert servers.count("baseline") == servers.count("speculative")
    # Never both at once: each request is answered before the next arrives.
    for earlier, later in itertools.pairwise(requests):
        assert later.t_received >= earlier.t_delivered
    # Each prompt goes to both, in turn, and which goes first alternates.
    measured = servers[2:]  # after the warm-up of each
    pairs = [tuple(measured[i:i + 2]) for i in range(0, len(measured), 2)]
    assert set(pairs) == {("baseline", "speculative"), ("speculative", "baseline")}
    assert all(len(set(p)) == 2 for p in pairs)
    m_base, m_spec = results.baseline.measurement, results.speculative.measurement
    assert m_base.repeats == m_spec.repeats == 2
    assert "interleaved" in m_base.stop_reason
    assert results.coverage.design == "interleaved"
    assert results.baseline.stop
    assert results.speculative.stop


@pytest.mark.slow
def test_a_speculative_server_that_cannot_start_beside_the_baseline_says_what_to_try(tmp_path):
    profile = _profile(tmp_path, design="interleaved", drafter_sim="{not json")
    results = live.run_live(profile, tmp_path / "reports")
    assert results.speculative.failure.stage == "start"
    assert "--mem-fraction-static" in results.speculative.failure.message
    assert results.baseline.failure.message.startswith(
        "not measured: the speculative server could not be run beside it")
    assert results.baseline.stop  # the resident baseline was stopped


def test_the_second_of_two_resident_servers_moves_off_a_shared_fixed_port(tmp_path):
    profile = _profile(tmp_path, design="interleaved")
    fixed = profile.model_copy(update={"server": profile.server.model_copy(
        update={"port": 31123})})
    planned = plan.resolve(fixed, tmp_path / "reports")
    moved = resident.beside(planned.baseline, planned.speculative)
    assert moved.spec.port == 31124
    assert moved.url.endswith(":31124")
    assert "--port" in moved.spec.argv
    assert moved.spec.argv[moved.spec.argv.index("--port") + 1] == "31124"
    free = plan.resolve(profile, tmp_path / "reports")
    assert resident.beside(free.baseline, free.speculative) is free.speculative


@pytest.mark.slow
def test_launches_of_successive_runs_teach_the_deployment_its_spread(tmp_path):
    reports = tmp_path / "reports"
    profile = _profile(tmp_path, bench={"launch_spread_min_launches": 2})
    first = live.run_live(profile, reports)
    assert first.coverage.baseline.source == "prior"
    assert first.coverage.speculative.source == "prior"
    second = live.run_live(profile, reports)
    assert second.coverage.baseline.source == "learned"
    assert second.coverage.baseline.launches == 2
    assert second.coverage.speculative.source == "learned"
    claim = spec_claims.speedup_claim(profile, second)
    assert "baseline tok/s" in claim.message
    assert "learned from 2 launches of this deployment" in claim.message
    assert len(launch_log.read(launch_log.log_file(reports))) == 4


def test_an_attached_baseline_is_not_logged(tmp_path):
    profile = _profile(tmp_path)
    attached = profile.model_copy(update={"server": profile.server.model_copy(
        update={"baseline_url": "http://127.0.0.1:9"})})
    keys = launches.keys(plan.resolve(attached, tmp_path / "reports"))
    assert keys.baseline is None
    assert keys.speculative is not None
    assert "baseline server is not launched here" in keys.why


def test_stored_baselines_count_as_launches(tmp_path):
    reports = tmp_path / "reports"
    planned = plan.resolve(_profile(tmp_path), reports)
    keys = launches.keys(planned)
    fp = reuse.fingerprint(planned)
    tps = Summary(7, 500.0, 1.0, 0.01, 495.0, 505.0, 0.95, 6.0)
    reuse.save(reports, fp, {"measurement": {"stats": {"tps": tps.to_json()}}})
    found = launches.history(reports, keys)
    assert [(r.config, r.fingerprint) for r in found] == [("baseline", keys.baseline)]
    assert found[0].log_of("tps") == pytest.approx(math.log(500.0))
    assert not launch_log.log_file(reports).exists()  # read, not written


def _measured(config, rate, *, verify=None, passes=2):
    samples = [RequestSample(r, f"p{i}", "chat", 10, 65, verify, 0.01,
                             0.01 + 64 / (rate * (1 + 0.05 * i)), None, "stop", 65)
               for r in range(1, passes + 1) for i in range(6)]
    return build_measurement(config=config, url="http://x", template=PLAIN,
                             sampling=Sampling(repeats=2, max_repeats=4), samples=samples)


def test_the_rule_for_more_passes_stops_when_the_launch_spread_alone_holds_the_interval():
    base = _measured("baseline", 100.0)
    near = _measured("speculative", 108.0, verify=30)
    thresholds = parse_profile({"name": "t"}).thresholds
    wide = drift.Coverage("ab", drift.fixed("tps", 0.1), drift.fixed("cycle_ms", 0.1))
    rule = gate.keep_going_rule(thresholds, "speculative", base, wide)
    assert rule(near) is None  # another pass would not move the launch part
    assert rule.undecided.startswith("more passes cannot decide it: the speedup interval")
    assert "launch-to-launch spread alone (14.1 %" in rule.undecided
    stopped = gate.stopped_why(near, rule)
    assert stopped.stop_reason.startswith("2 repeats: more passes cannot decide it")
    # Without launch spread the same interval is decided by the prompts: it clears 1.
    steady = drift.Coverage("ab", drift.fixed("tps", 1e-6), drift.fixed("cycle_ms", 1e-6))
    assert gate.keep_going_rule(thresholds, "speculative", base, steady)(near) is None
    # Where more passes can still help, the rule asks for them: prompts that disagree widely.
    factors = [2.0, 2.6, 1.6, 2.4, 1.0, 2.8]
    noisy = build_measurement(
        config="speculative", url="http://x", template=PLAIN,
        sampling=Sampling(repeats=2, max_repeats=4),
        samples=[dataclasses.replace(s, e2e_s=0.01 + (s.e2e_s - 0.01) / factors[i % 6])
                 for i, s in enumerate(_measured("speculative", 100.0, verify=30).samples)])
    asked = gate.keep_going_rule(thresholds, "speculative", base, wide)
    assert asked(noisy) is not None
    assert asked.undecided is None


def _emptied(tmp_path):
    for path in (tmp_path / "draft").iterdir():
        path.unlink()
    return tmp_path / "draft"


def test_an_empty_drafter_folder_keeps_the_gate_level(tmp_path):
    """Nothing is launched on the empty folder; the run it stops still stands at the gate's
    level, so the claims judge the baseline at the level it was measured at."""
    from specgate.io.checkpoint import empty_folder

    profile = _profile(tmp_path, bench={"concurrency": [1, 2]})
    profile = profile.model_copy(update={"thresholds": profile.thresholds.model_copy(
        update={"gate_concurrency": 2})})
    draft = _emptied(tmp_path)
    results = live.run_live(profile, tmp_path / "reports")
    assert results.gate_level == 2
    assert results.speculative.gate_level == 2
    assert results.speculative.failure is not None
    assert results.speculative.failure.cause == empty_folder(draft)
    assert results.baseline.failure is None  # measured alone before the speculative plan


def test_an_empty_drafter_folder_is_the_one_cause_of_both_resident_servers(tmp_path):
    """design = "interleaved" starts both servers side by side: the baseline left out beside
    the blocked one is broken by the same cause."""
    from specgate.io.checkpoint import empty_folder

    profile = _profile(tmp_path, design="interleaved")
    draft = _emptied(tmp_path)
    results = live.run_live(profile, tmp_path / "reports")
    for run in (results.baseline, results.speculative):
        assert run.failure is not None
        assert run.failure.cause == empty_folder(draft)


def _gpu_bound(tps=500.0):
    """A deployment whose decode at `tps` reads 65 % of an H200's memory bandwidth."""
    from specgate.results import deployment

    step = deployment.StepBytes(per_gpu=0.65 * 4.8e12 / tps)
    found = deployment.classify(tps=tps, gpu_names=["NVIDIA H200"], step=step)
    assert found.kind == "GPU-bound"
    return found


def test_the_baselines_rule_for_more_passes_takes_the_prior_of_the_class_it_measures():
    """Before the baseline is measured its class is unknown (the host-bound prior); the rule
    for more passes judges on the prior of the class its measurement so far gives, as the
    claim will."""
    steady = _measured("baseline", 100.0).samples
    base = build_measurement(  # prompts within 0.5 % of one another
        config="baseline", url="http://x", template=PLAIN,
        sampling=Sampling(repeats=2, max_repeats=4),
        samples=[dataclasses.replace(s, e2e_s=0.01 + 0.64 * (1 + 0.001 * (i % 6)))
                 for i, s in enumerate(steady)])
    mean = base.stat("tps").mean
    thresholds = parse_profile(
        {"name": "t", "thresholds": {"baseline_tps_min": 0.9 * mean}}).thresholds
    before = drift.prior_coverage()
    host = gate.keep_going_rule(thresholds, "baseline", None, before)
    assert host(base) is None
    assert host.undecided is not None
    assert "the prior of host-bound targets" in host.undecided
    gpu = drift.prior_coverage(deployment=_gpu_bound(mean))
    assert gpu.baseline.prior == "GPU-bound"
    seen = []
    classed = gate.keep_going_rule(thresholds, "baseline", None, before,
                                   reclass=lambda m: seen.append(m) or gpu)
    assert classed(base) is None
    assert seen == [base]
    assert classed.undecided is None  # the GPU-bound interval clears it: nothing to say
    assert classed.looked is gpu
    assert drift.cover(base.stat("tps"), gpu, "baseline").judged.ci_low > 0.9 * mean
    # At a threshold the GPU-bound launch part alone holds, the rule says so, naming that prior.
    near = parse_profile(
        {"name": "t", "thresholds": {"baseline_tps_min": 0.999 * mean}}).thresholds
    held = gate.keep_going_rule(near, "baseline", None, before, reclass=lambda m: gpu)
    held(base)
    assert held.undecided is not None
    assert "the prior of GPU-bound targets" in held.undecided
    assert "host-bound" not in held.undecided


@pytest.mark.parametrize("design", ["ab", "interleaved"])
def test_a_gpu_bound_baselines_message_names_one_prior_and_never_contradicts_itself(
        tmp_path, monkeypatch, design):
    """A first probe of a deployment its baseline classes GPU-bound: the rule for more passes
    and perf.baseline_tps judge on the same prior, so the claim that meets its minimum does not
    also say that more passes cannot decide it."""
    from specgate.claims import perf

    monkeypatch.setattr(live, "classify", lambda plan, baseline: _gpu_bound(
        baseline.measurement.stat("tps").mean if baseline.measurement is not None
        and baseline.measurement.stat("tps") is not None else 500.0))
    profile = sim_profile(
        tmp_path, name="classed", drafter_sim=json.dumps({"acceptance": [0.9, 0.8]}), env={},
        bench={"prompts_per_category": 1, "max_new_tokens": 32, "warmup": 1, "repeats": 2,
               "max_repeats": 3, "design": design},
        thresholds={"accept_len_min": 2.0, "baseline_tps_min": 1.0})
    first = live.run_live(profile, tmp_path / "first")
    tps = first.baseline.measurement.stat("tps").mean
    # A minimum the host-bound prior's launch part alone holds and the GPU-bound one clears.
    host = drift.prior("tps")
    minimum = round(tps * math.exp(-1.5 * host.sd), 1)
    profile = profile.model_copy(update={"thresholds": profile.thresholds.model_copy(
        update={"baseline_tps_min": minimum})})
    results = live.run_live(profile, tmp_path / "second")
    assert results.coverage.baseline.prior == "GPU-bound"
    claim = perf.baseline_tps_claim(profile, results)
    assert claim.status == "passed", claim.message
    assert "meets the minimum" in claim.message
    assert "more passes cannot decide" not in claim.message
    assert "host-bound" not in claim.message
    assert "the prior of GPU-bound targets" in claim.message
