"""Tests for specgate.claims.perf on constructed measurements: wording, verdicts, silent faults."""

import contextlib
import dataclasses
import math
import statistics
from types import SimpleNamespace

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from specgate.claims import env as env_claims
from specgate.claims import perf as perf_claims
from specgate.claims import spec as spec_claims
from specgate.claims import verdict
from specgate.claims.figures import figures_of, key_figures
from specgate.claims.result import Attachment, Status
from specgate.core.profile import parse_profile
from specgate.plugin import verdict_writer
from specgate.results import bench, drift, stats
from specgate.results.bench import RequestSample, Sampling, build_measurement
from specgate.results.live import ConfigRun, EnvCheck, Failure, GpuCheck, LiveResults
from specgate.results.prompts import template_named

PLAIN = template_named("plain", "test")
# A deployment whose launches are known not to move (set in the profile): the tests of wording
# and arithmetic below judge the interval over prompts and passes as it is.
STABLE = drift.Coverage("ab", drift.fixed("tps", 1e-9), drift.fixed("cycle_ms", 1e-9))


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
                             sampling=Sampling(max_repeats=3), samples=samples)


def _live(base=None, spec=None, *, base_run=None, spec_run=None, gpu=None, env=None,
          coverage=STABLE):
    base_run = base_run or ConfigRun("baseline", measurement=base, gpu=gpu, env=env)
    spec_run = spec_run or ConfigRun("speculative", measurement=spec, gpu=gpu, env=env,
                                     server_info={"speculative_algorithm": "EAGLE3"})
    return LiveResults("t", False, base_run, spec_run, coverage=coverage)


def _seeds_story():
    # Baseline 82 tok/s; the drafter: 30 ms cycles with accept length 2.00 (60 tok/s or so).
    base = _measurement("baseline", tps_per_repeat=[81.5, 82.0, 82.5])
    spec = _measurement("speculative", tps_per_repeat=[99 / 1.5] * 3, verify=50, completion=100)
    return base, spec


def test_breakeven_message_shows_the_arithmetic_of_the_seeds():
    base, spec = _seeds_story()
    result = spec_claims.breakeven_claim(_profile(), _live(base, spec))
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
    result = spec_claims.speedup_claim(_profile(), _live(base, spec))
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
    result = spec_claims.speedup_claim(_profile(), _live(base, spec))
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
    result = spec_claims.speedup_claim(_profile(), _live(base, spec))
    assert "per prompt 1.50× to 1.95× (median 1.73×), above 1 on all 4" in result.message
    assert "not above" not in result.message


def test_accept_len_against_breakeven_threshold():
    base, spec = _seeds_story()
    result = spec_claims.accept_len_claim(_profile(accept_len_min="breakeven"), _live(base, spec))
    assert result.status is Status.FAILED
    assert "measured break-even 2.460" in result.message
    assert "chat 2.00" in result.message
    # Said against the break-even, in accept length: not "below 1" (the paired ratio's terms).
    assert "below the whole" in result.message
    assert "interval of the break-even [" in result.message
    assert "below 1" not in result.message


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
    result = spec_claims.accept_len_claim(_profile(), _live(None, spec))
    assert result.status is Status.FAILED
    assert "not wired in" in result.message
    assert "missing d2t" in result.message


def test_missing_spec_fields_break_accept_len():
    spec = _measurement("speculative", tps_per_repeat=[50.0, 50.0])
    result = spec_claims.accept_len_claim(_profile(), _live(None, spec))
    assert result.status is Status.BROKEN
    assert "no spec_verify_ct on 8 of 8 responses" in result.message


def test_failures_make_claims_broken_with_log_tail():
    failure = Failure("start", "server exited with code 1", "CUDA error: out of memory")
    live = _live(base_run=ConfigRun("baseline", failure=failure),
                 spec_run=ConfigRun("speculative", failure=failure))
    for fn in (perf_claims.baseline_tps_claim, spec_claims.accept_len_claim,
               spec_claims.breakeven_claim, spec_claims.speedup_claim):
        result = fn(_profile(), live)
        assert result.status is Status.BROKEN
        assert "server did not start" in result.message
        assert "CUDA error: out of memory" in result.cause


