"""The config claims: [drafter.expect] fields and drafter-versus-target compatibility."""

from __future__ import annotations

from pathlib import Path

import pytest
from ckpt_support import make_profile, tiny_drafter

from specgate.claims.config import (
    config_field_claim,
    config_field_claims,
    config_field_ids,
    lookup,
    target_compat_claim,
)
from specgate.claims.result import Status
from specgate.testing.generate import aq_medai_k2, kimi_k25, write_target_config

EXPECT = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "hidden_size": 32,
    "eagle_config.eagle_aux_hidden_state_layer_ids": [1, 3, 5],
    "eagle_config.use_aux_hidden_state": True,
}


def _write_config(folder: Path, config: dict[str, object]) -> Path:
    import json

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_fields_pass_including_nested(tmp_path: Path) -> None:
    profile = make_profile(tiny_drafter(tmp_path / "d"), expect=EXPECT)
    assert config_field_ids(profile) == list(EXPECT)
    results = config_field_claims(profile)
    assert [r.id for r in results] == [f"config.{k}" for k in EXPECT]
    assert all(r.status is Status.PASSED for r in results), [r.message for r in results]


def test_wrong_and_missing_fields_fail(tmp_path: Path) -> None:
    folder = tiny_drafter(tmp_path / "d")
    profile = make_profile(folder, expect={"hidden_size": 64, "fc_norm": True,
                                           "eagle_config.eagle_aux_hidden_state_layer_ids":
                                               [2, 4, 6]})
    wrong = config_field_claim(profile, "hidden_size")
    assert (wrong.status, wrong.observed, wrong.expected) == (Status.FAILED, 32, 64)
    assert wrong.reason == "wrong_value"
    assert str(folder / "config.json") in wrong.message  # the contract: the file is named
    missing = config_field_claim(profile, "fc_norm")
    assert (missing.status, missing.reason) == (Status.FAILED, "missing_field")
    assert (missing.observed, missing.expected) == (None, True)
    aux = config_field_claim(profile, "eagle_config.eagle_aux_hidden_state_layer_ids")
    assert (aux.status, aux.reason) == (Status.FAILED, "aux_layer_ids_differ")
    assert aux.expected == [2, 4, 6]


def test_bool_is_not_one(tmp_path: Path) -> None:
    folder = _write_config(tmp_path / "d", {"flag": 1})
    assert config_field_claim(make_profile(folder, expect={"flag": True}),
                              "flag").status is Status.FAILED


def test_short_context_says_how_to_fix(tmp_path: Path) -> None:
    folder = _write_config(tmp_path / "aq", aq_medai_k2().config())
    result = config_field_claim(make_profile(folder, expect={"max_position_embeddings": 262144}),
                                "max_position_embeddings")
    assert (result.status, result.reason) == (Status.FAILED, "context_too_short")
    assert (result.observed, result.expected) == (131072, 262144)
    assert result.details["overwrite_env"] == "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"


def test_bad_or_absent_config_is_broken_or_skipped(tmp_path: Path) -> None:
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "config.json").write_text("{not json")
    result = config_field_claim(make_profile(folder, expect={"hidden_size": 1}), "hidden_size")
    assert (result.status, result.reason) == (Status.BROKEN, "unreadable_input")
    assert str(folder / "config.json") in result.message  # the contract: the file is named
    assert config_field_claim(make_profile(expect={"a": 1}), "a").status is Status.SKIPPED
    assert config_field_claim(make_profile(folder), "a").status is Status.BROKEN


def test_lookup_prefers_literal_keys() -> None:
    config = {"a.b": 1, "a": {"b": 2, "c": {"d": 3}}}
    assert lookup(config, "a.b") == 1
    assert lookup(config, "a.c.d") == 3
    assert lookup(config, "a.x") is lookup(config, "nope")


def test_target_compat_passes_for_k25(tmp_path: Path) -> None:
    drafter = _write_config(tmp_path / "k25", kimi_k25().config())
    for target in (write_target_config(tmp_path / "t"),
                   write_target_config(tmp_path / "mm", multimodal=True)):
        result = target_compat_claim(make_profile(drafter, target=target))
        assert result.status is Status.PASSED, result.message
        assert result.details["checks"]["aux_layer_ids"] == [[2, 30, 58], "61 layers", True]
        assert result.details["mismatched"] == []


@pytest.mark.parametrize(("change", "code"), [
    ({"hidden_size": 4096}, "hidden_size"),
    ({"vocab_size": 129280}, "vocab_size"),
    ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 61]}}, "aux_layer_ids"),
    ({"max_position_embeddings": 131072}, "max_position_embeddings"),
])
def test_target_compat_fails_per_mismatch(tmp_path: Path, change: dict[str, object],
                                          code: str) -> None:
    drafter = _write_config(tmp_path / "d", {**kimi_k25().config(), **change})
    target = write_target_config(tmp_path / "t")
    result = target_compat_claim(make_profile(drafter, target=target))
    assert result.status is Status.FAILED
    assert (result.observed, result.expected) == (1, 0)
    assert result.details["mismatched"] == [code]


def test_target_compat_skips_or_breaks(tmp_path: Path) -> None:
    drafter = _write_config(tmp_path / "d", kimi_k25().config())
    assert target_compat_claim(make_profile(drafter)).status is Status.SKIPPED
    missing = target_compat_claim(make_profile(drafter, target=tmp_path / "nowhere"))
    assert (missing.status, missing.reason) == (Status.BROKEN, "unreadable_input")
    assert str(tmp_path / "nowhere") in missing.message  # the contract: the path is named
    empty = _write_config(tmp_path / "empty", {"foo": 1})
    result = target_compat_claim(make_profile(drafter, target=empty))
    assert (result.status, result.reason) == (Status.BROKEN, "not_a_model_config")


@pytest.mark.parametrize("args", [["--context-length", "131072"], ["--context-length=65536"]])
def test_a_served_context_within_the_drafters_positions_fits(tmp_path: Path,
                                                             args: list[str]) -> None:
    # SGLang serves the target at --context-length; a drafter that covers that context starts.
    drafter = _write_config(tmp_path / "d", {**kimi_k25().config(),
                                             "max_position_embeddings": 131072})
    profile = make_profile(drafter, target=write_target_config(tmp_path / "t"))
    assert target_compat_claim(profile).status is Status.FAILED
    served = profile.model_copy(update={"server": profile.server.model_copy(
        update={"args": args})})
    result = target_compat_claim(served)
    assert result.status is Status.PASSED, result.message
    check = result.details["checks"]["max_position_embeddings"]
    assert check[2] is True
    assert "served at --context-length" in check[1]
    longer = profile.model_copy(update={"server": profile.server.model_copy(
        update={"args": ["--context-length", "200000"]})})
    assert target_compat_claim(longer).status is Status.FAILED
