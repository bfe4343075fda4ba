"""benchmarks/real_sglang/train_drafter.py end to end at a tiny size on CPU (needs transformers)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from script_support import load_script

from benchmarks.common import with_root

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from specgate.io.checkpoint import expected_layout, normalize_name, open_drafter
from specgate.io.metrics_log import read_metrics
from specgate.model.evaluate import open_dump

SCRIPT = ["-m", "benchmarks.real_sglang.train_drafter"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("train_drafter")
    cmd = [sys.executable, *SCRIPT, str(out), "--size", "tiny", "--device", "cpu",
           "--threads", "1", "--train-prompts", "9", "--train-tokens", "24",
           "--heldout-prompts", "3", "--heldout-tokens", "12", "--scratch-seconds", "0",
           "--finetune-seconds", "0.01", "--min-epochs", "4", "--max-steps", "3",
           "--lr", "1e-2"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False,
                          env=with_root())
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
    stdout = (run / "stdout.txt").read_text()
    assert re.search(r"generation \d+\.\d s, capture \d+\.\d s", stdout)
    assert re.search(r"one-token loops: \d+ of \d+ training answers end in one, on \d+ "
                     r"distinct tokens; \d+ of 3 held-out answers", stdout)
    meta = json.loads((run / "dump" / "train" / "metadata.json").read_text())
    assert meta["generate_s"] >= 0
    assert meta["capture_s"] >= 0
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


@pytest.fixture(scope="module")
def deep_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A deeper target (8 layers) and a deadline already past when the data is made."""
    import time

    out = tmp_path_factory.mktemp("train_drafter_deep")
    cmd = [sys.executable, *SCRIPT, str(out), "--size", "tiny", "--device", "cpu",
           "--threads", "1", "--layers", "8", "--train-prompts", "6", "--train-tokens", "16",
           "--heldout-prompts", "2", "--heldout-tokens", "8", "--scratch-seconds", "30",
           "--finetune-seconds", "10", "--max-steps", "2", "--gen-batch", "2",
           "--deadline", f"{time.time() + 1:.0f}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False,
                          env=with_root())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out, done.stdout


