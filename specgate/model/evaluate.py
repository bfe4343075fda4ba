"""Offline teacher-forced evaluation of a drafter on a hidden-state dump (the format: io.dump).

Alignment: draft step k at position t is fed aux[t] (step 0) or its own previous output, and the
embedding of input_ids[t + 1 + k]; it predicts input_ids[t + 2 + k], scored where that token's
loss_mask is 1. The claim built on it is specgate.claims.eval.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from specgate.core.errors import CheckpointError, DataError
from specgate.core.profile import EVAL_MIN_TOKENS
from specgate.io.checkpoint import Drafter, open_drafter
from specgate.io.dump import (
    EMBED_FILE,
    META_FILE,
    DumpSample,
    HiddenStateDump,
    encode,
    open_dump,
    read_answer,
    read_sample,
    stored_as,
)
from specgate.io.safetensors_io import TensorInfo, TensorSpec, read_array, read_header
from specgate.io.safetensors_io import write_sparse as _write
from specgate.model.predict import accept_length, conditional_from_chain, request_accept_length

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
    # The served walk (see _served_walk): tokens per verify pass of a chain of s = 1..steps
    # draft steps, as greedy serving visits the text; its verify passes and, at `steps`, how
    # many drafts each verify accepted (SGLang's spec_accept_histogram).
    served_accept: tuple[float, ...] = ()
    served_verifies: int = 0
    served_hist: tuple[int, ...] = ()

    @property
    def random_loss(self) -> float:
        return math.log(self.draft_vocab_size)

    @property
    def chain_accept_length(self) -> float:
        """The chain model: τ = 1 + Σ_k Π_{i≤k} acc_i with acc_i conditional on steps < i being
        accepted, averaged over every position. Biased high for serving (see _served_walk)."""
        return 1.0 + sum(self.chain_accept)

    @property
    def accept_length(self) -> float:
        """Tokens per verify pass of a chain of all evaluated steps: the served walk when it
        visited any anchor, else the chain model."""
        if self.served_accept and self.served_verifies:
            return self.served_accept[-1]
        return self.chain_accept_length

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
            "chain_model_accept_length": round(self.chain_accept_length, 4),
            "served_accept_length": [round(a, 4) for a in self.served_accept],
            "served_verifies": self.served_verifies,
            "served_accept_histogram": list(self.served_hist),
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
    embed, source = resolve_embeddings(model, dump, target_path, drafter)
    report = evaluate_model(model, dump, embed, steps=steps, drafter_label=label,
                            embedding_source=source)
    note = _rope_note(drafter)
    if note:
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
    served_tokens: np.ndarray[Any, Any]  # the served walk per chain depth s = 1..steps
    served_verifies: np.ndarray[Any, Any]
    served_hist: np.ndarray[Any, Any]  # drafts accepted per verify, at the deepest chain

    @classmethod
    def empty(cls, steps: int) -> _Tally:
        return cls(0, 0, np.zeros(steps, np.int64), np.zeros(steps, np.int64),
                   np.zeros(steps, np.int64), np.zeros(steps, np.float64),
                   np.zeros(steps + 1, np.int64), np.zeros(steps, np.int64),
                   np.zeros(steps, np.int64), np.zeros(steps + 1, np.int64))

    def __add__(self, other: _Tally) -> _Tally:
        return _Tally(self.samples + other.samples, self.tokens + other.tokens,
                      self.scored + other.scored, self.correct + other.correct,
                      self.in_vocab + other.in_vocab, self.loss_sum + other.loss_sum,
                      self.chain_hist + other.chain_hist,
                      self.served_tokens + other.served_tokens,
                      self.served_verifies + other.served_verifies,
                      self.served_hist + other.served_hist)

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
        served = tuple(float(self.served_tokens[k] / self.served_verifies[k])
                       if self.served_verifies[k] else 1.0 for k in range(steps))
        return EvalReport(drafter_label, str(dump.path), self.samples, self.tokens,
                          model.shape.draft_vocab_size, stats, total, accept, embedding_source,
                          seconds, served_accept=served,
                          served_verifies=int(self.served_verifies[-1]) if steps else 0,
                          served_hist=tuple(int(x) for x in self.served_hist))


def _served_walk(ok: np.ndarray[Any, Any], valid: np.ndarray[Any, Any], start: int,
                 depth: int) -> tuple[int, int, np.ndarray[Any, Any]]:
    """Greedy chain serving replayed on a teacher-forced table: (tokens, verify passes, drafts
    accepted per verify).

    ok[k, t] / valid[k, t]: draft step k anchored at position t is right / scored (its target,
    t + 2 + k, is loss-masked). Serving anchors the first chain at the last prompt position
    (`start`); a verify keeps the a leading right drafts (a ≤ depth) plus the target's own next
    token, so the next chain is anchored a + 1 positions on. At temperature 0 the accepted text
    is the target's greedy text, which is the dump's, and the drafter sees at each step what it
    was fed here, so this is what the server does, without its numerics. The chain model instead
    averages acceptance over every position, and a served chain starts only where the last one
    was rejected (the harder positions) and skips the inside of accepted runs: on real SGLang it
    over-predicted 3.53 tokens per verify against 2.09 measured.
    """
    n = ok.shape[1]
    tokens = verifies = 0
    hist = np.zeros(depth + 1, np.int64)
    t = start
    while 0 <= t and t + 2 < n and valid[0, t]:
        a = 0
        while a < depth and valid[a, t] and ok[a, t]:
            a += 1
        # the target's own token follows the accepted drafts, unless the dump ends there
        tokens += a + (1 if t + 2 + a < n else 0)
        verifies += 1
        hist[a] += 1
        t += a + 1
    return tokens, verifies, hist


def _answer_starts(mask: np.ndarray[Any, Any]) -> list[int]:
    """Where each run of loss-masked tokens (an answer) begins, after an unmasked token."""
    on = mask.astype(bool)
    return [int(i) for i in np.flatnonzero(on[1:] & ~on[:-1]) + 1] + ([0] if on[:1].any()
                                                                       else [])


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
            # one served walk per answer (a multi-turn sample has several), anchored at the
            # last token before it; an answer at position 0 has no prompt to anchor on
            for first in _answer_starts(mask_np):
                for depth in range(1, steps + 1):
                    tokens, verifies, hist = _served_walk(ok_rows, valid_rows, first - 1, depth)
                    tally.served_tokens[depth - 1] += tokens
                    tally.served_verifies[depth - 1] += verifies
                    if depth == steps:
                        tally.served_hist[:] += hist
            yield sample, tally


def resolve_embeddings(model: EagleDrafter, dump: HiddenStateDump,
                       target_path: Path | str | None,
                       drafter: Drafter | Path | str) -> tuple[Embeddings, str]:
    """The embedding serving would use: the dump's, else the target's, else the drafter's own
    (`drafter` as the caller opened it, or its folder)."""
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
    opened = drafter if isinstance(drafter, Drafter) else open_drafter(drafter)
    own = model.own_embeddings(opened)
    if own is not None:
        return own, f"{opened.path} (the drafter's own embed_tokens)"
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


# --- the served chain's accept length, overall and per category ---------------------------

ALL = "all"
MIN_TOKENS = EVAL_MIN_TOKENS


@dataclasses.dataclass(frozen=True)
class GroupPrediction:
    """The predicted accept length for one group of dump samples (all, or one category): the
    served walk, with the position-averaged chain model beside it."""

    name: str
    samples: int
    tokens: int  # tokens of the group's samples
    positions: int  # scored chain positions: where every draft step's target is loss-masked
    conditional: tuple[float, ...]  # p_j, P(step j right | steps before it right), all positions
    per_verify: float  # tau: tokens one verify pass yields (the served walk)
    min_tokens: int
    chain_model: float = float("nan")  # 1 + Σ Π p_j: over every position, biased high
    verifies: int = 0  # verify passes of the served walk

    @property
    def judged(self) -> bool:
        """Enough scored positions for the figure to be judged (else reported only)."""
        return self.positions >= self.min_tokens

    @property
    def note(self) -> str:
        return "" if self.judged else (f"too few tokens ({self.positions} scored positions < "
                                       f"{self.min_tokens})")

    def per_request(self, completion_tokens: float) -> float:
        """SGLang's Σ completion / Σ verify at this mean completion count (prefill token
        counted)."""
        return request_accept_length(self.per_verify, completion_tokens)

    def to_json(self, completion_tokens: float | None = None) -> dict[str, object]:
        out: dict[str, object] = {
            "samples": self.samples, "tokens": self.tokens, "positions": self.positions,
            "conditional_acceptance": [round(c, 4) for c in self.conditional],
            "per_verify": round(self.per_verify, 4), "served_verifies": self.verifies,
            "chain_model_per_verify": round(self.chain_model, 4), "judged": self.judged}
        if completion_tokens is not None:
            out["per_request"] = round(self.per_request(completion_tokens), 4)
        if self.note:
            out["note"] = self.note
        return out


@dataclasses.dataclass(frozen=True)
class ServedPrediction:
    """The accept length a served chain (topk 1, `steps` draft tokens) should show, predicted
    by the teacher-forced evaluation of its drafter on a dump of its target."""

    drafter: str
    dump: str
    steps: int
    embedding_source: str
    category_source: str
    overall: GroupPrediction
    categories: dict[str, GroupPrediction]
    completion_tokens: float | None = None
    notes: tuple[str, ...] = ()
    seconds: float = 0.0
    # one per dump sample (by file stem: the probe's prompt id), when asked for (by_sample)
    samples: dict[str, GroupPrediction] = dataclasses.field(default_factory=dict)
    # the same samples' first answers (token ids): what serving must produce for the prediction
    # to be about the text it served
    answers: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)

    @property
    def groups(self) -> tuple[GroupPrediction, ...]:
        return (self.overall, *(self.categories[c] for c in sorted(self.categories)))

    def to_json(self) -> dict[str, object]:
        n = self.completion_tokens
        return {"drafter": self.drafter, "dump": self.dump, "steps": self.steps, "topk": 1,
                "draft_tokens": self.steps + 1, "embedding_source": self.embedding_source,
                "category_source": self.category_source,
                "min_tokens": self.overall.min_tokens,
                "completion_tokens": None if n is None else round(n, 3),
                "overall": self.overall.to_json(n),
                "categories": {c: g.to_json(n) for c, g in sorted(self.categories.items())},
                **({"samples": {k: g.to_json(n) for k, g in sorted(self.samples.items())}}
                   if self.samples else {}),
                "notes": list(self.notes), "seconds": round(self.seconds, 3)}


def group_prediction(name: str, report: EvalReport, steps: int,
                     min_tokens: int = MIN_TOKENS) -> GroupPrediction:
    """tau of a `steps`-deep chain: the served walk of one group's teacher-forced table (the
    chain model beside it, and in its place when the walk visited no anchor)."""
    conditional = conditional_from_chain(report.chain_accept)
    chain = accept_length(conditional, steps)
    walked = report.served_verifies > 0 and len(report.served_accept) >= steps
    return GroupPrediction(name, report.samples, report.tokens, report.chain_positions,
                           tuple(conditional),
                           report.served_accept[steps - 1] if walked else chain, min_tokens,
                           chain_model=chain, verifies=report.served_verifies if walked else 0)


def sample_categories(dump: HiddenStateDump,
                      names: Mapping[str, str] | None = None) -> tuple[dict[str, str], str]:
    """Each sample's category by file stem, and where the categories came from.

    metadata.json's `"samples": {"<stem>": {"category": "..."}}` first; else `names` (the probe's
    prompt ids → category: a sample named after a prompt id takes that prompt's category); a
    sample with neither has none and counts only in "all".
    """
    meta_file = dump.path / META_FILE
    listed = dump.metadata.get("samples")
    if listed is not None and not isinstance(listed, dict):
        raise DataError(f"{meta_file}: \"samples\" is {type(listed).__name__}, expected an "
                        "object {\"<sample file stem>\": {\"category\": \"...\"}}")
    listed = listed or {}
    found: dict[str, str] = {}
    sources: set[str] = set()
    for sample in dump.samples:
        stem = sample.file.stem
        entry = listed.get(stem)
        category = entry.get("category") if isinstance(entry, dict) else None
        if entry is not None and not isinstance(entry, dict):
            raise DataError(f"{meta_file}: samples.{stem} is {type(entry).__name__}, expected "
                            "an object with a \"category\"")
        if category is not None and not isinstance(category, str):
            raise DataError(f"{meta_file}: samples.{stem}.category is "
                            f"{type(category).__name__}, expected a string")
        if category:
            found[stem] = category
            sources.add(f"{META_FILE} samples")
        elif names is not None and stem in names:
            found[stem] = names[stem]
            sources.add("sample names = probe prompt ids")
    return found, " and ".join(sorted(sources)) or "none (every sample counts in all only)"


def predict_served(drafter_path: Path | str, dump_path: Path | str, *, steps: int,
                   target_path: Path | str | None = None,
                   names: Mapping[str, str] | None = None,
                   completion_tokens: float | None = None, min_tokens: int = MIN_TOKENS,
                   device: str = "cpu", dtype: str = "float32",
                   by_sample: bool | Collection[str] = False) -> ServedPrediction:
    """Predicted accept length of a served chain (topk 1, `steps` draft steps), overall and per
    category (see sample_categories for `names`), per verify pass and, at a mean completion
    count, per request as SGLang counts it; with by_sample, per dump sample too (in the same
    pass over the dump; True: every sample, a collection: the samples of those file stems, such
    as the prompt ids a probe measured). Needs torch; raises DataError / CheckpointError naming
    the file for a bad dump or drafter."""
    import torch

    from specgate.model.eagle import EagleDrafter

    if steps < 1:
        raise ValueError(f"a served chain has at least 1 draft step, got {steps}")
    if completion_tokens is not None and not completion_tokens > 1.0:
        raise ValueError(f"completion tokens per request must be > 1 (a verify pass follows "
                         f"the prefill token), got {completion_tokens}")
    drafter = open_drafter(drafter_path)
    model = EagleDrafter.from_checkpoint(drafter, device=device, dtype=getattr(torch, dtype))
    dump = open_dump(dump_path)
    embed, source = resolve_embeddings(model, dump, target_path, drafter)
    categories, category_source = sample_categories(dump, names)
    groups = {c: {stem for stem, cat in categories.items() if cat == c}
              for c in sorted(set(categories.values()))}
    wanted = None if isinstance(by_sample, bool) else frozenset(by_sample)
    stems = [sample.file.stem for sample in dump.samples
             if by_sample is True or (wanted is not None and sample.file.stem in wanted)]
    keyed = {**{f"category:{c}": members for c, members in groups.items()},
             **{f"sample:{stem}": {stem} for stem in stems}}
    started = time.perf_counter()
    total, parts = evaluate_groups(model, dump, embed, steps=steps, groups=keyed,
                                   drafter_label=str(drafter.path), embedding_source=source)
    note = _rope_note(drafter)
    return ServedPrediction(
        drafter=str(drafter.path), dump=str(dump.path), steps=steps, embedding_source=source,
        category_source=category_source,
        overall=group_prediction(ALL, total, steps, min_tokens),
        categories={c: group_prediction(c, parts[f"category:{c}"], steps, min_tokens)
                    for c in groups},
        completion_tokens=completion_tokens, notes=(note,) if note else (),
        seconds=time.perf_counter() - started,
        samples={stem: group_prediction(stem, parts[f"sample:{stem}"], steps, min_tokens)
                 for stem in stems},
        answers={sample.file.stem: read_answer(sample) for sample in dump.samples
                 if sample.file.stem in set(stems)})


def served_table(prediction: ServedPrediction) -> str:
    """The prediction as a text table, one row per group."""
    n = prediction.completion_tokens
    lines = [f"{prediction.drafter} on {prediction.dump}: served chain of {prediction.steps} "
             f"draft steps, topk 1 ({prediction.steps + 1} draft tokens); categories from "
             f"{prediction.category_source}",
             f"{'group':<16}{'samples':>8}{'tokens':>9}{'positions':>10}{'per verify':>11}"
             + (f"{'per request':>12}" if n is not None else "") + f"{'chain model':>12}"
             + "  note"]
    for g in prediction.groups:
        row = (f"{g.name:<16}{g.samples:>8}{g.tokens:>9}{g.positions:>10}{g.per_verify:>11.3f}"
               + (f"{g.per_request(n):>12.3f}" if n is not None else "")
               + f"{g.chain_model:>12.3f}")
        lines.append(f"{row}  {g.note}".rstrip())
    if prediction.samples:
        lines.append("per sample (one sample each: figures for finding blind spots, not judged)")
        for g in (prediction.samples[k] for k in sorted(prediction.samples)):
            row = (f"{g.name:<16}{g.samples:>8}{g.tokens:>9}{g.positions:>10}"
                   f"{g.per_verify:>11.3f}"
                   + (f"{g.per_request(n):>12.3f}" if n is not None else "")
                   + f"{g.chain_model:>12.3f}")
            lines.append(row)  # [eval] min_tokens is for groups; the positions column says
    lines.append("per verify: the served walk (chains anchored where greedy serving anchors "
                 "them); chain model: acceptance averaged over every position, biased high")
    if n is not None:
        lines.append(f"per request: Σ completion / Σ verify at {n:g} completion tokens per "
                     "request (the first token comes from prefill, not from a verify pass)")
    lines += [f"note: {text}" for text in prediction.notes]
    return "\n".join(lines) + "\n"


def _rope_note(drafter: Drafter) -> str:
    params = drafter.config.get("rope_parameters")
    rope_type = params.get("rope_type") if isinstance(params, dict) else None
    if drafter.config.get("rope_scaling") or rope_type not in (None, "default"):
        return (f"{drafter.path}/config.json asks for RoPE scaling, which this evaluation does "
                "not apply (plain RoPE with rope_theta): figures are approximate")
    return ""


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


