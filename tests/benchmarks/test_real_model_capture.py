"""benchmarks/real_model/capture.py: the layers SGLang 0.5.17 captures for EAGLE-3, and a capture
with transformers that takes exactly the residual stream entering those layers."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from script_support import load_real_model_script


@pytest.fixture(scope="module")
def capture() -> ModuleType:
    pytest.importorskip("torch")
    return load_real_model_script("capture")


def test_sglang_default_capture_for_smollm2(capture: ModuleType) -> None:
    # SGLang 0.5.17 llama.py: no ids -> [2, n // 2, n - 3]; ids -> [id + 1 for id in ids]
    assert capture.sglang_capture_layers(None, 30) == [2, 15, 27]
    assert capture.sglang_capture_layers([1, 14, 26], 30) == [2, 15, 27]
    assert capture.config_ids_for([2, 15, 27]) == [1, 14, 26]
    assert capture.sglang_capture_layers([0, 1, 2], 4) == [1, 2, 3]


def test_batches_cover_every_sequence_once_within_the_token_bound(capture: ModuleType) -> None:
    lengths = [5, 90, 33, 33, 7, 64, 1, 120, 2]
    groups = list(capture.batches(lengths, max_tokens=130))
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for g in groups:
        assert len(g) == 1 or max(lengths[i] for i in g) * len(g) <= 130


@pytest.fixture(scope="module")
def tiny_target() -> Any:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_attention_heads=4,
        num_key_value_heads=2, num_hidden_layers=8, max_position_embeddings=128,
        tie_word_embeddings=True)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def test_capture_takes_the_inputs_of_the_layers_sglang_records(capture: ModuleType,
                                                               tiny_target: Any) -> None:
    import torch

    layers = capture.sglang_capture_layers(None, 8)  # [2, 4, 5]
    ids_cfg = capture.config_ids_for(layers)
    seqs = [[3, 9, 12, 40, 5, 7], [1, 2, 3], [8] * 11]
    caps, stats = capture.capture(tiny_target, seqs, [2, 1, 4], "cpu", ids_cfg)
    for seq, cap in zip(seqs, caps, strict=True):
        with torch.no_grad():
            out = tiny_target(input_ids=torch.tensor([seq]), output_hidden_states=True)
        # hidden_states[i] is the residual stream entering decoder layer i: SGLang's
        # `hidden_states + residual` before layer i runs
        want = torch.cat([out.hidden_states[i][0] for i in layers], -1).to(torch.bfloat16)
        assert cap["aux"].shape == (len(seq), 3 * 32)
        assert torch.allclose(cap["aux"].float(), want.float(), atol=2e-2, rtol=2e-2)
        assert cap["input_ids"].tolist() == seq
    assert caps[0]["loss_mask"].tolist() == [0, 0, 1, 1, 1, 1]
    assert stats["hook_vs_hidden_states_max_abs"] == 0.0


def test_the_layers_are_the_residual_stream_sglang_adds_up(capture: ModuleType,
                                                          tiny_target: Any) -> None:
    """SGLang's decoder layers return (mlp output, residual) and the stream entering layer i is
    their sum; run the layers by hand the same way and compare with the capture."""
    import torch

    seq = [4, 8, 15, 16, 23, 42]
    layers = capture.sglang_capture_layers(None, 8)
    caps, _ = capture.capture(tiny_target, [seq], [1], "cpu", capture.config_ids_for(layers))
    model = tiny_target.model
    ids = torch.tensor([seq])
    pos = torch.arange(len(seq))[None]
    with torch.no_grad():
        x = model.embed_tokens(ids)
        rope = model.rotary_emb(x, pos)
        mask = torch.full((len(seq), len(seq)), float("-inf")).triu(1)[None, None]
        seen = {}
        for i, layer in enumerate(model.layers):
            if i in layers:
                seen[i] = x[0]
            # transformers' layer returns the full residual stream (= SGLang's sum)
            res = layer(x, attention_mask=mask, position_ids=pos, position_embeddings=rope)
            x = res[0] if isinstance(res, tuple) else res
    want = torch.cat([seen[i] for i in layers], -1)
    assert torch.allclose(caps[0]["aux"].float(), want.float(), atol=3e-2, rtol=3e-2)