def test_a_deeper_target_captures_the_layers_sglang_would(deep_run: tuple[Path, str]) -> None:
    out, _ = deep_run
    config = json.loads((out / "target" / "config.json").read_text())
    assert config["num_hidden_layers"] == 8
    drafter = json.loads((out / "drafter" / "config.json").read_text())
    # SGLang's own choice for 8 layers when a drafter names none: inputs of layers 2, 4, 5.
    assert drafter["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]
    for name in ("train", "heldout"):
        dump = open_dump(out / "dump" / name)
        assert dump.metadata["aux_hidden_state_layer_ids"] == [1, 3, 4]
        assert dump.metadata["captured_layer_inputs"] == [2, 4, 5]
        assert dump.metadata["hook_vs_hidden_states_max_abs"] == 0.0
        assert dump.samples[0].aux.shape[1] == 3 * 64


def test_a_past_deadline_shrinks_the_training_instead_of_losing_the_drafter(
        deep_run: tuple[Path, str]) -> None:
    out, stdout = deep_run
    summary = json.loads((out / "summary.json").read_text())
    fitted = summary["training_seconds"]
    assert fitted["asked"] == [30.0, 10.0]
    assert fitted["given"] == [0.0, 0.0]
    assert "deadline" in fitted["note"]
    assert "deadline:" in stdout
    # The data stopped growing too: only the first generation batch (2 prompts) was made.
    assert "the deadline stopped the generation after 2 of 6 training prompts" in stdout
    assert json.loads((out / "dump" / "train" / "metadata.json").read_text())["prompts"] == 2
    assert (out / "drafter" / "model.safetensors").exists()
    assert (out / "prediction.json").exists()
    # The hard end beats min_epochs (1): past the deadline no update is made, only epoch 0 (the
    # untrained model) is logged.
    for log in ("scratch.jsonl", "finetune.jsonl"):
        rows = (out / "logs" / log).read_text().splitlines()
        assert [json.loads(r)["epoch"] for r in rows] == [0]


@pytest.fixture(scope="module")
def mod() -> Any:
    return load_script("train_drafter")


def test_fit_training_shrinks_both_runs_in_proportion(mod: Any) -> None:
    assert mod.fit_training(60, 20, None) == (60, 20, "")
    assert mod.fit_training(60, 20, 100, after_s=20) == (60, 20, "")
    scratch, finetune, note = mod.fit_training(60, 20, 60, after_s=20)
    assert (scratch, finetune) == (30, 10)
    assert "training 30 + 10 s instead of 60 + 20 s" in note
    assert mod.fit_training(60, 20, 5, after_s=20)[:2] == (0, 0)


@pytest.mark.parametrize(("flags", "message"), [
    (["--layers", "8", "--aux-layers", "1,1,4"], "--aux-layers 1,1,4: need three distinct ids"),
    (["--layers", "8", "--aux-layers", "1,3,7"],
     "--aux-layers 1,3,7: need three distinct ids in increasing order within [0, 6]"),
    (["--layers", "8", "--aux-layers", "1,x,4"],
     "--aux-layers 1,x,4: not comma-separated integers"),
    (["--prompt-mix", "code=3,poems=1"],
     "--prompt-mix code=3,poems=1: unknown prompt kind 'poems'"),
    (["--prompt-mix", "code=0"], "--prompt-mix code=0: code=0: the weight must be a positive "),
    (["--prompt-mix", "code"], "--prompt-mix code: code=: the weight must be a positive integer"),
    (["--prompt-mix", "code=1,code=2"], "--prompt-mix code=1,code=2: prompt kind 'code' given "),
])
def test_bad_flags_are_refused_with_the_flag_named(tmp_path: Path, flags: list[str],
                                                   message: str) -> None:
    done = subprocess.run([sys.executable, *SCRIPT, str(tmp_path / "x"), "--size", "tiny",
                           "--device", "cpu", *flags],
                          capture_output=True, text=True, timeout=120, check=False,
                          env=with_root())
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


@pytest.fixture(scope="module")
def fp32_target() -> Any:
    """A small random Llama in float32, where left padding, the KV cache and right padding
    change no argmax (bf16 would, at near-ties)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(3)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=5, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=8, max_position_embeddings=128)
    return LlamaForCausalLM(config).eval()


def _prompts() -> list[list[int]]:
    import random

    rng = random.Random(5)
    return [[rng.randrange(3, 64) for _ in range(rng.randrange(2, 12))] for _ in range(9)]


def test_batched_cached_greedy_equals_one_prompt_at_a_time(mod: Any, fp32_target: Any) -> None:
    import torch

    got = mod.greedy(fp32_target, _prompts(), 12, "cpu", batch=9)
    for prompt, continuation in zip(_prompts(), got, strict=True):
        ids, want = list(prompt), []
        with torch.no_grad():
            for _ in range(12):
                nxt = int(fp32_target(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
                want.append(nxt)
                ids.append(nxt)
                if nxt == mod.EOS:
                    break
        assert continuation == want


def test_batched_capture_equals_one_sequence_at_a_time(mod: Any, fp32_target: Any) -> None:
    import torch

    seqs = _prompts()
    aux = (0, 1, 3)
    batched = mod.capture(fp32_target, seqs, "cpu", aux)
    for seq, got in zip(seqs, batched, strict=True):
        (alone,) = mod.capture(fp32_target, [seq], "cpu", aux)
        assert got["aux"].shape == (len(seq), 3 * 32)
        assert torch.allclose(got["aux"], alone["aux"], atol=1e-5)
        assert torch.allclose(got["final"], alone["final"], atol=1e-5)
        assert torch.equal(got["next"], alone["next"])
        assert float(got["hook_vs_hidden_states"]) == 0.0


class _Tok:
    """A stand-in tokenizer: one id per character (what train_prompts needs of one)."""

    class _Enc:
        def __init__(self, ids: list[int]) -> None:
            self.ids = ids

    def encode(self, text: str) -> _Enc:
        return self._Enc([3 + ord(c) % 500 for c in text])


def test_prompt_mix_sets_the_kinds_in_proportion_and_long_prompts_stay_long(mod: Any) -> None:
    import random

    mix = mod.parse_mix("code=3,random=1,long=2")
    assert mix == (("code", 3), ("random", 1), ("long", 2))
    got = mod.train_prompts(_Tok(), 60, random.Random(0), 1024, None, mix)
    kinds = [k for _, k, _ in got]
    assert kinds[:6] == ["code", "code", "code", "random", "long", "long"]
    assert (kinds.count("code"), kinds.count("random"), kinds.count("long")) == (30, 10, 20)
    lengths = {k: max(len(ids) for _, kind, ids in got if kind == k) for k in set(kinds)}
    assert lengths["long"] == mod.LONG_PROMPT_TOKENS  # 4-8 sentences, cut at 224
    assert lengths["code"] <= 64
    assert lengths["random"] <= 64
    # Without a mix: the default recipe, a third each of the first three without a template.
    plain = mod.train_prompts(_Tok(), 6, random.Random(0), 1024)
    assert [k for _, k, _ in plain] == ["sentence", "code", "random"] * 2


def test_chat_prompts_need_a_template(mod: Any) -> None:
    import random

    with pytest.raises(ValueError, match="chat needs the probe's chat template"):
        mod.train_prompts(_Tok(), 4, random.Random(0), 1024, None, (("chat", 1),))


def test_loop_tokens_counts_answers_that_end_in_one_repeated_token(mod: Any) -> None:
    import torch

    def sample(prompt: list[int], answer: list[int]) -> dict[str, Any]:
        mask = torch.zeros(len(prompt) + len(answer), dtype=torch.uint8)
        mask[len(prompt):] = 1
        return {"input_ids": torch.tensor(prompt + answer), "loss_mask": mask}

    tail = mod.LOOP_TAIL
    found = mod.loop_tokens([
        sample([5, 6], [9, 8] + [7] * tail),  # a loop on 7
        sample([7] * 30, [4] * (tail - 1)),  # the prompt's 7s do not count; 15 fours are short
        sample([1], [2, 3] * tail),  # period 2: not a one-token loop
        sample([1], [7] * (tail + 5)),
        sample([1], [11] * tail)])
    assert found == {7: 2, 11: 1}


def _tiny_size(mod: Any) -> Any:
    import dataclasses

    return dataclasses.replace(mod.SIZES["tiny"], hidden=32, intermediate=64, heads=4,
                               kv_heads=2, head_dim=8, layers=5, vocab=64, draft_vocab=64,
                               aux_layers=(0, 1, 3))


@pytest.mark.parametrize("freeze", [True, False])
def test_freeze_head_keeps_the_targets_rows_and_trains_the_rest(
        mod: Any, fp32_target: Any, tmp_path: Path, freeze: bool) -> None:
    import torch

    from specgate.model.eagle import Embeddings

    size = _tiny_size(mod)
    hot = torch.arange(64)
    weights = mod.init_weights(size, fp32_target, hot, 0, "cpu")
    before = {k: v.detach().clone() for k, v in weights.items()}
    assert torch.equal(before["lm_head.weight"], fp32_target.lm_head.weight.detach())
    seqs = _prompts()
    data = [{"input_ids": torch.tensor(s), "aux": c["aux"].float(),
             "loss_mask": torch.ones(len(s), dtype=torch.bool)}
            for s, c in zip(seqs, mod.capture(fp32_target, seqs, "cpu", size.aux_layers),
                            strict=True)]
    d2t, t2d = torch.zeros(64, dtype=torch.int64), torch.ones(64, dtype=torch.bool)
    embed = Embeddings(fp32_target.model.embed_tokens.weight.detach().float())
    mod.train(size, weights, d2t, t2d, embed, data, seconds=0.0, max_epochs=2, min_epochs=2,
              ttt=2, lr=1e-2, log_path=tmp_path / "log.jsonl", seed=0,
              frozen=("lm_head.weight",) if freeze else ())
    assert torch.equal(weights["lm_head.weight"], before["lm_head.weight"]) is freeze
    assert not torch.equal(weights["fc.weight"], before["fc.weight"])
    assert not torch.equal(weights["midlayer.mlp.up_proj.weight"],
                           before["midlayer.mlp.up_proj.weight"])


def test_fc_init_last_passes_the_deepest_aux_state_through(mod: Any, fp32_target: Any) -> None:
    import torch

    size = _tiny_size(mod)
    fc = mod.init_weights(size, fp32_target, torch.arange(64), 0, "cpu", "last")["fc.weight"]
    aux = torch.randn(5, 3 * 32)
    assert torch.equal(aux @ fc.detach().T, aux[:, 64:])
    random_fc = mod.init_weights(size, fp32_target, torch.arange(64), 0, "cpu")["fc.weight"]
    assert float(random_fc.detach().abs().max()) < 0.2
