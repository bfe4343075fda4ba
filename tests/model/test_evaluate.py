"""Teacher-forced evaluation on generated dumps whose answers are known, and the seeds' replay."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ckpt_support import write_map
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("torch")

from specgate.claims.eval import teacher_forced_claim
from specgate.claims.result import Status
from specgate.cli.eval import main_eval
from specgate.core.errors import DataError
from specgate.core.profile import parse_profile
from specgate.io.dump import bf16_bits
from specgate.io.remap import remap_vocab
from specgate.io.safetensors_io import TensorSpec, read_array, read_file_header, write_sparse
from specgate.model import evaluate
from specgate.model.evaluate import (
    EvalReport,
    StepStats,
    generate_dump,
    open_dump,
    teacher_forced,
)
from specgate.testing.generate import shifted_token_ids, tiny, write_drafter

K2_IDS = np.sort(np.random.default_rng(7).choice(200, size=tiny().draft_vocab_size,
                                                 replace=False)).astype(np.int64)


def sharp_drafter(folder: Path, seed: int = 0, scale: float = 60.0,
                  token_ids: np.ndarray[Any, Any] = K2_IDS) -> Path:
    """A tiny random drafter whose lm_head is scaled up, so its predictions are confident."""
    write_drafter(folder, tiny(), fill="random", seed=seed, name_style="midlayer",
                  token_ids=token_ids)
    file = folder / "model.safetensors"
    header = read_file_header(file)
    specs = {}
    for name, info in header.tensors.items():
        array = read_array(file, info)
        if name == "lm_head.weight":
            array = array * np.float32(scale)
        data = bf16_bits(array) if info.dtype == "BF16" else array
        specs[name] = TensorSpec(info.dtype, info.shape, data=data)
    write_sparse(file, specs, header.metadata)
    return folder


@pytest.fixture(scope="module")
def known(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An init drafter, a dump of its own predictions, and the data's shifted map (the seeds)."""
    root = tmp_path_factory.mktemp("eval")
    init = sharp_drafter(root / "init")
    dump = generate_dump(root / "dump", init, samples=2, tokens=40, prompt_tokens=6, seed=1)
    noisy = generate_dump(root / "noisy", init, samples=2, tokens=40, prompt_tokens=6,
                          noise=0.5, seed=2)
    shifted = shifted_token_ids(K2_IDS, matches=8, vocab_size=256)
    data_map = write_map(root / "k25_map.safetensors", shifted, tiny().vocab_size)
    return {"root": root, "init": init, "dump": dump, "noisy": noisy, "map": data_map}


def test_the_generating_drafter_predicts_its_dump_exactly(known: dict[str, Path]) -> None:
    report = teacher_forced(known["init"], known["dump"], steps=3)
    step0 = report.steps[0]
    assert step0.scored == 2 * (40 - 6)
    assert step0.accuracy == 1.0
    assert step0.loss < 0.9 * math.log(tiny().draft_vocab_size)
    assert report.chain_accept_length >= 2.0  # step 0 always accepted
    # served: every verify accepts the first draft (the second is always wrong here); 33 answer
    # tokens after the prefill's in each of 2 samples, 2 per verify, the last verify only 1
    assert report.served_hist == (0, 34, 0, 0)
    assert report.accept_length == pytest.approx(2 * 33 / 34)
    assert report.embedding_source.endswith("embeddings.safetensors")


def test_noise_lowers_step_zero_accuracy_to_about_one_minus_noise(known: dict[str, Path]) -> None:
    report = teacher_forced(known["init"], known["noisy"], steps=1)
    # 68 scored tokens, p = 0.5: a 4-sigma band
    assert 0.25 <= report.steps[0].accuracy <= 0.75


def test_reading_the_init_through_the_data_map_is_worse_than_random(known: dict[str, Path]) -> None:
    vd = tiny().draft_vocab_size
    report = teacher_forced(known["init"], known["dump"], steps=2, vocab_map=known["map"])
    # only the 8 leading positions of the shifted map still score their own token
    assert report.steps[0].accuracy < 0.4
    assert report.steps[0].loss > math.log(vd)


def test_remapped_init_predicts_through_the_data_map_again(known: dict[str, Path]) -> None:
    out = known["root"] / "remapped"
    remap_vocab(known["init"], known["map"], out)
    report = teacher_forced(out, known["dump"], steps=2, vocab_map=known["map"])
    # every token but the one the data map dropped keeps its row
    assert report.steps[0].accuracy > 0.9
    assert report.steps[0].loss < 0.9 * math.log(tiny().draft_vocab_size)


def _profile(**finetune: Any) -> Any:
    return parse_profile({"name": "t", "finetune": {k: str(v) for k, v in finetune.items()},
                          "speculative": {"num_steps": 2, "eagle_topk": 1,
                                          "num_draft_tokens": 3}})


