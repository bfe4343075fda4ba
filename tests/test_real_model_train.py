"""benchmarks/real_model/train.py on a tiny Llama target and dump (CPU, seconds): the drafter has
the shape the target implies, SGLang's layout, a readable log, a prediction; with --init it
starts from that drafter. Where SpecForge 0.2.0 can be imported ($SPECFORGE_ROOT: an unpacked
wheel), its LlamaForCausalLMEagle3 loads the checkpoint with every key and shape matching."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from script_support import load_real_model_script

pytest.importorskip("torch")
pytest.importorskip("transformers")

from specgate.io.checkpoint import expected_layout, open_drafter
from specgate.io.metrics_log import read_metrics

load = load_real_model_script


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A 10-layer random target (hidden 32, vocab 96, rope 1e5, 512 positions), a dump of its
    states at the layers SGLang captures, a vocab map of 40 tokens, and one trained drafter."""
    import torch
    from safetensors.numpy import save_file as save_np
    from transformers import LlamaConfig, LlamaForCausalLM

    capture, vocab, train = load("capture"), load("vocab"), load("train")
    root = tmp_path_factory.mktemp("rm")
    target = root / "target"
    cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=48, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=8, num_hidden_layers=10,
                      max_position_embeddings=512, rope_theta=100000.0,
                      tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    model.save_pretrained(str(target))
    gen = torch.Generator().manual_seed(1)
    seqs = [torch.randint(3, 96, (int(n),), generator=gen).tolist() for n in (20, 31, 17, 26)]
    layers = capture.sglang_capture_layers(None, 10)
    ids_cfg = capture.config_ids_for(layers)
    caps, _ = capture.capture(model, seqs, [5, 5, 5, 5], "cpu", ids_cfg)
    dump = root / "dump"
    capture.write_samples(dump, [f"s{i}" for i in range(4)], caps, full=True)
    capture.finish_dump(dump, model.model.embed_tokens.weight.detach(), {
        "aux_hidden_state_layer_ids": ids_cfg, "target_model_type": "llama",
        "samples": {f"s{i}": {"category": "chat" if i % 2 else "math"} for i in range(4)}})
    d2t, t2d = vocab.mappings(vocab.count_tokens(
        [(c["input_ids"].numpy(), c["loss_mask"].numpy()) for c in caps]), 40, 96)
    vmap = root / "map.safetensors"
    save_np({"d2t": d2t, "t2d": t2d}, str(vmap))
    out = root / "drafter"
    assert train.main(["--dump", str(dump), "--vocab-map", str(vmap), "--target", str(target),
                       "--out", str(out), "--seconds", "1", "--max-epochs", "2",
                       "--pack-tokens", "64", "--heldout", str(dump), "--request-tokens", "16",
                       "--device", "cpu"]) == 0
    return {"root": root, "target": target, "dump": dump, "map": vmap, "out": out,
            "ids": ids_cfg, "train": train}


def test_the_drafter_fits_the_target_and_sglangs_layout(made: dict[str, Any]) -> None:
    config = json.loads((made["out"] / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert (config["hidden_size"], config["num_attention_heads"], config["vocab_size"],
            config["draft_vocab_size"]) == (32, 4, 96, 40)
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == made["ids"] == [1, 4, 6]
    assert config["max_position_embeddings"] == 512
    rope = config.get("rope_theta") or config["rope_parameters"]["rope_theta"]
    assert rope == 100000.0
    drafter = open_drafter(made["out"])
    layout = expected_layout(drafter.config)
    names = set(drafter.tensors)
    assert {"d2t", "t2d", "fc.weight", "lm_head.weight"} <= names
    assert not any("embed" in n for n in names)
    for name, info in drafter.tensors.items():
        if name in layout:
            assert list(info.shape) == list(layout[name].shape), name


def test_the_log_reads_and_the_summary_names_the_weights(made: dict[str, Any]) -> None:
    log = read_metrics(made["out"] / "logs" / "train.jsonl")
    first = log.first_loss()
    assert first is not None
    assert first.epoch == 0
    summary = json.loads((made["out"] / "summary.json").read_text())
    assert len(summary["sha256"]) == 64
    assert summary["how"] == "from scratch"
    assert "all" in summary["predicted"]


def test_a_fine_tune_starts_from_the_init(made: dict[str, Any]) -> None:
    from safetensors.torch import load_file

    out = made["root"] / "ft"
    assert made["train"].main([
        "--dump", str(made["dump"]), "--vocab-map", str(made["map"]), "--target",
        str(made["target"]), "--out", str(out), "--init", str(made["out"]), "--seconds", "0",
        "--max-epochs", "1", "--pack-tokens", "64", "--lr", "0", "--device", "cpu"]) == 0
    before, after = (load_file(str(p / "model.safetensors")) for p in (made["out"], out))
    # a learning rate of 0: the fine-tune saves its init unchanged
    for name in ("fc.weight", "lm_head.weight", "midlayer.mlp.down_proj.weight"):
        assert before[name].equal(after[name]), name
    first = read_metrics(out / "logs" / "train.jsonl").first_loss()
    scratch = read_metrics(made["out"] / "logs" / "train.jsonl").first_loss()
    assert first is not None
    assert scratch is not None
    assert first.loss != scratch.loss


def test_specforges_draft_model_loads_the_checkpoint(made: dict[str, Any]) -> None:
    root = os.environ.get("SPECFORGE_ROOT")
    if not root or not (Path(root) / "specforge" / "modeling" / "draft").is_dir():
        pytest.skip("SpecForge 0.2.0 is not importable here: set SPECFORGE_ROOT to an unpacked "
                    "specforge-0.2.0 wheel")
    vocab = load("vocab")
    vocab.load_specforge(Path(root))  # stubs what its imports need
    from safetensors.torch import load_file
    from specforge.modeling.draft.llama3_eagle import LlamaForCausalLMEagle3
    from transformers import LlamaConfig

    config = LlamaConfig.from_pretrained(str(made["out"]))
    model = LlamaForCausalLMEagle3(config)
    state = load_file(str(made["out"] / "model.safetensors"))
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert unexpected == []
    assert missing == ["embed_tokens.weight"]  # SGLang takes the target's
    own = model.state_dict()
    assert all(own[k].shape == v.shape for k, v in state.items())


def test_vocab_checkpoint_reports_what_specforge_makes_of_the_drafter(
        made: dict[str, Any], tmp_path: Path) -> None:
    root = os.environ.get("SPECFORGE_ROOT")
    if not root or not (Path(root) / "specforge" / "export" / "to_sglang.py").is_file():
        pytest.skip("SpecForge 0.2.0 is not importable here: set SPECFORGE_ROOT to an unpacked "
                    "specforge-0.2.0 wheel")
    vocab = load("vocab")
    found = vocab.checkpoint(made["out"], Path(root))
    assert found["missing_keys"] == ["embed_tokens.weight"]  # SGLang takes the target's
    assert found["unexpected_keys"] == []
    assert found["shapes_match"] is True
    assert found["exporter_serving_state_check"] == "passed"
    assert found["dtypes_in_checkpoint"]["d2t"][0] == "torch.int64"
    # a checkpoint without the maps SGLang's loader needs fails the exporter's check
    from safetensors.torch import load_file, save_file

    bare = tmp_path / "bare"
    shutil.copytree(made["out"], bare)
    state = load_file(str(bare / "model.safetensors"))
    del state["d2t"]
    save_file(state, str(bare / "model.safetensors"))
    assert vocab.checkpoint(bare, Path(root))["exporter_serving_state_check"].startswith(
        "failed: serving state is missing required keys ['d2t']")
