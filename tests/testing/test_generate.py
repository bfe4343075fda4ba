"""The generator: presets, configs, fills, shards, target configs and the CLI."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specgate.cli.generate import main_generate
from specgate.io.checkpoint import expected_layout, load_target_config, open_drafter
from specgate.io.health import scan
from specgate.io.vocab_maps import check_invariants, compare, load_map
from specgate.testing.generate import (
    aq_medai_k2,
    default_token_ids,
    kimi_k25,
    small,
    tiny,
    write_drafter,
)


def _bytes(shape_config: dict[str, object], embed: bool) -> int:
    layout = expected_layout(shape_config)  # type: ignore[arg-type]
    width = {"I64": 8, "BOOL": 1, None: 2}
    return sum(math.prod(t.shape) * width[t.dtype] for n, t in layout.items()
               if embed or n != "embed_tokens.weight")


def test_preset_sizes_match_the_real_drafters() -> None:
    assert abs(_bytes(kimi_k25().config(), True) - 4.73e9) < 0.01e9
    assert abs(_bytes(aq_medai_k2().config(), False) - 2.382e9) < 0.001e9
    aq = aq_medai_k2().config()
    assert aq["max_position_embeddings"] == 131072
    assert kimi_k25().config()["max_position_embeddings"] == 262144
    assert aq["eagle_config"] == {"eagle_aux_hidden_state_layer_ids": [2, 30, 58],
                                  "use_aux_hidden_state": True}


def test_small_drafter_is_sparse_and_sound(tmp_path: Path) -> None:
    folder = write_drafter(tmp_path / "s", small())
    drafter = open_drafter(folder)
    assert "embed_tokens.weight" in drafter.tensors
    vmap = load_map(folder)
    assert check_invariants(vmap, 512, 4096) == {}
    np.testing.assert_array_equal(vmap.target_ids(), default_token_ids(small()))
    file = folder / "model.safetensors"
    assert file.stat().st_blocks * 512 < file.stat().st_size // 4
    assert not scan(drafter).ok


def test_fills_and_overrides(tmp_path: Path) -> None:
    random = write_drafter(tmp_path / "r", tiny(), fill="random", seed=7,
                           config_overrides={"max_position_embeddings": 99})
    assert json.loads((random / "config.json").read_text())["max_position_embeddings"] == 99
    assert scan(open_drafter(random)).ok
    assert scan(open_drafter(write_drafter(tmp_path / "m", tiny(), fill="marked"))).ok
    with pytest.raises(ValueError, match="fill"):
        write_drafter(tmp_path / "x", tiny(), fill="noise")
    with pytest.raises(ValueError, match="draft_vocab_size"):
        write_drafter(tmp_path / "x", tiny(), token_ids=[1, 2, 3])


def test_seeded_fills_are_reproducible(tmp_path: Path) -> None:
    a = write_drafter(tmp_path / "a", tiny(), fill="random", seed=1)
    b = write_drafter(tmp_path / "b", tiny(), fill="random", seed=1)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()


def test_cli_writes_a_shifted_pair_and_a_target(tmp_path: Path) -> None:
    assert main_generate(["--preset", "small", "--out", str(tmp_path / "ref")]) == 0
    code = main_generate(["--preset", "small", "--out", str(tmp_path / "new"), "--shift-from",
                          str(tmp_path / "ref"), "--matches", "5", "--name-style", "midlayer",
                          "--shards", "2", "--fill", "sparse", "--target-out", str(tmp_path / "t")])
    assert code == 0
    cmp = compare(load_map(tmp_path / "new"), load_map(tmp_path / "ref"))
    assert cmp.d2t_positional_matches == 5
    assert cmp.shared_tokens == 511
    new = open_drafter(tmp_path / "new")
    assert len(new.files) == 2
    assert "midlayer.mlp.up_proj.weight" in new.tensors
    assert load_target_config(tmp_path / "t")["vocab_size"] == 4096


def test_cli_says_when_no_id_is_left_to_shift_in(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert int(default_token_ids(tiny())[-1]) == 255  # the tiny reference uses the last id
    assert main_generate(["--preset", "tiny", "--out", str(tmp_path / "ref")]) == 0
    assert main_generate(["--preset", "tiny", "--out", str(tmp_path / "new"), "--shift-from",
                          str(tmp_path / "ref"), "--matches", "5"]) == 2
    assert "no id above" in capsys.readouterr().err


def test_cli_reports_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main_generate(["--preset", "tiny", "--out", str(tmp_path / "x"), "--shift-from",
                          str(tmp_path / "missing")])
    assert code == 2
    assert "missing" in capsys.readouterr().err


def test_generate_and_remap_load_neither_the_profile_nor_pydantic() -> None:
    """`specgate generate` and `remap-vocab` read maps through io.vocab_maps, not the claims."""
    code = ("import sys, specgate.testing.generate, specgate.io.remap; "
            "print(sorted(m for m in sys.modules if m == 'pydantic' or m.endswith('.profile')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_generate_option_is_described(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    seen: list[argparse.Action] = []

    def spy(self: argparse.ArgumentParser, *a: object, **k: object) -> object:
        seen.extend(self._actions)
        raise SystemExit(0)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", spy)
    with pytest.raises(SystemExit):
        main_generate(["--help"])
    assert len(seen) > 10
    assert [a.option_strings for a in seen if a.option_strings and not a.help] == []
