"""Phase 2 claims about a hidden-state dataset: counts, shapes, dtypes, finiteness, layers, map."""

from __future__ import annotations

import collections
import dataclasses
import io
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from specgate.claims import ids as claim_ids
from specgate.claims import inputs
from specgate.claims import result as claims
from specgate.claims.result import Attachment, ClaimResult
from specgate.core.errors import CheckpointError, DataError
from specgate.core.profile import Profile
from specgate.io.checkpoint import Drafter, load_target_config, open_drafter
from specgate.io.dump import DumpSample, HiddenStateDump, open_dump, read_sample
from specgate.io.safetensors_io import DTYPES, FLOAT_DTYPES, read_array
from specgate.io.vocab_maps import VocabMap, map_of, required_count
from specgate.io.vocab_maps import compare as compare_maps

PHASE = "phase2"
AUX_DTYPES = frozenset({"BF16", "F16", "F32"})
INT_DTYPES = frozenset({"I64", "I32"})
MASK_DTYPES = frozenset({"BOOL", "U8", "I8", "I32", "I64"})
# Target families whose SGLang capture uses ids as-is unless the first is 1 (facts §4.2).
DEEPSEEK_FAMILY = ("deepseek", "kimi")
SCAN_ROWS = 4096  # rows of aux states read at a time when checking finiteness
LISTED = 8  # problem lines named in a message


@dataclasses.dataclass(frozen=True)
class DataContext:
    """What a data claim needs: the dump and (when given) the drafter it will train."""

    dump: HiddenStateDump
    drafter: Drafter | None


def _context(profile: Profile, cid: str, need_drafter: bool = False) -> DataContext | ClaimResult:
    if need_drafter:
        return inputs.prepare(profile, cid, PHASE, ["data", "drafter"],
                              lambda a, b: DataContext(open_dump(a), open_drafter(b)))
    # The drafter is optional here: claims that can use it do when the profile gives it.
    drafter_path = profile.drafter_path
    return inputs.prepare(profile, cid, PHASE, ["data"], lambda a: DataContext(
        open_dump(a), open_drafter(drafter_path) if drafter_path is not None else None))


def _claim(cid: str, need_drafter: bool = False) -> Callable[
        [Callable[[Profile, DataContext], ClaimResult]], Callable[[Profile], ClaimResult]]:
    """Open the dataset once per claim, turning unreadable input into a broken result."""
    def wrap(fn: Callable[[Profile, DataContext], ClaimResult]) -> Callable[[Profile],
                                                                             ClaimResult]:
        def run(profile: Profile) -> ClaimResult:
            ctx = _context(profile, cid, need_drafter)
            if isinstance(ctx, ClaimResult):
                return ctx
            try:
                return fn(profile, ctx)
            except (DataError, CheckpointError) as exc:
                return claims.broken(cid, PHASE, str(exc))
            except (KeyError, ValueError, TypeError) as exc:
                return claims.broken(cid, PHASE, f"{ctx.dump.path}: cannot be checked: "
                                     f"{type(exc).__name__}: {exc}")
        run.__doc__ = fn.__doc__
        run.__name__ = fn.__name__
        return run
    return wrap


def _listing(problems: list[str]) -> str:
    more = f"; … and {len(problems) - LISTED} more" if len(problems) > LISTED else ""
    return "; ".join(problems[:LISTED]) + more


@_claim(claim_ids.DATA_COUNTS.id)
def counts_claim(profile: Profile, ctx: DataContext) -> ClaimResult:
    """data.counts: samples, tokens and loss-masked tokens; every sample has something to learn."""
    cid = claim_ids.DATA_COUNTS.id
    tokens = masked = 0
    empty: list[str] = []
    for sample in ctx.dump.samples:
        tokens += sample.tokens
        if sample.loss_mask is None:
            n = sample.tokens
        else:
            n = int(read_array(sample.file, sample.loss_mask).astype(bool).sum())
        masked += n
        if n == 0:
            empty.append(sample.file.name)
    n_samples = len(ctx.dump.samples)
    message = (f"{ctx.dump.path}: {n_samples} samples, {tokens} tokens, {masked} loss-masked "
               f"(trained) tokens")
    if empty:
        message += (f"; {len(empty)} sample(s) have no loss-masked token and teach nothing: "
                    f"{_listing(empty)} (check the chat template / assistant masking)")
    return claims.judged(not empty and masked > 0, cid, PHASE, message, observed=masked,
                         expected="> 0 in every sample", unit="tokens",
                         fail_reason="nothing_to_learn",
                         details={"samples": n_samples, "tokens": tokens, "loss_masked": masked,
                                  **({"empty": empty[:50]} if empty else {})})


