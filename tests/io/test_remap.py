"""remap-vocab: lm_head rows follow the new map, logits of shared tokens are unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ckpt_support import write_map
from hypothesis import given, settings
from hypothesis import strategies as st

from specgate.claims.finetune import vocab_alignment_claim
from specgate.claims.result import Status
from specgate.cli.remap import main_remap
from specgate.core.profile import parse_profile
from specgate.io.checkpoint import open_drafter, read_tensor
from specgate.io.remap import remap_vocab, row_sources
from specgate.io.vocab_maps import VocabMap, load_map, map_of
from specgate.testing.generate import small, write_drafter

SHAPE = small()  # 256 hidden, 512 draft tokens of 4096


def _ids(seed: int) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(SHAPE.vocab_size, SHAPE.draft_vocab_size, replace=False))


def _new_ids(old: np.ndarray[Any, Any], keep: int, seed: int) -> np.ndarray[Any, Any]:
    """`keep` of the old tokens plus new ones: what a map built from other data looks like."""
    rng = np.random.default_rng(seed)
    kept = rng.choice(old, keep, replace=False)
    others = np.setdiff1d(np.arange(SHAPE.vocab_size), old)
    fresh = rng.choice(others, SHAPE.draft_vocab_size - keep, replace=False)
    return np.sort(np.concatenate([kept, fresh]))


@pytest.fixture(scope="module")
def remapped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("remap")
    old_ids = _ids(0)
    new_ids = _new_ids(old_ids, keep=400, seed=1)
    old = write_drafter(root / "old", SHAPE, token_ids=old_ids, fill="random",
                        name_style="midlayer", shards=2)
    map_path = write_map(root / "new_map.safetensors", new_ids, SHAPE.vocab_size)
    result = remap_vocab(old, map_path, root / "new")
    return {"root": root, "old": old, "new": root / "new", "map": map_path, "result": result,
            "old_ids": old_ids, "new_ids": new_ids}


def test_logits_of_every_shared_token_are_unchanged(remapped: dict[str, Any]) -> None:
    old, new = open_drafter(remapped["old"]), open_drafter(remapped["new"])
    old_head, new_head = read_tensor(old, "lm_head.weight"), read_tensor(new, "lm_head.weight")
    h = np.random.default_rng(3).standard_normal((16, SHAPE.hidden_size)).astype(np.float32)
    old_logits = dict(zip(map_of(old).target_ids().tolist(), (h @ old_head.T).T, strict=True))
    new_logits = dict(zip(map_of(new).target_ids().tolist(), (h @ new_head.T).T, strict=True))
    shared = set(old_logits) & set(new_logits)
    assert len(shared) == 400
    for token in shared:
        assert np.array_equal(old_logits[token], new_logits[token])


def test_new_rows_are_the_mean_row_and_the_map_is_the_new_one(remapped: dict[str, Any]) -> None:
    old, new = open_drafter(remapped["old"]), open_drafter(remapped["new"])
    result = remapped["result"]
    assert (result.carried_rows, result.filled_rows) == (400, 112)
    new_map = map_of(new)
    assert np.array_equal(new_map.target_ids(), remapped["new_ids"])
    assert new_map.t2d is not None
    assert int(new_map.t2d.sum()) == SHAPE.draft_vocab_size
    fresh = ~np.isin(remapped["new_ids"], remapped["old_ids"])
    head = read_tensor(new, "lm_head.weight")
    mean = read_tensor(old, "lm_head.weight").astype(np.float64).mean(axis=0)
    assert np.allclose(head[fresh], mean, atol=1e-3)  # bf16 rounding of the mean
    assert new.config["draft_vocab_size"] == SHAPE.draft_vocab_size


def test_every_other_tensor_is_copied_byte_for_byte(remapped: dict[str, Any]) -> None:
    old, new = open_drafter(remapped["old"]), open_drafter(remapped["new"])
    assert set(old.tensors) == set(new.tensors)
    assert sorted(p.name for p in new.files) == sorted(p.name for p in old.files)
    index = json.loads((remapped["new"] / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(new.tensors)
    for name, info in old.tensors.items():
        if name in ("lm_head.weight", "d2t", "t2d"):
            continue
        twin = new.tensors[name]
        with info.file.open("rb") as a, twin.file.open("rb") as b:
            a.seek(info.start)
            b.seek(twin.start)
            assert a.read(info.nbytes) == b.read(twin.nbytes), name


def test_after_remap_the_alignment_claim_passes(remapped: dict[str, Any]) -> None:
    def claim(init: Path) -> Any:
        return vocab_alignment_claim(parse_profile({"name": "t", "finetune": {
            "init": str(init), "vocab_map": str(remapped["map"])}}))

    before = claim(remapped["old"])
    assert (before.status, before.reason) == (Status.FAILED, "misaligned")
    assert before.details["remap"][:2] == ["specgate", "remap-vocab"]  # the fix it names
    after = claim(remapped["new"])
    assert after.status is Status.PASSED, after.message
    assert after.observed == SHAPE.draft_vocab_size


def test_zero_fill_and_a_drafter_as_the_map(tmp_path: Path, remapped: dict[str, Any]) -> None:
    target = write_drafter(tmp_path / "target_map", SHAPE, token_ids=remapped["new_ids"])
    result = remap_vocab(remapped["old"], target, tmp_path / "z", fill="zeros")
    head = read_tensor(open_drafter(tmp_path / "z"), "lm_head.weight")
    fresh = ~np.isin(remapped["new_ids"], remapped["old_ids"])
    assert result.fill == "zeros"
    assert not head[fresh].any()
    assert np.array_equal(load_map(tmp_path / "z").target_ids(), remapped["new_ids"])


def test_cli_refuses_a_non_empty_output(remapped: dict[str, Any],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    code = main_remap(["--from", str(remapped["old"]), "--to", str(remapped["map"]),
                       "--out", str(remapped["new"])])
    assert code == 2
    assert "not empty" in capsys.readouterr().err


def test_cli_writes_and_summarises(tmp_path: Path, remapped: dict[str, Any],
                                   capsys: pytest.CaptureFixture[str]) -> None:
    code = main_remap(["--from", str(remapped["old"]), "--to", str(remapped["map"]),
                       "--out", str(tmp_path / "cli")])
    assert code == 0
    assert "400 of 512 rows carried over" in capsys.readouterr().out


@given(st.sets(st.integers(0, 199), min_size=1, max_size=40),
       st.sets(st.integers(0, 199), min_size=1, max_size=40))
@settings(max_examples=100, deadline=None)
def test_row_sources_point_at_the_same_token(old: set[int], new: set[int]) -> None:
    a, b = VocabMap.from_token_ids(sorted(old), 200), VocabMap.from_token_ids(sorted(new), 200)
    src = row_sources(a, b)
    old_ids, new_ids = a.target_ids(), b.target_ids()
    for i, s in enumerate(src.tolist()):
        if s >= 0:
            assert old_ids[s] == new_ids[i]
        else:
            assert new_ids[i] not in old
    assert int((src >= 0).sum()) == len(old & new)


@pytest.mark.parametrize("flag", ["--from", "--to"])
def test_cli_names_the_flag_of_a_path_not_found(tmp_path: Path, remapped: dict[str, Any],
                                                capsys: pytest.CaptureFixture[str],
                                                flag: str) -> None:
    given = {"--from": str(remapped["old"]), "--to": str(remapped["map"])}
    given[flag] = str(tmp_path / "nothere")
    code = main_remap(["--from", given["--from"], "--to", given["--to"],
                       "--out", str(tmp_path / "out")])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"specgate remap-vocab: {tmp_path / 'nothere'}: "), err
    assert err.rstrip().endswith(f"not found; check {flag}"), err
    assert "--drafter" not in err
    assert not (tmp_path / "out").exists()
