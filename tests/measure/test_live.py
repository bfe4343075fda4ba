"""Tests for specgate.measure.live and fixtures.live: a whole live session against the simulator."""

import json
import socket
import threading
import time

import pytest
from sim_support import sim_profile
from specgate_fixtures.live import shared_live_results

from specgate.claims import env as env_claims
from specgate.claims import perf as perf_claims
from specgate.claims import spec as spec_claims
from specgate.claims.result import Status
from specgate.measure.live import run_live
from specgate.results.live import LiveResults


def _profile(tmp_path, *, acceptance=(0.8, 0.6), env=None, thresholds=None, bench=None):
    # The simulator's launches run at one speed here: a spread the profile states.
    return sim_profile(
        tmp_path, name="live-test", drafter_sim=json.dumps({"acceptance": list(acceptance)}),
        env=env or {"NCCL_PROTO": "Simple"},
        bench={"prompts_per_category": 1, "max_new_tokens": 48, "warmup": 1, "repeats": 2,
               "max_repeats": 3, "launch_spread": 0.01, **(bench or {})},
        thresholds={"baseline_tps_min": 100.0, "accept_len_min": 2.0, **(thresholds or {})})


@pytest.mark.slow
def test_run_live_measures_both_servers_and_claims_follow(tmp_path):
    # A drafter that clearly pays (1.31× by the model: τ 2.62 over a 4 ms cycle against 2 ms
    # decode steps), so its timed claims pass however busy the machine.
    profile = _profile(tmp_path, acceptance=(0.9, 0.8))
    live = run_live(profile, tmp_path / "reports")
    assert live.simulated
    assert live.baseline.failure is None, live.baseline.failure
    assert live.speculative.failure is None, live.speculative.failure
    assert live.baseline.measurement.repeats >= 2
    assert live.speculative.server_info["speculative_algorithm"] == "EAGLE3"
    assert live.baseline.env.checked
    assert live.baseline.env.found == {"NCCL_PROTO": "Simple"}
    assert live.baseline.stop
    back = LiveResults.read(tmp_path / "reports" / "live" / "results.json")
    assert back.speculative.measurement.stats["accept_len"].mean == pytest.approx(
        live.speculative.measurement.stats["accept_len"].mean)

    results = {c.id: c for c in (
        perf_claims.baseline_tps_claim(profile, back), spec_claims.accept_len_claim(profile, back),
        spec_claims.breakeven_claim(profile, back), spec_claims.speedup_claim(profile, back),
        env_claims.server_env_claim(profile, back), env_claims.gpu_clean_claim(profile, back))}
    for cid in ("perf.baseline_tps", "spec.accept_len", "spec.breakeven", "spec.speedup",
                "env.server_env"):
        assert results[cid].status is Status.PASSED, results[cid].message
    assert results["env.gpu_clean"].status in (Status.SKIPPED, Status.PASSED)
    assert results["spec.breakeven"].message.startswith("[simulated server] cycle ")
    assert "the drafter makes serving faster" in results["spec.breakeven"].message
    names = {a.name for a in results["spec.accept_len"].attachments}
    assert {"speculative requests.csv", "baseline statistics",
            "required accept length for tok/s targets"} <= names


@pytest.mark.slow
def test_the_speculative_passes_are_judged_with_the_class_the_baseline_showed(tmp_path,
                                                                              monkeypatch):
    """The deployment's class is read from the baseline as soon as it is measured, so the rule
    for more passes on the speculative server judges on that class's launch spread, the one
    its claims are judged with, not on the prior of an unclassified deployment."""
    from specgate.measure import live as live_mod
    from specgate.results.deployment import Deployment

    found = Deployment("GPU-bound", share=0.65, gpu="NVIDIA H200", peak_tbps=4.8, tps=217.0)
    monkeypatch.setattr(live_mod, "classify", lambda plan, baseline: found)
    given = {}
    real = live_mod.run_config

    def recording(plan, config, **kw):
        given[config] = kw.get("coverage")
        return real(plan, config, **kw)

    monkeypatch.setattr(live_mod, "run_config", recording)
    live = run_live(_profile(tmp_path, acceptance=(0.9, 0.8)), tmp_path / "reports")
    assert live.speculative.failure is None, live.speculative.failure
    assert given["baseline"].deployment is None  # nothing measured yet
    assert given["speculative"].deployment == found
    assert live.coverage.deployment == found


@pytest.mark.slow
def test_slow_drafter_fails_breakeven_and_speedup(tmp_path):
    profile = _profile(tmp_path, acceptance=(0.3, 0.1), thresholds={"accept_len_min": "breakeven"})
    live = run_live(profile, tmp_path / "reports")
    be = spec_claims.breakeven_claim(profile, live)
    assert be.status is Status.FAILED
    assert "the drafter makes serving slower" in be.message
    assert spec_claims.speedup_claim(profile, live).status is Status.FAILED
    assert spec_claims.accept_len_claim(profile, live).status is Status.FAILED