def test_gpu_clean_lists_offenders_or_skips():
    dirty = GpuCheck(True, "GPUs [0] checked", ({"pid": 4242, "process_name": "python3",
                                                 "gpu_index": 0, "used_memory_mib": 70000},))
    result = env_claims.gpu_clean_claim(_profile(), _live(gpu=dirty))
    assert result.status is Status.FAILED
    assert "pid 4242 python3 on GPU 0 holding 70000 MiB" in result.message
    nosmi = GpuCheck(False, "nvidia-smi is not available")
    assert env_claims.gpu_clean_claim(_profile(), _live(gpu=nosmi)).status is Status.SKIPPED
    assert env_claims.gpu_clean_claim(_profile(), _live()).status is Status.SKIPPED
    clean = GpuCheck(True, "GPUs [0] checked")
    assert env_claims.gpu_clean_claim(_profile(), _live(gpu=clean)).status is Status.PASSED


def test_server_env_mismatch_and_unreadable():
    want = {"NCCL_PROTO": "Simple"}
    bad = EnvCheck(True, "read", want, {"NCCL_PROTO": None})
    result = env_claims.server_env_claim(_profile(), _live(env=bad))
    assert result.status is Status.FAILED
    assert "NCCL_PROTO=None (expected 'Simple')" in result.message
    good = EnvCheck(True, "read", want, {"NCCL_PROTO": "Simple"})
    assert env_claims.server_env_claim(_profile(), _live(env=good)).status is Status.PASSED
    remote = EnvCheck(False, "remote launcher: the environment lives on the GPU host", want)
    result = env_claims.server_env_claim(_profile(), _live(env=remote))
    assert result.status is Status.SKIPPED
    assert "remote launcher" in result.message


def test_live_results_round_trip(tmp_path):
    base, spec = _seeds_story()
    live = _live(base, spec, gpu=GpuCheck(True, "ok"),
                 env=EnvCheck(True, "read", {"A": "1"}, {"A": "1"}))
    live.write(tmp_path / "r.json")
    back = LiveResults.read(tmp_path / "r.json")
    assert back == live


# -- what the gate decides on: one paired ratio of pooled rates, and break-even mapped from it ----

ONE_LOOK = Sampling(repeats=1, max_repeats=1)


@st.composite
def paired_runs(draw, *, extra_spec_prompt=False):
    """Baseline and speculative requests over the same prompts: answers of different lengths
    on each side, rates that differ by prompt and repeat, so that pooled rates, means of rates
    and means of per-prompt ratios all differ."""
    n = draw(st.integers(2, 6))
    repeats = draw(st.integers(1, 3))
    base, spec = [], []

    def sample(repeat, pid, completion, verify, tps):
        return RequestSample(repeat, pid, "chat", 10, completion, verify, 0.01,
                             0.01 + (completion - 1) / tps, None, "stop", 10)

    for i in range(n):
        base_rate = draw(st.floats(20.0, 2000.0))
        speedup = draw(st.floats(0.3, 3.0))
        tau = draw(st.floats(1.0, 4.0))
        for repeat in range(1, repeats + 1):
            b_tokens, s_tokens = draw(st.integers(2, 300)), draw(st.integers(2, 300))
            b_jitter, s_jitter = draw(st.floats(0.7, 1.4)), draw(st.floats(0.7, 1.4))
            verify = max(1, round((s_tokens - 1) / tau))
            base.append(sample(repeat, f"p{i}", b_tokens, None, base_rate * b_jitter))
            spec.append(sample(repeat, f"p{i}", s_tokens, verify,
                               base_rate * speedup * s_jitter))
    if extra_spec_prompt:
        # A prompt only the speculative server answered, at a rate far from the others.
        spec.append(sample(1, "only-spec", 200, 20, draw(st.floats(1.0, 1e5))))
        base.append(sample(1, "only-base", 200, None, draw(st.floats(1.0, 1e5))))
    return (build_measurement(config="baseline", url="x", template=PLAIN, sampling=ONE_LOOK,
                              samples=base),
            build_measurement(config="speculative", url="x", template=PLAIN, sampling=ONE_LOOK,
                              samples=spec))


def _rate(samples):
    return sum(s.decode_tokens for s in samples) / math.fsum(s.decode_s for s in samples)


