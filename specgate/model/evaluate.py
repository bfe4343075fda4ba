"""Offline teacher-forced evaluation of a drafter on a hidden-state dump (the format: io.dump).

Alignment: draft step k at position t is fed aux[t] (step 0) or its own previous output, and the
embedding of input_ids[t + 1 + k]; it predicts input_ids[t + 2 + k], scored where that token's
loss_mask is 1. The claim built on it is specgate.claims.eval.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import math
import sys
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from specgate.core.errors import CheckpointError, DataError
from specgate.io.checkpoint import open_drafter
from specgate.io.dump import (
    EMBED_FILE,
    META_FILE,
    DumpSample,
    HiddenStateDump,
    encode,
    open_dump,
    read_sample,
    stored_as,
)
from specgate.io.safetensors_io import TensorInfo, TensorSpec, read_array, read_header
from specgate.io.safetensors_io import write_sparse as _write

if TYPE_CHECKING:
    from specgate.model.eagle import EagleDrafter, Embeddings

DEFAULT_STEPS = 3


# --- evaluation -------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class StepStats:
    """Teacher-forced figures of one draft step."""

    step: int
    scored: int  # positions whose target token is loss-masked
    correct: int
    in_vocab: int  # scored positions whose target token the draft vocabulary holds
    loss: float  # mean cross-entropy (nats) over in-vocabulary targets

    @property
    def accuracy(self) -> float:
        return self.correct / self.scored if self.scored else 0.0


@dataclasses.dataclass(frozen=True)
class EvalReport:
    """One drafter on one dump: per-step accuracy and loss, and the predicted accept length."""

    drafter: str
    dump: str
    samples: int
    tokens: int
    draft_vocab_size: int
    steps: tuple[StepStats, ...]
    chain_positions: int  # positions where every step's target is scored
    chain_accept: tuple[float, ...]  # P(steps 0..k all correct), k = 0..steps-1
    embedding_source: str
    seconds: float
    notes: tuple[str, ...] = ()

    @property
    def random_loss(self) -> float:
        return math.log(self.draft_vocab_size)

    @property
    def accept_length(self) -> float:
        """τ = 1 + Σ_k Π_{i≤k} acc_i with acc_i conditional on steps < i being accepted."""
        return 1.0 + sum(self.chain_accept)

    @property
    def conditional_accuracy(self) -> tuple[float, ...]:
        out, prev = [], 1.0
        for p in self.chain_accept:
            out.append(p / prev if prev else 0.0)
            prev = p
        return tuple(out)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "drafter": self.drafter, "dump": self.dump, "samples": self.samples,
            "tokens": self.tokens, "draft_vocab_size": self.draft_vocab_size,
            "random_loss": round(self.random_loss, 4),
            "steps": [{"step": s.step, "accuracy": round(s.accuracy, 4), "loss": round(s.loss, 4),
                       "scored": s.scored, "in_vocab": s.in_vocab} for s in self.steps],
            "conditional_accuracy": [round(a, 4) for a in self.conditional_accuracy],
            "accept_length": round(self.accept_length, 4),
            "chain_positions": self.chain_positions,
            "embedding_source": self.embedding_source, "notes": list(self.notes),
            "seconds": round(self.seconds, 3), "tokens_per_s": round(self.tokens_per_s, 1),
        }


def teacher_forced(drafter_path: Path | str, dump_path: Path | str, *,
                   steps: int = DEFAULT_STEPS, target_path: Path | str | None = None,
                   device: str = "cpu", dtype: str = "float32",
                   vocab_map: Path | str | None = None) -> EvalReport:
    """Evaluate a drafter checkpoint on a dump (needs torch).

    With vocab_map the lm_head rows are read through that map's d2t instead of the drafter's:
    what a fine-tune that keeps the init's weights but the data's map starts from.
    """
    import torch

    from specgate.model.eagle import EagleDrafter

    drafter = open_drafter(drafter_path)
    model = EagleDrafter.from_checkpoint(drafter, device=device, dtype=getattr(torch, dtype))
    label = str(drafter.path)
    if vocab_map is not None:
        from specgate.io.vocab_maps import load_map

        model.use_map(load_map(vocab_map).d2t)
        label += f" read through {vocab_map}"
    dump = open_dump(dump_path)
    embed, source = resolve_embeddings(model, dump, target_path, drafter_path)
    report = evaluate_model(model, dump, embed, steps=steps, drafter_label=label,
                            embedding_source=source)
    params = drafter.config.get("rope_parameters")
    rope_type = params.get("rope_type") if isinstance(params, dict) else None
    if drafter.config.get("rope_scaling") or rope_type not in (None, "default"):
        note = (f"{drafter.path}/config.json asks for RoPE scaling, which this evaluation does "
                "not apply (plain RoPE with rope_theta): figures are approximate")
        report = dataclasses.replace(report, notes=(*report.notes, note))
    return report


def evaluate_model(model: EagleDrafter, dump: HiddenStateDump, embed: Embeddings, *,
                   steps: int, drafter_label: str = "", embedding_source: str = "",
                   ) -> EvalReport:
    """Teacher-forced accuracy, loss and chain acceptance of an in-memory drafter on a dump."""
    started = time.perf_counter()
    total = _Tally.empty(steps)
    for _sample, tally in _sample_tallies(model, dump, embed, steps):
        total = total + tally
    return total.report(model, dump, drafter_label, embedding_source,
                        time.perf_counter() - started)


def evaluate_groups(model: EagleDrafter, dump: HiddenStateDump, embed: Embeddings, *,
                    steps: int, groups: Mapping[str, Collection[str]],
                    drafter_label: str = "", embedding_source: str = "",
                    ) -> tuple[EvalReport, dict[str, EvalReport]]:
    """One pass over the dump: the report over every sample, and one per group of sample file
    stems (each sample is evaluated once, whatever the number of groups it is in)."""
    started = time.perf_counter()
    total = _Tally.empty(steps)
    parts = {name: _Tally.empty(steps) for name in groups}
    members = {name: frozenset(stems) for name, stems in groups.items()}
    for sample, tally in _sample_tallies(model, dump, embed, steps):
        total = total + tally
        for name, stems in members.items():
            if sample.file.stem in stems:
                parts[name] = parts[name] + tally
    seconds = time.perf_counter() - started
    return (total.report(model, dump, drafter_label, embedding_source, seconds),
            {name: part.report(model, dump, drafter_label, embedding_source, seconds)
             for name, part in parts.items()})


@dataclasses.dataclass(frozen=True)
class _Tally:
    """Counts of some samples, per draft step; they add up over samples."""

    samples: int
    tokens: int
    scored: np.ndarray[Any, Any]
    correct: np.ndarray[Any, Any]
    in_vocab: np.ndarray[Any, Any]
    loss_sum: np.ndarray[Any, Any]
    chain_hist: np.ndarray[Any, Any]  # positions whose leading k steps were all right

    @classmethod
    def empty(cls, steps: int) -> _Tally:
        return cls(0, 0, np.zeros(steps, np.int64), np.zeros(steps, np.int64),
                   np.zeros(steps, np.int64), np.zeros(steps, np.float64),
                   np.zeros(steps + 1, np.int64))

    def __add__(self, other: _Tally) -> _Tally:
        return _Tally(self.samples + other.samples, self.tokens + other.tokens,
                      self.scored + other.scored, self.correct + other.correct,
                      self.in_vocab + other.in_vocab, self.loss_sum + other.loss_sum,
                      self.chain_hist + other.chain_hist)

    def report(self, model: EagleDrafter, dump: HiddenStateDump, drafter_label: str,
               embedding_source: str, seconds: float) -> EvalReport:
        steps = self.scored.shape[0]
        stats = tuple(StepStats(k, int(self.scored[k]), int(self.correct[k]),
                                int(self.in_vocab[k]),
                                float(self.loss_sum[k] / self.in_vocab[k]) if self.in_vocab[k]
                                else float("nan"))
                      for k in range(steps))
        total = int(self.chain_hist.sum())
        accept = tuple(float(self.chain_hist[k + 1:].sum() / total) if total else 0.0
                       for k in range(steps))
        return EvalReport(drafter_label, str(dump.path), self.samples, self.tokens,
                          model.shape.draft_vocab_size, stats, total, accept, embedding_source,
                          seconds)


def _sample_tallies(model: EagleDrafter, dump: HiddenStateDump, embed: Embeddings,
                    steps: int) -> Iterator[tuple[DumpSample, _Tally]]:
    """Each sample's teacher-forced counts, one sample at a time."""
    import torch

    vd = model.shape.draft_vocab_size
    hot = model.hot_ids
    with torch.no_grad():
        for sample in dump.samples:
            ids_np, aux_np, mask_np = read_sample(sample)
            width = model.shape.n_aux * model.shape.target_hidden_size
            if aux_np.shape[1] != width:
                raise DataError(f"{sample.file}: aux hidden states are {aux_np.shape[1]} wide, "
                                f"the drafter's fc takes {model.shape.n_aux} × "
                                f"{model.shape.target_hidden_size} = {width}: the dump comes "
                                "from another target or capture setting (see data.shapes)")
            n = ids_np.shape[0]
            tally = dataclasses.replace(_Tally.empty(steps), samples=1, tokens=n)
            if n < 3:
                yield sample, tally
                continue
            ids = torch.from_numpy(ids_np).to(model.device)
            outs = model.chain(embed, ids, torch.from_numpy(aux_np), steps)
            ok_rows = np.zeros((steps, n), dtype=bool)
            valid_rows = np.zeros((steps, n), dtype=bool)
            for k, hidden in enumerate(outs):
                target_pos = np.arange(n) + 2 + k
                valid = target_pos < n
                valid[valid] &= mask_np[target_pos[valid]]
                if not valid.any():
                    continue
                rows = torch.from_numpy(np.flatnonzero(valid)).to(model.device)
                truth = ids[torch.from_numpy(target_pos[valid]).to(model.device)]
                logits = model.logits(hidden[rows]).float()
                pred = model.to_target(logits.argmax(-1))
                draft_idx = torch.searchsorted(hot, truth).clamp(max=vd - 1)
                present = hot[draft_idx] == truth
                ce = torch.logsumexp(logits, -1) - logits.gather(1, draft_idx[:, None])[:, 0]
                hit = (pred == truth).cpu().numpy()
                tally.scored[k] += int(valid.sum())
                tally.correct[k] += int(hit.sum())
                tally.in_vocab[k] += int(present.sum())
                tally.loss_sum[k] += float(ce[present].double().sum())
                ok_rows[k, valid] = hit
                valid_rows[k] = valid
            chain = valid_rows.all(axis=0)
            if chain.any():
                leading = np.cumprod(ok_rows[:, chain], axis=0).sum(axis=0)
                tally.chain_hist[:] += np.bincount(leading, minlength=steps + 1)
            yield sample, tally


