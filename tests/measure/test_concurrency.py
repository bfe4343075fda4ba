"""A live session at several concurrency levels against the batching simulator, held to its
truth log: the curve, the crossover, the claims per level, and a stream that stalls."""

import dataclasses
import json
import math
import sys

import pytest
import sim_support
from ckpt_support import tiny_drafter

from specgate.claims import levels, live_run
from specgate.claims import spec as spec_claims
from specgate.claims.result import Status
from specgate.core.profile import parse_profile
from specgate.measure.live import run_live
from specgate.results import bench
from specgate.results import curve as curves
from specgate.results.live import LiveResults
from specgate.testing.simulator import model

# Its tests share a costly fixture: one xdist worker runs them all (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("test_concurrency")

STEPS = 2
ACCEPTANCE = [0.8, 0.6]
# Each token a forward adds costs the target 0.28 ms and the drafter 0.06 ms a draft step: the
# 2-step drafter (τ 2.28, cycle 2.5 ms against a 2 ms decode step) pays 1.82× alone and 1.20×
# at 4 in flight, and costs at 16 (0.84×); the speed-up reaches 1 at a batch of about 7, far
# enough from both levels that each one's interval is clear of 1 on a busy machine. Answers of
# 128 tokens keep the closed loop's gap between one request and the next (a new request joins
# at the next step boundary, a longer wait on the server whose steps are longer) a small part
# of each request, so each server's batch stays near the level on a busy machine too.
TIMING = {"decode_ms": 2.0, "verify_ms": 2.0, "draft_step_ms": 0.25,
          "batch_ms_per_token": 0.28, "draft_batch_ms_per_token": 0.06}
LEVELS = [1, 4, 16]


def _profile(tmp_path, *, fault="", bench_extra=None, thresholds=None):
    target, draft = tmp_path / "target", tmp_path / "draft"
    target.mkdir(exist_ok=True)
    if not draft.exists():  # a whole drafter: SGLang will not start on a config alone
        tiny_drafter(draft, config_overrides={"max_position_embeddings": 8192})
    (target / model.SIM_FILE).write_text(json.dumps(TIMING))
    (draft / model.SIM_FILE).write_text(json.dumps({"acceptance": ACCEPTANCE}))
    env = {model.ENV_TRUTH: str(tmp_path / "truth.jsonl"), "SPECGATE_SIM_START_DELAY_S": "0.2",
           "SPECGATE_SIM_HEALTH_GENERATE_S": "0.05"}
    if fault:
        env["SPECGATE_SIM_FAULT"] = fault
    raw = {
        "name": "concurrency-test",
        "target": {"path": str(target)},
        "drafter": {"path": str(draft)},
        "server": {"launcher": [sys.executable, "-m", "specgate.testing.simulator"], "port": 0,
                   "startup_timeout_s": 30, "env": env},
        "speculative": {"algorithm": "EAGLE3", "num_steps": STEPS, "eagle_topk": 1,
                        "num_draft_tokens": STEPS + 1},
        "bench": {"prompts_per_category": 3, "categories": ["chat", "coding", "math",
                                                            "reasoning", "extraction"],
                  "chat_template": "chatml", "max_new_tokens": 128, "warmup": 1,
                  "repeats": 2, "max_repeats": 2, "concurrency": LEVELS,
                  # the simulator runs every launch at one speed: a small known spread
                  "launch_spread": 0.02, **(bench_extra or {})},
        "thresholds": {"baseline_tps_min": 100.0, "accept_len_min": 2.0, **(thresholds or {})},
    }
    return parse_profile(raw, source=tmp_path / "profile.toml")


def _params():
    return model.SimParams(timing=model.timing_from(TIMING, {}),
                           drafter=model.Drafter(acceptance=tuple(ACCEPTANCE)),
                           speculative=True, num_steps=STEPS, eagle_topk=1,
                           num_draft_tokens=STEPS + 1)


def _modelled_s(m: bench.Measurement, by_rid: dict[str, model.RequestTruth],
                params: model.SimParams) -> float:
    """The decode seconds the timing model gives these requests at the batch each one ran in
    (the scheduler's own, from the truth log, however far a busy machine's closed loop kept it
    from the level): the steps after its first message, each of the model's step time for that
    batch (linear in it, so the mean batch serves)."""
    seconds = 0.0
    for s in m.samples:
        r = by_rid[s.request_id]
        assert r.batch is not None
        steps = r.verify_ct - 1 if params.speculative else r.decode_tokens
        low = max(1, math.floor(r.batch))
        step_ms = model.step_ms(params, low) + (r.batch - low) * (
            model.step_ms(params, low + 1) - model.step_ms(params, low))
        seconds += steps * step_ms / 1000
    return seconds


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("levels")
    profile = _profile(tmp_path)
    live = run_live(profile, tmp_path / "reports")
    truth = {r.rid: r for r in model.read_truth(tmp_path / "truth.jsonl")}
    return profile, live, truth


