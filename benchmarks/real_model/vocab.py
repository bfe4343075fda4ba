"""The draft vocabulary from the answers' token frequencies, built exactly as SpecForge 0.2.0 does.

SpecForge (specforge/data/preprocessing.py) counts, sample by sample in dataset order, the
unique loss-masked token ids of each sample (ascending, as torch.unique returns them) into one
Counter; pads it with ids from range(draft_vocab_size) at frequency 0 when it holds fewer than
that; keeps Counter.most_common(draft_vocab_size) (ties go to the id counted first); sorts those
ids; d2t[i] = used[i] - i and t2d[j] = j in used. `count_tokens` and `mappings` follow those
steps one for one, so the same data gives the same maps, tie-breaks included.

`compare` runs SpecForge's own generate_vocab_mapping_file on the same samples (a wheel of
specforge==0.2.0 unpacked or installed, its heavy imports stubbed: see `load_specforge`) and
reports whether its d2t/t2d equal ours:

    python3 -m benchmarks.real_model.vocab compare TOKENS.npz MAP.safetensors \
        --specforge /path/to/unpacked/wheel [--json OUT]

TOKENS.npz holds, per sample in dataset order, `ids_<k>` and `mask_<k>` (`numpy.savez` of the
samples the map was counted on);
MAP.safetensors the d2t/t2d the drafter was built with. `sizes` does the same at other draft
vocabulary sizes, where more tokens tie at the cutoff count; `checkpoint` loads a drafter with
SpecForge's own EAGLE-3 draft model and runs its exporter's check of the serving keys:

    python3 -m benchmarks.real_model.vocab sizes TOKENS.npz ... --vocab-size V \
        --draft-vocab 1024,4096,8192 --specforge /path/to/unpacked/wheel [--json OUT]
    python3 -m benchmarks.real_model.vocab checkpoint DRAFTER_DIR \
        --specforge /path/to/unpacked/wheel [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import import_package


def count_tokens(samples: Iterable[tuple[Sequence[int] | np.ndarray[Any, Any],
                                         Sequence[int] | np.ndarray[Any, Any]]]) -> Counter[int]:
    """Loss-masked token frequencies, counted as SpecForge counts them (see the module doc)."""
    counts: Counter[int] = Counter()
    for ids, mask in samples:
        ids_a = np.asarray(ids, dtype=np.int64).reshape(-1)
        mask_a = np.asarray(mask).reshape(-1)
        masked = ids_a[mask_a == 1]
        unique, freq = np.unique(masked, return_counts=True)
        counts.update(dict(zip(unique.tolist(), freq.tolist(), strict=True)))
    return counts


def mappings(counts: Counter[int], draft_vocab_size: int,
             vocab_size: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """d2t (int64, [Vd]) and t2d (bool, [V]) from frequencies, as SpecForge's
    process_token_dict_to_mappings makes them (the Counter is copied, not changed)."""
    token_dict = Counter(counts)
    if len(token_dict) < draft_vocab_size:
        existing = set(token_dict.keys())
        for token in set(range(draft_vocab_size)) - existing:
            token_dict[token] = 0
            if len(token_dict) >= draft_vocab_size:
                break
    used = sorted(key for key, _ in token_dict.most_common(draft_vocab_size))
    d2t = np.asarray([used[i] - i for i in range(len(used))], dtype=np.int64)
    t2d = np.zeros(vocab_size, dtype=bool)
    t2d[np.asarray(used, dtype=np.int64)] = True
    return d2t, t2d


def coverage(counts: Counter[int], d2t: np.ndarray[Any, Any]) -> float:
    """The fraction of counted tokens the draft vocabulary holds (SpecForge prints it)."""
    total = sum(counts.values())
    ids = d2t + np.arange(d2t.shape[0])
    return sum(counts.get(int(t), 0) for t in ids) / total if total else 0.0


def save_tokens(path: Path, samples: Sequence[tuple[np.ndarray[Any, Any],
                                                    np.ndarray[Any, Any]]]) -> None:
    """Per-sample input_ids and loss masks in dataset order (small: int32 and uint8)."""
    arrays: dict[str, np.ndarray[Any, Any]] = {}
    for k, (ids, mask) in enumerate(samples):
        arrays[f"ids_{k:06d}"] = np.asarray(ids, dtype=np.int32)
        arrays[f"mask_{k:06d}"] = np.asarray(mask, dtype=np.uint8)
    np.savez_compressed(path, **arrays)  # type: ignore[arg-type]


def load_tokens(path: Path) -> list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]:
    with np.load(path) as z:
        keys = sorted(k for k in z.files if k.startswith("ids_"))
        return [(z[k].astype(np.int64), z["mask_" + k[4:]].astype(np.int64)) for k in keys]


# --- SpecForge as the oracle ------------------------------------------------------------------

def load_specforge(root: Path) -> types.ModuleType:
    """specforge.data.preprocessing from an unpacked specforge-0.2.0 wheel at `root`.

    Importing it pulls in `datasets` (only for a type hint), `specforge.distributed` (process
    groups) and the chat-template parsers; the first is stubbed when missing, the rest import
    as they are where torch and transformers are installed. Only the vocab-map functions run.
    """
    try:
        import datasets  # noqa: F401
    except ImportError:
        stub = types.ModuleType("datasets")
        stub.Dataset = type("Dataset", (), {})  # type: ignore[attr-defined]
        sys.modules["datasets"] = stub
    import importlib

    import_package(root, "specforge")
    return importlib.import_module("specforge.data.preprocessing")


class _Rows:
    """What generate_vocab_mapping_file reads of a Hugging Face dataset: two columns by name."""

    def __init__(self, samples: Sequence[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]):
        import torch

        self.cols = {"input_ids": [torch.from_numpy(np.asarray(i, dtype=np.int64))
                                   for i, _ in samples],
                     "loss_mask": [torch.from_numpy(np.asarray(m, dtype=np.int64))
                                   for _, m in samples]}

    def __getitem__(self, key: str) -> list[Any]:
        return self.cols[key]

    def __len__(self) -> int:
        return len(self.cols["input_ids"])


def specforge_maps(module: types.ModuleType, samples: Sequence[tuple[np.ndarray[Any, Any],
                                                                     np.ndarray[Any, Any]]],
                   draft_vocab_size: int, vocab_size: int,
                   cache_dir: Path) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """SpecForge's generate_vocab_mapping_file on the samples; its saved d2t/t2d as numpy."""
    import torch

    path = module.generate_vocab_mapping_file(_Rows(samples), vocab_size, draft_vocab_size,
                                              cache_dir=str(cache_dir), cache_key="specgate")
    saved = torch.load(path, map_location="cpu", weights_only=True)
    return saved["d2t"].numpy().astype(np.int64), saved["t2d"].numpy().astype(bool)