def test_claim_fails_for_the_seeds_init_and_compares_drafters(known: dict[str, Path]) -> None:
    finetune = {"init": str(known["init"]), "vocab_map": str(known["map"]),
                "hidden_states": str(known["dump"])}
    profile = parse_profile({"name": "t", "drafter": {"path": str(known["init"])},
                             "finetune": finetune})
    result = teacher_forced_claim(profile)
    assert result.status is Status.FAILED
    main = result.details["reports"][0]
    # the step-0 loss is not below 0.9 × ln(Vd): no better than a uniform guess
    assert result.observed == main["steps"][0]["loss"] >= 0.9 * main["random_loss"]
    assert result.expected == f"< {0.9 * main['random_loss']:.4f}"
    assert result.unit == "nats"
    table = result.attachments[0].body
    assert isinstance(table, str)
    assert len(table.strip().splitlines()) == 3  # header, the init through the map, the drafter
    assert "read through" in table


def test_claim_passes_for_a_sound_init(known: dict[str, Path]) -> None:
    result = teacher_forced_claim(_profile(init=known["init"], hidden_states=known["dump"]))
    assert result.status is Status.PASSED, result.message
    main = result.details["reports"][0]
    assert result.observed == main["steps"][0]["loss"] < 0.9 * main["random_loss"]
    assert main["accept_length"] > 1  # the predicted accept length is reported


def test_claim_skips_without_a_dump_and_breaks_on_a_bad_one(tmp_path: Path,
                                                          known: dict[str, Path]) -> None:
    assert teacher_forced_claim(_profile(init=known["init"])).status is Status.SKIPPED
    (tmp_path / "empty").mkdir()
    result = teacher_forced_claim(_profile(init=known["init"], hidden_states=tmp_path / "empty"))
    assert (result.status, result.reason) == (Status.BROKEN, "unreadable_input")
    assert str(tmp_path / "empty") in result.message  # the contract: the dump is named


def test_a_dump_of_another_width_breaks_with_the_file_named(tmp_path: Path,
                                                             known: dict[str, Path]) -> None:
    other = write_drafter(tmp_path / "wide", tiny(), fill="random",
                          config_overrides={"target_hidden_size": 48})
    with pytest.raises(DataError, match=r"sample_00000\.safetensors: "):  # the file is named
        teacher_forced(other, known["dump"], steps=1)


