"""The per-level claims and the simulator's fit on two launches of real SGLang 0.5.17 on
an H200 (an 8B-shaped target and a drafter that accepts 2.0,
benchmarks/results/2026-12-04-h200-llama8b-shapes-concurrency/): a level above the speculative
server's max_running_requests, and a level where the baseline did not run the requests held in
flight at once."""

import dataclasses
import gzip
from pathlib import Path

from specgate.claims import levels
from specgate.claims import spec as spec_claims
from specgate.core.profile import load_profile
from specgate.results import held
from specgate.results.live import ConfigRun, LiveResults
from specgate.testing.simulator import calibrate

RESULT = (Path(__file__).resolve().parents[2] / "benchmarks" / "results"
          / "2026-12-04-h200-llama8b-shapes-concurrency")


def _read(tmp_path: Path, run: str) -> LiveResults:
    results = tmp_path / f"{run}.json"
    results.write_bytes(gzip.decompress((RESULT / run / "crossover-results.json.gz").read_bytes()))
    return LiveResults.read(results)


def _capped(live: LiveResults, cap: int | None = 48) -> LiveResults:
    """The session with the speculative server's max_running_requests set (48: SGLang's default
    for speculative decoding, which the first launch's results do not record and its server
    log does) or removed (None)."""
    info = {k: v for k, v in live.speculative.server_info.items()
            if k != "max_running_requests"}
    if cap is not None:
        info["max_running_requests"] = cap
    return dataclasses.replace(live, speculative=dataclasses.replace(live.speculative,
                                                                     server_info=info))


def _session(tmp_path: Path, run: str):
    return load_profile(RESULT / run / "crossover-profile.toml"), _capped(_read(tmp_path, run))


def test_a_baseline_whose_requests_decoded_far_faster_than_alone_was_not_held(tmp_path):
    """At 64 in flight in the second launch half the baseline's requests decoded about twice
    as fast as its fastest single stream: its claims there say the server did not run the 64
    at once."""
    profile, live = _session(tmp_path, "crossover-48")
    baseline = levels.level_claim("perf.baseline_tps", profile, live, 64)
    found = baseline.details["not_held"]["baseline"]
    assert (found["faster"], found["requests"], found["alone_level"]) == (21, 42, 1)
    assert found["fastest_tps"] > 2 * found["alone_fastest_tps"]
    assert "Not held: at 64 in flight 21 of the baseline server's 42 requests" in baseline.message
    assert "the server did not run the 64 requests held in flight at once" in baseline.message
    # the speed-up judges both servers' timings; the accept length is not a timing
    assert set(levels.level_claim("spec.speedup", profile, live, 64).details["not_held"]) == {
        "baseline"}
    assert "not_held" not in levels.level_claim("spec.accept_len", profile, live, 64).details
    for level in (32, 48):
        assert "not_held" not in levels.level_claim("spec.speedup", profile, live, level).details
    gate = spec_claims.speedup_claim(profile, live, attach=False)
    assert set(gate.details["not_held_levels"]) == {"64"}
    assert "at 64 in flight the baseline server did not run the requests" in gate.message


def test_a_session_whose_servers_ran_every_level_as_held_has_no_note(tmp_path):
    profile, live = _session(tmp_path, "crossover")
    for level in (2, 4, 8, 16, 32, 64):
        claim = levels.level_claim("spec.speedup", profile, live, level)
        assert "not_held" not in claim.details
        assert "Not held" not in claim.message
    # the queue above the speculative server's cap is named at 64 alone
    at64 = levels.level_claim("spec.speedup", profile, live, 64)
    assert at64.details["queued"] == {"speculative": {"max_running_requests": 48, "waiting": 16}}
    assert "queued" not in levels.level_claim("spec.speedup", profile, live, 32).details


def _faster(run: ConfigRun, level: int, how_many: int, by: float) -> ConfigRun:
    """The run with `how_many` of its requests at `level` decoding `by` times its fastest at
    1 in flight."""
    top = max(held.decode_rates(run.at(1).measurement))
    m = run.levels[level]
    samples = list(m.samples)
    for i in range(how_many):
        r = samples[i]
        samples[i] = dataclasses.replace(r, e2e_s=r.ttft_s + r.decode_tokens / (by * top))
    return dataclasses.replace(run, levels={**run.levels,
                                            level: dataclasses.replace(m, samples=samples)})


def test_a_few_requests_or_a_small_lead_over_the_fastest_alone_is_noise(tmp_path):
    base = _read(tmp_path, "crossover").baseline
    assert held.not_held(base, 2) is None
    assert held.not_held(_faster(base, 2, 20, 1.15), 2) is None  # within FASTER_BY
    assert held.not_held(_faster(base, 2, 4, 1.5), 2) is None  # under 10 % of 42
    seen = held.not_held(_faster(base, 2, 5, 1.5), 2)
    assert seen is not None
    assert seen.faster == 5
    assert held.not_held(base, 1) is None  # the smallest level is never set against itself


def test_the_default_fit_leaves_out_a_level_whose_server_did_not_run_what_was_held(tmp_path):
    live = _read(tmp_path, "crossover-48")
    assert live.speculative.max_running == 48  # recorded from /server_info
    # without the cap, 64 is left out because the baseline did not run the 64 at once
    found = calibrate.fit(_capped(live, None))
    assert found.fit_levels == (1, 32, 48)
    at64 = next(p for p in found.points if p["concurrency"] == 64)
    assert at64["not_held"] is True
    assert at64["queued"] is False
    assert at64["held_out"] is True
    capped = calibrate.fit(_capped(live), fit_levels=[1, 32])
    at48 = next(p for p in capped.points if p["concurrency"] == 48)
    assert abs(at48["speedup_error"]) < 0.05  # the held-out level at the cap, as the README says
