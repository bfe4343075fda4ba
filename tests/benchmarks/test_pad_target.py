"""benchmarks/real_model/pad_target.py: a small Llama folder widened so that a decode step reads a
larger model's bytes. The widened MLPs compute what the original ones do, every other tensor is
the same bytes, the width is the smallest that reaches the bytes asked for, the same seed writes
the same files, and a folder it cannot widen is named in a message, not a traceback."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from script_support import load_real_model_script

from benchmarks.common import with_root

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

LAYERS, HIDDEN, INTER, VOCAB = 3, 64, 96, 200


@pytest.fixture(scope="module")
def pad() -> ModuleType:
    return load_real_model_script("pad_target")


def tiny_llama(folder: Path, dtype: object = None, tied: bool = True) -> dict[str, object]:
    """A Llama-shaped folder with seeded random weights, a config and a tokenizer file."""
    g = torch.Generator().manual_seed(5)
    dt = dtype or torch.float32

    def rnd(*shape: int) -> object:
        return (torch.randn(*shape, generator=g) * 0.1).to(dt)

    t: dict[str, object] = {"model.embed_tokens.weight": rnd(VOCAB, HIDDEN),
                            "model.norm.weight": rnd(HIDDEN)}
    if not tied:
        t["lm_head.weight"] = rnd(VOCAB, HIDDEN)
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t.update({p + "input_layernorm.weight": rnd(HIDDEN),
                  p + "post_attention_layernorm.weight": rnd(HIDDEN),
                  p + "self_attn.q_proj.weight": rnd(HIDDEN, HIDDEN),
                  p + "self_attn.k_proj.weight": rnd(HIDDEN // 2, HIDDEN),
                  p + "self_attn.v_proj.weight": rnd(HIDDEN // 2, HIDDEN),
                  p + "self_attn.o_proj.weight": rnd(HIDDEN, HIDDEN),
                  p + "mlp.gate_proj.weight": rnd(INTER, HIDDEN),
                  p + "mlp.up_proj.weight": rnd(INTER, HIDDEN),
                  p + "mlp.down_proj.weight": rnd(HIDDEN, INTER)})
    folder.mkdir(parents=True, exist_ok=True)
    safetensors_torch.save_file(t, str(folder / "model.safetensors"))
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
           "num_hidden_layers": LAYERS, "hidden_size": HIDDEN, "intermediate_size": INTER,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": VOCAB,
           "hidden_act": "silu", "tie_word_embeddings": tied}
    (folder / "config.json").write_text(json.dumps(cfg))
    (folder / "tokenizer.json").write_text('{"a tokenizer": true}')
    (folder / "chat_template.jinja").write_text("{{ messages }}")
    return t


def widened(out: Path) -> dict[str, object]:
    index = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    tensors: dict[str, object] = {}
    for f in sorted(set(index.values())):
        tensors.update(safetensors_torch.load_file(str(out / f)))
    assert set(tensors) == set(index)
    return tensors


def mlp(w: dict[str, object], i: int, x: object) -> object:
    f = torch.nn.functional
    p = f"model.layers.{i}.mlp."
    gate = f.silu(f.linear(x, w[p + "gate_proj.weight"]))
    return f.linear(gate * f.linear(x, w[p + "up_proj.weight"]), w[p + "down_proj.weight"])


def step_bytes(t: dict[str, object]) -> int:
    return sum(v.numel() * v.element_size() for v in t.values())


def test_the_widened_mlps_compute_what_the_original_ones_do(pad: ModuleType,
                                                           tmp_path: Path) -> None:
    orig = tiny_llama(tmp_path / "src")
    goal = step_bytes(orig) * 6
    rec = pad.pad(tmp_path / "src", tmp_path / "wide", goal / 1e9, 0, "cpu")
    wide = widened(tmp_path / "wide")
    x = torch.randn(5, HIDDEN, generator=torch.Generator().manual_seed(1))
    for i in range(LAYERS):
        a, b = mlp(orig, i, x), mlp(wide, i, x)
        assert b.shape == a.shape
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), (i, (a - b).abs().max())
        p = f"model.layers.{i}.mlp."
        # the new channels: zero gates, so their products are zero whatever up and down hold
        assert torch.count_nonzero(wide[p + "gate_proj.weight"][INTER:]) == 0
        assert torch.count_nonzero(wide[p + "up_proj.weight"][INTER:]) > 0
        assert torch.count_nonzero(wide[p + "down_proj.weight"][:, INTER:]) > 0
        for name in ("gate_proj", "up_proj"):
            assert torch.equal(wide[p + f"{name}.weight"][:INTER], orig[p + f"{name}.weight"])
        assert torch.equal(wide[p + "down_proj.weight"][:, :INTER], orig[p + "down_proj.weight"])
    # every tensor outside the MLPs is the same
    for name, t in orig.items():
        if ".mlp." not in name:
            assert torch.equal(wide[name], t), name
    assert rec["max_relative_mlp_difference"] < 1e-5


def test_the_width_is_the_smallest_that_reads_the_bytes_asked_for(pad: ModuleType,
                                                                 tmp_path: Path) -> None:
    orig = tiny_llama(tmp_path / "src")
    base = step_bytes(orig)
    goal = base * 5 + 12345
    pad.pad(tmp_path / "src", tmp_path / "wide", goal / 1e9, 0, "cpu")
    cfg = json.loads((tmp_path / "wide" / "config.json").read_text())
    wide = cfg["intermediate_size"]
    assert wide % pad.ALIGN == 0
    per_channel = LAYERS * 3 * HIDDEN * 4  # float32
    assert step_bytes(widened(tmp_path / "wide")) == base + per_channel * (wide - INTER)
    assert base + per_channel * (wide - INTER) >= goal
    assert base + per_channel * (wide - pad.ALIGN - INTER) < goal  # one step narrower is short
    record = cfg["specgate_padding"]
    assert record["source_intermediate_size"] == INTER
    assert record["step_bytes"] == base + per_channel * (wide - INTER)
    assert record["source_sha256"]["model.safetensors"] == hashlib.sha256(
        (tmp_path / "src" / "model.safetensors").read_bytes()).hexdigest()
    # the tokenizer and the chat template travel with it; the other config fields are kept
    assert (tmp_path / "wide" / "tokenizer.json").read_text() == '{"a tokenizer": true}'
    assert (tmp_path / "wide" / "chat_template.jinja").exists()
    assert cfg["num_hidden_layers"] == LAYERS
    assert cfg["hidden_size"] == HIDDEN


def test_an_untied_model_counts_its_lm_head_and_not_its_embedding(pad: ModuleType,
                                                                  tmp_path: Path) -> None:
    tiny_llama(tmp_path / "src", tied=False)
    cfg = pad.read_config(tmp_path / "src")
    tensors = pad.load_tensors(tmp_path / "src")
    emb = VOCAB * HIDDEN * 4
    assert pad.step_bytes(tensors, cfg) == step_bytes(tensors) - emb


def test_the_same_seed_writes_the_same_files_and_another_seed_other_ones(
        pad: ModuleType, tmp_path: Path) -> None:
    orig = tiny_llama(tmp_path / "src", dtype=torch.bfloat16)
    gb = step_bytes(orig) * 4 / 1e9

    def digest(out: Path) -> dict[str, str]:
        return {f.name: hashlib.sha256(f.read_bytes()).hexdigest()
                for f in sorted(out.glob("*.safetensors"))}

    pad.pad(tmp_path / "src", tmp_path / "a", gb, 0, "cpu")
    pad.pad(tmp_path / "src", tmp_path / "b", gb, 0, "cpu")
    pad.pad(tmp_path / "src", tmp_path / "c", gb, 1, "cpu")
    assert digest(tmp_path / "a") == digest(tmp_path / "b")
    assert digest(tmp_path / "a") != digest(tmp_path / "c")


def test_large_widenings_are_written_in_shards_that_the_index_names(
        pad: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    orig = tiny_llama(tmp_path / "src")
    monkeypatch.setattr(pad, "SHARD_BYTES", step_bytes(orig))  # about one widened layer a shard
    pad.pad(tmp_path / "src", tmp_path / "wide", step_bytes(orig) * 4 / 1e9, 0, "cpu")
    files = sorted(f.name for f in (tmp_path / "wide").glob("*.safetensors"))
    assert len(files) > 1
    assert files == [f"model-{k:05d}-of-{len(files):05d}.safetensors"
                     for k in range(1, len(files) + 1)]
    index = json.loads((tmp_path / "wide" / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == set(files)
    assert index["metadata"]["total_size"] == sum(
        (tmp_path / "wide" / f).stat().st_size for f in files)


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "benchmarks.real_model.pad_target", *argv],
                          capture_output=True, text=True, timeout=600, env=with_root())


@pytest.mark.parametrize(("breaks", "says"), [
    ("no-config", "config.json: no such file"),
    ("gelu", "hidden_act is 'gelu'"),
    ("no-layer", "no tensor model.layers.2.mlp.up_proj.weight"),
    ("shape", "model.layers.0.mlp.down_proj.weight has shape [64, 95], not [64, 96]"),
    ("small", "already reads"),
    ("no-weights", "no *.safetensors file"),
])
def test_a_folder_it_cannot_widen_is_named(tmp_path: Path, breaks: str, says: str) -> None:
    src = tmp_path / "src"
    t = tiny_llama(src)
    gb = "1"
    if breaks == "no-config":
        (src / "config.json").unlink()
    elif breaks == "gelu":
        cfg = json.loads((src / "config.json").read_text())
        (src / "config.json").write_text(json.dumps({**cfg, "hidden_act": "gelu"}))
    elif breaks in ("no-layer", "shape"):
        if breaks == "no-layer":
            del t["model.layers.2.mlp.up_proj.weight"]
        else:
            t["model.layers.0.mlp.down_proj.weight"] = torch.zeros(HIDDEN, INTER - 1)
        safetensors_torch.save_file(t, str(src / "model.safetensors"))
    elif breaks == "small":
        gb = "0.000001"
    elif breaks == "no-weights":
        (src / "model.safetensors").unlink()
    done = _run(str(src), str(tmp_path / "wide"), "--gb", gb, "--device", "cpu")
    assert done.returncode == 2, done.stderr
    assert says in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "wide" / "config.json").exists()


def test_the_command_line_says_what_it_made(tmp_path: Path) -> None:
    orig = tiny_llama(tmp_path / "src")
    gb = step_bytes(orig) * 3 / 1e9
    done = _run(str(tmp_path / "src"), str(tmp_path / "wide"), "--gb", f"{gb:.9f}",
                "--device", "cpu")
    assert done.returncode == 0, done.stderr
    wide = json.loads((tmp_path / "wide" / "config.json").read_text())["intermediate_size"]
    assert f"intermediate size {INTER} -> {wide}" in done.stdout


def test_check_says_whether_a_folder_is_this_widening_of_this_target(tmp_path: Path) -> None:
    orig = tiny_llama(tmp_path / "src")
    gb = f"{step_bytes(orig) * 3 / 1e9:.9f}"
    src, wide = str(tmp_path / "src"), str(tmp_path / "wide")
    assert _run("--check", src, wide, "--gb", gb).returncode == 1  # nothing there yet
    assert _run(src, wide, "--gb", gb, "--device", "cpu").returncode == 0
    assert _run("--check", src, wide, "--gb", gb).returncode == 0
    assert _run("--check", src, wide, "--gb", gb, "--seed", "1").returncode == 1
    assert _run("--check", src, wide, "--gb", f"{float(gb) * 2:.9f}").returncode == 1
    # another model in the target's place
    t = safetensors_torch.load_file(str(tmp_path / "src" / "model.safetensors"))
    t["model.norm.weight"] = t["model.norm.weight"] + 1
    safetensors_torch.save_file(t, str(tmp_path / "src" / "model.safetensors"))
    assert _run("--check", src, wide, "--gb", gb).returncode == 1


def test_an_out_folder_holding_the_target_is_refused(tmp_path: Path) -> None:
    tiny_llama(tmp_path / "models" / "src")
    for out in (tmp_path / "models", tmp_path / "models" / "src"):
        done = _run(str(tmp_path / "models" / "src"), str(out), "--gb", "1", "--device", "cpu")
        assert done.returncode == 2
        assert "must not be TARGET or hold it" in done.stderr
    assert (tmp_path / "models" / "src" / "model.safetensors").exists()


def test_a_tied_checkpoint_that_stores_its_lm_head_counts_it_once(pad: ModuleType,
                                                                  tmp_path: Path) -> None:
    t = tiny_llama(tmp_path / "src")
    t["lm_head.weight"] = t["model.embed_tokens.weight"].clone()
    cfg = pad.read_config(tmp_path / "src")
    assert pad.step_bytes(t, cfg) == step_bytes(t) - VOCAB * HIDDEN * 4