def test_rope_scaling_is_noted(tmp_path: Path, known: dict[str, Path]) -> None:
    scaled = sharp_drafter(tmp_path / "scaled")
    config = json.loads((scaled / "config.json").read_text())
    config["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0}
    (scaled / "config.json").write_text(json.dumps(config))
    report = teacher_forced(scaled, known["dump"], steps=1)
    assert report.notes
    assert "RoPE scaling" in report.notes[0]


def test_main_eval_prints_a_comparison(known: dict[str, Path],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main_eval(["--drafter", str(known["init"]), "--drafter", str(known["init"]),
                      "--hidden-states", str(known["dump"]), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc) == 2
    assert doc[0]["steps"][0]["accuracy"] == 1.0
    assert main_eval(["--drafter", str(known["init"]), "--hidden-states", "/nonexistent"]) == 2


def test_dump_format_written_by_the_generator(known: dict[str, Path]) -> None:
    dump = open_dump(known["dump"])
    assert len(dump.samples) == 2
    assert dump.samples[0].aux.shape == (40, 3 * tiny().hidden_size)
    assert dump.samples[0].aux.dtype == "BF16"
    assert dump.metadata["aux_hidden_state_layer_ids"] == list(tiny().aux_layer_ids)
    assert dump.metadata["generated_by"].endswith("init")


@given(st.lists(st.integers(0, 1000), min_size=1, max_size=6))
@settings(max_examples=60, deadline=None)
def test_accept_length_is_one_plus_the_sum_of_chain_products(hist: list[int]) -> None:
    total = sum(hist)
    if total == 0:
        return
    steps = len(hist) - 1 or 1
    hist = [*hist, 0][: steps + 1]
    accept = tuple(sum(hist[k + 1:]) / total for k in range(steps))
    stats = tuple(StepStats(k, 1, 1, 1, 0.0) for k in range(steps))
    report = EvalReport("d", "h", 1, 1, 10, stats, total, accept, "", 1.0)
    cond = report.conditional_accuracy
    products = [math.prod(cond[: k + 1]) for k in range(steps)]
    assert report.accept_length == pytest.approx(1 + sum(products))
    assert 1.0 <= report.accept_length <= 1 + steps
    assert all(0.0 <= c <= 1.0 for c in cond)


def test_bf16_bits_round_to_nearest_even_like_torch() -> None:
    import torch

    values = np.array([1.0, -2.5, 3.14159, 1e-3, 65504.0, 1.00390625, 1.01171875],
                      dtype=np.float32)
    want = torch.from_numpy(values).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(bf16_bits(values), want)


def test_eval_module_has_no_torch_at_import() -> None:
    assert "torch" not in evaluate.__dict__


# --- the served walk ------------------------------------------------------------------------------

def _table(rows: list[list[int]], n: int) -> tuple[np.ndarray, np.ndarray]:
    """ok[k, t] from rows; valid[k, t] where the target t + 2 + k lies inside n tokens."""
    ok = np.array(rows, dtype=bool)
    valid = np.array([[t + 2 + k < n for t in range(n)] for k in range(len(rows))])
    return ok & valid, valid


def test_served_walk_anchors_each_chain_after_the_last_accepted_token() -> None:
    from specgate.model.evaluate import _served_walk

    ok, valid = _table([[1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1],
                        [1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1]], 12)
    # t=0: 2 accepted -> t=3: 2 -> t=6: 2 -> t=9: step 0 right (token 11), step 1 past the
    # end, and no target token after the dump's last one -> 1 token; t=11 stops
    tokens, verifies, hist = _served_walk(ok, valid, 0, 2)
    assert (tokens, verifies, hist.tolist()) == (3 + 3 + 3 + 1, 4, [0, 1, 3])
    # a chain of one step: t=0 ok -> t=2 ok -> t=4 wrong -> t=5 ok -> t=7 ... -> t=9 -> t=11 stop
    tokens, verifies, hist = _served_walk(ok, valid, 0, 1)
    assert (tokens, verifies, hist.tolist()) == (2 + 2 + 1 + 2 + 2 + 1, 6, [1, 5])


def test_each_answer_of_a_multi_turn_sample_is_walked_from_its_own_anchor() -> None:
    from specgate.model.evaluate import _answer_starts

    mask = np.array([0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 1], dtype=np.uint8)
    assert _answer_starts(mask) == [2, 7, 10]
    assert _answer_starts(np.array([1, 1, 0, 1], dtype=np.uint8)) == [3, 0]
    assert _answer_starts(np.zeros(4, dtype=np.uint8)) == []


def test_served_walk_differs_from_the_average_over_positions() -> None:
    """Serving anchors a chain only where the last verify ended, so it skips positions: here
    every even anchor is right and every odd one wrong. The average over positions says 1.5
    tokens per verify; serving from an even anchor never meets an odd one and gets 2.0."""
    from specgate.model.evaluate import _served_walk

    n = 41
    ok, valid = _table([[t % 2 == 0 for t in range(n)]], n)
    tokens, verifies, _ = _served_walk(ok, valid, 0, 1)
    assert (tokens, verifies) == (39, 20)  # 2 tokens per verify; the last lacks its bonus
    chain_model = 1.0 + ok[0, valid[0]].mean()
    assert chain_model == pytest.approx(1.5, abs=0.02)
    # started on an odd anchor, the first verify is rejected, then it falls in step
    tokens, verifies, hist = _served_walk(ok, valid, 1, 1)
    assert (tokens, verifies, hist.tolist()) == (1 + 2 * 18 + 1, 20, [1, 19])


def test_the_claim_runs_on_the_eval_device(known: dict[str, Path],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import specgate.claims.eval as eval_claims

    seen: list[str] = []
    real = eval_claims.teacher_forced

    def spy(*args: Any, **kw: Any) -> Any:
        seen.append(kw.get("device", "cpu"))
        return real(*args, **{**kw, "device": "cpu"})

    monkeypatch.setattr(eval_claims, "teacher_forced", spy)
    monkeypatch.setattr(eval_claims, "eval_device", lambda _profile: "cuda:3")
    profile = _profile(init=known["init"], hidden_states=known["dump"])
    assert teacher_forced_claim(profile).status is Status.PASSED
    assert seen == ["cuda:3"]


def test_an_evaluation_opens_the_drafter_once(known: dict[str, Path], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # Without the dump's embedding table and a target, the drafter's own embed_tokens serve:
    # read from the drafter the evaluation opened, not from a second opening.
    dump = tmp_path / "dump"
    shutil.copytree(known["dump"], dump)
    (dump / "embeddings.safetensors").unlink()
    opened: list[object] = []
    real = evaluate.open_drafter

    def counted(path: Path | str) -> Any:
        opened.append(path)
        return real(path)

    monkeypatch.setattr(evaluate, "open_drafter", counted)
    report = teacher_forced(known["init"], dump, steps=1)
    assert report.embedding_source.endswith("(the drafter's own embed_tokens)")
    assert opened == [known["init"]]
    predicted = evaluate.predict_served(known["init"], dump, steps=1)
    assert predicted.embedding_source.endswith("(the drafter's own embed_tokens)")
    assert opened == [known["init"], known["init"]]
