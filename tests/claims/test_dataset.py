"""Phase 2 data claims on good and deliberately broken hidden-state dumps."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ckpt_support import make_profile

from specgate.claims import data as dataset
from specgate.claims.data import capture_layers, vocab_map_from_data
from specgate.claims.result import Status
from specgate.core.profile import Profile, parse_profile
from specgate.io.dump import bf16_bits, open_dump
from specgate.io.safetensors_io import TensorSpec, write_sparse
from specgate.testing.generate import tiny, write_drafter

SHAPE = tiny()  # hidden 32, vocab 256, draft vocab 64, aux ids [1, 3, 5]
WIDTH = 3 * SHAPE.hidden_size


def write_dump(folder: Path, samples: list[dict[str, Any]],
               metadata: dict[str, Any] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, sample in enumerate(samples):
        ids = np.asarray(sample["ids"], dtype=np.int64)
        aux = sample.get("aux")
        if aux is None:
            aux = np.random.default_rng(i).standard_normal((len(ids), WIDTH)).astype(np.float32)
        dtype = sample.get("dtype", "BF16")
        data = bf16_bits(aux) if dtype == "BF16" else aux.astype(
            {"F16": np.float16, "F32": np.float32}[dtype])
        mask = np.asarray(sample.get("mask", np.ones(len(ids))), dtype=np.uint8)
        write_sparse(folder / f"s{i:03d}.safetensors", {
            "input_ids": TensorSpec("I64", ids.shape, ids),
            "aux_hidden_states": TensorSpec(dtype, aux.shape, data),
            "loss_mask": TensorSpec("U8", mask.shape, mask)})
    meta = {"aux_hidden_state_layer_ids": list(SHAPE.aux_layer_ids)} if metadata is None \
        else metadata
    (folder / "metadata.json").write_text(json.dumps(meta))
    return folder


def _tokens(seed: int, n: int = 600) -> np.ndarray[Any, Any]:
    """Zipf-like token ids over the whole vocabulary: more distinct tokens than the draft vocab."""
    rng = np.random.default_rng(seed)
    return (rng.zipf(1.3, n) * 7 % SHAPE.vocab_size).astype(np.int64)


def _profile(data: Path, drafter: Path | None = None, target: Path | None = None) -> Profile:
    return make_profile(drafter, target=target, sections={"data": {"path": data}})


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("data")
    samples = [{"ids": _tokens(s, 200), "mask": [0] * 20 + [1] * 180} for s in range(3)]
    dump = write_dump(root / "dump", samples)
    data_map, _ = vocab_map_from_data(open_dump(dump), SHAPE.draft_vocab_size, SHAPE.vocab_size)
    drafter = write_drafter(root / "drafter", SHAPE, token_ids=data_map.target_ids())
    other = write_drafter(root / "other", SHAPE, seed=5)
    return {"root": root, "dump": dump, "drafter": drafter, "other": other}


@pytest.mark.parametrize("claim", ["counts_claim", "shapes_claim", "dtypes_claim",
                                   "finite_claim", "capture_layers_claim", "vocab_map_claim"])
def test_every_data_claim_passes_on_a_good_dataset(good: dict[str, Path], claim: str) -> None:
    result = getattr(dataset, claim)(_profile(good["dump"], good["drafter"]))
    assert result.status is Status.PASSED, result.message


def test_counts_report_samples_tokens_and_masked_tokens(good: dict[str, Path]) -> None:
    result = dataset.counts_claim(_profile(good["dump"]))
    assert result.details == {"samples": 3, "tokens": 600, "loss_masked": 540}
    assert (result.observed, result.unit) == (540, "tokens")


def test_a_sample_with_nothing_to_learn_fails_counts(tmp_path: Path) -> None:
    dump = write_dump(tmp_path / "d", [{"ids": [1, 2, 3]}, {"ids": [4, 5], "mask": [0, 0]}])
    result = dataset.counts_claim(_profile(dump))
    assert (result.status, result.reason) == (Status.FAILED, "nothing_to_learn")
    assert result.details["empty"] == ["s001.safetensors"]


def test_wrong_aux_width_fails_shapes_naming_the_file(tmp_path: Path,
                                                      good: dict[str, Path]) -> None:
    aux = np.zeros((4, 2 * SHAPE.hidden_size), np.float32)
    dump = write_dump(tmp_path / "d", [{"ids": [1, 2, 3, 4], "aux": aux}])
    result = dataset.shapes_claim(_profile(dump, good["drafter"]))
    assert (result.status, result.observed) == (Status.FAILED, 1)
    assert result.details["shapes"] == [["s000.safetensors", "aux_hidden_states", [4, 64],
                                         [4, WIDTH]]]


def test_mixed_dtypes_fail(tmp_path: Path) -> None:
    dump = write_dump(tmp_path / "d", [{"ids": [1, 2]}, {"ids": [3, 4], "dtype": "F16"}])
    result = dataset.dtypes_claim(_profile(dump))
    assert (result.status, result.reason, result.observed) == (Status.FAILED, "mixed_dtypes",
                                                               "mixed")
    assert result.details["aux_dtypes"] == {"BF16": 1, "F16": 1}


@pytest.mark.parametrize(("dtype", "bad"), [("BF16", np.nan), ("F16", np.inf), ("F32", -np.inf)])
def test_non_finite_values_fail_finite(tmp_path: Path, dtype: str, bad: float) -> None:
    aux = np.ones((5, WIDTH), np.float32)
    aux[3, 7] = bad
    dump = write_dump(tmp_path / "d", [{"ids": [1, 2, 3, 4, 5]},
                                       {"ids": [1, 2, 3, 4, 5], "aux": aux, "dtype": dtype}])
    result = dataset.finite_claim(_profile(dump))
    assert (result.status, result.observed) == (Status.FAILED, 1)
    assert result.details["nonfinite"] == {"s001.safetensors": [1, 3]}


def _target(folder: Path, model_type: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": model_type,
                                                    "num_hidden_layers": 8}))
    return folder


def test_kimi_treats_1_29_57_and_2_30_58_alike(tmp_path: Path) -> None:
    assert capture_layers([1, 29, 57], "deepseek") == capture_layers([2, 30, 58], "deepseek")
    assert capture_layers([1, 29, 57], "llama") != capture_layers([2, 30, 58], "llama")
    drafter = write_drafter(tmp_path / "k", SHAPE, config_overrides={
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]}})
    dump = write_dump(tmp_path / "d", [{"ids": [1, 2]}],
                      {"aux_hidden_state_layer_ids": [1, 29, 57]})
    kimi = dataset.capture_layers_claim(_profile(dump, drafter, _target(tmp_path / "t", "kimi_k2")))
    assert kimi.status is Status.PASSED, kimi.message
    llama = dataset.capture_layers_claim(_profile(dump, drafter, _target(tmp_path / "l", "llama")))
    assert (llama.status, llama.reason) == (Status.FAILED, "other_layers")
    assert (llama.observed, llama.expected) == ([2, 30, 58], [3, 31, 59])


def test_capture_layers_skip_without_metadata(tmp_path: Path, good: dict[str, Path]) -> None:
    dump = write_dump(tmp_path / "d", [{"ids": [1, 2]}], metadata={})
    result = dataset.capture_layers_claim(_profile(dump, good["drafter"]))
    assert (result.status, result.reason) == (Status.SKIPPED, "no_capture_metadata")


def test_a_map_from_other_data_fails_vocab_map(good: dict[str, Path]) -> None:
    result = dataset.vocab_map_claim(_profile(good["dump"], good["other"]))
    assert (result.status, result.reason) == (Status.FAILED, "other_data")


def test_data_map_is_the_top_tokens_sorted(good: dict[str, Path]) -> None:
    vmap, counts = vocab_map_from_data(open_dump(good["dump"]), SHAPE.draft_vocab_size,
                                       SHAPE.vocab_size)
    ids = vmap.target_ids()
    assert np.all(np.diff(ids) > 0)
    cutoff = min(counts[int(t)] for t in ids)
    assert all(c <= cutoff for t, c in counts.items() if t not in set(ids.tolist()))


def test_claims_skip_without_data_and_break_on_a_bad_folder(tmp_path: Path) -> None:
    skipped = dataset.counts_claim(parse_profile({"name": "t"}))
    assert skipped.status is Status.SKIPPED
    (tmp_path / "x.safetensors").write_bytes(b"\x01")
    broken = dataset.shapes_claim(_profile(tmp_path))
    assert (broken.status, broken.reason) == (Status.BROKEN, "unreadable_input")
    assert "x.safetensors" in broken.message  # the contract: the file is named


def test_vocab_map_needs_the_exact_count_not_one_more(tmp_path: Path) -> None:
    # Tokens 0..99 twice each: the data's top 100 is exactly them; the drafter keeps 7 of them.
    shape = dataclasses.replace(SHAPE, draft_vocab_size=100)
    dump = write_dump(tmp_path / "dump", [{"ids": list(range(100)) * 2}])
    ids = [*range(7), *range(150, 243)]
    drafter = write_drafter(tmp_path / "drafter", shape, token_ids=ids)
    assert 0.07 * 100 > 7  # 7.000000000000001: a plain ceiling would ask for 8
    profile = parse_profile({"name": "t", "data": {"path": str(dump)},
                             "drafter": {"path": str(drafter)},
                             "thresholds": {"d2t_match_min": 0.07}})
    result = dataset.vocab_map_claim(profile)
    assert (result.status, result.observed, result.expected) == (Status.PASSED, 7, ">= 7")