def resolve_embeddings(model: EagleDrafter, dump: HiddenStateDump,
                       target_path: Path | str | None,
                       drafter_path: Path | str) -> tuple[Embeddings, str]:
    """The embedding serving would use: the dump's, else the target's, else the drafter's own."""
    import torch

    from specgate.model.eagle import Embeddings

    if dump.embeddings is not None:
        return _embeddings_file(dump.embeddings).to(model.device, model.dtype), str(
            dump.embeddings)
    if target_path is not None:
        found = _target_embedding(Path(target_path))
        if found is not None:
            weight = read_array(found.file, found)
            return Embeddings(torch.from_numpy(weight)).to(model.device, model.dtype), (
                f"{found.file} ({found.name})")
    own = model.own_embeddings(open_drafter(drafter_path))
    if own is not None:
        return own, f"{drafter_path} (the drafter's own embed_tokens)"
    raise DataError(f"{dump.path}: no token embedding to evaluate with: the dump has no "
                    f"{EMBED_FILE}, no target model with embed_tokens was given ([target] path), "
                    "and the drafter has no embed_tokens.weight. Add one of them")


def _embeddings_file(path: Path) -> Embeddings:
    import torch

    from specgate.model.eagle import Embeddings

    try:
        tensors = read_header(path)
    except CheckpointError as exc:
        raise DataError(str(exc)) from None
    if "embed_tokens.weight" in tensors:
        return Embeddings(torch.from_numpy(read_array(path, tensors["embed_tokens.weight"])))
    if "token_ids" in tensors and "weight" in tensors:
        ids = torch.from_numpy(read_array(path, tensors["token_ids"]).astype(np.int64))
        return Embeddings(torch.from_numpy(read_array(path, tensors["weight"])), ids)
    raise DataError(f"{path}: expected embed_tokens.weight [V, h] or token_ids [N] + weight "
                    f"[N, h] (found: {', '.join(sorted(tensors))})")


