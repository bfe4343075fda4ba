"""Tests for specgate.testing.simulator.model: truth formulas and request plans."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specgate.core.profile import parse_profile
from specgate.testing.simulator import model

rates_st = st.lists(st.floats(0.0, 1.0), min_size=1, max_size=6).map(tuple)


def spec_params(acceptance: tuple[float, ...] = (0.8, 0.7, 0.6), steps: int = 3,
                topk: int = 1, draft_tokens: int = 4) -> model.SimParams:
    return model.SimParams(
        drafter=model.Drafter(acceptance=acceptance),
        speculative=True,
        num_steps=steps,
        eagle_topk=topk,
        num_draft_tokens=draft_tokens,
    )


def test_truth_defaults_match_the_documented_formulas() -> None:
    t = model.truth(spec_params())
    assert t.baseline_tps == pytest.approx(500.0)
    assert t.cycle_ms == pytest.approx(2.0 + 0.1 * 4 + 0.3 * 3)
    assert t.tau == pytest.approx(1 + 0.8 + 0.8 * 0.7 + 0.8 * 0.7 * 0.6)
    assert t.spec_tps == pytest.approx(1000 * t.tau / t.cycle_ms)
    assert t.breakeven_accept_length == pytest.approx(t.cycle_ms / 2.0)
    assert t.speedup == pytest.approx(t.tau / t.breakeven_accept_length)


def test_short_acceptance_list_repeats_its_last_rate() -> None:
    assert model.effective_acceptance(spec_params((0.9,), steps=3)) == (0.9, 0.9, 0.9)


def test_tree_uses_best_of_topk_and_caps_depth_at_draft_tokens() -> None:
    rates = model.effective_acceptance(spec_params((0.5,), steps=5, topk=2, draft_tokens=4))
    assert rates == pytest.approx((0.75, 0.75, 0.75))


def test_category_multiplier_applies_to_matching_prompts_only() -> None:
    drafter = model.Drafter(
        acceptance=(0.5,),
        categories=(model.Category("code", ("def ",), 1.5),),
    )
    params = model.SimParams(drafter=drafter, speculative=True, num_steps=1, num_draft_tokens=2)
    assert model.truth(params, "def f(): pass").tau == pytest.approx(1.75)
    assert model.truth(params, "tell a story").tau == pytest.approx(1.5)


@given(rates_st, st.integers(0, 5), st.floats(0.0, 0.5))
def test_tau_is_monotone_and_bounded(rates: tuple[float, ...], index: int, bump: float) -> None:
    tau = model.tau_of(rates)
    assert 1.0 <= tau <= 1.0 + len(rates) + 1e-9
    i = index % len(rates)
    higher = tuple(min(1.0, a + bump) if k == i else a for k, a in enumerate(rates))
    assert model.tau_of(higher) >= tau - 1e-12


@given(st.floats(0.1, 50.0), st.floats(0.0, 5.0), st.floats(0.0, 5.0))
def test_breakeven_grows_with_cycle_cost(decode: float, extra: float, more: float) -> None:
    def breakeven(draft_step: float) -> float:
        timing = model.Timing(decode_ms=decode, draft_step_ms=draft_step)
        return model.truth(model.SimParams(timing=timing, speculative=True)).breakeven_accept_length

    assert breakeven(extra + more) >= breakeven(extra) - 1e-12


@settings(max_examples=60, deadline=None)
@given(
    st.text(min_size=1, max_size=40),
    st.integers(1, 300),
    rates_st,
    st.booleans(),
)
def test_plan_invariants(prompt: str, max_new: int, rates: tuple[float, ...], spec: bool) -> None:
    params = model.SimParams(drafter=model.Drafter(acceptance=rates), speculative=spec,
                             num_steps=len(rates), num_draft_tokens=len(rates) + 1)
    plan = model.plan_request(params, prompt, max_new, eos_token_id=7)
    assert math.ceil(0.5 * max_new) <= plan.completion_tokens <= max_new
    assert len(plan.output_ids) == plan.completion_tokens
    assert sum(plan.tokens_per_event) == plan.completion_tokens - 1
    if plan.completion_tokens == max_new:
        assert plan.finish_reason == {"type": "length", "length": max_new}
    else:
        assert plan.finish_reason == {"type": "stop", "matched": 7}
    if spec:
        assert plan.verify_ct == len(plan.tokens_per_event)
        assert plan.completion_tokens == 1 + plan.verify_ct + plan.num_correct_drafts
        assert sum(plan.histogram) == plan.verify_ct
        assert all(1 <= n <= len(rates) + 1 for n in plan.tokens_per_event)
    else:
        assert plan.verify_ct == 0
        assert set(plan.tokens_per_event) <= {1}
    assert model.plan_request(params, prompt, max_new, eos_token_id=7) == plan


def test_lengths_spread_between_half_and_full_with_some_capped() -> None:
    lengths = [model.output_length(f"prompt {i}", 200) for i in range(400)]
    assert min(lengths) >= 100
    capped = sum(n == 200 for n in lengths) / len(lengths)
    assert 0.1 < capped < 0.25
    assert len(set(lengths)) > 50


def test_ignore_eos_and_tiny_limits_use_the_whole_budget() -> None:
    assert model.output_length("x", 50, ignore_eos=True) == 50
    assert model.output_length("x", 1) == 1
    assert model.output_length("x", 0) == 0


def test_realised_accept_length_matches_tau_over_twenty_prompts() -> None:
    params = spec_params()
    tau = model.truth(params).tau
    plans = [model.plan_request(params, f"question number {i}: explain", 256) for i in range(20)]
    # Every cycle but each answer's last, which its EOS cuts short (as SGLang drops the
    # drafts accepted past an EOS): tau is the drafter's per cycle.
    verify = sum(p.verify_ct - 1 for p in plans)
    decode_tokens = sum(p.completion_tokens - 1 - p.tokens_per_event[-1] for p in plans)
    assert decode_tokens / verify == pytest.approx(tau, rel=0.005)
    # The last cycles count too in what SGLang's Σcompletion/Σverify shows, and the prefill
    # token adds one per request.
    last = sum(p.tokens_per_event[-1] for p in plans)
    completion = sum(p.completion_tokens for p in plans)
    assert completion / (verify + len(plans)) == pytest.approx(
        (tau * verify + last + len(plans)) / (verify + len(plans)), rel=0.005)
    assert all(p.tokens_per_event[-1] <= params.num_steps + 1 for p in plans)


def test_both_servers_answer_the_same_text_and_totals_are_exact() -> None:
    """A speculative answer ends at the EOS the target answers, whatever drafts the last cycle
    accepted past it: both servers' answers to a prompt have one length (and, without a
    target's logits, one text)."""
    spec, base = spec_params(), model.SimParams()
    prompts = [f"p{i}" for i in range(30)]
    for prompt in prompts:
        a, b = model.plan_request(spec, prompt, 64), model.plan_request(base, prompt, 64)
        assert a.output_ids == b.output_ids
        assert a.completion_tokens == b.completion_tokens
    completion, verify = model.expected_totals(spec, prompts, 64)
    plans = [model.plan_request(spec, p, 64) for p in prompts]
    assert completion == sum(p.completion_tokens for p in plans)
    assert verify == sum(p.verify_ct for p in plans)


