"""benchmarks/real_model/vocab.py: the draft vocabulary built as SpecForge 0.2.0 builds it.

The SpecForge comparison runs where SpecForge can be imported: an installed `specforge`, or an
unpacked specforge-0.2.0 wheel named by $SPECFORGE_ROOT (`pip download --no-deps
specforge==0.2.0` and unzip it); otherwise it is skipped with that reason.
"""

from __future__ import annotations

import importlib.util
import os
from collections import Counter
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from script_support import load_real_model_script

from specgate.io.vocab_maps import VocabMap, check_invariants

load = load_real_model_script


@pytest.fixture(scope="module")
def vocab() -> ModuleType:
    return load("vocab")


def samples(seed: int, n: int = 40, vocab_size: int = 300) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        length = int(rng.integers(4, 50))
        # a skewed distribution, so frequencies tie at many cutoffs
        ids = (rng.zipf(1.4, size=length) % vocab_size).astype(np.int64)
        out.append((ids, (rng.random(length) < 0.7).astype(np.int64)))
    return out


def test_only_loss_masked_tokens_are_counted(vocab: ModuleType) -> None:
    counts = vocab.count_tokens([(np.array([5, 6, 6, 7]), np.array([0, 1, 1, 0]))])
    assert counts == Counter({6: 2})


def test_ties_at_the_cutoff_go_to_the_token_counted_first(vocab: ModuleType) -> None:
    # 9 and 3 both occur once; 9's sample comes first, so 9 is "counted first" and kept.
    data = [(np.array([9, 1, 1]), np.array([1, 1, 1])), (np.array([3]), np.array([1]))]
    d2t, t2d = vocab.mappings(vocab.count_tokens(data), 2, 12)
    assert (d2t + np.arange(2)).tolist() == [1, 9]
    assert np.flatnonzero(t2d).tolist() == [1, 9]


def test_too_few_tokens_are_padded_from_the_lowest_ids(vocab: ModuleType) -> None:
    d2t, t2d = vocab.mappings(Counter({40: 3}), 4, 50)
    assert (d2t + np.arange(4)).tolist() == [0, 1, 2, 40]
    assert int(t2d.sum()) == 4


@pytest.mark.parametrize("vd", [16, 120, 400])
def test_the_maps_keep_every_invariant_specgate_checks(vocab: ModuleType, vd: int) -> None:
    d2t, t2d = vocab.mappings(vocab.count_tokens(samples(1)), vd, 500)
    assert d2t.dtype == np.int64
    assert t2d.dtype == np.bool_
    assert check_invariants(VocabMap(d2t, t2d), vd, 500) == {}


def test_the_token_file_round_trips_in_order(vocab: ModuleType, tmp_path: Path) -> None:
    data = samples(2, n=5)
    vocab.save_tokens(tmp_path / "t.npz", data)
    back = vocab.load_tokens(tmp_path / "t.npz")
    assert [(a.tolist(), m.tolist()) for a, m in back] == [(a.tolist(), m.tolist())
                                                          for a, m in data]


def specforge_root() -> Path | None:
    given = os.environ.get("SPECFORGE_ROOT")
    if given:
        return Path(given)
    found = importlib.util.find_spec("specforge")
    return Path(found.origin).parent.parent if found and found.origin else None


@pytest.mark.parametrize("vd", [16, 120, 400])
def test_specforges_own_function_builds_the_same_maps(vocab: ModuleType, tmp_path: Path,
                                                      vd: int) -> None:
    pytest.importorskip("torch")
    root = specforge_root()
    if root is None or not (root / "specforge" / "data" / "preprocessing.py").exists():
        pytest.skip("SpecForge 0.2.0 is not importable here: set SPECFORGE_ROOT to an unpacked "
                    "specforge-0.2.0 wheel")
    module = vocab.load_specforge(root)
    data = samples(3)
    theirs = vocab.specforge_maps(module, data, vd, 500, tmp_path / "cache")
    ours = vocab.mappings(vocab.count_tokens(data), vd, 500)
    assert np.array_equal(theirs[0], ours[0])
    assert np.array_equal(theirs[1], ours[1])


def test_sizes_sets_our_maps_against_specforges_at_each_draft_vocabulary(
        vocab: ModuleType, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    root = specforge_root()
    if root is None or not (root / "specforge" / "data" / "preprocessing.py").exists():
        pytest.skip("SpecForge 0.2.0 is not importable here: set SPECFORGE_ROOT to an unpacked "
                    "specforge-0.2.0 wheel")
    data = samples(5)
    path = tmp_path / "tasks-train-tokens.npz"
    vocab.save_tokens(path, data)
    found = vocab.sizes([path], 500, [16, 400], root, tmp_path / "cache")
    assert sorted(found) == ["tasks-train vd=16", "tasks-train vd=400"]
    counts = vocab.count_tokens(data)
    for size in (16, 400):
        row = found[f"tasks-train vd={size}"]
        assert row["d2t_identical"], row
        assert row["t2d_identical"], row
        # the least frequent kept token's count, and every counted token that has it
        ranked = sorted(counts.values(), reverse=True)
        least = ranked[size - 1] if size <= len(ranked) else 0
        assert row["cutoff_count"] == least
        assert row["tokens_at_cutoff_count"] == sum(1 for c in ranked if c == least)


def test_cutoff_counts_the_tokens_tied_with_the_last_one_kept(vocab: ModuleType) -> None:
    counts = Counter({5: 9, 7: 4, 2: 4, 3: 4, 8: 1})
    d2t, _ = vocab.mappings(counts, 3, 10)  # keeps 5, then the first two counted of the 4s
    assert vocab.cutoff(counts, d2t) == (4, 3)
    d2t, _ = vocab.mappings(counts, 8, 10)  # padded with ids never counted
    assert vocab.cutoff(counts, d2t) == (0, 0)
