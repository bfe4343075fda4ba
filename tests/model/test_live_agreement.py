"""eval.live_agreement and the library under it: the accept length the offline evaluation predicts
for the served chain (overall and per category) against live samples constructed to a known
accept length."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from test_evaluate import sharp_drafter

from specgate.claims import eval as eval_claims
from specgate.claims.result import ClaimResult, Status
from specgate.cli.eval import main_eval
from specgate.core.errors import DataError
from specgate.core.profile import Profile, parse_profile
from specgate.model.evaluate import (
    ALL,
    ServedPrediction,
    generate_dump,
    open_dump,
    predict_served,
    sample_categories,
    teacher_forced,
)
from specgate.results.bench import RequestSample, Sampling, build_measurement
from specgate.results.live import ConfigRun, Failure, LiveResults
from specgate.results.prompts import template_named

# Its tests share a costly fixture: one xdist worker runs them all (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("test_live_agreement")

TOKENS, PROMPT_TOKENS = 120, 8  # 112 scored positions per sample at one draft step
COMPLETION = 1001  # completion tokens of each constructed live request
# A clean sample (every draft right) served by chains of one step: the first chain is anchored
# at the last prompt token; each verify yields 2 tokens, the last only 1 (the dump ends there).
CLEAN = (TOKENS - PROMPT_TOKENS - 1) / 56  # 111 answer tokens after the prefill's, 56 verifies


@pytest.fixture(scope="module")
def known(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A drafter and one dump of its target: two clean samples named after probe prompt ids
    (chat-1, chat-2), two noisy ones that metadata.json files under math, and one clean sample
    metadata.json files under tiny (too few positions alone)."""
    root = tmp_path_factory.mktemp("agree")
    drafter = sharp_drafter(root / "drafter")
    # The same seed gives both dumps the same embedding table, so their samples mix.
    clean = generate_dump(root / "clean", drafter, samples=3, tokens=TOKENS,
                          prompt_tokens=PROMPT_TOKENS, seed=1)
    noisy = generate_dump(root / "noisy", drafter, samples=2, tokens=TOKENS,
                          prompt_tokens=PROMPT_TOKENS, noise=0.6, seed=1)
    assert (clean / "embeddings.safetensors").read_bytes() == (
        noisy / "embeddings.safetensors").read_bytes()
    dump = root / "dump"
    dump.mkdir()
    for src, name in ((clean / "sample_00000", "chat-1"), (clean / "sample_00001", "chat-2"),
                      (clean / "sample_00002", "x-1"), (noisy / "sample_00000", "math-1"),
                      (noisy / "sample_00001", "math-2")):
        shutil.copy(f"{src}.safetensors", dump / f"{name}.safetensors")
    shutil.copy(clean / "embeddings.safetensors", dump / "embeddings.safetensors")
    meta = json.loads((clean / "metadata.json").read_text())
    meta["samples"] = {"math-1": {"category": "math"}, "math-2": {"category": "math"},
                       "x-1": {"category": "tiny"}}
    (dump / "metadata.json").write_text(json.dumps(meta))
    return {"root": root, "drafter": drafter, "dump": dump, "noisy": noisy}


PROBE_NAMES = {"chat-1": "chat", "chat-2": "chat", "chat-3": "chat", "math-1": "coding"}


@pytest.fixture(scope="module")
def prediction(known: dict[str, Path]) -> ServedPrediction:
    return predict_served(known["drafter"], known["dump"], steps=1, names=PROBE_NAMES,
                          completion_tokens=COMPLETION)


# -- the library ---------------------------------------------------------------------------------