def _target_embedding(folder: Path) -> TensorInfo | None:
    """The language model's embed_tokens tensor of a target model folder (headers only)."""
    if not folder.is_dir():
        return None
    candidates: list[TensorInfo] = []
    for file in sorted(folder.glob("*.safetensors")):
        try:
            header = read_header(file)
        except CheckpointError:
            continue
        candidates += [i for n, i in header.items() if n.endswith("embed_tokens.weight")
                       and not any(v in n for v in ("vision", "mm_", "audio"))]
        if candidates:
            break
    return min(candidates, key=lambda i: len(i.name)) if candidates else None


# --- the table and the command --------------------------------------------------

def compare_table(reports: Sequence[EvalReport]) -> str:
    """A CSV table of several drafters on the same dump."""
    steps = max((len(r.steps) for r in reports), default=0)
    out = io.StringIO()
    out.write("drafter,tokens,loss_step0,random_loss,"
              + ",".join(f"acc_step{k}" for k in range(steps)) + ",accept_length\n")
    for r in reports:
        accs = [f"{s.accuracy:.4f}" for s in r.steps] + [""] * (steps - len(r.steps))
        loss0 = f"{r.steps[0].loss:.4f}" if r.steps else ""
        out.write(f"{r.drafter},{r.tokens},{loss0},{r.random_loss:.4f},{','.join(accs)},"
                  f"{r.accept_length:.4f}\n")
    return out.getvalue()


