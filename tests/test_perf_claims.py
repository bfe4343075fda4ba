"""Tests for specgate.claims.perf on constructed measurements: wording, verdicts, silent faults."""

import pytest

from specgate.claims import perf as perf_claims
from specgate.claims.result import Status
from specgate.core.profile import BenchSection, parse_profile
from specgate.measure.bench import RequestSample, build_measurement
from specgate.measure.live import ConfigRun, EnvCheck, Failure, GpuCheck, LiveResults
from specgate.measure.prompts import template_named

PLAIN = template_named("plain", "test")


def _profile(**thresholds):
    return parse_profile({"name": "t", "speculative": {"num_steps": 2, "eagle_topk": 1,
                                                       "num_draft_tokens": 3},
                          "server": {"env": {"NCCL_PROTO": "Simple"}},
                          "thresholds": {"baseline_tps_min": 80.0, "accept_len_min": 2.46,
                                         **thresholds}})


def _measurement(config, *, tps_per_repeat, verify=None, completion=83, requests=4,
                 prompt_factors=None):
    """Requests whose decode rate is exactly the given tok/s in each repeat (times the prompt's
    factor: intervals are over prompts, so prompts that differ give an interval its width)."""
    samples = []
    factors = prompt_factors or [1.0] * requests
    for repeat, tps in enumerate(tps_per_repeat, 1):
        for i in range(requests):
            decode_s = (completion - 1) / (tps * factors[i])
            samples.append(RequestSample(repeat, f"p{i}", "chat" if i % 2 else "math", 10,
                                         completion, verify, 0.05, 0.05 + decode_s, None,
                                         "stop", 10))
    # One look (repeats == max_repeats): intervals at the plain 95 %, as the wording tests expect.
    return build_measurement(config=config, url="http://x", template=PLAIN,
                             bench=BenchSection(max_repeats=3), samples=samples)


def _live(base=None, spec=None, *, base_run=None, spec_run=None, gpu=None, env=None):
    base_run = base_run or ConfigRun("baseline", measurement=base, gpu=gpu, env=env)
    spec_run = spec_run or ConfigRun("speculative", measurement=spec, gpu=gpu, env=env,
                                     server_info={"speculative_algorithm": "EAGLE3"})
    return LiveResults("t", False, base_run, spec_run)


def _seeds_story():
    # Baseline 82 tok/s; the drafter: 30 ms cycles with accept length 2.00 (60 tok/s or so).
    base = _measurement("baseline", tps_per_repeat=[81.5, 82.0, 82.5])
    spec = _measurement("speculative", tps_per_repeat=[99 / 1.5] * 3, verify=50, completion=100)
    return base, spec


def test_breakeven_message_shows_the_arithmetic_of_the_seeds():
    base, spec = _seeds_story()
    result = perf_claims.breakeven_claim(_profile(), _live(base, spec))
    assert result.status is Status.FAILED
    assert result.message.startswith("cycle 30.0 ms × 82.0 tok/s = break-even 2.46")
    assert "the drafter makes serving slower" in result.message
    assert result.observed == pytest.approx(1.98)  # decode-only: (100 − 1) / 50
    assert result.details["breakeven"] == pytest.approx(2.46, abs=1e-3)
    assert result.expected == ">= 2.460"
    names = [a.name for a in result.attachments]
    assert "required accept length for tok/s targets" in names
    table = next(a.body for a in result.attachments if a.name.startswith("required"))
    assert "150.0           4.500       n/a" in table  # 4.5 > 3 = max with 2 steps
    assert "break-even" in table


def test_speedup_fails_below_one_with_interval():
    base, spec = _seeds_story()
    result = perf_claims.speedup_claim(_profile(), _live(base, spec))
    assert result.status is Status.FAILED
    assert "makes serving slower" in result.message
    assert "95 % CI" in result.message
    assert result.observed == pytest.approx(66.0 / 82.0, rel=1e-3)


def test_speedup_names_the_prompts_that_are_not_faster():
    # Four prompts: the drafter doubles two and runs two at 0.5× and 0.6×, as a drafter of a
    # 64-layer target on real SGLang ran 11 of 42 prompts at 0.47-0.87×.
    base = _measurement("baseline", tps_per_repeat=[100.0] * 3)
    spec = _measurement("speculative", tps_per_repeat=[100.0] * 3, verify=40, completion=83,
                        prompt_factors=[0.5, 2.0, 0.6, 2.0])
    result = perf_claims.speedup_claim(_profile(), _live(base, spec))
    assert "per prompt (median 1.30×) not above 1 on 2 of 4: p0 0.50×" in result.message
    assert "p2 0.60×, accept length 2.08" in result.message
    rows = result.details["per_prompt"]
    assert [r["prompt_id"] for r in rows] == ["p0", "p2", "p1", "p3"]  # slowest first
    assert rows[0]["speedup"] == pytest.approx(0.5)
    assert rows[-1]["category"] == "chat"


def test_speedup_spread_when_every_prompt_is_faster():
    base = _measurement("baseline", tps_per_repeat=[100.0] * 3)
    spec = _measurement("speculative", tps_per_repeat=[150.0] * 3, verify=40,
                        prompt_factors=[1.0, 1.2, 1.1, 1.3])
    result = perf_claims.speedup_claim(_profile(), _live(base, spec))
    assert "per prompt 1.50× to 1.95× (median 1.73×), above 1 on all 4" in result.message
    assert "not above" not in result.message