def _aux_width(ctx: DataContext) -> tuple[int | None, str]:
    if ctx.drafter is not None:
        cfg = ctx.drafter.config
        th = int(cfg.get("target_hidden_size") or cfg["hidden_size"])
        ids = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
        n_aux = int(cfg.get("num_aux_hidden_states") or (len(ids) if ids else 3))
        return n_aux * th, f"{n_aux} × {th} from {ctx.drafter.path}/config.json"
    meta = ctx.dump.metadata
    if isinstance(meta.get("target_hidden_size"), int):
        n_aux = int(meta.get("num_aux_hidden_states") or 3)
        return n_aux * int(meta["target_hidden_size"]), f"{n_aux} × {meta['target_hidden_size']}" \
            " from the dataset metadata"
    return None, "the first sample"


@_claim(claim_ids.DATA_SHAPES.id)
def shapes_claim(profile: Profile, ctx: DataContext) -> ClaimResult:
    """data.shapes: input_ids [T], aux states [T, n_aux × hidden], loss_mask [T] in every sample."""
    cid = claim_ids.DATA_SHAPES.id
    width, source = _aux_width(ctx)
    if width is None:
        width = ctx.dump.samples[0].aux.shape[-1]
    problems = []
    found: list[list[Any]] = []  # [file, tensor, shape, expected shape]

    def wrong(file: str, tensor: str, shape: tuple[int, ...], expected: list[Any]) -> None:
        problems.append(f"{file}: {tensor} {list(shape)}, expected "
                        f"[{', '.join(map(str, expected))}]")
        found.append([file, tensor, list(shape), expected])

    for s in ctx.dump.samples:
        t = s.input_ids.shape[0] if len(s.input_ids.shape) == 1 else None
        if t is None:
            wrong(s.file.name, "input_ids", s.input_ids.shape, ["T"])
            continue
        if s.aux.shape != (t, width):
            wrong(s.file.name, s.aux.name, s.aux.shape, [t, width])
        if s.loss_mask is not None and s.loss_mask.shape != (t,):
            wrong(s.file.name, "loss_mask", s.loss_mask.shape, [t])
    ok = not problems
    message = (f"{ctx.dump.path}: every sample has input_ids [T], aux states [T, {width}] "
               f"({source}) and loss_mask [T]" if ok else
               f"{ctx.dump.path}: {len(problems)} shape problem(s): {_listing(problems)}; aux "
               f"width {width} comes from {source}: the data was captured from another target "
               "or with another number of aux layers than the drafter expects")
    return claims.judged(ok, cid, PHASE, message, observed=len(problems), expected="= 0",
                         unit="problems", details={"aux_width": width, "problems": problems[:50],
                                                   "shapes": found[:50]})


@_claim(claim_ids.DATA_DTYPES.id)
def dtypes_claim(profile: Profile, ctx: DataContext) -> ClaimResult:
    """data.dtypes: integer ids, one float dtype for aux states across files, int/bool masks."""
    cid = claim_ids.DATA_DTYPES.id
    problems = []
    aux_dtypes = collections.Counter(s.aux.dtype for s in ctx.dump.samples)
    for s in ctx.dump.samples:
        if s.input_ids.dtype not in INT_DTYPES:
            problems.append(f"{s.file.name}: input_ids is {s.input_ids.dtype}, expected I64")
        if s.aux.dtype not in AUX_DTYPES:
            problems.append(f"{s.file.name}: {s.aux.name} is {s.aux.dtype}, expected BF16, F16 "
                            "or F32")
        if s.loss_mask is not None and s.loss_mask.dtype not in MASK_DTYPES:
            problems.append(f"{s.file.name}: loss_mask is {s.loss_mask.dtype}, expected BOOL or "
                            "an integer")
    if len(aux_dtypes) > 1:
        problems.append(f"aux states mix dtypes {dict(aux_dtypes)}: files were captured with "
                        "different settings")
    ok = not problems
    dtype = next(iter(aux_dtypes)) if len(aux_dtypes) == 1 else "mixed"
    message = (f"{ctx.dump.path}: input_ids integer, aux states {dtype} in all "
               f"{len(ctx.dump.samples)} samples, loss_mask integer/bool" if ok else
               f"{ctx.dump.path}: {_listing(problems)}")
    return claims.judged(ok, cid, PHASE, message, observed=dtype, expected="one of BF16/F16/F32",
                         fail_reason="mixed_dtypes" if len(aux_dtypes) > 1 else "wrong_dtype",
                         details={"aux_dtypes": dict(aux_dtypes), "problems": problems[:50]})