def test_prediction_per_group_is_the_chain_model_of_each_groups_samples(
        known: dict[str, Path], prediction: ServedPrediction) -> None:
    chat, math_, tiny = (prediction.categories[c] for c in ("chat", "math", "tiny"))
    # The clean samples are the drafter's own predictions: every step-0 draft is accepted.
    assert chat.per_verify == tiny.per_verify == CLEAN
    assert (chat.samples, chat.positions) == (2, 2 * (TOKENS - PROMPT_TOKENS))
    assert chat.tokens == 2 * TOKENS
    noisy = teacher_forced(known["drafter"], known["noisy"], steps=1)
    # beside the served walk, the chain model of the group's own positions
    assert chat.chain_model == 2.0
    assert math_.chain_model == pytest.approx(1.0 + noisy.steps[0].accuracy)
    assert math_.per_verify == pytest.approx(noisy.served_accept[0])
    assert math_.per_verify < 1.8  # the noise is seen
    overall = prediction.overall
    assert (overall.name, overall.samples, overall.positions) == (ALL, 5, 5 * 112)
    hits = 3 * 112 + noisy.steps[0].correct
    assert overall.chain_model == pytest.approx(1.0 + hits / (5 * 112))
    # the walk pools tokens and verify passes over the group's samples
    clean_tokens = 3 * (TOKENS - PROMPT_TOKENS)  # (almost) every verify yields 2 tokens
    assert overall.per_verify == pytest.approx(
        (clean_tokens + noisy.served_accept[0] * noisy.served_verifies)
        / (clean_tokens / 2 + noisy.served_verifies), rel=0.01)


def test_per_request_figure_counts_the_prefill_token(prediction: ServedPrediction) -> None:
    chat = prediction.categories["chat"]
    # 1 token from prefill, the rest from verify passes: per verify × n / (n − 1)
    assert chat.per_request(COMPLETION) == pytest.approx(CLEAN * COMPLETION / (COMPLETION - 1))
    assert chat.per_request(2.0) == pytest.approx(2 * CLEAN)
    doc = prediction.to_json()
    assert doc["categories"]["chat"]["per_request"] == pytest.approx(1.9841, abs=1e-4)
    assert doc["completion_tokens"] == COMPLETION


def test_metadata_categories_win_over_prompt_ids_and_the_rest_count_in_all_only(
        known: dict[str, Path], prediction: ServedPrediction) -> None:
    # math-1 is a probe prompt id of category coding, but metadata.json says math.
    assert set(prediction.categories) == {"chat", "math", "tiny"}
    assert prediction.categories["math"].samples == 2
    assert "metadata.json" in prediction.category_source
    assert "prompt ids" in prediction.category_source
    found, _source = sample_categories(open_dump(known["dump"]), None)
    assert found == {"math-1": "math", "math-2": "math", "x-1": "tiny"}
    bare = dataclasses.replace(open_dump(known["dump"]), metadata={})
    assert sample_categories(bare, None) == ({}, "none (every sample counts in all only)")
    bad = dataclasses.replace(bare, metadata={"samples": {"chat-1": {"category": 3}}})
    with pytest.raises(DataError, match=r"metadata\.json: samples\.chat-1\.category"):
        sample_categories(bad, None)


def test_a_group_with_too_few_positions_is_reported_but_not_judged(
        prediction: ServedPrediction) -> None:
    tiny = prediction.categories["tiny"]
    assert tiny.positions == 112 < 200
    assert not tiny.judged
    assert tiny.note == "too few tokens (112 scored positions < 200)"
    assert prediction.to_json()["categories"]["tiny"]["judged"] is False
    assert prediction.categories["chat"].judged  # 224 positions


def test_specgate_eval_prints_the_served_prediction(known: dict[str, Path],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--drafter", str(known["drafter"]), "--hidden-states", str(known["dump"]),
            "--steps", "1", "--served-steps", "1", "--by-category", "--completion-tokens",
            str(COMPLETION), "--json"]
    assert main_eval(argv, probe_names=lambda _profile: PROBE_NAMES) == 0
    doc = json.loads(capsys.readouterr().out)
    served = doc[0]["served"]
    assert (served["steps"], served["topk"]) == (1, 1)
    assert served["categories"]["chat"]["per_verify"] == pytest.approx(CLEAN, abs=1e-4)
    assert served["categories"]["chat"]["per_request"] == pytest.approx(1.9841, abs=1e-4)
    assert served["categories"]["tiny"]["note"].startswith("too few tokens")
    assert doc[0]["accept_length"] == served["overall"]["per_verify"]  # the same chain
    # The table, without --by-category: the overall row only.
    plain = ["--drafter", str(known["drafter"]), "--hidden-states", str(known["dump"]),
             "--served-steps", "1"]
    assert main_eval(plain) == 0
    out = capsys.readouterr().out
    assert "served chain of 1 draft steps, topk 1" in out
    assert "\nall " in out
    assert "\nchat " not in out
    # --min-tokens is honoured as given (10000: every group too small), and 0 is refused
    # rather than quietly replaced by the default.
    assert main_eval([*argv[:-1], "--min-tokens", "10000", "--json"],
                     probe_names=lambda _profile: PROBE_NAMES) == 0
    small = json.loads(capsys.readouterr().out)[0]["served"]
    assert small["overall"]["judged"] is False
    assert main_eval([*plain, "--min-tokens", "0"]) == 2
    assert "--min-tokens must be at least 1, got 0" in capsys.readouterr().err


