"""Bounded work on adversarial inputs: each ends in a sentence naming the file, quickly."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from helpers_ckpt import tiny_drafter

from specgate.core.errors import CheckpointError
from specgate.io import checkpoint
from specgate.io.checkpoint import expected_layout, open_drafter, read_config


@pytest.mark.parametrize(("text", "match"), [
    ('{"hidden_size": ' + "9" * 5000 + "}", "number specgate will not read"),
    ("[" * 100_000 + "]" * 100_000, "nests JSON too deeply"),
])
def test_config_json_numbers_and_nesting(tmp_path: Path, text: str, match: str) -> None:
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(CheckpointError, match=match) as err:
        read_config(tmp_path)
    assert str(tmp_path / "config.json") in str(err.value)


@pytest.mark.parametrize(("change", "match"), [
    ({"hidden_size": 1e400}, "garbles field"),
    ({"num_attention_heads": 0}, "head size cannot be derived"),
])
def test_layout_of_a_garbled_config(change: dict[str, object], match: str) -> None:
    config = {"hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 64,
              "vocab_size": 256, **change}
    with pytest.raises(CheckpointError, match=match):
        expected_layout(json.loads(json.dumps(config)))


def test_a_drafter_path_that_is_a_symlink_to_itself(tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(CheckpointError, match="loop"):
        open_drafter(loop)


def test_find_is_not_quadratic(tmp_path: Path) -> None:
    """find() per tensor on 20,000 tensors: linear (the map is built once)."""
    drafter = open_drafter(tiny_drafter(tmp_path / "d"))
    info = next(iter(drafter.tensors.values()))
    many = checkpoint.Drafter(drafter.path, drafter.config,
                              {f"model.t{i}": info for i in range(20_000)}, drafter.files)
    started = time.perf_counter()
    found = sum(many.find(f"t{i}") is not None for i in range(20_000))
    assert found == 20_000
    assert time.perf_counter() - started < 2.0  # quadratic: ~400 M dict inserts, minutes