def test_acceptance_pattern_varies_from_cycle_to_cycle() -> None:
    plan = model.plan_request(spec_params(), "some prompt", 256, ignore_eos=True)
    assert len(set(plan.tokens_per_event[:-1])) >= 3


def test_greedy_text_is_deterministic_and_seeded_text_differs() -> None:
    params = model.SimParams()
    a = model.plan_request(params, "same", 40)
    b = model.plan_request(params, "same", 40)
    c = model.plan_request(params, "same", 40, text_seed="other")
    assert a.output_ids == b.output_ids
    assert a.output_ids != c.output_ids
    assert a.completion_tokens == c.completion_tokens


def test_load_params_reads_files_then_env(tmp_path: Path) -> None:
    target, draft = tmp_path / "t", tmp_path / "d"
    target.mkdir()
    draft.mkdir()
    (target / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    (target / model.SIM_FILE).write_text(json.dumps({"decode_ms": 12.0, "verify_ms": 20.0}))
    (draft / model.SIM_FILE).write_text(json.dumps({"acceptance": [0.5, 0.4]}))
    params = model.load_params(target, draft, env={})
    assert (params.num_steps, params.eagle_topk, params.num_draft_tokens) == (5, 4, 8)
    assert params.timing.decode_ms == 12.0
    assert model.cycle_ms(params) == pytest.approx(20.0 + 5 * model.DEFAULT_DRAFT_STEP_MS)
    assert params.drafter.acceptance == (0.5, 0.4)
    assert params.speculative
    env = {"SPECGATE_SIM_ACCEPTANCE": "0.9", "SPECGATE_SIM_DECODE_MS": "3"}
    overridden = model.load_params(target, draft, num_steps=2, eagle_topk=1, env=env)
    assert overridden.drafter.acceptance == (0.9,)
    assert overridden.timing.decode_ms == 3.0
    assert overridden.num_draft_tokens == 3


def test_missing_files_give_documented_defaults(tmp_path: Path) -> None:
    params = model.load_params(tmp_path / "nowhere", None, env={})
    assert params.timing == model.Timing()
    assert params.drafter.acceptance == model.DEFAULT_ACCEPTANCE
    assert not params.speculative
    assert (params.num_steps, params.eagle_topk, params.num_draft_tokens) == (3, 1, 4)


@pytest.mark.parametrize("text", ["", "1.5", "0.5,x", "-0.1"])
def test_bad_acceptance_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="acceptance"):
        model.parse_acceptance(text)