@_claim(claim_ids.DATA_FINITE.id)
def finite_claim(profile: Profile, ctx: DataContext) -> ClaimResult:
    """data.finite: no NaN or Inf in any aux hidden state (read in bounded blocks)."""
    cid = claim_ids.DATA_FINITE.id
    bad: list[str] = []
    where: dict[str, list[int | None]] = {}  # file → [non-finite values, first row]
    values = 0
    for s in ctx.dump.samples:
        if s.aux.dtype not in FLOAT_DTYPES or s.aux.dtype not in DTYPES:
            continue
        nonfinite, first = _count_nonfinite(s.file, s.aux.start, s.aux.dtype, s.aux.shape)
        values += s.aux.numel
        if nonfinite:
            bad.append(f"{s.file.name}: {nonfinite} non-finite value(s), first in row {first}")
            if len(where) < 50:
                where[s.file.name] = [nonfinite, first]
    ok = not bad
    message = (f"{ctx.dump.path}: all {values} aux values are finite" if ok else
               f"{ctx.dump.path}: {len(bad)} sample(s) hold NaN/Inf: {_listing(bad)}; training "
               "on them turns the loss NaN: drop or re-capture these samples (fp16 capture "
               "overflows on large activations: capture in bf16)")
    return claims.judged(ok, cid, PHASE, message, observed=len(bad), expected="= 0",
                         unit="samples", details={"bad": bad[:50], "nonfinite": where})


def _count_nonfinite(file: Path, start: int, dtype: str,
                     shape: tuple[int, ...]) -> tuple[int, int | None]:
    rows = shape[0] if shape else 0
    width = math.prod(shape[1:]) if len(shape) > 1 else 1
    data = np.memmap(file, dtype=DTYPES[dtype], mode="r", offset=start, shape=(rows, width))
    total, first = 0, None
    for lo in range(0, rows, SCAN_ROWS):
        block = np.asarray(data[lo:lo + SCAN_ROWS])
        if dtype == "BF16":
            # NaN/Inf in bf16: all exponent bits set
            bad = (block & np.uint16(0x7F80)) == np.uint16(0x7F80)
        else:
            bad = ~np.isfinite(block)
        n = int(bad.sum())
        if n and first is None:
            first = lo + int(np.flatnonzero(bad.any(axis=1))[0])
        total += n
    return total, first


def capture_layers(ids: list[int], family: str | None) -> list[int]:
    """The layers SGLang captures for config-style aux ids on a target family (facts §4.2)."""
    if family == "deepseek":
        return [i + 1 for i in ids] if ids and ids[0] == 1 else list(ids)
    if family == "llama":
        return [i + 1 for i in ids]
    return list(ids)


def target_family(profile: Profile, ctx: DataContext) -> str | None:
    """deepseek (DeepSeek-V3, Kimi), llama, or None when neither the target nor the data say."""
    names: list[str] = [str(ctx.dump.metadata.get("target_model_type") or "")]
    target = profile.target_path
    if target is not None:
        try:
            config = load_target_config(target)
            names += [str(config.get("model_type") or ""), *map(str, config.get("architectures")
                                                                 or [])]
        except CheckpointError:
            pass
    joined = " ".join(names).lower()
    if any(f in joined for f in DEEPSEEK_FAMILY):
        return "deepseek"
    if any(f in joined for f in ("llama", "qwen", "mistral")):
        return "llama"
    return None


