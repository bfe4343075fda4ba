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


def test_two_drafters_one_byte_apart_have_different_byte_digests(tmp_path: Path) -> None:
    weight = np.zeros((64, 8), np.float32)
    a = _model(tmp_path / "a", weight)
    nudged = weight.copy()
    nudged.reshape(-1).view(np.uint8)[100] = 1  # one byte of one weight
    b = _model(tmp_path / "b", nudged)
    same = _model(tmp_path / "same", weight.copy())
    found = [identify(f, weight_bytes=True) for f in (a, b, same)]
    assert all(f is not None for f in found)
    fa, fb, fs = (f or {} for f in found)
    assert fa["weights_header_sha256"] == fb["weights_header_sha256"]  # headers cannot tell
    assert fa["weights_blake3"] != fb["weights_blake3"]
    assert fa["weights_blake3"] == fs["weights_blake3"]  # the bytes, not the path
    assert fa["weight_bytes"] == (a / "model.safetensors").stat().st_size
    assert "weights_blake3" not in (identify(a) or {})  # a target's is not read


def test_the_byte_digest_is_blake3_of_each_file_by_name_size_and_bytes(tmp_path: Path) -> None:
    import blake3

    folder = _model(tmp_path / "m", np.arange(12, dtype=np.float32).reshape(3, 4))
    save_file({"x": np.ones(3, np.float32)}, str(folder / "extra.safetensors"))
    whole = blake3.blake3()
    for path in sorted(folder.glob("*.safetensors")):
        data = path.read_bytes()
        whole.update(path.name.encode() + b"\0" + str(len(data)).encode() + b"\0"
                     + blake3.blake3(data).digest())
    found = identify(folder, weight_bytes=True) or {}
    assert found["weights_blake3"] == whole.hexdigest()
    # A file changed in place (new size and mtime) is read again, not taken from the memo.
    save_file({"x": np.zeros(5, np.float32)}, str(folder / "extra.safetensors"))
    assert (identify(folder, weight_bytes=True) or {})["weights_blake3"] != whole.hexdigest()


def test_a_sparse_file_digests_as_the_zeros_its_holes_read_as(tmp_path: Path) -> None:
    """The holes of a sparse weight file are hashed as zeros without being read: the digest is
    that of the same bytes written out in full."""
    sparse, dense = tmp_path / "sparse", tmp_path / "dense"
    for folder in (sparse, dense):
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(CONFIG))
    data = 8 + (70 << 20)  # a hole longer than one read block, between two marks
    header = json.dumps({"w": {"dtype": "U8", "shape": [data], "data_offsets": [0, data]}})
    head = struct.pack("<Q", len(header)) + header.encode() + b"mark"
    body = head + bytes(data - 8) + b"mark"
    with open(sparse / "model.safetensors", "wb") as fh:
        fh.write(head)
        fh.seek(len(body) - 4)
        fh.write(b"mark")
    (dense / "model.safetensors").write_bytes(body)
    assert (sparse / "model.safetensors").stat().st_blocks * 512 < len(body) // 2
    a = identify(sparse, weight_bytes=True) or {}
    b = identify(dense, weight_bytes=True) or {}
    import blake3

    assert a["weights_blake3"] == b["weights_blake3"]
    expected = blake3.blake3(b"model.safetensors\0" + str(len(body)).encode() + b"\0"
                             + blake3.blake3(body).digest()).hexdigest()
    assert a["weights_blake3"] == expected