def _by_prompt(m):
    out = {}
    for s in m.samples:
        out.setdefault(s.prompt_id, []).append(s)
    return out


def _definitions(base, spec):
    """The pooled ratio the gate decides on, and the two statistics it must not be."""
    b, s = _by_prompt(base), _by_prompt(spec)
    shared = [p for p in s if p in b]
    pooled = (_rate([x for p in shared for x in s[p]])
              / _rate([x for p in shared for x in b[p]]))
    mean_of_ratios = statistics.fmean(_rate(s[p]) / _rate(b[p]) for p in shared)
    ratio_of_mean_rates = (statistics.fmean(_rate(s[p]) for p in shared)
                           / statistics.fmean(_rate(b[p]) for p in shared))
    return pooled, mean_of_ratios, ratio_of_mean_rates


@settings(max_examples=60, deadline=None)
@given(paired_runs(extra_spec_prompt=True))
def test_the_speedup_is_the_ratio_of_pooled_rates_over_paired_prompts(runs):
    base, spec = runs
    pooled, mean_of_ratios, ratio_of_mean_rates = _definitions(base, spec)
    # The data tell the three definitions apart.
    assume(abs(mean_of_ratios / pooled - 1) > 1e-3)
    assume(abs(ratio_of_mean_rates / pooled - 1) > 1e-3)
    ratio = bench.speedup(spec, base)
    assert ratio.mean == pytest.approx(pooled, rel=1e-9)
    assert ratio.n == len(_by_prompt(base)) - 1  # the prompt only one server answered: out


def test_the_speedup_of_two_prompts_is_neither_a_mean_of_ratios_nor_of_rates():
    # The same answers on both servers. p0: 200 tokens, baseline 100 tok/s (2 s), speculative
    # 400 tok/s (0.5 s). p1: 20 tokens, baseline 50 tok/s (0.4 s), speculative 25 tok/s (0.8 s).
    # Pooled: 220/1.3 ÷ 220/2.4 = 1.846, the time the drafter saves over these prompts. A mean
    # of per-prompt ratios says 2.25 and a ratio of mean rates 2.83.
    def sample(pid, tokens, verify, seconds):
        return RequestSample(1, pid, "chat", 10, tokens + 1, verify, 0.0, seconds, None,
                             "stop", 10)

    base = build_measurement(config="baseline", url="x", template=PLAIN, sampling=ONE_LOOK,
                             samples=[sample("p0", 200, None, 2.0), sample("p1", 20, None, 0.4)])
    spec = build_measurement(config="speculative", url="x", template=PLAIN, sampling=ONE_LOOK,
                             samples=[sample("p0", 200, 50, 0.5), sample("p1", 20, 15, 0.8)])
    pooled, mean_of_ratios, ratio_of_mean_rates = _definitions(base, spec)
    assert (mean_of_ratios, ratio_of_mean_rates) == pytest.approx((2.25, 212.5 / 75))
    assert bench.speedup(spec, base).mean == pytest.approx(pooled) == pytest.approx(2.4 / 1.3)
    with _no_plots():
        result = spec_claims.speedup_claim(_profile(), _live(base, spec))
    assert result.observed == pytest.approx(1.8462, abs=1e-4)


@st.composite
def ratios(draw):
    """A speed-up Summary as bench.speedup gives one: a positive estimate inside its interval."""
    mean = draw(st.floats(0.05, 20.0))
    below = draw(st.floats(0.0, 0.99)) * mean
    above = draw(st.floats(0.0, 5.0)) * mean
    return stats.Summary(n=5, mean=mean, std=1.0, cv=1.0, ci_low=mean - below,
                         ci_high=mean + above, confidence=0.95, df=4.0)


@given(ratios(), st.floats(1.0, 8.0), st.floats(0.1, 100.0))
def test_the_breakeven_interval_is_the_speedup_interval_in_accept_length(ratio, tau, cycle_ms):
    be = spec_claims.BreakEven(ratio, tau, cycle_ms, tau / ratio.mean / (cycle_ms / 1000.0))
    low, high = be.breakeven_ci
    assert low is not None
    assert high is not None
    # Ordered, around the point value, and τ ÷ the speed-up interval: the faster end of the
    # speed-up is the lower end of break-even.
    assert low <= be.breakeven <= high
    assert be.breakeven == pytest.approx(tau / ratio.mean)
    assert low == pytest.approx(tau / ratio.ci_high)
    assert high == pytest.approx(tau / ratio.ci_low)
    # Break-even and speed-up cannot contradict: τ clears the whole break-even interval exactly
    # when the whole speed-up interval clears 1.
    assert (tau > high) == (ratio.ci_low > 1.0)
    assert (tau < low) == (ratio.ci_high < 1.0)