def main_eval(argv: Sequence[str] | None = None) -> int:
    """`specgate eval --drafter D [--drafter D2 ...] --hidden-states H [--vocab-map M]`."""
    parser = argparse.ArgumentParser(prog="specgate eval", description="Teacher-forced offline "
                                     "evaluation of EAGLE-3 drafters on a hidden-state dump.")
    parser.add_argument("--drafter", required=True, action="append",
                        help="drafter folder (repeat to compare several on the same dump)")
    parser.add_argument("--hidden-states", required=True, help="hidden-state dump folder")
    parser.add_argument("--target-model", help="target model folder (for its embed_tokens)")
    parser.add_argument("--vocab-map", help="read the first drafter's lm_head through this map "
                        "(a fine-tune init as training will see it)")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="draft chain depth")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    try:
        reports = [teacher_forced(d, args.hidden_states, steps=args.steps,
                                  target_path=args.target_model, device=args.device,
                                  dtype=args.dtype, vocab_map=args.vocab_map if i == 0 else None)
                   for i, d in enumerate(args.drafter)]
    except (DataError, CheckpointError, KeyError, ValueError) as exc:
        print(f"specgate eval: {exc}", file=sys.stderr)
        return 2
    except ImportError:
        print("specgate eval: needs torch (pip install 'specgate[eval]')", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([r.to_json() for r in reports], indent=2))
    else:
        print(compare_table(reports), end="")
    return 0


# --- a generator of dumps whose answers are known ------------------------------------------

def generate_dump(out_dir: Path | str, drafter_path: Path | str, *, samples: int = 2,
                  tokens: int = 48, prompt_tokens: int = 8, noise: float = 0.0, seed: int = 0,
                  dtype: str = "BF16", metadata: dict[str, Any] | None = None) -> Path:
    """Write a dump whose masked next tokens are the given drafter's own step-0 predictions.

    With noise p a fraction p of them is replaced by another random draft-vocabulary token, so the
    drafter's teacher-forced step-0 accuracy on the dump is about 1 − p. A random embedding table
    of the drafter's vocabulary goes to embeddings.safetensors. Small shapes only (needs torch).
    """
    import torch

    from specgate.model.eagle import EagleDrafter, Embeddings

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    drafter = open_drafter(drafter_path)
    model = EagleDrafter.from_checkpoint(drafter)
    s = model.shape
    rng = np.random.default_rng(seed)
    table = stored_as(rng.standard_normal((s.vocab_size, s.hidden_size), dtype=np.float32), dtype)
    embed = Embeddings(torch.from_numpy(table))
    hot = model.hot_ids.numpy()
    width = s.n_aux * s.target_hidden_size
    for index in range(samples):
        ids = rng.choice(hot, size=tokens).astype(np.int64)
        aux = stored_as(rng.standard_normal((tokens, width), dtype=np.float32), dtype)
        mask = np.zeros(tokens, dtype=np.uint8)
        mask[prompt_tokens:] = 1
        cache = model.new_cache(tokens)
        with torch.no_grad():
            hidden_all = model.project(torch.from_numpy(aux))
            for t in range(tokens - 2):
                position = torch.tensor([t])
                out_hidden = model.decode(embed(torch.from_numpy(ids[t + 1:t + 2])),
                                          hidden_all[t:t + 1], position, cache)
                if t + 2 < prompt_tokens:
                    continue
                pred = int(model.to_target(model.logits(out_hidden).argmax(-1))[0])
                if noise and rng.random() < noise:
                    pred = int(rng.choice(hot[hot != pred]))
                ids[t + 2] = pred
        _write(out / f"sample_{index:05d}.safetensors", {
            "input_ids": TensorSpec("I64", (tokens,), ids),
            "aux_hidden_states": TensorSpec(dtype, (tokens, width), encode(aux, dtype)),
            "loss_mask": TensorSpec("U8", (tokens,), mask),
        })
    _write(out / EMBED_FILE, {"embed_tokens.weight": TensorSpec(
        dtype, table.shape, encode(table, dtype))})
    eagle = drafter.config.get("eagle_config") or {}
    meta = {"format": "specgate.hidden_states", "version": 1,
            "aux_hidden_state_layer_ids": eagle.get("eagle_aux_hidden_state_layer_ids"),
            "target_hidden_size": s.target_hidden_size, "num_aux_hidden_states": s.n_aux,
            "generated_by": str(drafter.path), **(metadata or {})}
    (out / META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return out


