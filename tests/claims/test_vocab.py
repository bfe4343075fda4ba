"""Vocab maps: construction, invariants, loading, comparison and the three vocab claims."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from ckpt_support import make_profile, rewrite, tiny_drafter
from hypothesis import given, settings
from hypothesis import strategies as st

from specgate.claims.result import Status
from specgate.claims.vocab import d2t_match_claim, invariants_claim, t2d_match_claim
from specgate.claims.weights import layout_claim
from specgate.core.errors import CheckpointError
from specgate.io.safetensors_io import TensorSpec, write_sparse
from specgate.io.vocab_maps import VocabMap, check_invariants, compare, load_map, required_count
from specgate.testing.generate import shifted_token_ids, tiny, write_drafter

id_sets = st.integers(2, 400).flatmap(
    lambda v: st.tuples(st.just(v), st.sets(st.integers(0, v - 1), min_size=1, max_size=v)))


@given(id_sets)
def test_map_from_any_id_set_is_sound_and_round_trips(case: tuple[int, set[int]]) -> None:
    vocab, ids = case
    vmap = VocabMap.from_token_ids(sorted(ids), vocab)
    assert check_invariants(vmap, len(ids), vocab) == {}
    assert vmap.target_ids().tolist() == sorted(ids)
    assert vmap.d2t.dtype == np.int64
    assert vmap.t2d is not None
    assert vmap.t2d.dtype == bool
    assert np.all(np.diff(vmap.d2t) >= 0)


@given(id_sets)
def test_a_map_compared_with_itself_matches_fully(case: tuple[int, set[int]]) -> None:
    vmap = VocabMap.from_token_ids(sorted(case[1]), case[0])
    cmp = compare(vmap, vmap)
    n = len(case[1])
    assert cmp.d2t_positional_matches == cmp.shared_tokens == cmp.longest_matching_prefix == n
    assert cmp.first_mismatch is None
    assert not cmp.looks_shifted


@given(st.sets(st.integers(0, 10_000), min_size=2, max_size=300), st.data())
@settings(max_examples=60)
def test_shifted_ids_keep_exactly_the_prefix(ids: set[int], data: st.DataObject) -> None:
    ref = sorted(ids)
    matches = data.draw(st.integers(0, len(ref) - 1))
    shifted = shifted_token_ids(ref, matches)
    cmp = compare(VocabMap.from_token_ids(shifted, 10_002), VocabMap.from_token_ids(ref, 10_002))
    assert cmp.d2t_positional_matches == matches == cmp.longest_matching_prefix
    assert cmp.shared_tokens == len(ref) - 1


def test_shifted_ids_need_room_above() -> None:
    with pytest.raises(ValueError, match="no id above"):
        shifted_token_ids([1, 2, 9], 1, vocab_size=10)
    with pytest.raises(ValueError, match="matches"):
        shifted_token_ids([1, 2, 3], 3)


def test_seeds_case_looks_shifted() -> None:
    rng = np.random.default_rng(1)
    ref = np.sort(rng.choice(163840, 32000, replace=False))
    cmp = compare(VocabMap.from_token_ids(shifted_token_ids(ref, 252), 163840),
                  VocabMap.from_token_ids(ref, 163840))
    assert (cmp.d2t_positional_matches, cmp.shared_tokens) == (252, 31999)
    assert cmp.first_mismatch == 252
    assert cmp.looks_shifted
    assert "d2t_positional_matches,252" in cmp.table_csv()


def _good() -> VocabMap:
    return VocabMap.from_token_ids([3, 5, 8, 9], 12)


@pytest.mark.parametrize(("vmap", "match"), [
    (VocabMap(_good().d2t.astype(np.float32), _good().t2d), "d2t_dtype"),
    (VocabMap(_good().d2t, np.ones(11, bool)), "t2d_shape"),
    (VocabMap(_good().d2t, None), "t2d_missing"),
    (VocabMap(_good().d2t, _good().t2d.astype(np.uint8)), "t2d_dtype"),  # type: ignore[union-attr]
    (VocabMap(np.array([3, 4, 4, 4]), _good().t2d), "t2d_disagrees"),
    (VocabMap(np.array([3, 2, 6, 6]), _good().t2d), "not_increasing"),
    (VocabMap(np.array([3, 4, 6, 9]), _good().t2d), "out_of_range"),
    (VocabMap(np.array([3, 4, 6]), _good().t2d), "d2t_shape"),
])
def test_broken_maps_are_named(vmap: VocabMap, match: str) -> None:
    problems = check_invariants(vmap, 4, 12)
    assert match in problems, problems


def test_load_map_from_folder_safetensors_and_pt(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    folder = tiny_drafter(tmp_path / "d")
    from_dir = load_map(folder)
    assert from_dir.draft_vocab_size == 64
    file = write_sparse(tmp_path / "map.safetensors", {
        "d2t": TensorSpec("I64", (64,), data=from_dir.d2t),
        "t2d": TensorSpec("BOOL", (256,), data=from_dir.t2d)})
    np.testing.assert_array_equal(load_map(file).target_ids(), from_dir.target_ids())
    torch.save({"d2t": torch.from_numpy(from_dir.d2t), "t2d": torch.from_numpy(from_dir.t2d)},
               tmp_path / "map.pt")
    from_pt = load_map(tmp_path / "map.pt")
    np.testing.assert_array_equal(from_pt.target_ids(), from_dir.target_ids())
    assert from_pt.t2d is not None
    assert from_pt.t2d.dtype == bool
    torch.save({"d2t": torch.from_numpy(from_dir.d2t).to(torch.bfloat16)}, tmp_path / "bf16.pt")
    floaty = load_map(tmp_path / "bf16.pt")
    assert floaty.d2t.dtype == np.float32
    assert "d2t_dtype" in check_invariants(floaty, 64, 256)


class _NotAllowed:
    pass


def test_load_map_refuses_unsafe_pickles(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    torch.save({"d2t": _NotAllowed()}, tmp_path / "evil.pt")
    with pytest.raises(CheckpointError, match="weights-only") as info:
        load_map(tmp_path / "evil.pt")
    assert "evil.pt" in str(info.value)
    torch.save([1, 2], tmp_path / "list.pt")
    with pytest.raises(CheckpointError, match="expected a dict"):
        load_map(tmp_path / "list.pt")


def test_load_map_unknown_format(tmp_path: Path) -> None:
    (tmp_path / "x.npy").write_text("")
    with pytest.raises(CheckpointError, match="unknown vocab map format"):
        load_map(tmp_path / "x.npy")


# --- claims ----------------------------------------------------------------------------------

def test_claims_on_a_shifted_pair(tmp_path: Path) -> None:
    ref = tiny_drafter(tmp_path / "ref", token_ids=range(0, 128, 2))
    ids = shifted_token_ids(load_map(ref).target_ids(), 10)
    mine = tiny_drafter(tmp_path / "mine", token_ids=ids, seed=5)
    profile = make_profile(mine, ref)
    d2t = d2t_match_claim(profile)
    assert (d2t.status, d2t.observed, d2t.expected, d2t.unit) == (
        Status.FAILED, 10, ">= 64", "positions")
    assert d2t.reason == "shifted_map"
    assert d2t.details["d2t_positional_matches"] == 10
    assert d2t.details["looks_shifted"] is True
    assert d2t.attachments[0].kind == "csv"
    t2d = t2d_match_claim(profile)
    assert (t2d.status, t2d.observed) == (Status.FAILED, 63)
    assert t2d_match_claim(make_profile(mine, ref, t2d_match_min=0.9)).status is Status.PASSED
    assert d2t_match_claim(make_profile(ref, ref)).status is Status.PASSED
    assert invariants_claim(profile).status is Status.PASSED


def test_claims_skip_without_inputs(tmp_path: Path) -> None:
    folder = tiny_drafter(tmp_path / "d")
    assert d2t_match_claim(make_profile(folder)).status is Status.SKIPPED
    assert t2d_match_claim(make_profile(folder)).status is Status.SKIPPED
    assert invariants_claim(make_profile()).status is Status.SKIPPED


def test_missing_reference_is_broken(tmp_path: Path) -> None:
    result = d2t_match_claim(make_profile(tiny_drafter(tmp_path / "d"), tmp_path / "nope"))
    assert (result.status, result.reason) == (Status.BROKEN, "unreadable_input")
    assert "nope" in result.message  # the contract: a broken result names the file


@pytest.mark.parametrize(("change", "match"), [
    ({"d2t": TensorSpec("F32", (64,), data=np.zeros(64, np.float32))}, "d2t_dtype"),
    ({"t2d": TensorSpec("BOOL", (255,), data=np.ones(255, bool))}, "t2d_shape"),
    ({"t2d": TensorSpec("BOOL", (256,), data=np.eye(1, 256, 7, dtype=bool)[0])},
     "t2d_disagrees"),
], ids=["d2t-float", "t2d-length", "disagree"])
def test_invariants_claim_fails_on_bad_maps(tmp_path: Path, change: dict[str, TensorSpec],
                                            match: str) -> None:
    folder = tiny_drafter(tmp_path / "d", change)  # type: ignore[arg-type]
    result = invariants_claim(make_profile(folder))
    assert result.status is Status.FAILED
    assert result.reason == match
    assert match in result.details["codes"]
    assert str(folder) in result.message  # the contract: the message names the drafter


def test_missing_d2t_on_a_small_draft_vocab_is_broken(tmp_path: Path) -> None:
    folder = tiny_drafter(tmp_path / "d", {"d2t": None})
    result = invariants_claim(make_profile(folder))
    assert (result.status, result.reason) == (Status.BROKEN, "unreadable_input")
    assert str(folder) in result.message


@pytest.mark.parametrize("drop", [("d2t", "t2d"), ("t2d",)], ids=["no-map", "d2t-only"])
def test_full_vocabulary_drafter_without_a_map_passes_as_weights_layout_does(
        tmp_path: Path, drop: tuple[str, ...]) -> None:
    full = dataclasses.replace(tiny(), draft_vocab_size=tiny().vocab_size)
    folder = write_drafter(tmp_path / "d", full, fill="random")
    rewrite(folder / "model.safetensors", dict.fromkeys(drop))
    profile = make_profile(folder)
    assert layout_claim(profile).status is Status.PASSED
    vmap = load_map(folder)
    assert vmap.implied == drop
    assert vmap.t2d is not None
    assert vmap.t2d.all()
    assert vmap.t2d.shape == (full.vocab_size,)
    result = invariants_claim(profile)
    assert (result.status, result.reason) == (Status.PASSED, "identity_implied"), result.message
    assert result.details["implied"] == list(drop)


def test_full_vocabulary_drafter_with_a_wrong_d2t_still_fails(tmp_path: Path) -> None:
    full = dataclasses.replace(tiny(), draft_vocab_size=tiny().vocab_size)
    folder = write_drafter(tmp_path / "d", full, fill="random")
    d2t = np.zeros(full.vocab_size, np.int64)
    d2t[-1] = 1  # the last draft id points past the vocabulary
    rewrite(folder / "model.safetensors",
            {"t2d": None, "d2t": TensorSpec("I64", d2t.shape, data=d2t)})
    result = invariants_claim(make_profile(folder))
    assert (result.status, result.reason) == (Status.FAILED, "out_of_range")
    assert "out_of_range" in result.details["codes"]
    assert result.details["implied"] == ["t2d"]


@pytest.mark.parametrize(("fraction", "n", "need"), [
    (0.543, 24000, 13032), (0.99, 32000, 31680), (0.1, 30, 3), (0.7, 10, 7), (1.0, 7, 7),
    (0.0, 5, 0), (0.5, 3, 2), (0.3333, 3, 1),
])
def test_required_count_is_the_exact_ceiling(fraction: float, n: int, need: int) -> None:
    assert math.ceil(0.543 * 24000) == 13033  # the binary noise this guards against
    assert required_count(fraction, n) == need


@given(st.integers(0, 1000), st.integers(1, 200_000))
def test_required_count_of_an_exact_share_is_that_share(per_mille: int, n: int) -> None:
    fraction = per_mille / 1000
    need = required_count(fraction, n)
    assert need == -((-per_mille * n) // 1000)  # integer ceiling, no floats involved
    assert need >= fraction * n - 1e-6


def test_d2t_match_needs_the_exact_count_not_one_more(tmp_path: Path) -> None:
    shape = dataclasses.replace(tiny(), draft_vocab_size=100)
    ref = write_drafter(tmp_path / "ref", shape, token_ids=range(0, 200, 2), fill="random")
    ids = shifted_token_ids(load_map(ref).target_ids(), 7)
    mine = write_drafter(tmp_path / "mine", shape, token_ids=ids, fill="random", seed=5)
    assert 0.07 * 100 > 7  # 7.000000000000001: a plain ceiling would ask for 8
    result = d2t_match_claim(make_profile(mine, ref, d2t_match_min=0.07))
    assert (result.status, result.observed, result.expected) == (Status.PASSED, 7, ">= 7")
    t2d = t2d_match_claim(make_profile(mine, ref, t2d_match_min=0.56))
    assert (t2d.status, t2d.observed, t2d.expected) == (Status.PASSED, 99, ">= 56")


@pytest.mark.parametrize("entries", [0, 1])
def test_a_tiny_map_is_judged_against_the_reference_size(tmp_path: Path, entries: int) -> None:
    """A d2t of 0 or 1 entries (the reference's own first entries) matches every position it has,
    yet covers almost none of the reference's: both match claims fail."""
    ref = tiny_drafter(tmp_path / "ref")
    reference_size = load_map(ref).draft_vocab_size
    assert reference_size >= 64
    mine = tiny_drafter(tmp_path / "mine")
    d2t = load_map(ref).d2t[:entries].astype(np.int64)
    rewrite(mine / "model.safetensors", {"d2t": TensorSpec("I64", d2t.shape, data=d2t)})
    profile = make_profile(mine, ref, d2t_match_min=0.5, t2d_match_min=0.5)
    d2t_result, t2d_result = d2t_match_claim(profile), t2d_match_claim(profile)
    for result in (d2t_result, t2d_result):
        assert result.status is Status.FAILED, result.message
        assert result.expected == f">= {math.ceil(reference_size / 2)}"
    assert d2t_result.observed == entries
