"""The aux hidden states SGLang 0.5.17 feeds an EAGLE-3 drafter, captured with transformers.

SGLang 0.5.17, python/sglang/srt/models/llama.py:
- `LlamaForCausalLM.set_eagle3_layers_to_capture(layer_ids)`: with no ids the model captures
  layers [2, num_layers // 2, num_layers - 3]; with ids (the drafter's
  eagle_config.eagle_aux_hidden_state_layer_ids, read in model_runner_components/
  spec_aux_hidden_state.py) it captures [id + 1 for id in ids] ("for the ith layer, it takes the
  output of the (i-1)th layer as aux hidden state").
- `LlamaModel.forward`: `if i in self.layers_to_capture: aux_hidden_states.append(hidden_states
  + residual)` before decoder layer i runs, i.e. the residual stream entering layer i. In
  transformers that is `output_hidden_states[i]` (index 0 is the embedding output), and the
  input of `model.layers[i]`, which a forward pre-hook sees.

So for SmolLM2-135M (30 layers) SGLang's default capture is layers [2, 15, 27], and the ids
[1, 14, 26] written into the drafter's config make it capture the same layers. `capture` hooks
the inputs of exactly those layers (train_drafter.capture) and checks them against
output_hidden_states.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from benchmarks.real_sglang import train_drafter  # capture hooks, dump writer

CAPTURE_TOKENS = 32768  # tokens per capture forward (padded batch size × length)


def sglang_capture_layers(layer_ids: Sequence[int] | None, num_layers: int) -> list[int]:
    """The decoder layers whose inputs SGLang 0.5.17's Llama target records for EAGLE-3."""
    if layer_ids is None:
        return [2, num_layers // 2, num_layers - 3]
    return [int(i) + 1 for i in layer_ids]


def config_ids_for(capture_layers: Sequence[int]) -> list[int]:
    """The eagle_aux_hidden_state_layer_ids that make SGLang capture these layers' inputs."""
    return [int(i) - 1 for i in capture_layers]


def batches(lengths: Sequence[int], max_tokens: int = CAPTURE_TOKENS) -> Iterator[list[int]]:
    """Indices grouped by similar length (longest first), each group's padded size bounded."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    group: list[int] = []
    for i in order:
        width = max([lengths[j] for j in group] + [lengths[i]])
        if group and width * (len(group) + 1) > max_tokens:
            yield group
            group = []
        group.append(i)
    if group:
        yield group


def capture(model: Any, seqs: Sequence[list[int]], prompt_lens: Sequence[int], device: str,
            aux_ids: Sequence[int]) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Per sequence: input_ids, aux states (inputs of layers id + 1, bf16, CPU), final hidden,
    argmax, loss mask (1 on answer tokens); and how well the forward agrees with the answers."""
    import torch

    out: list[dict[str, Any] | None] = [None] * len(seqs)
    agree = total = 0
    worst = 0.0
    started = time.perf_counter()
    for group in batches([len(s) for s in seqs]):
        caps = train_drafter.capture(model, [seqs[i] for i in group], device, tuple(aux_ids))
        for i, cap in zip(group, caps, strict=True):
            ids = torch.tensor(seqs[i], dtype=torch.int64)
            nxt = cap["next"].cpu().to(torch.int64)
            p = prompt_lens[i]
            gen = torch.arange(p - 1, len(seqs[i]) - 1)
            agree += int((nxt[gen] == ids[gen + 1]).sum())
            total += int(gen.numel())
            worst = max(worst, float(cap["hook_vs_hidden_states"]))
            mask = torch.zeros(len(seqs[i]), dtype=torch.uint8)
            mask[p:] = 1
            out[i] = {"input_ids": ids, "aux": cap["aux"].to(torch.bfloat16).contiguous().cpu(),
                      "final": cap["final"].to(torch.bfloat16).contiguous().cpu(),
                      "next": nxt.contiguous(), "loss_mask": mask, "prompt_tokens": p}
    stats = {"argmax_agreement": agree / max(total, 1), "answer_tokens": float(total),
             "hook_vs_hidden_states_max_abs": worst,
             "capture_s": round(time.perf_counter() - started, 2)}
    return [o for o in out if o is not None], stats


def write_samples(folder: Path, names: Sequence[str], samples: Sequence[dict[str, Any]], *,
                  full: bool) -> None:
    """One safetensors file per sample; `full` also stores final hidden states and argmax (the
    held-out dump: eval.live_agreement reads the answers, the prediction the rest)."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    for name, s in zip(names, samples, strict=True):
        tensors = {"input_ids": s["input_ids"], "aux_hidden_states": s["aux"],
                   "loss_mask": s["loss_mask"]}
        if full:
            tensors.update(final_hidden_states=s["final"], target_next_ids=s["next"])
        save_file(tensors, str(folder / f"{name}.safetensors"))


def finish_dump(folder: Path, embed: Any, meta: dict[str, Any]) -> None:
    """embeddings.safetensors (the target's embed_tokens) and metadata.json."""
    import json

    import torch
    from safetensors.torch import save_file

    save_file({"embed_tokens.weight": embed.to(torch.bfloat16).contiguous().cpu()},
              str(folder / "embeddings.safetensors"))
    (folder / "metadata.json").write_text(json.dumps(meta, indent=1) + "\n")


def link_subset(src: Path, dst: Path, names: Sequence[str], meta: dict[str, Any]) -> None:
    """A dump of some of src's samples: symbolic links to their files, the embeddings and new
    metadata (a data-size run reads a subset without copying gigabytes)."""
    import json

    dst.mkdir(parents=True, exist_ok=True)
    for name in [*[f"{n}.safetensors" for n in names], "embeddings.safetensors"]:
        link = dst / name
        if not link.exists():
            link.symlink_to(src / name)
    (dst / "metadata.json").write_text(json.dumps(meta, indent=1) + "\n")