def test_server_that_dies_at_start_makes_claims_broken_with_log_tail(tmp_path):
    profile = _profile(tmp_path, env={"SPECGATE_SIM_FAULT": "exit_at_start"})
    live = run_live(profile, tmp_path / "reports")
    assert live.baseline.failure is not None
    assert live.baseline.failure.stage == "start"
    claim = perf_claims.baseline_tps_claim(profile, live)
    assert claim.status is Status.BROKEN
    assert "could not be made" in claim.message
    for fn in (spec_claims.accept_len_claim, spec_claims.breakeven_claim,
               spec_claims.speedup_claim, env_claims.server_env_claim):
        assert fn(profile, live).status is Status.BROKEN


def test_no_spec_fields_is_flagged(tmp_path):
    profile = _profile(tmp_path, env={"SPECGATE_SIM_FAULT": "no_spec_fields"},
                       bench={"repeats": 1, "max_repeats": 1, "prompts_per_category": None,
                              "categories": ["math"]})
    live = run_live(profile, tmp_path / "reports")
    claim = spec_claims.accept_len_claim(profile, live)
    assert claim.status is Status.BROKEN
    assert "no spec_verify_ct" in claim.message


def test_fixture_runs_live_once_for_concurrent_workers(tmp_path, monkeypatch):
    calls = []
    fake = LiveResults.from_json(json.loads(json.dumps(_fake_results())))

    def fake_run_live(profile, reports_dir, progress=None, levels=None):
        calls.append(1)
        return fake

    monkeypatch.setattr("specgate.measure.live.run_live", fake_run_live)
    got = []
    threads = [threading.Thread(target=lambda: got.append(
        shared_live_results(None, tmp_path, "run-1"))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert len(got) == 4
    assert all(g.profile == "fake" for g in got)
    shared_live_results(None, tmp_path, "run-2")
    assert len(calls) == 2


def _fake_results():
    run = {"config": "baseline", "failure": {"stage": "start", "message": "x", "log_tail": ""}}
    return {"profile": "fake", "simulated": True, "baseline": run,
            "speculative": {**run, "config": "speculative"}}


def test_server_dying_mid_measurement_is_reported_with_its_log(tmp_path):
    profile = _profile(tmp_path, env={"SPECGATE_SIM_FAULT": "die_after:3"},
                       bench={"repeats": 1, "max_repeats": 1})
    live = run_live(profile, tmp_path / "reports")
    failure = live.baseline.failure
    assert failure is not None
    assert failure.stage == "measure"
    assert "die_after" in failure.log_tail
    claim = perf_claims.baseline_tps_claim(profile, live)
    assert claim.status is Status.BROKEN
    assert "last lines of the server log" in claim.cause


def _closed_port():
    """A loopback port that refuses connections: bound, never listening."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock, sock.getsockname()[1]


def test_an_unreachable_server_url_is_found_before_anything_is_launched(tmp_path):
    holder, port = _closed_port()
    with holder:
        url = f"http://127.0.0.1:{port}"
        profile = _profile(tmp_path).with_overrides(server_url=url)
        started = time.monotonic()
        live = run_live(profile, tmp_path / "reports")
    assert time.monotonic() - started < 10  # no baseline launch and measurement first
    assert not (tmp_path / "reports" / "live" / "baseline-server.log").exists()
    progress = (tmp_path / "reports" / "live" / "progress.log").read_text()
    assert "launching" not in progress
    said = live.speculative.failure.message
    assert said == (f"the speculative server at {url} (--server-url / [server] url) cannot be "
                    f"reached: connection refused (nothing listens on 127.0.0.1 port {port}); "
                    f"start it there, or point --server-url at the running speculative server")
    for urllib3_words in ("HTTPConnectionPool", "Max retries", "NewConnectionError", "Caused by"):
        assert urllib3_words not in said
    assert live.baseline.failure.message.startswith("not launched: the speculative server "
                                                    "cannot be used")
    claim = perf_claims.baseline_tps_claim(profile, live)
    assert claim.status is Status.BROKEN
    assert "the baseline server did not start" in claim.message
    assert "cannot be reached: connection refused" in claim.cause
    # Attach mode launched nothing: the attached server is not said to have failed to start.
    accept = spec_claims.accept_len_claim(profile, live)
    assert accept.status is Status.BROKEN
    assert accept.message.endswith("the speculative server could not be reached or attached to "
                                   "(attach mode: specgate launched nothing)"), accept.message
    env = env_claims.server_env_claim(profile, live)
    assert env.message.endswith("no server could be used, so its environment could not be "
                                "read: the speculative server could not be reached or attached "
                                "to (attach mode: specgate launched nothing)"), env.message
    assert "cannot be reached: connection refused" in env.cause
    for said in (accept.message, env.message):
        assert "did not start" not in said, said


def test_an_attached_server_of_the_wrong_kind_is_found_before_anything_is_launched(tmp_path):
    from specgate.serving import launch, server

    profile = _profile(tmp_path)
    spec = launch.build_command(profile, "baseline")
    with server.running(spec, tmp_path / "attached.log", startup_timeout_s=30) as baseline:
        live = run_live(profile.with_overrides(server_url=baseline.url), tmp_path / "reports")
        assert baseline.alive()  # left running
    assert not (tmp_path / "reports" / "live" / "baseline-server.log").exists()
    assert "expected EAGLE3 (or EAGLE) for the speculative server" in (
        live.speculative.failure.message)
    assert live.speculative.stop == "attached: left running"
    assert live.baseline.failure.stage == "start"
