"""The weight claims: layout, shape parity and health, on tiny drafters and the full-size pair."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from ckpt_support import make_profile, rewrite, tiny_drafter

from specgate.claims import vocab
from specgate.claims.result import Status
from specgate.claims.weights import health_claim, layout_claim, shape_parity_claim
from specgate.io import vocab_maps
from specgate.io.safetensors_io import TensorSpec, read_header
from specgate.testing.generate import (
    aq_medai_k2,
    kimi_k25,
    shifted_token_ids,
    tiny,
    write_drafter,
    write_target_config,
)


def test_layout_passes_for_both_name_styles(tmp_path: Path) -> None:
    for style in ("layers.0", "midlayer"):
        result = layout_claim(make_profile(tiny_drafter(tmp_path / style, name_style=style)))
        assert result.status is Status.PASSED, result.message


@pytest.mark.parametrize(("change", "match"), [
    ({"fc.weight": None}, "fc.weight missing"),
    ({"lm_head.weight": TensorSpec("BF16", (63, 32))},
     r"shape \[63, 32\], config implies \[64, 32\]"),
    ({"norm.weight": TensorSpec("I32", (32,))}, "expected a float type"),
    ({"d2t": TensorSpec("I32", (64,))}, "d2t has dtype I32, expected I64"),
], ids=["missing", "shape", "float", "d2t-dtype"])
def test_layout_fails_with_each_mismatch_named(tmp_path: Path, change: dict[str, TensorSpec],
                                               match: str) -> None:
    folder = tiny_drafter(tmp_path / "d", change)  # type: ignore[arg-type]
    result = layout_claim(make_profile(folder))
    assert result.status is Status.FAILED
    assert result.observed == 1
    assert pytest.importorskip("re").search(match, result.message), result.message


def test_a_drafter_wider_than_its_target_must_carry_its_own_embedding(tmp_path: Path) -> None:
    # SGLang shares the target's embedding only when hidden_size equals target_hidden_size; a
    # drafter of another width keeps its own embed_tokens, which must then be in the files.
    wider = {"target_hidden_size": 48}
    fc = {"fc.weight": TensorSpec("BF16", (32, 3 * 48))}  # reads three 48-wide aux states
    bare = tiny_drafter(tmp_path / "bare", fc, include_embed=False, config_overrides=wider)
    result = layout_claim(make_profile(bare))
    assert result.status is Status.FAILED, result.message
    assert "embed_tokens.weight missing" in result.message
    assert "target_hidden_size (32 ≠ 48)" in result.message
    own = tiny_drafter(tmp_path / "own", fc, include_embed=True, config_overrides=wider)
    assert layout_claim(make_profile(own)).status is Status.PASSED
    same = tiny_drafter(tmp_path / "same", include_embed=False)
    assert layout_claim(make_profile(same)).status is Status.PASSED


def test_layout_mentions_names_sglang_would_ignore(tmp_path: Path) -> None:
    folder = tiny_drafter(tmp_path / "d", {"draft_model.extra": TensorSpec("F32", (2,))})
    result = layout_claim(make_profile(folder))
    assert result.status is Status.PASSED
    assert "draft_model.extra" in result.message


def test_layout_of_a_broken_folder_is_broken(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    result = layout_claim(make_profile(tmp_path / "d"))
    assert result.status is Status.BROKEN
    assert "empty" in result.message
    assert layout_claim(make_profile()).status is Status.SKIPPED


def test_shape_parity_normalises_names_and_ignores_embed(tmp_path: Path) -> None:
    mine = tiny_drafter(tmp_path / "mine", include_embed=True)
    ref = tiny_drafter(tmp_path / "ref", name_style="midlayer", include_embed=False, seed=3)
    assert shape_parity_claim(make_profile(mine, ref)).status is Status.PASSED
    assert shape_parity_claim(make_profile(ref, mine)).status is Status.PASSED
    assert shape_parity_claim(make_profile(mine)).status is Status.SKIPPED


def test_shape_parity_lists_every_mismatch(tmp_path: Path) -> None:
    mine = write_drafter(tmp_path / "mine", tiny(), fill="random",
                         config_overrides={"intermediate_size": 64})
    other = tiny().__class__(**{**tiny().__dict__, "intermediate_size": 48})
    ref = write_drafter(tmp_path / "ref", other, fill="random")
    result = shape_parity_claim(make_profile(mine, ref))
    assert result.status is Status.FAILED
    assert result.observed == 3
    for proj in ("gate_proj", "up_proj", "down_proj"):
        assert proj in result.message
    rewrite(mine / "model.safetensors", {"fc.weight": None})
    assert shape_parity_claim(make_profile(mine, ref)).observed == 4


def test_health_passes_random_fails_sparse(tmp_path: Path) -> None:
    assert health_claim(make_profile(tiny_drafter(tmp_path / "r"))).status is Status.PASSED
    marked = write_drafter(tmp_path / "m", tiny(), fill="marked")
    assert health_claim(make_profile(marked)).status is Status.PASSED
    sparse = write_drafter(tmp_path / "s", tiny(), fill="sparse")
    result = health_claim(make_profile(sparse))
    assert result.status is Status.FAILED
    assert len(result.details["all_zero"]) == 13
    assert result.observed == 13


def test_health_counts_nans(tmp_path: Path) -> None:
    folder = tiny_drafter(tmp_path / "d")
    bits = np.full(32, 0x3F80, np.uint16)
    bits[[3, 9]] = [0x7FC0, 0xFF80]  # NaN, -Inf
    rewrite(folder / "model.safetensors", {"norm.weight": TensorSpec("BF16", (32,), data=bits)})
    result = health_claim(make_profile(folder))
    assert result.status is Status.FAILED
    assert result.details["nonfinite"] == {"norm.weight": 2}


@pytest.mark.slow
def test_full_size_k25_and_aq_medai_pair(tmp_path: Path) -> None:
    aq = write_drafter(tmp_path / "aq", aq_medai_k2(), fill="marked")
    ref_ids = vocab_maps.load_map(aq).target_ids()
    k25 = write_drafter(tmp_path / "k25", kimi_k25(), fill="marked",
                        token_ids=shifted_token_ids(ref_ids, 252))
    target = write_target_config(tmp_path / "target")
    for folder, size in ((aq, 2.38e9), (k25, 4.73e9)):
        file = folder / "model.safetensors"
        st = file.stat()
        assert abs(st.st_size - size) < 0.01e9
        assert st.st_blocks * 512 < 8 << 20  # real disk: d2t, t2d, one page per weight
        # CPU time of this process: the work done, which a busy machine does not stretch.
        started = time.process_time()
        read_header(file)
        assert time.process_time() - started < 1.0
    profile = make_profile(k25, aq, target, expect={"max_position_embeddings": 262144})
    assert layout_claim(profile).status is Status.PASSED
    assert layout_claim(make_profile(aq)).status is Status.PASSED
    assert shape_parity_claim(profile).status is Status.PASSED
    assert health_claim(profile).status is Status.PASSED
    d2t = vocab.d2t_match_claim(profile)
    assert (d2t.status, d2t.observed, d2t.expected) == (Status.FAILED, 252, ">= 31680")
    assert (d2t.reason, d2t.details["shared_tokens"]) == ("shifted_map", 31999)
    t2d = vocab.t2d_match_claim(profile)
    assert t2d.observed == 31999