def test_accept_len_against_breakeven_threshold():
    base, spec = _seeds_story()
    result = perf_claims.accept_len_claim(_profile(accept_len_min="breakeven"), _live(base, spec))
    assert result.status is Status.FAILED
    assert "measured break-even 2.460" in result.message
    assert "chat 2.00" in result.message


def test_inconclusive_interval_fails_with_that_wording():
    base = _measurement("baseline", tps_per_repeat=[80.0] * 3,
                        prompt_factors=[0.85, 1.15, 0.9, 1.1])
    result = perf_claims.baseline_tps_claim(_profile(), _live(base))
    assert result.status is Status.FAILED
    assert "inconclusive at 95 %" in result.message
    tps = result.details["tps"]
    assert tps["ci_low"] < 80.0 < tps["ci_high"]
    assert tps["n"] == 4  # the interval is over the 4 prompts, not the 3 repeats


def test_baseline_passes_when_the_interval_clears():
    base = _measurement("baseline", tps_per_repeat=[90.0, 90.5, 91.0])
    result = perf_claims.baseline_tps_claim(_profile(), _live(base))
    assert result.status is Status.PASSED
    assert result.observed == pytest.approx(90.5)
    # The per-request CSV, the statistics table and the tok/s-per-repeat chart.
    assert {a.kind for a in result.attachments} == {"csv", "text", "png"}
    png = next(a for a in result.attachments if a.kind == "png")
    assert isinstance(png.body, bytes)
    assert png.body.startswith(b"\x89PNG")


def test_secretly_speculative_baseline_is_flagged():
    base = _measurement("baseline", tps_per_repeat=[90.0, 91.0], verify=30)
    result = perf_claims.baseline_tps_claim(_profile(), _live(base))
    assert result.status is Status.BROKEN
    assert "baseline server is speculative" in result.message


def test_accept_len_near_one_says_drafter_not_wired():
    spec = _measurement("speculative", tps_per_repeat=[50.0, 50.0], verify=82, completion=83)
    result = perf_claims.accept_len_claim(_profile(), _live(None, spec))
    assert result.status is Status.FAILED
    assert "not wired in" in result.message
    assert "missing d2t" in result.message


def test_missing_spec_fields_break_accept_len():
    spec = _measurement("speculative", tps_per_repeat=[50.0, 50.0])
    result = perf_claims.accept_len_claim(_profile(), _live(None, spec))
    assert result.status is Status.BROKEN
    assert "no spec_verify_ct on 8 of 8 responses" in result.message


def test_failures_make_claims_broken_with_log_tail():
    failure = Failure("start", "server exited with code 1", "CUDA error: out of memory")
    live = _live(base_run=ConfigRun("baseline", failure=failure),
                 spec_run=ConfigRun("speculative", failure=failure))
    for fn in (perf_claims.baseline_tps_claim, perf_claims.accept_len_claim,
               perf_claims.breakeven_claim, perf_claims.speedup_claim):
        result = fn(_profile(), live)
        assert result.status is Status.BROKEN
        assert "CUDA error: out of memory" in result.message


def test_gpu_clean_lists_offenders_or_skips():
    dirty = GpuCheck(True, "GPUs [0] checked", ({"pid": 4242, "process_name": "python3",
                                                 "gpu_index": 0, "used_memory_mib": 70000},))
    result = perf_claims.gpu_clean_claim(_profile(), _live(gpu=dirty))
    assert result.status is Status.FAILED
    assert "pid 4242 python3 on GPU 0 holding 70000 MiB" in result.message
    nosmi = GpuCheck(False, "nvidia-smi is not available")
    assert perf_claims.gpu_clean_claim(_profile(), _live(gpu=nosmi)).status is Status.SKIPPED
    assert perf_claims.gpu_clean_claim(_profile(), _live()).status is Status.SKIPPED
    clean = GpuCheck(True, "GPUs [0] checked")
    assert perf_claims.gpu_clean_claim(_profile(), _live(gpu=clean)).status is Status.PASSED


def test_server_env_mismatch_and_unreadable():
    want = {"NCCL_PROTO": "Simple"}
    bad = EnvCheck(True, "read", want, {"NCCL_PROTO": None})
    result = perf_claims.server_env_claim(_profile(), _live(env=bad))
    assert result.status is Status.FAILED
    assert "NCCL_PROTO=None (expected 'Simple')" in result.message
    good = EnvCheck(True, "read", want, {"NCCL_PROTO": "Simple"})
    assert perf_claims.server_env_claim(_profile(), _live(env=good)).status is Status.PASSED
    remote = EnvCheck(False, "remote launcher: the environment lives on the GPU host", want)
    result = perf_claims.server_env_claim(_profile(), _live(env=remote))
    assert result.status is Status.SKIPPED
    assert "remote launcher" in result.message


def test_live_results_round_trip(tmp_path):
    base, spec = _seeds_story()
    live = _live(base, spec, gpu=GpuCheck(True, "ok"),
                 env=EnvCheck(True, "read", {"A": "1"}, {"A": "1"}))
    live.write(tmp_path / "r.json")
    back = LiveResults.read(tmp_path / "r.json")
    assert back == live