def test_no_breakeven_interval_without_a_positive_speedup_interval():
    no_interval = stats.summarize([1.2])
    reaching_zero = stats.Summary(5, 0.5, 1.0, 2.0, -0.3, 1.3, 0.95, 4.0)
    for ratio in (no_interval, reaching_zero):
        assert spec_claims.BreakEven(ratio, 2.0, 10.0, 100.0).breakeven_ci == (None, None)


@contextlib.contextmanager
def _no_plots():
    """The claims without their charts (matplotlib is what costs time here, not the claims)."""
    blank = Attachment("chart", b"", "png")
    with pytest.MonkeyPatch.context() as mp:
        for name in ("breakeven", "tps_repeats", "per_prompt", "per_category", "per_position"):
            mp.setattr(spec_claims.live_plots, name, lambda *a, **k: blank)
        yield


@settings(max_examples=40, deadline=None)
@given(paired_runs())
def test_breakeven_and_speedup_decide_on_the_one_paired_interval(runs):
    base, spec = runs
    profile = _profile(speedup_min=1.0, accept_len_min="breakeven")
    live = _live(base, spec)
    with _no_plots():
        breakeven = spec_claims.breakeven_claim(profile, live)
        speedup = spec_claims.speedup_claim(profile, live)
        accept = spec_claims.accept_len_claim(profile, live)
    ratio = bench.speedup(spec, base)
    tau = spec.stats["tau_decode"].mean  # decode-only: Σ(completion − 1) / Σ verify
    d = breakeven.details
    # The details round to 4 places the interval STABLE's 1e-9 spread widens by a hair: a value
    # on a rounding tie may round either way, half a unit of the last place from the raw one.
    last_place = 0.5e-4 + 1e-8
    assert d["speedup_ci"] == pytest.approx([ratio.ci_low, ratio.ci_high], abs=last_place)
    assert d["breakeven"] == round(tau / ratio.mean, 4)
    if ratio.ci_low > 0:
        assert d["breakeven_ci"] == pytest.approx([tau / ratio.ci_high, tau / ratio.ci_low],
                                                  abs=last_place)
    assert breakeven.observed == round(tau, 3)
    # Break-even is cycle time × baseline tok/s, the arithmetic the message shows.
    cycle_s = spec.stats["cycle_ms"].mean / 1000.0
    assert tau / ratio.mean == pytest.approx(cycle_s * base.stats["tps"].mean, rel=1e-9)
    assert speedup.observed == round(ratio.mean, 4)
    # One hypothesis, one verdict, whichever claim states it.
    assert breakeven.status is speedup.status is accept.status
    assert (breakeven.status is Status.PASSED) == (ratio.ci_low > 1.0)


