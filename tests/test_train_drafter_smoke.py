"""benchmarks/real_sglang/train_drafter.py end to end at a tiny size on CPU (needs transformers)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from specgate.io.checkpoint import expected_layout, normalize_name, open_drafter
from specgate.io.metrics_log import read_metrics
from specgate.model.evaluate import open_dump

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "real_sglang" / "train_drafter.py"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("train_drafter")
    cmd = [sys.executable, str(SCRIPT), str(out), "--size", "tiny", "--device", "cpu",
           "--threads", "1", "--train-prompts", "9", "--train-tokens", "24",
           "--heldout-prompts", "3", "--heldout-tokens", "12", "--scratch-seconds", "0",
           "--finetune-seconds", "0.01", "--min-epochs", "4", "--max-steps", "3",
           "--lr", "1e-2"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (out / "stdout.txt").write_text(done.stdout)
    return out


def test_drafter_has_the_layout_sglang_loads(run: Path) -> None:
    drafter = open_drafter(run / "drafter")
    config = drafter.config
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 1, 2]
    assert config["draft_vocab_size"] == 512
    assert config["vocab_size"] == 1024
    names = {normalize_name(n) for n in drafter.tensors}
    required = {n for n, e in expected_layout(config).items() if not e.optional}
    assert required <= names
    assert "embed_tokens.weight" not in names  # SGLang takes the target's
    assert all(n.startswith("midlayer.") for n in drafter.tensors if "layers" in normalize_name(n))
    assert drafter.tensors["d2t"].dtype == "I64"
    assert drafter.tensors["t2d"].dtype == "BOOL"
    assert drafter.tensors["fc.weight"].dtype == "BF16"
    target = json.loads((run / "target" / "config.json").read_text())
    assert target["architectures"] == ["LlamaForCausalLM"]
    assert target["num_hidden_layers"] == 4
    assert (run / "target" / "model.safetensors").is_file()


def test_loss_went_down_and_the_logs_read(run: Path) -> None:
    for name in ("scratch", "finetune"):
        log = read_metrics(run / "logs" / f"{name}.jsonl")
        losses = [r.loss for r in log.rows if r.loss is not None]
        assert len(losses) >= 5  # epoch 0 (untrained) + 4 epochs
        assert losses[-1] < losses[0], (name, losses)
    scratch = read_metrics(run / "logs" / "scratch.jsonl")
    finetune = read_metrics(run / "logs" / "finetune.jsonl")
    # the fine-tune starts where the scratch run ended
    assert finetune.rows[0].loss is not None
    assert scratch.rows[0].loss is not None
    assert finetune.rows[0].loss < scratch.rows[0].loss


def test_dumps_and_prediction(run: Path) -> None:
    for name in ("train", "heldout"):
        dump = open_dump(run / "dump" / name)
        assert dump.samples
        assert dump.embeddings is not None
        assert dump.samples[0].aux.shape[1] == 3 * 64
        assert dump.metadata["aux_hidden_state_layer_ids"] == [0, 1, 2]
    prediction = json.loads((run / "prediction.json").read_text())
    overall = prediction["groups"]["all"]
    tau = overall["predicted"]["steps3_topk1_draft4"]
    assert 1.0 <= overall["predicted"]["steps1_topk1_draft2"] <= tau <= 4.0
    assert len(overall["conditional_acceptance"]) == 3
    assert "predicted accept length" in (run / "stdout.txt").read_text()