@pytest.mark.slow
def test_every_level_is_measured_with_nothing_lost(session):
    profile, live, truth = session
    assert live.levels == tuple(LEVELS)
    assert live.gate_level == 1
    n_prompts = 15
    for level in LEVELS:
        for run in (live.baseline.at(level), live.speculative.at(level)):
            assert run.failure is None, run.failure
            m = run.measurement
            assert m is not None
            assert m.concurrency == level
            # Every measured request is one the server finished; none is missing or extra.
            assert len(m.samples) == n_prompts * m.repeats
            assert len({s.request_id for s in m.samples}) == len(m.samples)
            assert all(truth[s.request_id].outcome == "finished" for s in m.samples)
            if level > 1:
                assert m.held > 0.95, m.load_text()
                assert m.fillers >= level  # the opening, at least
    back = LiveResults.read(profile.resolve("reports/live/results.json"))
    assert back.speculative.at(16).measurement.samples == \
        live.speculative.at(16).measurement.samples


@pytest.mark.slow
def test_the_crossover_is_found_where_the_drafter_stops_paying(session):
    """The simulated drafter pays at 1 and 4 in flight and costs at 16: the server's own
    clock says so, the harness's speed-up at each level lies where the truth log puts it, and
    the curve puts the crossover between 4 and 16."""
    _, live, truth = session
    found = curves.curve(live)
    served = {}
    params = _params()
    baseline_params = dataclasses.replace(params, speculative=False)
    for point in found.points:
        view = live.at(point.level)
        spec, base = view.speculative.measurement, view.baseline.measurement
        s_served = sim_support.served_for(spec.samples, truth.values())
        b_served = sim_support.served_for(base.samples, truth.values())
        served[point.level] = s_served.tps / b_served.tps
        # Every prompt ran on both servers, so the paired ratio of pooled rates is the ratio
        # of the two sides' pooled rates: it lies inside what the slack allows.
        low, high = sim_support.ratio_bounds(s_served, b_served)
        assert low <= point.decode.mean <= high
        # The schedule each server kept is the model's at the batch it ran: the speed-up on
        # it is the model's to within the prefills of the requests that join a running batch
        # (they hold up both servers' batches alike, about 2 % of each window).
        spec_model = s_served.tokens / _modelled_s(spec, truth, params)
        base_model = b_served.tokens / _modelled_s(base, truth, baseline_params)
        assert s_served.due_tps / b_served.due_tps == pytest.approx(spec_model / base_model,
                                                                    rel=0.015)
    assert served[1] > 1.3
    assert served[4] > 1.05
    assert served[16] < 0.97
    assert [p.verdict() for p in found.points] == ["pays", "pays", "costs"]
    assert (found.crossover.pays_up_to, found.crossover.stops_at) == (4, 16)
    assert 4 < found.crossover.estimate < 16
    # The model the simulator runs puts it there too.
    assert 4 < model.crossover_batch(params) < 16


@pytest.mark.slow
def test_claims_per_level_and_the_gate_keep_their_ids(session):
    profile, live, _ = session
    gate = spec_claims.speedup_claim(profile, live)
    assert gate.id == "spec.speedup"
    assert gate.status is Status.PASSED
    assert gate.details["concurrency"] == 1
    assert gate.message.startswith("[simulated server] at 1 in flight: ")
    curve = gate.details["curve"]
    assert [lv["concurrency"] for lv in curve["levels"]] == LEVELS
    assert curve["crossover"]["stops_at"] == 16
    assert "stops paying by 16" in gate.message
    assert "speed-up against concurrency" in {a.name for a in gate.attachments}
    assert gate.details["total_speedup"]["mean"] > 1
    at = {(cid, n): levels.level_claim(cid, profile, live, n)
          for cid in levels.LEVEL_CLAIMS for n in (4, 16)}
    assert at["spec.speedup", 4].id == "spec.speedup@c4"
    assert at["spec.speedup", 4].status is Status.PASSED
    assert at["spec.speedup", 16].status is Status.FAILED
    assert at["spec.breakeven", 16].status is Status.FAILED  # one hypothesis, one interval
    assert at["spec.accept_len", 16].status is Status.PASSED  # the drafter is as good
    assert at["perf.baseline_tps", 16].status is Status.SKIPPED
    assert at["perf.baseline_tps", 16].reason == "reported"
    for (cid, n), result in at.items():
        assert result.id == f"{cid}@c{n}"
        assert result.details["concurrency"] == n
        assert result.details["gating"] is False
        assert f"at {n} in flight: " in result.message
        assert not any(a.name.endswith(" server log") for a in result.attachments)
        assert "curve" not in result.details
    # Break-even at 16 comes from the cycle time measured at 16.
    spec16 = live.speculative.at(16).measurement
    assert at["spec.breakeven", 16].details["cycle_ms"] == pytest.approx(
        spec16.stats["cycle_ms"].mean, rel=1e-3)
    assert at["spec.speedup", 16].details["total_speedup"]["mean"] < 1
    with pytest.raises(ValueError, match="gate's level"):
        levels.level_claim("spec.speedup", profile, live, 1)