def test_key_figures_come_from_the_claims_with_their_intervals(tmp_path):
    """What the closing block and the report's overview show is what the claims measured."""
    base = _measurement("baseline", tps_per_repeat=[81.0, 82.0, 83.0],
                        prompt_factors=[0.95, 1.0, 1.05, 1.1])
    spec = _measurement("speculative", tps_per_repeat=[150.0, 152.0, 154.0], verify=40,
                        completion=100, prompt_factors=[1.0, 1.1, 0.9, 1.05])
    live = _live(base, spec)
    profile = _profile(speedup_min=1.0)
    results = [perf_claims.baseline_tps_claim(profile, live),
               spec_claims.accept_len_claim(profile, live),
               spec_claims.breakeven_claim(profile, live),
               spec_claims.speedup_claim(profile, live)]
    by_id = {r.id: r for r in results}
    figures = {f.key: f for f in key_figures(results)}
    assert list(figures) == ["baseline_tps", "accept_len", "breakeven", "speedup"]
    tps = by_id["perf.baseline_tps"].details["tps"]
    assert (figures["baseline_tps"].value, figures["baseline_tps"].ci_low,
            figures["baseline_tps"].ci_high) == (tps["mean"], tps["ci_low"], tps["ci_high"])
    assert figures["accept_len"].value == by_id["spec.accept_len"].details["accept_len"]["mean"]
    assert figures["breakeven"].value == by_id["spec.breakeven"].details["breakeven"]
    assert [figures["breakeven"].ci_low, figures["breakeven"].ci_high] == (
        by_id["spec.breakeven"].details["breakeven_ci"])
    speedup = by_id["spec.speedup"].details["speedup"]
    assert figures["speedup"].value == speedup["mean"]
    for figure in figures.values():
        assert figure.ci_low is not None
        assert figure.ci_high is not None
        assert figure.ci_low <= figure.value <= figure.ci_high
        assert figure.confidence == speedup["confidence"]
    # One source: the verdict carries them, and the closing block prints them from it.
    doc = verdict.build(results, profile="t", drafter=None, outcome="passed")
    assert [f.key for f in figures_of(doc)] == list(figures)
    assert doc["figures"]["speedup"]["ci_low"] == speedup["ci_low"]
    verdict.write(tmp_path / "verdict.json", doc)
    lines: list[str] = []
    reporter = SimpleNamespace(write_sep=lambda _sep, title: lines.append(title),
                               write_line=lines.append)
    verdict_writer.summarize(SimpleNamespace(reports_dir=tmp_path, warnings=[]), reporter)
    shown = "\n".join(lines)
    low, high = speedup["ci_low"], speedup["ci_high"]
    assert f"speed-up       {speedup['mean']:.3f}×, 95 % CI [{low:.3f}, {high:.3f}]" in shown
    assert f"baseline       {tps['mean']:.1f} tok/s, 95 % CI" in shown
    assert "accept length  " in shown
    assert "break-even     " in shown


def test_a_failed_server_is_one_cause_of_every_claim_it_broke():
    failure = Failure("start", "the speculative server exited with code 1", "OOM at layer 3")
    live = _live(_measurement("baseline", tps_per_repeat=[80.0] * 3),
                 spec_run=ConfigRun("speculative", failure=failure))
    results = [fn(_profile(), live) for fn in (
        spec_claims.accept_len_claim, spec_claims.breakeven_claim, spec_claims.speedup_claim)]
    assert {r.status for r in results} == {Status.BROKEN}
    assert {r.cause for r in results} == {"speculative server, during start: the speculative "
                                         "server exited with code 1\n--- last lines of the "
                                         "server log ---\nOOM at layer 3"}
    for r in results:
        assert r.message == ("the speculative measurement could not be made: the speculative "
                             "server did not start")
    doc = verdict.build(results, profile="t", drafter=None, outcome="error")
    assert doc["causes"] == [{"message": results[0].cause,
                              "claims": ["spec.accept_len", "spec.breakeven", "spec.speedup"]}]


# -- what the timed claims' intervals cover -------------------------------------------------------

LEARNED = drift.Coverage("ab", drift.Spread("tps", 0.04, 5.0, "learned", 6, 1),
                         drift.Spread("cycle_ms", 0.05, 4.0, "learned", 6, 3))


def _faster(by):
    """Every prompt `by` times faster on the speculative server, with a tight interval."""
    factors = [0.9, 1.0, 1.1, 1.05]
    base = _measurement("baseline", tps_per_repeat=[100.0, 100.5, 99.5], prompt_factors=factors)
    spec = _measurement("speculative", tps_per_repeat=[100.0 * by] * 3, verify=30,
                        prompt_factors=factors)
    return base, spec


TIMED = (perf_claims.baseline_tps_claim, spec_claims.speedup_claim,
         spec_claims.breakeven_claim, spec_claims.accept_len_claim)