def test_bad_sim_file_names_the_file(tmp_path: Path) -> None:
    (tmp_path / model.SIM_FILE).write_text("[1, 2]")
    with pytest.raises(ValueError, match=model.SIM_FILE):
        model.read_sim_file(tmp_path)


def test_truth_for_profile_uses_profile_paths_and_env(tmp_path: Path) -> None:
    (tmp_path / "draft").mkdir()
    (tmp_path / "draft" / model.SIM_FILE).write_text(json.dumps({"acceptance": [0.5]}))
    profile = parse_profile(
        {
            "name": "sim",
            "drafter": {"path": "draft"},
            "server": {"env": {"SPECGATE_SIM_DECODE_MS": "4"}},
            "speculative": {"num_steps": 2, "eagle_topk": 1, "num_draft_tokens": 3},
        },
        source=tmp_path / "profile.toml",
    )
    t = model.truth_for_profile(profile, env={})
    assert t.baseline_tps == pytest.approx(250.0)
    assert t.tau == pytest.approx(1.75)


# --- launch to launch ---------------------------------------------------------------------


def test_without_a_spread_every_launch_runs_at_speed_one() -> None:
    assert model.launch_speed(0.0, "any") == 1.0
    assert model.launch_spread({}) == 0.0
    params = spec_params()
    assert model.at_speed(params, 1.0) is params