@pytest.mark.slow
def test_a_stream_that_stalls_at_the_highest_level_is_reported(tmp_path):
    """A request at 16 in flight that stops streaming breaks that level's claims with the
    stream and its prompt named; the gate's level and the others keep their figures."""
    # 16 requests at 1 in flight (one warm-up), 23 to 35 at 4 (4 warm-up, 4 opening, 15
    # measured, the tail's fillers), then 16 warm-up and 16 opening at 16: the measured
    # requests at 16 are numbers 84 to 86 at least.
    # Short answers: the stall is counted in requests, and no level's batch is judged here.
    profile = _profile(tmp_path, fault="stall_request:85",
                       bench_extra={"repeats": 1, "max_repeats": 1, "request_timeout_s": 2,
                                    "max_new_tokens": 32})
    live = run_live(profile, tmp_path / "reports")
    for run in (live.baseline, live.speculative):
        assert run.failure is None
        assert run.at(4).failure is None
        failure = run.level_failures[16]
        assert failure.stage == "load"
        assert "at 16 in flight: 1 of 16 streams failed" in failure.message
        assert "stalled" in failure.message
        assert "(filler" not in failure.message  # a measured request, named by its prompt
        assert 16 not in run.levels
    speedup16 = levels.level_claim("spec.speedup", profile, live, 16)
    assert speedup16.status is Status.BROKEN
    assert "a stream of the speculative server stalled or was cut" in speedup16.message
    assert "1 of 16 streams failed" in speedup16.cause
    assert "stalled" in speedup16.cause
    assert spec_claims.speedup_claim(profile, live).status is Status.PASSED
    records = model.read_truth(tmp_path / "truth.jsonl")
    assert [r.outcome for r in records].count("stalled") == 2  # one per server
    point = next(p for p in curves.curve(live).points if p.level == 16)
    assert point.verdict() == "unmeasured"
    assert "stalled" in point.why
    assert not math.isnan(curves.curve(live).points[0].decode.mean)


@pytest.mark.slow
def test_the_fitted_batching_reproduces_the_measured_curve(session, tmp_path):
    """Calibration: the slopes fitted to the session give back its speed-up at every level
    (the place a GPU session's figures go into the simulator)."""
    from specgate.cli.calibrate_simulator import main_calibrate_simulator
    from specgate.testing.simulator import calibrate

    profile, live, _ = session
    found = calibrate.fit(live, draft_step_ms=TIMING["draft_step_ms"])
    assert found.timing["batch_ms_per_token"] == pytest.approx(
        TIMING["batch_ms_per_token"], rel=0.35)  # the closed loop's effective slope
    params = calibrate.fitted_params(found, ACCEPTANCE)
    for point in curves.curve(live).points:
        fitted = model.truth(params, batch=point.level).speedup
        assert point.decode.mean == pytest.approx(fitted, rel=0.05), found.to_json()
    assert main_calibrate_simulator([str(profile.resolve("reports/live/results.json"))]) == 0
    with pytest.raises(ValueError, match="two levels or more"):
        calibrate.fit(live.at(4))


