"""Tests for specgate.io.identity: what the verdict says a target or drafter folder is."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from specgate.io.identity import identify

CONFIG = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 30, "hidden_size": 576,
          "vocab_size": 49152}


def _model(folder: Path, weight: np.ndarray, config: dict[str, object] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config or CONFIG))
    save_file({"lm_head.weight": weight}, str(folder / "model.safetensors"))
    return folder


def test_a_folder_is_named_by_its_shape_and_digests(tmp_path: Path) -> None:
    found = identify(_model(tmp_path / "m", np.zeros((4, 2), np.float32)))
    assert found is not None
    assert found["architecture"] == "LlamaForCausalLM"
    assert (found["layers"], found["hidden_size"], found["vocab_size"]) == (30, 576, 49152)
    assert "draft_vocab_size" not in found
    assert found["weight_files"] == 1
    assert len(found["config_sha256"]) == len(found["weights_header_sha256"]) == 64


def test_the_header_digest_follows_shapes_not_weight_values(tmp_path: Path) -> None:
    a = identify(_model(tmp_path / "a", np.zeros((4, 2), np.float32)))
    b = identify(_model(tmp_path / "b", np.ones((4, 2), np.float32)))
    c = identify(_model(tmp_path / "c", np.zeros((2, 4), np.float32)))
    assert a is not None
    assert b is not None
    assert c is not None
    assert a["weights_header_sha256"] == b["weights_header_sha256"]
    assert a["weights_header_sha256"] != c["weights_header_sha256"]
    d = identify(_model(tmp_path / "d", np.zeros((4, 2), np.float32),
                        {**CONFIG, "num_hidden_layers": 31}))
    assert d is not None
    assert d["config_sha256"] != a["config_sha256"]
    assert d["layers"] == 31


def test_a_multimodal_config_is_read_from_its_text_config(tmp_path: Path) -> None:
    config = {"architectures": ["KimiK25ForConditionalGeneration"],
              "text_config": {"num_hidden_layers": 61, "hidden_size": 7168,
                              "vocab_size": 163840}}
    found = identify(_model(tmp_path / "k", np.zeros(2, np.float32), config))
    assert found is not None
    assert (found["layers"], found["vocab_size"]) == (61, 163840)


def test_what_cannot_be_read_is_said_not_raised(tmp_path: Path) -> None:
    assert identify(None) is None
    missing = identify(tmp_path / "on-the-gpu-host")
    assert missing is not None
    assert "not found" in missing["unreadable"]
    bad = _model(tmp_path / "bad", np.zeros(2, np.float32))
    (bad / "model.safetensors").write_bytes(struct.pack("<Q", 10**12) + b"{}")
    found = identify(bad)
    assert found is not None
    assert "larger than" in found["weights_unreadable"]
    assert "weights_header_sha256" not in found