def compare(tokens: Path, vmap: Path, specforge_root: Path, cache_dir: Path) -> dict[str, Any]:
    from safetensors.numpy import load_file

    samples = load_tokens(tokens)
    ours = load_file(str(vmap))
    d2t, t2d = ours["d2t"].astype(np.int64), ours["t2d"].astype(bool)
    module = load_specforge(specforge_root)
    sf_d2t, sf_t2d = specforge_maps(module, samples, d2t.shape[0], t2d.shape[0], cache_dir)
    counts = count_tokens(samples)
    again_d2t, again_t2d = mappings(counts, d2t.shape[0], t2d.shape[0])
    return {
        "samples": len(samples), "masked_tokens": int(sum(counts.values())),
        "distinct_tokens": len(counts), "draft_vocab_size": int(d2t.shape[0]),
        "vocab_size": int(t2d.shape[0]), "coverage": round(coverage(counts, d2t), 6),
        "d2t_identical": bool(np.array_equal(d2t, sf_d2t)),
        "t2d_identical": bool(np.array_equal(t2d, sf_t2d)),
        "d2t_positions_equal": int((d2t == sf_d2t).sum()) if d2t.shape == sf_d2t.shape else 0,
        "rebuilt_here_identical": bool(np.array_equal(again_d2t, d2t)
                                       and np.array_equal(again_t2d, t2d)),
        "specforge": "specforge 0.2.0 specforge.data.preprocessing.generate_vocab_mapping_file "
                     "+ process_token_dict_to_mappings, run on CPU",
    }


def cutoff(counts: Counter[int], d2t: np.ndarray[Any, Any]) -> tuple[int, int]:
    """The count of the least frequent token kept, and how many counted tokens have it."""
    kept = np.arange(d2t.shape[0]) + d2t
    least = min(counts.get(int(t), 0) for t in kept)
    return least, sum(1 for c in counts.values() if c == least)