def test_every_timed_claim_says_what_its_interval_covers():
    base, spec = _faster(2.0)
    profile = _profile(baseline_tps_min=60.0, accept_len_min="breakeven")
    with _no_plots():
        results = [claim(profile, _live(base, spec, coverage=LEARNED)) for claim in TIMED]
    for result in results:
        assert result.status is Status.PASSED, result.message
        assert "the interval includes the launch-to-launch spread" in result.message
        assert "learned from 6 launches of this deployment" in result.message
        covered = result.details["launch_spread"]
        assert covered["included"] is True
        assert covered["design"] == "ab"
    by_id = {r.id: r for r in results}
    assert by_id["spec.speedup"].details["launch_spread"]["sd"] == pytest.approx(
        math.sqrt(0.04**2 + 0.05**2), rel=1e-4)
    assert by_id["perf.baseline_tps"].details["launch_spread"]["sd"] == pytest.approx(0.04)
    assert "learned from 6 launches of 3 configurations" in by_id["spec.speedup"].message


def test_a_margin_within_the_launch_spread_fails_as_inconclusive_and_says_so():
    base, spec = _faster(1.12)
    profile = _profile(baseline_tps_min=82.0, accept_len_min="breakeven")
    with _no_plots():
        steady = [claim(profile, _live(base, spec)) for claim in TIMED]
        first = [claim(profile, _live(base, spec, coverage=None)) for claim in TIMED]
    # Over prompts and passes alone every claim clears its threshold...
    assert [r.status for r in steady] == [Status.PASSED] * 4
    # ...but not with the spread of launches specgate has not seen yet (the prior).
    for result in first:
        assert result.status is Status.FAILED, result.message
        assert result.reason == "within_launch_spread"
        assert "lies within the launch-to-launch spread it leaves out" in result.message
        assert "not a confident pass" in result.message
        assert "the prior of host-bound targets (" in result.message
        low, high = result.details["launch_spread"]["within_launch_ci"]
        assert low <= high
    speedup = next(r for r in first if r.id == "spec.speedup")
    judged, within = speedup.details["speedup"], speedup.details["speedup_within_launch"]
    assert judged["ci_low"] < 1.0 < within["ci_low"]
    assert speedup.details["launch_spread"]["baseline"]["source"] == "prior"


def test_a_gpu_bound_deployment_is_judged_with_the_narrow_prior_and_says_its_class():
    """The case above on a deployment classed GPU-bound: the prior of GPU-bound launches (under
    1 %) leaves the baseline's margin over its minimum clear, where the host-bound prior made
    it inconclusive."""
    from specgate.results import deployment

    base, spec = _faster(1.12)
    profile = _profile(baseline_tps_min=82.0, accept_len_min="breakeven")
    found = deployment.classify(tps=100.0, gpu_names=["NVIDIA H200"],
                                step=deployment.StepBytes(30e9))
    assert found.kind == "GPU-bound"
    coverage = drift.prior_coverage("ab", found)
    with _no_plots():
        results = {claim.__name__: claim(profile, _live(base, spec, coverage=coverage))
                   for claim in TIMED}
    baseline = results["baseline_tps_claim"]
    assert baseline.status is Status.PASSED, baseline.message
    assert "the prior of GPU-bound targets (9 launches" in baseline.message
    assert baseline.message.endswith(
        ". Deployment: GPU-bound: 62 % of the H200's memory bandwidth (30.00 GB a step × "
        "100 tok/s, against 4.8 TB/s)")
    assert baseline.details["deployment"]["class"] == "GPU-bound"
    # The speculative server's verify cycle takes the GPU-bound launches' prior too: the
    # speed-up of 1.12 that the host-bound priors left inconclusive (the case above) passes.
    speedup = results["speedup_claim"]
    cycle = drift.prior("cycle_ms", "GPU-bound", "NVIDIA H200")
    tps = drift.prior("tps", "GPU-bound", "NVIDIA H200")
    assert (f"speculative cycle {cycle.sd * 100:.1f} %, the prior of GPU-bound targets "
            f"({cycle.prior_launches} launches") in speedup.message
    assert "this deployment: GPU-bound, 62 % of memory bandwidth" in speedup.message
    assert speedup.details["launch_spread"]["sd"] == pytest.approx(
        math.hypot(cycle.sd, tps.sd), rel=1e-4)
    assert speedup.status is Status.PASSED, speedup.message
    assert 1.0 < speedup.details["speedup"]["ci_low"]