def test_launch_speeds_are_seeded_and_spread_as_asked() -> None:
    assert model.launch_speed(0.1, "s/0/baseline") == model.launch_speed(0.1, "s/0/baseline")
    assert model.launch_speed(0.1, "s/0/baseline") != model.launch_speed(0.1, "s/1/baseline")
    logs = [math.log(model.launch_speed(0.12, f"spread/{k}")) for k in range(4000)]
    mean = sum(logs) / len(logs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
    assert abs(mean) < 0.01
    assert sd == pytest.approx(0.12, rel=0.05)


def test_a_launch_speed_divides_every_decode_cost_and_keeps_the_speedup() -> None:
    params = spec_params()
    fast = model.at_speed(params, 1.25)
    t, f = params.timing, fast.timing
    for name in ("decode_ms", "prefill_base_ms", "prefill_ms_per_token", "verify_base_ms",
                 "verify_ms_per_draft_token", "draft_step_ms", "batch_ms_per_token",
                 "draft_batch_ms_per_token"):
        assert getattr(f, name) == pytest.approx(getattr(t, name) / 1.25)
    assert (f.start_delay_s, f.health_generate_s) == (t.start_delay_s, t.health_generate_s)
    assert model.truth(fast).baseline_tps == pytest.approx(1.25 * model.truth(params).baseline_tps)
    assert model.truth(fast).speedup == pytest.approx(model.truth(params).speedup)


@pytest.mark.parametrize("text", ["-0.1", "fast", "nan"])
def test_a_bad_launch_spread_is_refused_with_the_variable_named(text: str) -> None:
    with pytest.raises(ValueError, match="SPECGATE_SIM_LAUNCH_SPREAD must be a number >= 0"):
        model.launch_spread({model.ENV_LAUNCH_SPREAD: text})


# -- batching ------------------------------------------------------------------------------

def test_one_sequence_is_timed_as_without_batching() -> None:
    params = spec_params()
    t = params.timing
    assert model.cycle_ms(params, 1) == pytest.approx(
        t.verify_base_ms + t.verify_ms_per_draft_token * 4 + t.draft_step_ms * 3)
    assert model.decode_step_ms(t, 1) == t.decode_ms
    assert model.truth(params, batch=1) == model.truth(params)


def test_batching_costs_follow_the_documented_slopes() -> None:
    timing = model.Timing(decode_ms=2.0, verify_base_ms=2.0, verify_ms_per_draft_token=0.1,
                          draft_step_ms=0.3, batch_ms_per_token=0.05,
                          draft_batch_ms_per_token=0.01)
    params = dataclasses.replace(spec_params(topk=2, draft_tokens=5), timing=timing)
    assert model.decode_step_ms(timing, 9) == pytest.approx(2.0 + 0.05 * 8)
    # verify: 8 more sequences of 5 draft tokens; draft steps: 8 more of topk 2, three steps.
    assert model.cycle_ms(params, 9) == pytest.approx(
        2.0 + 0.1 * 5 + 0.05 * 8 * 5 + 3 * (0.3 + 0.01 * 8 * 2))
    assert model.step_ms(params, 9) == model.cycle_ms(params, 9)
    base = dataclasses.replace(params, speculative=False)
    assert model.step_ms(base, 9) == model.decode_step_ms(timing, 9)


@settings(max_examples=200)
@given(st.floats(0.5, 20.0), st.floats(0.0, 2.0), st.floats(0.0005, 0.5), st.floats(0.0, 0.2),
       rates_st, st.integers(1, 6))
def test_the_speedup_moves_with_the_batch_and_crosses_1_at_the_crossover(
        decode: float, verify_extra: float, share: float, draft_slope: float,
        rates: tuple[float, ...], steps: int) -> None:
    slope = share * decode  # a token costs less than a whole step: decode is memory-bound
    timing = model.Timing(decode_ms=decode, verify_base_ms=decode + verify_extra,
                          verify_ms_per_draft_token=0.0, draft_step_ms=0.1 * decode,
                          batch_ms_per_token=slope, draft_batch_ms_per_token=draft_slope)
    params = model.SimParams(timing=timing, drafter=model.Drafter(acceptance=rates),
                             speculative=True, num_steps=steps, eagle_topk=1,
                             num_draft_tokens=steps + 1)
    batches = (1, 2, 4, 16, 64, 1024)
    speedups = [model.truth(params, batch=b).speedup for b in batches]
    # A memory-bound decode step gets cheaper per sequence as the batch grows.
    per_sequence = [model.decode_step_ms(timing, b) / b for b in batches]
    assert per_sequence == sorted(per_sequence, reverse=True)
    # A verify multiplies every sequence's work: the speed-up heads for τ × c / (the cycle's
    # cost per sequence), τ / (steps + 1) without draft costs, falling where it starts above.
    tau = model.tau_of(model.effective_acceptance(params))
    per_seq_cycle = (steps + 1) * slope + steps * draft_slope
    limit = tau * slope / per_seq_cycle
    if speedups[0] > limit:
        assert speedups == sorted(speedups, reverse=True)
    else:
        assert speedups == sorted(speedups)
    crossing = model.crossover_batch(params)
    if crossing is None:
        assert speedups[0] <= 1.0 or limit >= 1.0
        return
    assert speedups[0] > 1.0 > limit
    # The speed-up is linear-fractional in the batch: at the crossover it is 1 exactly.
    at = tau * (decode + slope * (crossing - 1)) / (model.cycle_ms(params)
                                                    + per_seq_cycle * (crossing - 1))
    assert at == pytest.approx(1.0)


def test_batching_slopes_come_from_the_target_file_and_env(tmp_path: Path) -> None:
    (tmp_path / model.SIM_FILE).write_text(json.dumps({"batch_ms_per_token": 0.2}))
    params = model.load_params(tmp_path, env={})
    assert params.timing.batch_ms_per_token == 0.2
    assert params.timing.draft_batch_ms_per_token == model.DEFAULT_DRAFT_BATCH_MS_PER_TOKEN
    params = model.load_params(tmp_path, env={"SPECGATE_SIM_DRAFT_BATCH_MS_PER_TOKEN": "0.03"})
    assert params.timing.draft_batch_ms_per_token == 0.03
    default = model.Timing()
    assert default.batch_ms_per_token == pytest.approx(0.0036 * default.decode_ms)