@pytest.mark.slow
def test_a_fit_to_some_levels_predicts_the_speedup_at_the_level_held_out(session, capsys):
    """Fitted at 1 and 16 alone, the simulator's straight-line batching predicts the decode
    speed-up at 4 from that level's tokens per verify, within 5 % of what was measured there."""
    from specgate.cli.calibrate_simulator import main_calibrate_simulator
    from specgate.testing.simulator import calibrate

    profile, live, _ = session
    found = calibrate.fit(live, draft_step_ms=TIMING["draft_step_ms"], fit_levels=[1, 16])
    assert found.fit_levels == (1, 16)
    held = {p["concurrency"]: p for p in found.points if p["held_out"]}
    assert list(held) == [4]
    point = next(p for p in curves.curve(live).points if p.level == 4)
    assert held[4]["speedup"] == pytest.approx(point.within.mean, rel=1e-3)
    assert held[4]["fitted_speedup"] == pytest.approx(point.within.mean, rel=0.05), held
    worst = found.worst_held_out_error
    assert worst is not None
    assert worst < 0.05
    results = str(profile.resolve("reports/live/results.json"))
    assert main_calibrate_simulator([results, "--fit-levels", "1,16"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["fit_levels"] == [1, 16]
    assert printed["worst_held_out_speedup_error"] == pytest.approx(worst, abs=1e-4)
    with pytest.raises(ValueError, match=r"--fit-levels \[8\]: not measured"):
        calibrate.fit(live, fit_levels=[1, 8])
    assert main_calibrate_simulator([results, "--fit-levels", "4"]) == 1
    assert "two levels or more" in capsys.readouterr().err


def _capped(live: LiveResults, cap: int) -> LiveResults:
    """The session as if its speculative server had run at most `cap` requests at once."""
    info = {**live.speculative.server_info, "max_running_requests": cap}
    return dataclasses.replace(live, speculative=dataclasses.replace(live.speculative,
                                                                     server_info=info))


@pytest.mark.slow
def test_a_level_above_a_servers_max_running_requests_says_it_measures_the_queue(session):
    """SGLang runs at most max_running_requests at once (48 for speculative decoding unless
    set) and queues the rest; the claims at a level above it say so, in words and details."""
    profile, live, _ = session
    # the simulator reports SGLang's default of 48 for speculative decoding, and the session
    # keeps it
    assert live.speculative.max_running == 48
    assert live.baseline.max_running is None
    assert "queue" not in levels.level_claim("spec.speedup", profile, live, 16).message
    capped = _capped(live, 2)
    at4 = levels.level_claim("spec.speedup", profile, capped, 4)
    assert at4.details["queued"] == {"speculative": {"max_running_requests": 2, "waiting": 2}}
    assert "the speculative server runs at most 2 requests at once" in at4.message
    assert "2 of the 4 in flight wait in its queue" in at4.message
    gate = spec_claims.speedup_claim(profile, capped, attach=False)  # at 1 in flight
    assert "queued" not in gate.details
    assert set(gate.details["queued_levels"]) == {"4", "16"}
    assert "max_running_requests: the speculative server's is 2" in gate.message
    # a claim on the baseline's figures alone is not the speculative server's queue's
    assert "queued" not in levels.level_claim("perf.baseline_tps", profile, capped, 16).details
    breakeven = levels.level_claim("spec.breakeven", profile, capped, 16)
    assert breakeven.details["queued"]["speculative"]["waiting"] == 14
    # SGLang's own default, named as such, at a level above it
    note, queued = live_run.queued_at(live, 64)
    assert queued == {"speculative": {"max_running_requests": 48, "waiting": 16}}
    assert "(max_running_requests, SGLang's default for speculative decoding)" in note
    assert live_run.queued_at(live, 48) == ("", {})


@pytest.mark.slow
def test_the_fit_takes_each_servers_batch_as_capped_by_its_max_running_requests(session,
                                                                                 capsys):
    from specgate.cli.calibrate_simulator import main_calibrate_simulator
    from specgate.testing.simulator import calibrate

    profile, live, _ = session
    plain = calibrate.fit(live, draft_step_ms=TIMING["draft_step_ms"])
    assert [p["speculative_batch"] for p in plain.points] == LEVELS
    capped = calibrate.fit(_capped(live, 4), draft_step_ms=TIMING["draft_step_ms"])
    assert [p["speculative_batch"] for p in capped.points] == [1, 4, 4]
    assert [p["baseline_batch"] for p in capped.points] == LEVELS
    # a level where a server queues is held out of the default fit
    assert capped.fit_levels == (1, 4)
    assert [p["queued"] for p in capped.points] == [False, False, True]
    assert [p["held_out"] for p in capped.points] == [False, False, True]
    assert plain.fit_levels == tuple(LEVELS)
    # the same session read as a capped one fits another cycle slope
    assert capped.timing["draft_batch_ms_per_token"] != plain.timing["draft_batch_ms_per_token"]
    given = calibrate.fit(live, draft_step_ms=TIMING["draft_step_ms"], speculative_max_running=4)
    assert given.points == capped.points
    results = str(profile.resolve("reports/live/results.json"))
    assert main_calibrate_simulator([results, "--speculative-max-running", "4"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [p["speculative_batch"] for p in printed["levels"]] == [1, 4, 4]
    with pytest.raises(SystemExit):
        main_calibrate_simulator([results, "--baseline-max-running", "0"])
    assert "give 1 or more" in capsys.readouterr().err


@pytest.mark.slow
def test_an_aba_baseline_pools_both_launches_at_every_level(tmp_path):
    profile = _profile(tmp_path, bench_extra={"concurrency": [1, 4], "design": "aba",
                                              "repeats": 1, "max_repeats": 1})
    live = run_live(profile, tmp_path / "reports")
    assert live.baseline_after is not None
    for level in (1, 4):
        pooled = live.baseline.at(level).measurement
        assert pooled is not None
        assert pooled.concurrency == level
        assert pooled.repeats == 2  # one pass a launch
        assert "two launches" in pooled.stop_reason
    assert levels.level_claim("spec.speedup", profile, live, 4).status is Status.PASSED