@_claim(claim_ids.DATA_CAPTURE_LAYERS.id, need_drafter=True)
def capture_layers_claim(profile: Profile, ctx: DataContext) -> ClaimResult:
    """data.capture_layers: the dataset was captured at the layers the drafter is configured for."""
    cid = claim_ids.DATA_CAPTURE_LAYERS.id
    assert ctx.drafter is not None
    meta = ctx.dump.metadata
    recorded = meta.get("aux_hidden_state_layer_ids", meta.get("capture_layers"))
    if not isinstance(recorded, list) or not all(isinstance(i, int) for i in recorded):
        return claims.skipped(cid, PHASE, f"{ctx.dump.path}/metadata.json records no "
                              "aux_hidden_state_layer_ids: record the capture layers with the "
                              "dataset so this can be checked", reason="no_capture_metadata")
    ids = (ctx.drafter.config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    if not isinstance(ids, list):
        return claims.skipped(cid, PHASE, f"{ctx.drafter.path}/config.json has no eagle_config."
                              "eagle_aux_hidden_state_layer_ids (SGLang captures its default)",
                              reason="no_drafter_layer_ids")
    family = target_family(profile, ctx)
    data_layers = capture_layers(recorded, family)
    drafter_layers = capture_layers([int(i) for i in ids], family)
    ok = data_layers == drafter_layers
    how = {"deepseek": "on a DeepSeek/Kimi target (ids starting at 1 shift by one)",
           "llama": "on a Llama-family target (ids shift by one)",
           None: "as written (target family unknown: give [target] path or target_model_type "
                 "in the metadata)"}[family]
    message = (f"{ctx.dump.path}: captured with ids {recorded}, drafter {ctx.drafter.path} "
               f"configured with {ids}; captured layers {data_layers} vs {drafter_layers} {how}")
    if not ok:
        message += (": the drafter would be trained on other layers' states than SGLang feeds it"
                    " at serving time; re-capture or fix eagle_aux_hidden_state_layer_ids")
    return claims.judged(ok, cid, PHASE, message, observed=data_layers,
                         expected=drafter_layers, fail_reason="other_layers",
                         details={"family": family, "recorded_ids": recorded,
                                  "drafter_ids": ids})


def vocab_map_from_data(dump: HiddenStateDump, draft_vocab_size: int,
                        vocab_size: int) -> tuple[VocabMap, collections.Counter[int]]:
    """SpecForge's construction over loss-masked tokens: top Vd by frequency, sorted."""
    counts: collections.Counter[int] = collections.Counter()
    for sample in dump.samples:
        counts.update(_masked_ids(sample).tolist())
    top = [t for t, _ in counts.most_common(draft_vocab_size)]
    # SpecForge pads with ids from range(Vd) at frequency 0 when too few tokens were seen
    pad = (i for i in range(vocab_size) if i not in counts)
    while len(top) < draft_vocab_size:
        top.append(next(pad))
    return VocabMap.from_token_ids(top, vocab_size), counts


def _masked_ids(sample: DumpSample) -> np.ndarray[Any, Any]:
    ids = read_array(sample.file, sample.input_ids).astype(np.int64).reshape(-1)
    if sample.loss_mask is None:
        return ids
    mask: np.ndarray[Any, Any] = read_array(sample.file, sample.loss_mask).reshape(-1)
    masked: np.ndarray[Any, Any] = ids[mask.astype(bool)]
    return masked


@_claim(claim_ids.DATA_VOCAB_MAP.id, need_drafter=True)
def vocab_map_claim(profile: Profile, ctx: DataContext) -> ClaimResult:
    """data.vocab_map: the drafter's map is the top-Vd loss-masked tokens of this dataset."""
    cid = claim_ids.DATA_VOCAB_MAP.id
    assert ctx.drafter is not None
    drafter_map = map_of(ctx.drafter)
    vd = drafter_map.draft_vocab_size
    vocab = int(ctx.drafter.config["vocab_size"])
    data_map, counts = vocab_map_from_data(ctx.dump, vd, vocab)
    cmp = compare_maps(drafter_map, data_map)
    # Tokens tied with the last selected one could have gone either way: they count as agreeing.
    cutoff = min((counts.get(int(t), 0) for t in data_map.target_ids()), default=0)
    selected = set(data_map.target_ids().tolist())
    consistent = sum(1 for t in drafter_map.target_ids().tolist()
                     if t in selected or counts.get(t, 0) == cutoff)
    need = required_count(profile.thresholds.d2t_match_min, vd)
    ok = consistent >= need
    table = io.StringIO()
    table.write(cmp.table_csv())
    message = (f"{ctx.drafter.path}: {consistent} of {vd} draft tokens are among the "
               f"{vd} most frequent loss-masked tokens of {ctx.dump.path} (ties at the cutoff "
               f"count {cutoff} included); positions match {cmp.d2t_positional_matches} of {vd}")
    if len(counts) < vd:
        unseen = sum(1 for t in drafter_map.target_ids().tolist() if t not in counts)
        message += (f"; the dataset has only {len(counts)} distinct loss-masked tokens, fewer "
                    f"than {vd}, so it cannot tell the map's other tokens apart ({unseen} of the "
                    "drafter's never occur)")
    if not ok:
        message += (": the drafter's map was built from other data, so its lm_head covers tokens"
                    " this dataset rarely trains and misses ones it does; rebuild the map from "
                    "this dataset (SpecForge's vocab mapping) before training")
    return claims.judged(ok, cid, PHASE, message, observed=consistent, expected=f">= {need}",
                         unit="tokens", fail_reason="other_data",
                         details={"shared_tokens": cmp.shared_tokens,
                                  "d2t_positional_matches": cmp.d2t_positional_matches,
                                  "distinct_masked_tokens": len(counts)},
                         attachments=(Attachment("data vocab map vs drafter", table.getvalue(),
                                                 "csv"),))


# read_sample is re-exported for callers that walk a dataset
__all__ = ["capture_layers", "capture_layers_claim", "counts_claim", "dtypes_claim",
           "finite_claim", "read_sample", "shapes_claim", "target_family", "vocab_map_claim",
           "vocab_map_from_data"]