def test_a_result_without_a_coverage_is_judged_with_the_prior():
    base, spec = _faster(3.0)
    with _no_plots():
        result = spec_claims.speedup_claim(_profile(), _live(base, spec, coverage=None))
    assert result.status is Status.PASSED
    spread = result.details["launch_spread"]
    assert spread["speculative"] == drift.prior("cycle_ms").to_json()
    assert spread["baseline"] == drift.prior("tps").to_json()


def test_the_speedup_takes_the_stricter_confidence_of_two_sequential_measurements():
    """The baseline stopped after its first look (95 %); the speculative server looked up to
    three times (its intervals judged at 98.33 %). The speed-up's interval, and the claim
    judged on it, take the stricter level, as wide as the more-looked side requires."""
    import dataclasses

    factors = [0.8, 1.0, 1.1, 1.3]
    base = _measurement("baseline", tps_per_repeat=[80.0], prompt_factors=factors)
    spec = _measurement("speculative", tps_per_repeat=[120.0, 121.0, 119.0],
                        prompt_factors=[1.3, 1.0, 0.9, 0.8])
    looked = Sampling(repeats=1, max_repeats=3)
    strict = bench.judged_confidence(looked)
    assert strict == pytest.approx(1 - 0.05 / 3)
    spec = build_measurement(config="speculative", url="http://x", template=PLAIN,
                             sampling=looked, samples=spec.samples)
    assert spec.confidence == pytest.approx(strict)
    assert base.confidence == pytest.approx(0.95)
    for a, b in ((spec, base), (base, spec)):
        ratio = bench.speedup(a, b)
        assert ratio.confidence == pytest.approx(strict)
    at_95 = bench.speedup(dataclasses.replace(spec, confidence=0.95), base)
    ratio = bench.speedup(spec, base)
    assert ratio.mean == pytest.approx(at_95.mean)
    assert ratio.ci_high - ratio.ci_low > at_95.ci_high - at_95.ci_low
    result = spec_claims.speedup_claim(_profile(), _live(base, spec), attach=False)
    assert result.details["speedup_within_launch"]["confidence"] == pytest.approx(strict)
    assert "98.33 % CI" in result.message


def test_acceptance_per_draft_position_is_a_key_figure(tmp_path):
    """spec.accept_len records each draft position's acceptance with its interval; the verdict
    carries them as figures and the closing block shows them on one line."""
    base = _measurement("baseline", tps_per_repeat=[81.0, 82.0, 83.0])
    plain = _measurement("speculative", tps_per_repeat=[150.0, 152.0, 154.0], verify=40,
                         completion=100)
    hists = {"p0": (10, 20, 10), "p1": (12, 18, 10), "p2": (8, 22, 10), "p3": (10, 19, 11)}
    samples = [dataclasses.replace(s, drafts_histogram=hists[s.prompt_id])
               for s in plain.samples]
    spec = build_measurement(config="speculative", url="http://x", template=PLAIN,
                             sampling=Sampling(max_repeats=3), samples=samples,
                             server_spec={"speculative_num_steps": 2})
    result = spec_claims.accept_len_claim(_profile(), _live(base, spec))
    shares = [p["mean"] for p in result.details["accept_pos"]]
    assert shares == pytest.approx([120 / 160, 41 / 160])
    assert "accepted at draft 1 0.750, 2 0.256" in result.message
    figures = {f.key: f for f in key_figures([result])}
    assert list(figures) == ["accept_len", "accept_pos1", "accept_pos2"]
    first = figures["accept_pos1"]
    assert (first.value, first.ci_low, first.ci_high) == tuple(
        result.details["accept_pos"][0][k] for k in ("mean", "ci_low", "ci_high"))
    doc = verdict.build([result], profile="t", drafter=None, outcome="passed")
    assert [f.position for f in figures_of(doc)] == [None, 1, 2]
    verdict.write(tmp_path / "verdict.json", doc)
    lines: list[str] = []
    reporter = SimpleNamespace(write_sep=lambda _sep, title: lines.append(title),
                               write_line=lines.append)
    verdict_writer.summarize(SimpleNamespace(reports_dir=tmp_path, warnings=[]), reporter)
    shown = [line for line in lines if "accepted at draft" in line]
    assert shown == [f"  accepted at draft  1: {first.short_text()}, 2: "
                     f"{figures['accept_pos2'].short_text()}"]
