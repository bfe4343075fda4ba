"""spec.parity: both servers' greedy answers compared, each divergence judged by the target's
own logprobs (results/parity.py, claims/parity.py), on constructed evidence and against the
simulator, alike pairs and unlike ones."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import sim_support
from ckpt_support import tiny_drafter

from specgate.claims.parity import parity_claim
from specgate.claims.result import Status
from specgate.core.profile import Profile, parse_profile
from specgate.measure.live import run_live
from specgate.results import parity
from specgate.results.answers import AnswerEvidence, Scored
from specgate.results.bench import RequestSample, Sampling, build_measurement
from specgate.results.live import ConfigRun, LiveResults
from specgate.results.prompts import template_named

PLAIN = template_named("plain", "test")


# -- constructed evidence --------------------------------------------------------------------

def _sample(prompt: str, ids: tuple[int, ...], repeat: int = 1,
            prompt_tokens: int = 5) -> RequestSample:
    return RequestSample(repeat=repeat, prompt_id=prompt, category="c",
                         prompt_tokens=prompt_tokens, completion_tokens=len(ids),
                         spec_verify_ct=None, ttft_s=0.01, e2e_s=0.1, server_e2e_s=None,
                         finish_reason="stop", chunks=len(ids), output_ids=ids)


def _measured(config: str, answers: dict[str, tuple[int, ...]], **kw: Any) -> Any:
    return build_measurement(config=config, url="http://x", template=PLAIN, sampling=Sampling(),
                             samples=[_sample(p, ids, **kw) for p, ids in answers.items()])


def _scored(prompt: str, tokens: tuple[int, ...], rows: list[list[tuple[int, float]]],
            forward: str = "prefill") -> Scored:
    """Scores along tokens: at each position the best (token, logprob), and the chosen token's
    own logprob read from them."""
    chosen = tuple(dict(row).get(t) for t, row in zip(tokens, rows, strict=True))
    return Scored(prompt, tokens, chosen, tuple(tuple(r) for r in rows), forward, "timed")


BASE = (11, 12, 13, 14)
TIE = [(11, -0.1), (21, -2.0)], [(12, -0.50), (22, -0.52)], [(13, -0.2), (23, -3.0)], \
    [(14, -0.1), (24, -4.0)]


def _evidence(*scored: Scored, batch: dict[str, tuple[int, ...]] | None = None,
              error: str = "") -> AnswerEvidence:
    texts = {11: " The", 12: " cat", 22: " dog", 13: " sat", 14: ".", 21: " A", 99: " zebra"}
    return AnswerEvidence(prompt_ids={"p": (1, 2, 3)}, batch=batch or {}, batch_size=2,
                          scored=scored, texts=texts, error=error)


def _margin_evidence(shift: float) -> list[Scored]:
    """A batch decode and a prefill of the same text whose best two move by `shift`."""
    tokens = (11, 12)
    prefill = _scored("q", tokens, [[(11, -0.1), (21, -2.0)], [(12, -0.3), (22, -1.0)]])
    decode = _scored("q", tokens, [[(11, -0.1), (21, -2.0)],
                                   [(12, -0.3), (22, -1.0 + shift)]], forward="decode")
    return [prefill, decode]


def test_the_first_divergence_is_where_two_answers_part() -> None:
    assert parity.first_divergence((1, 2, 3), (1, 2, 3)) is None
    assert parity.first_divergence((1, 2, 3), (1, 5, 3)) == 1
    assert parity.first_divergence((1, 2), (1, 2, 3)) == 2
    assert parity.first_divergence((), (4,)) == 0


def test_the_margin_is_the_widest_gap_the_baseline_moved_by_itself() -> None:
    """Three sources: a decode and a prefill of the same text, a prefill that ranks another
    token above one the baseline decoded, and two of its own answers that part."""
    assert parity.noise_margin(None, None).value is None
    shifted = parity.noise_margin(_evidence(*_margin_evidence(0.25)), None)
    assert shifted.value == pytest.approx(0.25)
    assert shifted.shifts == 2
    assert "decode in a timed against prefill, prompt q token 1" in shifted.widest
    # The prefill ranks 22 above the decoded 12 by 0.4: a flip of the baseline's own.
    flipped = _scored("r", (12,), [[(22, -0.1), (12, -0.5)]])
    found = parity.noise_margin(_evidence(flipped, *_margin_evidence(0.05)), None)
    assert found.value == pytest.approx(0.4)
    assert found.flips == 1
    # Its timed answer and its batch answer part at token 1, where the target's gap is 0.02.
    timed = _measured("baseline", {"p": BASE})
    batch = {"p": (11, 22, 33)}
    own = parity.noise_margin(_evidence(_scored("p", BASE, list(TIE)), batch=batch), timed)
    assert own.value == pytest.approx(0.02)
    assert "its answers to prompt p part at token 1" in own.widest


def _compare(spec_answer: tuple[int, ...], *, shift: float = 0.1,
             base_rows: list[list[tuple[int, float]]] | None = None,
             spec_tokens: int = 5, base_info: dict[str, Any] | None = None,
             spec_info: dict[str, Any] | None = None) -> parity.Parity:
    base = _measured("baseline", {"p": BASE})
    spec = _measured("speculative", {"p": spec_answer}, prompt_tokens=spec_tokens)
    evidence = _evidence(_scored("p", BASE, base_rows or list(TIE)), *_margin_evidence(shift))
    return parity.compare(base, spec, evidence, None, base_info or {}, spec_info or {})


def test_a_divergence_within_the_margin_is_a_near_tie() -> None:
    found = _compare((11, 22, 33, 44))
    assert found.identical == ()
    (d,) = found.divergences
    assert (d.position, d.baseline_text, d.speculative_text) == (1, " cat", " dog")
    assert d.gap == pytest.approx(0.02)
    assert d.explained
    assert "near-tie" in d.why


def test_a_divergence_wider_than_the_margin_is_not() -> None:
    rows = [list(TIE[0]), [(12, -0.2), (22, -0.9)], list(TIE[2]), list(TIE[3])]
    (d,) = _compare((11, 22, 33), base_rows=rows).divergences
    assert d.gap == pytest.approx(0.7)
    assert not d.explained
    assert "wider than the margin 0.100" in d.why
    # The same divergence with a margin the baseline measured wider than its gap: a tie.
    assert _compare((11, 22, 33), base_rows=rows, shift=0.8).divergences[0].explained


def test_a_token_outside_the_targets_best_is_never_a_tie() -> None:
    (d,) = _compare((11, 99, 33), shift=0.9).divergences
    assert d.speculative_logprob is None
    assert not d.explained
    assert "not among the target's best 2 (the worst of them -0.520" in d.why
    assert d.speculative_text == " zebra"


def test_settings_and_tokenization_that_differ_are_found() -> None:
    found = _compare(BASE, spec_tokens=7,
                     base_info={"dtype": "bfloat16", "model_path": "/m/a"},
                     spec_info={"dtype": "float16", "model_path": "/m/b"})
    assert found.identical == ("p",)
    assert found.settings == (("dtype", "bfloat16", "float16"),)
    assert found.served == (("model_path", "/m/a", "/m/b"),)
    assert found.token_counts == (("p", 5, 7),)


def _live(base_answers: dict[str, tuple[int, ...]], spec_answers: dict[str, tuple[int, ...]],
          evidence: AnswerEvidence | None, **info: dict[str, Any]) -> LiveResults:
    base = ConfigRun("baseline", measurement=_measured("baseline", base_answers),
                     answers=evidence, server_info=info.get("base", {}))
    spec = ConfigRun("speculative", measurement=_measured("speculative", spec_answers),
                     server_info=info.get("spec", {"speculative_algorithm": "EAGLE3"}))
    return LiveResults("t", False, base, spec)


def _profile(temperature: float = 0.0) -> Profile:
    return parse_profile({"name": "t", "bench": {"temperature": temperature}})


def test_the_claim_passes_identical_and_tied_answers() -> None:
    evidence = _evidence(_scored("p", BASE, list(TIE)), *_margin_evidence(0.1))
    result = parity_claim(_profile(), _live({"p": BASE, "q": (11, 12)},
                                            {"p": (11, 22, 33), "q": (11, 12)}, evidence))
    assert result.status is Status.PASSED, result.message
    assert result.message.startswith("2 prompts, 1 answered identically, 1 diverging answer; "
                                     "1 at a near-tie")
    assert result.observed == 0
    table = result.attachments[0].body
    assert isinstance(table, str)
    assert "p,near-tie,1,1, cat, dog" in table
    assert "q,identical" in table


def test_the_claim_fails_naming_the_prompt_position_and_tokens() -> None:
    rows = [[(11, -0.1), (21, -2.5)], *list(TIE[1:])]
    evidence = _evidence(_scored("p", BASE, rows), *_margin_evidence(0.1))
    result = parity_claim(_profile(), _live({"p": BASE}, {"p": (21, 12)}, evidence))
    assert result.status is Status.FAILED
    assert "1 diverging answer where the target has no near-tie: p at token 0: baseline " \
           "' The' (logprob -0.100), speculative ' A' (-2.500)" in result.message
    assert "At the first token (p) both servers run the same prefill" in result.message
    assert result.observed == 1


def test_the_claim_fails_unlike_settings_and_says_what_it_cannot_judge() -> None:
    evidence = _evidence(_scored("p", BASE, list(TIE)), *_margin_evidence(0.1))
    unlike = _live({"p": BASE}, {"p": BASE}, evidence, base={"quantization": None},
                   spec={"quantization": "fp8"})
    result = parity_claim(_profile(), unlike)
    assert result.status is Status.FAILED
    assert "compute the target differently: quantization None against fp8" in result.message
    sampled = parity_claim(_profile(temperature=0.7), unlike)
    assert sampled.status is Status.SKIPPED
    assert "out of reach" in sampled.message
    no_ids = _live({"p": ()}, {"p": BASE}, evidence)
    assert parity_claim(_profile(), no_ids).status is Status.BROKEN
    # Divergences with no logprobs from the baseline cannot be explained.
    blind = parity_claim(_profile(), _live({"p": BASE}, {"p": (11, 22)},
                                           _evidence(error="HTTP 400: logprobs refused")))
    assert blind.status is Status.FAILED
    assert "no target logprobs here: HTTP 400: logprobs refused" in blind.message


def test_evidence_round_trips_through_results_json() -> None:
    evidence = _evidence(_scored("p", BASE, list(TIE)), batch={"p": (11, 22)})
    run = ConfigRun("baseline", answers=evidence)
    back = ConfigRun.from_json(json.loads(json.dumps(run.to_json())))
    assert back.answers == evidence


# -- against the simulator -------------------------------------------------------------------

def _sim_profile(root: Path, **server: Any) -> Profile:
    target, draft = root / "target", root / "draft"
    for folder in (target, draft):
        folder.mkdir(parents=True, exist_ok=True)
    tiny_drafter(draft, config_overrides={"max_position_embeddings": 8192})
    (target / "config.json").write_text(json.dumps(
        {"architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16",
         "num_hidden_layers": 4}))
    (target / "specgate_sim.json").write_text(json.dumps(
        {"decode_ms": 0.5, "verify_ms": 0.8, "draft_step_ms": 0.05, "start_delay_s": 0.05,
         "health_generate_s": 0.02}))
    raw = {"name": "parity", "target": {"path": str(target)}, "drafter": {"path": str(draft)},
           "server": {"launcher": [sys.executable, "-m", "specgate.testing.simulator"],
                      "port": 0, "startup_timeout_s": 30, **server},
           "speculative": {"algorithm": "EAGLE3", "num_steps": 2, "eagle_topk": 1,
                           "num_draft_tokens": 3},
           "bench": {"max_new_tokens": 160, "warmup": 0, "repeats": 2, "max_repeats": 2,
                     "prompts_per_category": 2,
                     "launch_spread": 0.01},
           "thresholds": {"baseline_tps_min": 1.0, "accept_len_min": 1.0}}
    return parse_profile(raw, source=root / "profile.toml")


@pytest.mark.slow
def test_an_alike_pair_passes_with_its_divergences_explained(tmp_path: Path) -> None:
    profile = _sim_profile(tmp_path)
    live = run_live(profile, tmp_path / "reports")
    result = parity_claim(profile, live)
    assert result.status is Status.PASSED, result.message
    found = result.details
    assert found["divergences"], "the simulated target has near-ties that the verify turns"
    assert all(d["explained"] for d in found["divergences"])
    assert found["margin"]["value"] > 0
    assert live.baseline.answers is not None
    assert live.baseline.answers.batch_size == found["prompts"]
    # The speculative server scored only the answers that part from the baseline's.
    assert live.speculative.answers is not None
    assert {s.prompt_id for s in live.speculative.answers.scored} == {
        d["prompt_id"] for d in found["divergences"]}


@pytest.mark.slow
@pytest.mark.parametrize(("server", "said"), [
    ({"args": ["--dtype", "float16"], "baseline_args": ["--dtype", "bfloat16"]},
     "dtype bfloat16 against float16"),
    ({"baseline_args": ["--quantization", "fp8"]}, "quantization"),
], ids=["dtype", "quantization"])
def test_a_speculative_server_computing_otherwise_fails(tmp_path: Path, server: dict[str, Any],
                                                        said: str) -> None:
    """One server on another dtype, or a quantized target: its answers part where the target
    has no near-tie, and the claim names the prompt, the position and both tokens."""
    profile = _sim_profile(tmp_path, **server)
    result = parity_claim(profile, run_live(profile, tmp_path / "reports"))
    assert result.status is Status.FAILED
    assert said in result.message
    unexplained = [d for d in result.details["divergences"] if not d["explained"]]
    assert unexplained, "the answers alone must show it, not only the settings"
    first = unexplained[0]
    assert f"{first['prompt_id']} at token {first['position']}: baseline " \
           f"{first['baseline_text']!r}" in result.message


@pytest.mark.slow
def test_an_attached_pair_whose_baseline_serves_another_model_fails(tmp_path: Path) -> None:
    profile = _sim_profile(tmp_path / "spec")
    other = _sim_profile(tmp_path / "base")
    (other.target_path / "config.json").write_text(json.dumps(  # type: ignore[union-attr]
        {"architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16",
         "num_hidden_layers": 12}))
    spec_proc, spec_url = sim_support.start(
        sim_support.spec_args(profile.target_path, profile.drafter_path, 2),
        tmp_path / "spec.log", tmp_path / "spec-truth.jsonl")
    base_proc, base_url = sim_support.start(["--model-path", str(other.target_path)],
                                            tmp_path / "base.log", tmp_path / "base-truth.jsonl")
    try:
        attached = profile.with_overrides(server_url=spec_url, baseline_url=base_url)
        result = parity_claim(attached, run_live(attached, tmp_path / "reports"))
    finally:
        for proc in (spec_proc, base_proc):
            sim_support.stop(proc)
    assert result.status is Status.FAILED
    assert "at token 0:" in result.message
    assert "At the first token" in result.message
    assert "they serve model_path" in result.message


def test_a_baseline_that_disagrees_with_itself_beyond_rounding_gives_no_margin() -> None:
    """One of its own decodes trailing its prefill's best by 5 nats: no rounding does that, so
    no margin is measured and the divergence is not judged (never explained)."""
    evidence = _evidence(_scored("p", BASE, list(TIE)), *_margin_evidence(5.0))
    margin = parity.noise_margin(evidence, None)
    assert margin.value is None
    assert margin.beyond_count == 1
    assert "1 time over 1 nat (the widest: 5.000 nats" in margin.text()
    result = parity_claim(_profile(), _live({"p": BASE}, {"p": (11, 22, 33)}, evidence))
    assert result.status is Status.FAILED
    assert "1 divergence could not be judged" in result.message
    assert "At the first token" not in result.message


def test_every_repeat_of_the_speculative_server_is_compared() -> None:
    """Its first repeat answers as the baseline; its second parts where the target has no tie."""
    base = _measured("baseline", {"p": BASE})
    spec = build_measurement(config="speculative", url="u", template=PLAIN, sampling=Sampling(),
                             samples=[_sample("p", BASE), _sample("p", (11, 12, 23, 14),
                                                                  repeat=2)])
    live = LiveResults("t", False, ConfigRun("baseline", measurement=base, answers=_evidence(
        _scored("p", BASE, list(TIE)), *_margin_evidence(0.1))),
        ConfigRun("speculative", measurement=spec))
    result = parity_claim(_profile(), live)
    assert result.status is Status.FAILED
    assert "p at token 2 (its repeat 2)" in result.message


def test_prompts_unanswered_or_tokenized_otherwise_fail() -> None:
    evidence = _evidence(_scored("p", BASE, list(TIE)), *_margin_evidence(0.1))
    missing = parity_claim(_profile(), _live({"p": BASE, "q": (11, 12)}, {"p": BASE, "q": ()},
                                             evidence))
    assert missing.status is Status.FAILED
    assert "1 prompt got no answer with token ids from one of the servers" in missing.message
    assert missing.observed == 1
    base = ConfigRun("baseline", measurement=_measured("baseline", {"p": BASE}),
                     answers=evidence)
    spec = ConfigRun("speculative", measurement=_measured("speculative", {"p": BASE},
                                                          prompt_tokens=9))
    retokenized = parity_claim(_profile(), LiveResults("t", False, base, spec))
    assert retokenized.status is Status.FAILED
    assert "tokenize the same prompts differently" in retokenized.message


def test_a_setting_left_to_auto_or_unstated_is_not_compared() -> None:
    found = _compare(BASE, base_info={"dtype": "auto", "quantization": None},
                     spec_info={"dtype": "bfloat16"})
    assert found.settings == ()
    assert found.uncompared == ("dtype", "quantization")


def test_no_divergence_is_explained_without_its_evidence() -> None:
    """An answer that ends where the other goes on, a gap with no margin measured, a token the
    baseline gave no logprob for: none of them is a near-tie."""
    evidence = _evidence(_scored("p", BASE, list(TIE)), *_margin_evidence(0.1))
    base, spec = _measured("baseline", {"p": BASE}), _measured("speculative", {"p": BASE[:2]})
    (ended,) = parity.compare(base, spec, evidence, None, {}, {}).divergences
    assert (ended.explained, ended.speculative_text) == (False, "(the answer ends)")
    alone = _evidence(_scored("p", BASE, list(TIE)))  # no decode to measure a margin by
    (blind,) = _compare_with(alone, (11, 22, 33)).divergences
    assert blind.gap == pytest.approx(0.02)
    assert not blind.explained
    assert not blind.judged
    rows = (TIE[0], ((22, -0.52), (32, -0.9)), TIE[2], TIE[3])
    silent = _evidence(Scored("p", BASE, (None,) * 4, tuple(tuple(r) for r in rows), "prefill",
                              "timed"), *_margin_evidence(0.1))
    (mute,) = _compare_with(silent, (11, 22, 33)).divergences
    assert not mute.explained
    assert "sent no logprob for its own token" in mute.why


def test_the_speculative_servers_own_view_is_its_logprobs_of_the_baseline_token_then_its_own(
        ) -> None:
    own = AnswerEvidence(scored=(_scored("p", (11, 22), [[(11, -0.1)], [(22, -0.4), (12, -0.6)]]),))
    base = _measured("baseline", {"p": BASE})
    spec = _measured("speculative", {"p": (11, 22, 33)})
    evidence = _evidence(_scored("p", BASE, list(TIE)), *_margin_evidence(0.1))
    (d,) = parity.compare(base, spec, evidence, own, {}, {}).divergences
    assert d.speculative_view == (-0.6, -0.4)


def _compare_with(evidence: AnswerEvidence, spec_answer: tuple[int, ...]) -> parity.Parity:
    return parity.compare(_measured("baseline", {"p": BASE}),
                          _measured("speculative", {"p": spec_answer}), evidence, None, {}, {})


@pytest.mark.slow
def test_both_resident_servers_give_their_evidence(tmp_path: Path) -> None:
    """The interleaved design (both servers resident) gathers the same evidence."""
    profile = _sim_profile(tmp_path)
    raw_bench = {**profile.bench.model_dump(), "design": "interleaved"}
    interleaved = parse_profile({"name": "parity", "target": {"path": str(profile.target_path)},
                                 "drafter": {"path": str(profile.drafter_path)},
                                 "server": profile.server.model_dump(exclude_none=True),
                                 "speculative": profile.speculative.model_dump(),
                                 "bench": raw_bench,
                                 "thresholds": {"baseline_tps_min": 1.0, "accept_len_min": 1.0}},
                                source=tmp_path / "interleaved.toml")
    live = run_live(interleaved, tmp_path / "reports")
    assert live.coverage.design == "interleaved"
    assert live.baseline.answers is not None
    assert live.baseline.answers.batch
    assert live.speculative.answers is not None
    assert parity_claim(interleaved, live).status is Status.PASSED


@pytest.mark.slow
def test_a_race_of_configurations_asks_no_evidence(tmp_path: Path) -> None:
    """`specgate tune` races configurations (keep_going given): no answer is asked about."""
    from specgate.measure import plan as live_plan
    from specgate.measure.server_session import run_config

    profile = _sim_profile(tmp_path)
    planned = live_plan.resolve(profile, tmp_path / "reports")
    raced = run_config(planned, "baseline", keep_going=lambda _m: None)
    assert raced.measurement is not None
    assert raced.answers is None
    probed = run_config(planned, "baseline")
    assert probed.answers is not None