def test_specgate_eval_refuses_a_tree_profile(known: dict[str, Path], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    prof = tmp_path / "tree.toml"
    prof.write_text(f'name = "t"\n[drafter]\npath = "{known["drafter"]}"\n'
                    f'[eval]\nhidden_states = "{known["dump"]}"\n'
                    "[speculative]\nnum_steps = 2\neagle_topk = 4\nnum_draft_tokens = 6\n")
    assert main_eval(["--profile", str(prof)]) == 2
    err = capsys.readouterr().err
    assert "eagle_topk = 4" in err
    assert "topk 1 only" in err
    assert str(prof) in err
    # --served-steps asks for a chain anyway; the profile gives drafter and dump.
    assert main_eval(["--profile", str(prof), "--served-steps", "1", "--steps", "1"]) == 0
    assert "served chain of 1 draft steps" in capsys.readouterr().out


# -- the claim -----------------------------------------------------------------------------------

PLAIN = template_named("plain", "test")


def _live(ratios: dict[str, tuple[list[str], float]], *, spread: float = 0.01,
          server_info: dict[str, Any] | None = None) -> LiveResults:
    """Live requests of COMPLETION tokens whose Σ completion / Σ verify is about the given
    ratio per category; the prompts of a category differ by ±spread (the interval's width)."""
    samples = []
    for category, (prompt_ids, ratio) in ratios.items():
        for i, pid in enumerate(prompt_ids):
            factor = 1.0 + spread * (i % 3 - 1)
            verify = round(COMPLETION / (ratio * factor))
            samples.append(RequestSample(1, pid, category, 10, COMPLETION, verify, 0.05, 1.0,
                                         None, "stop", 100))
    spec = build_measurement(config="speculative", url="http://x", template=PLAIN,
                             sampling=Sampling(max_repeats=3), samples=samples)
    info = {"speculative_algorithm": "EAGLE3", **(server_info or {})}
    return LiveResults("t", False, ConfigRun("baseline"),
                       ConfigRun("speculative", measurement=spec, server_info=info))


def _profile(known: dict[str, Path], *, steps: int = 1, topk: int = 1,
             **eval_keys: Any) -> Profile:
    section = {"hidden_states": str(known["dump"]), **eval_keys}
    return parse_profile({"name": "t", "drafter": {"path": str(known["drafter"])},
                          "speculative": {"num_steps": steps, "eagle_topk": topk,
                                          "num_draft_tokens": steps + 1 if topk == 1 else 8},
                          "eval": {k: v for k, v in section.items() if v is not None}})


CHAT = ["chat-1", "chat-2", "chat-3"]
MATH = ["math-1", "math-2", "math-3"]


def _claim(known: dict[str, Path], live: LiveResults, **kw: Any) -> ClaimResult:
    return eval_claims.live_agreement_claim(_profile(known, **kw), live)


def _everywhere(prediction: ServedPrediction, factor: float) -> dict[str, tuple[list[str], float]]:
    """Every category measured at the overall prediction × factor."""
    target = prediction.overall.per_request(COMPLETION) * factor
    return {"chat": (CHAT, target), "math": (MATH, target), "tiny": (["x-1", "x-2"], target)}


def test_passes_when_the_prediction_is_within_the_widened_interval(
        known: dict[str, Path], prediction: ServedPrediction) -> None:
    # Measured 6 % below the prediction with a ±1 % spread: outside the interval itself,
    # inside it widened by 10 %.
    result = _claim(known, _live(_everywhere(prediction, 1 / 1.06)))
    assert result.status is Status.PASSED, result.message
    assert (result.reason, result.id, result.phase) == ("met", "eval.live_agreement", "phase0")
    overall = result.details["overall"]
    low, high = overall["measured"]["ci_low"], overall["measured"]["ci_high"]
    assert high < overall["predicted_per_request"] <= high * 1.1
    assert overall["widened"] == [pytest.approx(low * 0.9, abs=1e-4),
                                  pytest.approx(high * 1.1, abs=1e-4)]
    assert result.observed == pytest.approx(prediction.overall.per_request(COMPLETION), abs=1e-3)
    assert overall["relative_error"] == pytest.approx(0.06, abs=3e-3)
    assert "the offline evaluation agrees with serving" in result.message


def test_fails_optimistic_and_says_by_how_much(known: dict[str, Path],
                                               prediction: ServedPrediction) -> None:
    result = _claim(known, _live(_everywhere(prediction, 1 / 1.3)))
    assert (result.status, result.reason) == (Status.FAILED, "optimistic")
    assert result.details["overall"]["relative_error"] == pytest.approx(0.3, abs=3e-3)
    err = result.details["overall"]["relative_error"]
    assert f"the offline evaluation is optimistic: it predicts {err:.1%} more than measured" in (
        result.message)


def test_fails_pessimistic_below_the_widened_interval(known: dict[str, Path],
                                                      prediction: ServedPrediction) -> None:
    result = _claim(known, _live(_everywhere(prediction, 1.25)))
    assert (result.status, result.reason) == (Status.FAILED, "pessimistic")
    err = result.details["overall"]["relative_error"]
    assert err == pytest.approx(-0.2, abs=3e-3)
    assert f"the offline evaluation is pessimistic: it predicts {-err:.1%} less than measured" in (
        result.message)
    # The default tolerance is 10 %; 25 % is within [eval] tolerance = 0.3.
    assert _claim(known, _live(_everywhere(prediction, 1.25)),
                  tolerance=0.3).status is Status.PASSED


def test_categories_side_by_side_and_small_ones_not_judged(
        known: dict[str, Path], prediction: ServedPrediction) -> None:
    chat = prediction.categories["chat"].per_request(COMPLETION)
    live = _live({"chat": (CHAT, chat), "math": (MATH, 1.1),
                  "tiny": (["x-1", "x-2"], 2.0), "coding": (["coding-1"], 3.0)})
    result = _claim(known, live)
    rows = result.details["per_category"]
    assert rows["chat"]["verdict"] == "agrees"
    assert rows["chat"]["judged"] is True
    assert rows["math"]["verdict"] == "optimistic"  # predicted ~1.35 against 1.1
    assert rows["tiny"]["judged"] is False
    assert rows["tiny"]["verdict"] == "too few tokens (112 scored positions < 200)"
    assert rows["coding"]["verdict"] == "no dump sample of this category"
    # The message shows both figures and the interval of each category, briefly.
    assert f"chat {chat:.2f} vs {chat:.2f} [" in result.message
    assert "tiny 1.98 vs 1.99 [" in result.message
    assert "not judged: too few tokens (112 scored positions < 200)" in result.message
    # The attachment puts predicted and measured side by side.
    table = next(a.body for a in result.attachments if a.name == "predicted vs measured.csv")
    assert isinstance(table, str)
    parsed = {r["group"]: r for r in csv.DictReader(io.StringIO(table))}
    assert list(parsed) == ["all", "chat", "coding", "math", "tiny"]
    assert float(parsed["chat"]["predicted_per_request"]) == pytest.approx(chat, abs=1e-4)
    assert float(parsed["chat"]["measured_accept_len"]) == pytest.approx(chat, rel=2e-3)
    assert parsed["math"]["verdict"] == "optimistic"
    math_ = prediction.categories["math"].per_request(COMPLETION)
    assert float(parsed["math"]["predicted_per_request"]) == pytest.approx(math_, abs=1e-4)
    assert float(parsed["math"]["measured_accept_len"]) == pytest.approx(1.1, rel=2e-3)


def test_a_category_with_one_request_is_not_judged(known: dict[str, Path],
                                                   prediction: ServedPrediction) -> None:
    live = _live({"chat": (CHAT, 2.0), "math": (["math-1"], 1.4)})
    rows = _claim(known, live).details["per_category"]
    assert rows["math"]["dump_positions"] == 224  # enough tokens in the dump
    assert rows["math"]["verdict"] == "too few requests (1 < 2)"
    assert rows["math"]["judged"] is False


def test_skipped_without_a_dump_for_trees_and_for_a_small_dump(
        known: dict[str, Path], prediction: ServedPrediction) -> None:
    live = _live(_everywhere(prediction, 1.0))
    unset = eval_claims.live_agreement_claim(parse_profile({"name": "t"}), live)
    assert (unset.status, unset.reason) == (Status.SKIPPED, "not_configured")
    assert "no [eval] hidden_states" in unset.message
    assert "synthetic" not in unset.message  # a real server
    tree = _claim(known, live, steps=3, topk=4)
    assert (tree.status, tree.reason) == (Status.SKIPPED, "tree_not_modelled")
    assert "eagle_topk = 4" in tree.message
    assert "topk 1 only" in tree.message
    # The server's own topk counts when the profile leaves [speculative] out.
    served_tree = eval_claims.live_agreement_claim(
        parse_profile({"name": "t", "drafter": {"path": str(known["drafter"])},
                       "eval": {"hidden_states": str(known["dump"])}}),
        _live(_everywhere(prediction, 1.0), server_info={"speculative_num_steps": 3,
                                                         "speculative_eagle_topk": 2}))
    assert served_tree.reason == "tree_not_modelled"
    small = _claim(known, live, min_tokens=10_000)
    assert (small.status, small.reason) == (Status.SKIPPED, "too_few_tokens")
    assert "560 scored positions < 10000" in small.message
    assert "lower [eval] min_tokens" in small.message
    # Enough dump, one request measured: the reason names the probe's side, not the dump's.
    one = _claim(known, _live({"chat": (["chat-1"], 2.0)}))
    assert (one.status, one.reason) == (Status.SKIPPED, "too_few_requests")
    assert "too few requests (1 < 2) by the probe" in one.message
    assert "min_tokens" not in one.message.split(". Per category")[0]


def test_skip_on_the_simulator_says_its_acceptance_is_synthetic() -> None:
    live = dataclasses.replace(_live({"chat": (CHAT, 2.0)}), simulated=True)
    result = eval_claims.live_agreement_claim(parse_profile({"name": "t"}), live)
    assert result.status is Status.SKIPPED
    assert result.message.startswith("[simulated server] no [eval] hidden_states")
    assert "acceptance is synthetic" in result.message


def test_on_the_simulator_a_given_dump_is_not_judged_either(known: dict[str, Path],
                                                             prediction: ServedPrediction) -> None:
    # The simulator's acceptance does not come from the drafter's weights: a real profile dry-run
    # against it must not fail this claim (as a loop dry run on the simulator did).
    live = dataclasses.replace(_live(_everywhere(prediction, 1 / 1.5)), simulated=True)
    result = _claim(known, live)
    assert (result.status, result.reason) == (Status.SKIPPED, "simulated_acceptance")
    assert result.message.startswith(f"[simulated server] [eval] hidden_states {known['dump']}")
    # The same numbers from a real server fail (optimistic): the skip is the simulator's alone.
    assert _claim(known, dataclasses.replace(live, simulated=False)).status is Status.FAILED


def test_broken_with_the_server_like_the_other_live_claims(known: dict[str, Path]) -> None:
    failed = LiveResults("t", False, ConfigRun("baseline"), ConfigRun(
        "speculative", failure=Failure("start", "the server exited with code 1", "CUDA OOM")))
    result = _claim(known, failed)
    assert result.status is Status.BROKEN
    assert "the speculative measurement could not be made" in result.message
    assert "CUDA OOM" in result.cause  # the reason, said once for every claim it broke


def test_broken_on_a_bad_dump_a_bad_drafter_or_without_torch(
        known: dict[str, Path], prediction: ServedPrediction, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    live = _live(_everywhere(prediction, 1.0))
    (tmp_path / "empty").mkdir()
    bad_dump = _claim(known, live, hidden_states=str(tmp_path / "empty"))
    assert (bad_dump.status, bad_dump.reason) == (Status.BROKEN, "unreadable_input")
    assert f"{tmp_path / 'empty'}: no sample *.safetensors files" in bad_dump.message
    not_a_drafter = tmp_path / "not-a-drafter"
    not_a_drafter.mkdir()
    profile = _profile(known).model_copy(update={"drafter": parse_profile(
        {"name": "t", "drafter": {"path": str(not_a_drafter)}}).drafter})
    bad_drafter = eval_claims.live_agreement_claim(profile, live)
    assert (bad_drafter.status, bad_drafter.reason) == (Status.BROKEN, "unreadable_input")
    assert str(not_a_drafter) in bad_drafter.message
    monkeypatch.setitem(sys.modules, "torch", None)
    no_torch = _claim(known, live)
    assert (no_torch.status, no_torch.reason) == (Status.BROKEN, "missing_dependency")
    assert "pip install 'specgate[eval]'" in no_torch.message


def test_eval_device_is_validated_and_auto_resolves_to_what_torch_sees(
        known: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    for good in ("cpu", "cuda", "cuda:1", "auto"):
        assert _profile(known, device=good).eval.device == good
    from specgate.core.errors import ProfileError

    with pytest.raises(ProfileError, match=r"key 'eval.device'.*found 'gpu'"):
        _profile(known, device="gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert eval_claims.eval_device(_profile(known, device="auto")) == "cpu"
    with pytest.raises(ValueError, match=r"\[eval\] device = 'cuda:1', but torch sees no CUDA"):
        eval_claims.eval_device(_profile(known, device="cuda:1"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert eval_claims.eval_device(_profile(known, device="auto")) == "cuda"
    assert eval_claims.eval_device(_profile(known, device="cuda:1")) == "cuda:1"
    with pytest.raises(ValueError, match="sees 2 CUDA devices"):
        eval_claims.eval_device(_profile(known, device="cuda:2"))


def test_a_device_torch_cannot_use_breaks_the_claim_with_its_name(
        known: dict[str, Path], prediction: ServedPrediction,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    result = _claim(known, _live(_everywhere(prediction, 1.0)), device="cuda:97")
    assert result.status is Status.BROKEN, result.message
    assert "could not be made" in result.message
    assert "[eval] device = 'cuda:97', but torch sees 1 CUDA device here" in result.message


# -- per prompt: blind spots ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def blind(known: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dump of three probe prompts: chat-1 clean, math-1 noisy (60 %), chat-3 all noise (the
    drafter is never right: no draft accepted, as on 7 of 40 prompts of a 64-layer target on
    real SGLang)."""
    root = tmp_path_factory.mktemp("blind")
    wrong = generate_dump(root / "wrong", known["drafter"], samples=1, tokens=TOKENS,
                          prompt_tokens=PROMPT_TOKENS, noise=1.0, seed=1)
    # math-2: never right either, but its answer stops after 6 tokens (too short to call)
    short = generate_dump(root / "short", known["drafter"], samples=1, tokens=PROMPT_TOKENS + 6,
                          prompt_tokens=PROMPT_TOKENS, noise=1.0, seed=1)
    dump = root / "dump"
    dump.mkdir()
    shutil.copy(known["dump"] / "chat-1.safetensors", dump / "chat-1.safetensors")
    shutil.copy(known["dump"] / "math-1.safetensors", dump / "math-1.safetensors")
    shutil.copy(wrong / "sample_00000.safetensors", dump / "chat-3.safetensors")
    shutil.copy(short / "sample_00000.safetensors", dump / "math-2.safetensors")
    shutil.copy(known["dump"] / "embeddings.safetensors", dump / "embeddings.safetensors")
    meta = json.loads((known["dump"] / "metadata.json").read_text())
    meta["samples"] = {"math-1": {"category": "math"}, "math-2": {"category": "math"}}
    (dump / "metadata.json").write_text(json.dumps(meta))
    return dump


def test_prediction_per_sample_in_the_same_pass(known: dict[str, Path], blind: Path,
                                                prediction: ServedPrediction) -> None:
    assert prediction.samples == {}  # only when asked for
    per = predict_served(known["drafter"], blind, steps=1, names=PROBE_NAMES, by_sample=True)
    assert sorted(per.samples) == ["chat-1", "chat-3", "math-1", "math-2"]
    # only the samples asked for (the claim asks for the prompt ids the probe measured)
    assert sorted(predict_served(known["drafter"], blind, steps=1,
                                 by_sample={"chat-1", "nope"}).samples) == ["chat-1"]
    assert per.samples["chat-1"].per_verify == CLEAN
    assert per.samples["chat-3"].per_verify < 1.1  # never right: (almost) one token per verify
    assert 1.1 < per.samples["math-1"].per_verify < 1.8
    assert per.samples["math-2"].positions == 6  # the short answer
    # the categories are the same as without by_sample (one pass serves both)
    plain = predict_served(known["drafter"], blind, steps=1, names=PROBE_NAMES)
    assert {c: g.per_verify for c, g in per.categories.items()} == {
        c: g.per_verify for c, g in plain.categories.items()}
    assert per.to_json()["samples"]["chat-3"]["samples"] == 1


def test_specgate_eval_by_sample(blind: Path, known: dict[str, Path],
                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main_eval(["--drafter", str(known["drafter"]), "--hidden-states", str(blind),
                      "--served-steps", "1", "--by-sample"]) == 0
    out = capsys.readouterr().out
    assert "per sample (one sample each" in out
    row = next(line for line in out.splitlines() if line.startswith("chat-1 "))
    assert f"{CLEAN:.3f}" in row


def test_agreement_per_prompt_ranks_and_names_the_blind_spots(
        known: dict[str, Path], blind: Path) -> None:
    profile = parse_profile({"name": "t", "drafter": {"path": str(known["drafter"])},
                             "speculative": {"num_steps": 1, "eagle_topk": 1,
                                             "num_draft_tokens": 2},
                             "eval": {"hidden_states": str(blind), "min_tokens": 100}})
    ids = {"chat": ["chat-1", "chat-3"], "math": ["math-1"]}

    def live(chat1: float, math1: float, chat3: float) -> LiveResults:
        run = _live({"chat": (["chat-1"], chat1), "math": (["math-1", "math-2"], math1),
                     "x": (["chat-3"], chat3)}, spread=0.0)
        samples = [dataclasses.replace(s, category="chat") if s.prompt_id in ids["chat"] else s
                   for s in run.speculative.measurement.samples]  # type: ignore[union-attr]
        spec = build_measurement(config="speculative", url="http://x", template=PLAIN,
                                 sampling=Sampling(max_repeats=3), samples=samples)
        return dataclasses.replace(run, speculative=dataclasses.replace(run.speculative,
                                                                        measurement=spec))

    same = eval_claims.live_agreement_claim(profile, live(2.0, 1.3, 1.0))
    assert ("per prompt (3 in the dump and the probe; 1 more left out, their dump answers "
            "scored at under 20 positions): rank correlation 1.00") in same.message
    assert ("the offline walk predicts almost no accepted draft (< 1.1 per verify) on 1: "
            "chat-3; measured 1.00 on each there") in same.message
    rows = {r["prompt_id"]: r for r in same.details["per_prompt"]}
    assert rows["chat-3"]["measured"] == pytest.approx(1.0)
    assert rows["chat-1"]["predicted_per_verify"] == pytest.approx(CLEAN, abs=1e-4)
    assert rows["math-2"]["ranked"] is False  # predicted ~1 per verify, yet not called blind
    assert rows["math-2"]["dump_positions"] < 20
    table = next(a.body for a in same.attachments
                 if a.name == "predicted vs measured per prompt.csv")
    assert isinstance(table, str)
    assert [r["prompt_id"] for r in csv.DictReader(io.StringIO(table))] == [
        "chat-1", "math-1", "math-2", "chat-3"]
    # Measured in the opposite order: the ranks say so.
    reversed_ = eval_claims.live_agreement_claim(profile, live(1.0, 1.3, 2.0))
    assert "rank correlation -1.00" in reversed_.message
    assert "measured 2.00 on each there" in reversed_.message


def test_served_answers_are_compared_with_the_dumps_token_by_token(
        known: dict[str, Path], blind: Path) -> None:
    """A greedy answer that leaves the dump's (another kernel deciding a near-tie otherwise) is
    another text: the claim says where each served answer left the dump's, and how far off the
    prediction was there against where the texts are the same."""
    from specgate.io.dump import open_dump, read_answer

    answers = {s.file.stem: read_answer(s) for s in open_dump(blind).samples}
    assert len(answers["chat-1"]) == TOKENS - PROMPT_TOKENS
    profile = parse_profile({"name": "t", "drafter": {"path": str(known["drafter"])},
                             "speculative": {"num_steps": 1, "eagle_topk": 1,
                                             "num_draft_tokens": 2},
                             "eval": {"hidden_states": str(blind), "min_tokens": 100}})
    run = _live({"chat": (["chat-1", "chat-3"], 1.5), "math": (["math-1"], 1.5)}, spread=0.0)
    spec = run.speculative.measurement
    assert spec is not None

    def served(ids: dict[str, tuple[int, ...]]) -> LiveResults:
        samples = [dataclasses.replace(s, output_ids=ids.get(s.prompt_id, ()))
                   for s in spec.samples]
        measured = build_measurement(config="speculative", url="http://x", template=PLAIN,
                                     sampling=Sampling(max_repeats=3), samples=samples)
        return dataclasses.replace(run, speculative=dataclasses.replace(
            run.speculative, measurement=measured))

    unknown = eval_claims.live_agreement_claim(profile, served({}))
    assert "no whole-answer output_ids came back from the server (none sent, or not one per " \
           "completion token), so whether it served the dump's answers is not known" \
           in unknown.message
    assert "cut short" not in unknown.message  # every dump answer is shorter than 1001 tokens
    # Without output_ids, the prompts whose dump answer is as long as the served one stand
    # apart from those where the dump's generator stopped early (at a near-tie).
    n = len(answers["chat-1"])
    full = [dataclasses.replace(s, completion_tokens=n, spec_verify_ct=round(n / 1.5))
            if s.prompt_id == "chat-1" else s for s in spec.samples]
    run_full = dataclasses.replace(run, speculative=dataclasses.replace(
        run.speculative, measurement=build_measurement(
            config="speculative", url="http://x", template=PLAIN,
            sampling=Sampling(max_repeats=3), samples=full)))
    split = eval_claims.live_agreement_claim(profile, run_full)
    assert "(the dump's answer is as long as the served one on 1: median error per verify " \
           in split.message
    assert "; cut short on 2, where the dump's generator and its own forward split" \
           in split.message
    rows = {r["prompt_id"]: r for r in split.details["per_prompt"]}
    assert (rows["chat-1"]["cut_short"], rows["math-1"]["cut_short"]) == (False, True)
    left = answers["math-1"][:5] + tuple(t + 1 for t in answers["math-1"][5:])
    same = eval_claims.live_agreement_claim(profile, served(
        {"chat-1": answers["chat-1"] + (7, 7), "chat-3": answers["chat-3"], "math-1": left}))
    assert "the served answer leaves the dump's on 1 of 3 prompts (after 5 to 5 tokens, " \
           "median 5)" in same.message
    rows = {r["prompt_id"]: r for r in same.details["per_prompt"]}
    assert rows["math-1"]["same_answer_tokens"] == 5
    assert rows["chat-1"]["same_answer_tokens"] == len(answers["chat-1"])  # longer: not left
    assert rows["chat-1"]["dump_answer_tokens"] == len(answers["chat-1"])
    table = next(a.body for a in same.attachments
                 if a.name == "predicted vs measured per prompt.csv")
    assert isinstance(table, str)
    by_id = {r["prompt_id"]: r for r in csv.DictReader(io.StringIO(table))}
    assert by_id["math-1"]["same_answer_tokens"] == "5"
    whole = eval_claims.live_agreement_claim(profile, served(
        {"chat-1": answers["chat-1"], "chat-3": answers["chat-3"], "math-1": answers["math-1"]}))
    assert "every served answer is the dump's over all its tokens (3 prompts" in whole.message
    # A served answer that stopped early (max_new_tokens) as a prefix of the dump's has not
    # left it.
    prefix = eval_claims.live_agreement_claim(profile, served(
        {"chat-1": answers["chat-1"][:40], "chat-3": answers["chat-3"], "math-1": left}))
    assert "leaves the dump's on 1 of 3 prompts (after 5 to 5 tokens" in prefix.message
    rows = {r["prompt_id"]: r for r in prefix.details["per_prompt"]}
    assert rows["chat-1"]["same_answer_tokens"] == 40


def test_a_dump_answer_is_only_what_follows_a_prompt(known: dict[str, Path],
                                                    tmp_path: Path) -> None:
    """read_answer: the first masked run after a prompt; nothing when there is no prompt before
    it (the whole sample masked) or no mask at all."""
    from specgate.io.dump import open_dump, read_answer

    with_prompt = generate_dump(tmp_path / "p", known["drafter"], samples=1, tokens=20,
                                prompt_tokens=4)
    (sample,) = open_dump(with_prompt).samples
    assert len(read_answer(sample)) == 16
    no_prompt = generate_dump(tmp_path / "n", known["drafter"], samples=1, tokens=20,
                              prompt_tokens=0)
    (sample,) = open_dump(no_prompt).samples
    assert read_answer(sample) == ()
    assert read_answer(dataclasses.replace(sample, loss_mask=None)) == ()
