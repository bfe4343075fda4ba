"""Opening drafter folders: layouts, shards, name normalisation, the cache and bad input."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
from ckpt_support import tiny_drafter

from specgate.core.errors import CheckpointError
from specgate.io.checkpoint import (
    INDEX_NAME,
    expected_layout,
    load_target_config,
    normalize_name,
    open_drafter,
    read_config,
    read_tensor,
)
from specgate.testing.generate import aq_medai_k2, kimi_k25, tiny, write_target_config


def test_open_tiny_drafter(tmp_path: Path) -> None:
    folder = tiny_drafter(tmp_path / "d")
    drafter = open_drafter(folder)
    assert drafter.config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert drafter.files == (folder / "model.safetensors",)
    assert drafter.tensors["fc.weight"].shape == (32, 96)
    assert read_tensor(drafter, "d2t").dtype == np.int64
    assert read_tensor(drafter, "midlayer.mlp.up_proj.weight").shape == (64, 32)


def test_shards_hold_the_same_tensors(tmp_path: Path) -> None:
    one = open_drafter(tiny_drafter(tmp_path / "one"))
    three = open_drafter(tiny_drafter(tmp_path / "three", shards=3))
    assert len(three.files) == 3
    assert {n: (i.shape, i.dtype) for n, i in one.tensors.items()} == {
        n: (i.shape, i.dtype) for n, i in three.tensors.items()}
    np.testing.assert_array_equal(read_tensor(one, "lm_head.weight"),
                                  read_tensor(three, "lm_head.weight"))


def test_cache_returns_the_same_drafter_until_a_file_changes(tmp_path: Path) -> None:
    folder = tiny_drafter(tmp_path / "d")
    first = open_drafter(folder)
    assert open_drafter(folder) is first
    config = folder / "config.json"
    doc = json.loads(config.read_text())
    doc["max_position_embeddings"] = 4096
    config.write_text(json.dumps(doc))
    st = config.stat()
    os.utime(config, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    again = open_drafter(folder)
    assert again is not first
    assert again.config["max_position_embeddings"] == 4096


@pytest.mark.parametrize(("name", "canonical"), [
    ("midlayer.self_attn.q_proj.weight", "layers.0.self_attn.q_proj.weight"),
    ("model.layers.0.mlp.up_proj.weight", "layers.0.mlp.up_proj.weight"),
    ("model.midlayer.hidden_norm.weight", "layers.0.hidden_norm.weight"),
    ("aux_norm_mid.weight", "fc_norm.1.weight"),
    ("fc.weight", "fc.weight"),
    ("d2t", "d2t"),
])
def test_normalize_name(name: str, canonical: str) -> None:
    assert normalize_name(name) == canonical
    assert normalize_name(canonical) == canonical


def test_expected_layout_of_kimi_k25() -> None:
    layout = expected_layout(kimi_k25().config())
    assert layout["fc.weight"].shape == (7168, 3 * 7168)
    assert layout["layers.0.self_attn.q_proj.weight"].shape == (8192, 14336)
    assert layout["layers.0.self_attn.o_proj.weight"].shape == (7168, 8192)
    assert layout["layers.0.mlp.down_proj.weight"].shape == (7168, 18432)
    assert layout["lm_head.weight"].shape == (32000, 7168)
    assert layout["d2t"][:3] == ((32000,), "I64", False)
    assert layout["t2d"][:3] == ((163840,), "BOOL", False)
    assert layout["embed_tokens.weight"].optional
    trainable = sum(int(np.prod(t.shape)) * 2 for n, t in layout.items()
                    if n not in ("d2t", "t2d", "embed_tokens.weight"))
    # The seeds' AQ-MedAI model.safetensors is 2,382,319,104 bytes: header + d2t/t2d on top.
    assert 2_381_000_000 < trainable + 32000 * 8 + 163840 < 2_382_319_104


def test_expected_layout_variants() -> None:
    config = dict(tiny().config(), target_hidden_size=48, fc_norm=True, attention_bias=True)
    layout = expected_layout(config)
    assert layout["fc.weight"].shape == (32, 3 * 48)
    assert layout["fc_norm.2.weight"].shape == (48,)
    assert "layers.0.self_attn.q_proj.bias" in layout
    full = expected_layout(dict(tiny().config(), draft_vocab_size=256))
    assert full["d2t"].optional
    assert full["t2d"].optional
    with pytest.raises(CheckpointError, match="hidden_size"):
        expected_layout({"vocab_size": 3})


def test_aq_medai_preset_uses_legacy_names(tmp_path: Path) -> None:
    assert aq_medai_k2().name_style == "midlayer"
    drafter = open_drafter(tiny_drafter(tmp_path / "d", name_style="midlayer"))
    assert "midlayer.self_attn.q_proj.weight" in drafter.tensors
    assert drafter.find("layers.0.self_attn.q_proj.weight") is not None


def test_target_config_from_folder_file_and_text_config(tmp_path: Path) -> None:
    plain = write_target_config(tmp_path / "t")
    assert load_target_config(plain)["num_hidden_layers"] == 61
    assert load_target_config(plain / "config.json")["vocab_size"] == 163840
    mm = write_target_config(tmp_path / "mm", multimodal=True)
    assert "text_config" in read_config(mm)
    assert load_target_config(mm)["hidden_size"] == 7168


def _broken_folder(tmp_path: Path, case: str) -> Path:
    folder = tmp_path / "d"
    if case == "missing":
        return folder
    folder.mkdir()
    if case == "empty":
        return folder
    good = tiny_drafter(tmp_path / "good")
    if case == "no-config":
        (folder / "model.safetensors").write_bytes((good / "model.safetensors").read_bytes())
    elif case == "config-not-json":
        (folder / "config.json").write_text("{'hidden_size': 32,}")
        (folder / "model.safetensors").write_bytes((good / "model.safetensors").read_bytes())
    elif case == "pickle-only":
        (folder / "config.json").write_text((good / "config.json").read_text())
        (folder / "pytorch_model.bin").write_bytes(b"\x80\x04not really")
    elif case == "cut-short":
        (folder / "config.json").write_text((good / "config.json").read_text())
        data = (good / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    elif case in ("missing-shard", "tensor-not-in-shard"):
        sharded = tiny_drafter(tmp_path / "sharded", shards=2)
        for f in sharded.iterdir():
            (folder / f.name).write_bytes(f.read_bytes())
        index = json.loads((folder / INDEX_NAME).read_text())
        if case == "missing-shard":
            (folder / "model-00002-of-00002.safetensors").unlink()
        else:
            index["weight_map"]["ghost.weight"] = "model-00001-of-00002.safetensors"
            (folder / INDEX_NAME).write_text(json.dumps(index))
    return folder


@pytest.mark.parametrize(("case", "match"), [
    ("missing", "not found"),
    ("empty", "empty"),
    ("no-config", "no config.json"),
    ("config-not-json", "not valid JSON"),
    ("pickle-only", "never unpickles"),
    ("cut-short", "truncated"),
    ("missing-shard", "model-00002-of-00002.safetensors"),
    ("tensor-not-in-shard", "ghost.weight"),
])
def test_bad_folders_give_a_clear_error_fast(tmp_path: Path, case: str, match: str) -> None:
    folder = _broken_folder(tmp_path, case)
    # CPU time of this process: the work done, which a busy machine does not stretch.
    started = time.process_time()
    with pytest.raises(CheckpointError, match=match) as info:
        open_drafter(folder)
    assert time.process_time() - started < 1.0
    assert str(folder) in str(info.value)


def test_a_tensor_in_two_files_is_refused_naming_both(tmp_path: Path) -> None:
    from specgate.io.safetensors_io import TensorSpec, write_sparse

    folder = tiny_drafter(tmp_path / "d")
    write_sparse(folder / "a-extra.safetensors", {"x": TensorSpec("F32", (2,)),
                                                  "norm.weight": TensorSpec("F32", (2,))})
    with pytest.raises(CheckpointError, match=r"tensor 'norm\.weight' appears in both "
                       r"a-extra\.safetensors and model\.safetensors"):
        open_drafter(folder)
    (folder / "a-extra.safetensors").unlink()
    write_sparse(folder / "a-extra.safetensors", {"x": TensorSpec("F32", (2,))})
    drafter = open_drafter(folder)
    assert next(iter(drafter.tensors)) == "x"
    assert drafter.tensors["x"].file.name == "a-extra.safetensors"
    assert drafter.tensors["norm.weight"].file.name == "model.safetensors"
    assert "x" in drafter.tensors
    assert "y" not in drafter.tensors