def sizes(tokens: Sequence[Path], vocab_size: int, draft_sizes: Sequence[int],
          specforge_root: Path, cache_dir: Path) -> dict[str, Any]:
    """Our maps against SpecForge's at each draft vocabulary size, per token file."""
    import shutil

    module = load_specforge(specforge_root)
    out: dict[str, Any] = {}
    for path in tokens:
        samples = load_tokens(path)
        counts = count_tokens(samples)
        for size in draft_sizes:
            shutil.rmtree(cache_dir, ignore_errors=True)  # SpecForge reuses a cached file
            d2t, t2d = mappings(counts, size, vocab_size)
            sf_d2t, sf_t2d = specforge_maps(module, samples, size, vocab_size, cache_dir)
            least, tied = cutoff(counts, d2t)
            out[f"{path.stem.removesuffix('-tokens')} vd={size}"] = {
                "d2t_identical": bool(np.array_equal(d2t, sf_d2t)),
                "t2d_identical": bool(np.array_equal(t2d, sf_t2d)),
                "cutoff_count": least, "tokens_at_cutoff_count": tied,
                "coverage": round(coverage(counts, d2t), 6)}
    return out


def checkpoint(drafter: Path, specforge_root: Path) -> dict[str, Any]:
    """The drafter loaded into SpecForge 0.2.0's LlamaForCausalLMEagle3, and its exporter's check
    of the keys SGLang's EAGLE-3 loader requires."""
    load_specforge(specforge_root)
    from safetensors.torch import load_file
    from specforge.export.to_sglang import _serving_state
    from specforge.modeling.draft.llama3_eagle import LlamaForCausalLMEagle3
    from transformers import LlamaConfig

    state = load_file(str(drafter / "model.safetensors"))
    model = LlamaForCausalLMEagle3(LlamaConfig.from_pretrained(str(drafter)))
    missing, unexpected = model.load_state_dict(state, strict=False)
    own = model.state_dict()
    try:
        _serving_state(state, {})
        served = "passed"
    except ValueError as exc:
        served = f"failed: {exc}"
    return {
        "specforge_class": "specforge.modeling.draft.llama3_eagle.LlamaForCausalLMEagle3 (0.2.0)",
        "missing_keys": sorted(missing), "unexpected_keys": sorted(unexpected),
        "shapes_match": all(k in own and own[k].shape == v.shape for k, v in state.items()),
        "dtypes_in_checkpoint": {k: [str(v.dtype), list(v.shape)]
                                 for k, v in sorted(state.items())},
        "exporter_serving_state_check": served}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compare", help="our map against SpecForge's on the same samples")
    c.add_argument("tokens", type=Path)
    c.add_argument("map", type=Path)
    c.add_argument("--specforge", type=Path, required=True,
                   help="an unpacked specforge-0.2.0 wheel (the folder holding specforge/)")
    c.add_argument("--cache-dir", type=Path, default=Path("/tmp/specforge-vocab-cache"))
    c.add_argument("--json", type=Path)
    z = sub.add_parser("sizes", help="the same at other draft vocabulary sizes")
    z.add_argument("tokens", type=Path, nargs="+")
    z.add_argument("--vocab-size", type=int, required=True, help="the target's vocabulary")
    z.add_argument("--draft-vocab", required=True, help="sizes, e.g. 1024,4096,8192")
    k = sub.add_parser("checkpoint", help="a drafter loaded by SpecForge's draft model")
    k.add_argument("drafter", type=Path, help="the drafter's folder")
    for p in (z, k):
        p.add_argument("--specforge", type=Path, required=True,
                       help="an unpacked specforge-0.2.0 wheel (the folder holding specforge/)")
        p.add_argument("--json", type=Path)
    z.add_argument("--cache-dir", type=Path, default=Path("/tmp/specforge-vocab-cache"))
    args = ap.parse_args(argv)
    import shutil

    if args.cmd == "compare":
        shutil.rmtree(args.cache_dir, ignore_errors=True)  # SpecForge reuses a cached file
        result = compare(args.tokens, args.map, args.specforge, args.cache_dir)
        ok = result["d2t_identical"] and result["t2d_identical"]
    elif args.cmd == "sizes":
        try:
            draft = [int(n) for n in args.draft_vocab.split(",")]
        except ValueError:
            ap.error(f"--draft-vocab {args.draft_vocab!r}: want whole numbers, e.g. 1024,4096")
        result = sizes(args.tokens, args.vocab_size, draft, args.specforge, args.cache_dir)
        ok = all(r["d2t_identical"] and r["t2d_identical"] for r in result.values())
    else:
        result = checkpoint(args.drafter, args.specforge)
        ok = (result["unexpected_keys"] == [] and result["shapes_match"]
              and result["exporter_serving_state_check"] == "passed")
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0 if ok else 1

if __name__ == "__main__":
    sys.exit(main())
