"""The per-level claims on two sessions real SGLang 0.5.17 served on an H200 (an 8B-shaped target
and a drafter that accepts 2.0, benchmarks/results/2026-12-04-h200-llama8b-shapes-concurrency/):
a level above the speculative server's max_running_requests, and a level where the baseline did
not run the requests held in flight at once."""

import dataclasses
import gzip
from pathlib import Path

from specgate.claims import levels
from specgate.claims import perf as perf_claims
from specgate.core.profile import load_profile
from specgate.measure.results import LiveResults

RESULT = (Path(__file__).resolve().parents[1] / "benchmarks" / "results"
          / "2026-12-04-h200-llama8b-shapes-concurrency")


def _session(tmp_path: Path, run: str):
    results = tmp_path / f"{run}.json"
    results.write_bytes(gzip.decompress((RESULT / run / "crossover-results.json.gz").read_bytes()))
    live = LiveResults.read(results)
    # these sessions' results do not record the cap; the servers' logs do (48, SGLang's default)
    info = {**live.speculative.server_info, "max_running_requests": 48}
    live = dataclasses.replace(live, speculative=dataclasses.replace(live.speculative,
                                                                     server_info=info))
    return load_profile(RESULT / run / "crossover-profile.toml"), live


def test_a_baseline_whose_requests_decoded_faster_than_alone_was_not_held(tmp_path):
    """At 64 in flight in the second session half the baseline's requests decoded faster than
    its fastest single stream: its claims there say the server did not run the 64 at once."""
    profile, live = _session(tmp_path, "crossover-48")
    baseline = levels.level_claim("perf.baseline_tps", profile, live, 64)
    found = baseline.details["not_held"]["baseline"]
    assert found["faster"] == 21
    assert found["requests"] == 42
    assert found["fastest_tps"] > 2 * found["alone_fastest_tps"]
    assert "Not held: at 64 in flight 21 of the baseline server's 42 requests" in baseline.message
    # the speed-up judges both servers' figures; the accept length the speculative server's only
    assert "baseline" in levels.level_claim("spec.speedup", profile, live, 64).details["not_held"]
    assert "not_held" not in levels.level_claim("spec.accept_len", profile, live, 64).details
    for level in (32, 48):
        assert "not_held" not in levels.level_claim("spec.speedup", profile, live, level).details
    gate = perf_claims.speedup_claim(profile, live, attach=False)
    assert set(gate.details["not_held_levels"]) == {"64"}
    assert "did not run the requests held in flight at once" in gate.message


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


def test_the_smallest_level_is_never_set_against_itself(tmp_path):
    _, live = _session(tmp_path, "crossover-48")
    assert perf_claims.not_held_at(live, 1) == ("", {})
    assert perf_claims.not_held_at(live, 32) == ("", {})
