"""Phase 1 claims replay the seeds: 252 of 32000, a loss worse than random, 38 % vs 75 %."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ckpt_support import make_profile, write_map

from specgate.claims.finetune import (
    init_parity_claim,
    initial_loss_claim,
    progress_claim,
    vocab_alignment_claim,
)
from specgate.claims.result import Status
from specgate.core.profile import Profile, parse_profile
from specgate.io.safetensors_io import TensorSpec, read_file_header, write_sparse
from specgate.io.vocab_maps import VocabMap
from specgate.testing.generate import (
    aq_medai_k2,
    default_token_ids,
    kimi_k25,
    shifted_token_ids,
    small,
    tiny,
    write_drafter,
)


def _profile(drafter: Path | None = None, **finetune: Any) -> Profile:
    return make_profile(drafter, sections={"finetune": finetune})


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Full-size sparse drafters (holes on disk): AQ-MedAI's K2 init and a K2.5 from scratch."""
    root = tmp_path_factory.mktemp("seeds")
    k2_ids = default_token_ids(aq_medai_k2(), seed=1)
    k2 = write_drafter(root / "aq_medai_k2", aq_medai_k2(), token_ids=k2_ids)
    k25_ids = shifted_token_ids(k2_ids, matches=252, vocab_size=163840)
    k25 = write_drafter(root / "k25_scratch", kimi_k25(), token_ids=k25_ids)
    map_file = write_map(root / "k25_vocab.safetensors", k25_ids, 163840)
    return {"k2": k2, "k25": k25, "map": map_file, "root": root}


def test_init_parity_passes_across_midlayer_and_layers0_names(seeds: dict[str, Path]) -> None:
    result = init_parity_claim(_profile(seeds["k25"], init=seeds["k2"]))
    assert result.status is Status.PASSED, result.message
    assert result.details["names_normalised"] is True  # midlayer.* ≡ layers.0.*
    assert result.details["skipped"] == ["d2t", "t2d"]  # as a fine-tune loader does
    assert result.observed == 13  # fc, 7 projections, 3 layer norms, norm, lm_head
    assert result.expected == "= 13"


def test_init_parity_fails_naming_each_mismatched_tensor(tmp_path: Path,
                                                         seeds: dict[str, Path]) -> None:
    drafter = write_drafter(tmp_path / "small", small())
    result = init_parity_claim(_profile(drafter, init=seeds["k2"]))
    assert (result.status, result.reason) == (Status.FAILED, "shape_mismatch")
    assert (result.observed, result.expected, result.details["compared"]) == (0, "= 13", 13)
    assert ["fc.weight", "[7168, 21504] BF16", "[256, 768] BF16"] in result.details["mismatched"]
    assert ["lm_head.weight", "[32000, 7168] BF16", "[512, 256] BF16"] in \
        result.details["mismatched"]


def test_init_parity_reports_missing_tensors(tmp_path: Path) -> None:
    init = write_drafter(tmp_path / "init", tiny(), name_style="midlayer")
    drafter = write_drafter(tmp_path / "drafter", tiny())
    file = drafter / "model.safetensors"
    header = read_file_header(file)
    write_sparse(file, {n: TensorSpec(i.dtype, i.shape) for n, i in header.tensors.items()
                        if n != "layers.0.mlp.up_proj.weight"})
    result = init_parity_claim(_profile(drafter, init=init))
    assert (result.status, result.reason) == (Status.FAILED, "missing_tensor")
    assert result.details["missing"] == ["layers.0.mlp.up_proj.weight"]


def test_vocab_alignment_replays_252_of_32000(seeds: dict[str, Path]) -> None:
    result = vocab_alignment_claim(_profile(init=seeds["k2"], vocab_map=seeds["map"]))
    assert (result.status, result.reason) == (Status.FAILED, "misaligned")
    assert result.details["draft_vocab_size"] == 32000
    assert result.details["shared_tokens"] == 31999
    assert result.details["remap"] == ["specgate", "remap-vocab", "--from", str(seeds["k2"]),
                                       "--to", str(seeds["map"])]
    assert (result.observed, result.expected, result.unit) == (252, ">= 31680", "positions")


def test_vocab_alignment_passes_against_its_own_map(seeds: dict[str, Path]) -> None:
    result = vocab_alignment_claim(_profile(init=seeds["k25"], vocab_map=seeds["map"]))
    assert result.status is Status.PASSED
    assert result.observed == 32000


def test_vocab_alignment_breaks_on_an_unreadable_map(tmp_path: Path,
                                                     seeds: dict[str, Path]) -> None:
    bad = tmp_path / "map.safetensors"
    bad.write_bytes(b"\x00" * 4)
    result = vocab_alignment_claim(_profile(init=seeds["k2"], vocab_map=bad))
    assert result.status is Status.BROKEN
    assert str(bad) in result.message


def _log(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_initial_loss_of_18_7_is_worse_than_uniform(tmp_path: Path,
                                                    seeds: dict[str, Path]) -> None:
    log = _log(tmp_path / "ft.jsonl", [{"epoch": 0, "step": 10, "loss": 18.7, "accuracy": 0.0},
                                       {"epoch": 0, "step": 20, "loss": 19.4}])
    result = initial_loss_claim(_profile(seeds["k25"], log=log))
    assert (result.status, result.reason) == (Status.FAILED, "worse_than_random")
    assert (result.observed, result.expected, result.unit) == (18.7, "< 9.3361", "nats")
    assert result.details["random_loss"] == 10.3735  # ln(32000)
    assert (result.details["line"], result.details["epoch"], result.details["step"]) == (1, 0, 10)
    assert f"{log}:1" in result.message  # the message names the file and line


def test_initial_loss_near_random_fails_and_clearly_below_passes(
        tmp_path: Path, seeds: dict[str, Path]) -> None:
    near = _log(tmp_path / "near.jsonl", [{"epoch": 0, "step": 0, "loss": 9.8}])
    result = initial_loss_claim(_profile(seeds["k25"], log=near))
    assert (result.status, result.reason) == (Status.FAILED, "near_random")
    good = _log(tmp_path / "good.jsonl", [{"epoch": 0, "step": 0, "loss": 4.2}])
    assert initial_loss_claim(_profile(seeds["k25"], log=good)).status is Status.PASSED
    assert math.isclose(0.9 * math.log(32000), 9.3357, rel_tol=1e-4)


def test_initial_loss_needs_a_draft_vocab_size(tmp_path: Path) -> None:
    log = _log(tmp_path / "ft.jsonl", [{"epoch": 0, "step": 0, "loss": 1.0}])
    result = initial_loss_claim(_profile(log=log))
    assert (result.status, result.reason) == (Status.BROKEN, "vocab_size_unknown")


def test_progress_replays_38_vs_75_percent(tmp_path: Path) -> None:
    ft = [0.24, 0.31, 0.35, 0.37, 0.38, 0.38]
    scratch = [0.40, 0.55, 0.64, 0.70, 0.73, 0.75, 0.76]
    log = _log(tmp_path / "ft.jsonl", [{"epoch": e, "step": 100 * e + s, "loss": 9.0,
                                        "accuracy": a - 0.01 * (1 - s)}
                                       for e, a in enumerate(ft) for s in (0, 1)])
    ref = tmp_path / "scratch.csv"
    ref.write_text("epoch,step,loss,accuracy\n" + "".join(
        f"{e},{100 * e},2.0,{a}\n" for e, a in enumerate(scratch)))
    result = progress_claim(_profile(log=log, reference_log=ref))
    assert (result.status, result.reason) == (Status.FAILED, "behind_reference")
    assert result.details["behind"] == result.details["epochs"] == [0, 1, 2, 3, 4, 5]
    assert result.details["last"] == {"epoch": 5, "accuracy": 0.38, "reference_accuracy": 0.75}
    table = result.attachments[0].body
    assert isinstance(table, str)
    assert "5,0.3800,0.7500,-0.3700" in table


def test_progress_passes_when_ahead_and_skips_without_shared_epochs(tmp_path: Path) -> None:
    log = _log(tmp_path / "ft.jsonl", [{"epoch": 0, "step": 0, "accuracy": 0.5},
                                       {"epoch": 1, "step": 1, "accuracy": 0.7}])
    ref = _log(tmp_path / "ref.jsonl", [{"epoch": 0, "step": 0, "accuracy": 0.4},
                                        {"epoch": 1, "step": 1, "accuracy": 0.7}])
    assert progress_claim(_profile(log=log, reference_log=ref)).status is Status.PASSED
    later = _log(tmp_path / "later.jsonl", [{"epoch": 3, "step": 0, "accuracy": 0.4}])
    result = progress_claim(_profile(log=log, reference_log=later))
    assert (result.status, result.reason) == (Status.SKIPPED, "no_shared_epoch")
    assert (result.details["epochs"], result.details["reference_epochs"]) == ([0, 1], [3])


def test_progress_breaks_on_a_bad_log_naming_the_line(tmp_path: Path) -> None:
    log = tmp_path / "ft.jsonl"
    log.write_text('{"epoch": 0, "step": 0, "accuracy": 0.5}\n{"epoch": 1, "step": }\n')
    ref = _log(tmp_path / "ref.jsonl", [{"epoch": 0, "step": 0, "accuracy": 0.4}])
    result = progress_claim(_profile(log=log, reference_log=ref))
    assert (result.status, result.reason) == (Status.BROKEN, "unreadable_input")
    assert f"{log}:2" in result.message  # the contract: the file and line are named


@pytest.mark.parametrize("claim", [init_parity_claim, vocab_alignment_claim,
                                   initial_loss_claim, progress_claim])
def test_claims_skip_without_their_input(claim: Any) -> None:
    result = claim(_profile())
    assert (result.status, result.reason) == (Status.SKIPPED, "not_configured")
    assert result.details["missing_input"] in ("init", "log", "vocab_map")


def test_shifted_ids_keep_the_seeds_numbers() -> None:
    ids = default_token_ids(aq_medai_k2(), seed=1)
    shifted = shifted_token_ids(ids, matches=252, vocab_size=163840)
    assert int((np.sort(ids) == shifted).sum()) == 252


def test_progress_leaves_out_an_epoch_the_fine_tune_is_still_training(tmp_path: Path) -> None:
    # Epochs of 100 steps logged every 10; the fine-tune is 30 steps into epoch 2, where its
    # running accuracy is still low, while the reference finished epoch 2 long ago.
    def rows(accs: dict[int, list[float]]) -> list[dict[str, Any]]:
        return [{"epoch": e, "step": 100 * e + 10 * i, "accuracy": a}
                for e, seq in accs.items() for i, a in enumerate(seq)]

    log = _log(tmp_path / "ft.jsonl", rows({0: [0.3] * 10, 1: [0.6] * 10, 2: [0.2] * 4}))
    ref = _log(tmp_path / "ref.jsonl", rows({e: [0.3 + 0.1 * e] * 10 for e in range(4)}))
    result = progress_claim(_profile(log=log, reference_log=ref))
    assert result.status is Status.PASSED, result.message
    assert result.details["epochs"] == [0, 1]
    assert result.details["left_out"] == {"2": [str(log)]}
    # Once epoch 2 has run its 100 steps it is compared, and now it trails.
    done = _log(tmp_path / "done.jsonl", rows({0: [0.3] * 10, 1: [0.6] * 10, 2: [0.2] * 10}))
    result = progress_claim(_profile(log=done, reference_log=ref))
    assert (result.status, result.reason) == (Status.FAILED, "behind_reference")
    assert result.details["epochs"] == [0, 1, 2]
    assert result.details["left_out"] == {}


def test_progress_skips_when_no_shared_epoch_is_finished(tmp_path: Path) -> None:
    log = _log(tmp_path / "ft.jsonl", [{"epoch": 0, "step": s, "accuracy": 0.1}
                                       for s in range(0, 30, 10)])
    ref = _log(tmp_path / "ref.jsonl", [{"epoch": e, "step": s, "accuracy": 0.5}
                                        for e in (0, 1) for s in range(100 * e, 100 * e + 100, 10)])
    result = progress_claim(_profile(log=log, reference_log=ref))
    assert (result.status, result.reason) == (Status.SKIPPED, "no_finished_epoch")
    assert result.details["left_out"] == {"0": [str(log)]}


@pytest.mark.parametrize(("loss", "label"), [("NaN", "NaN"), ("Infinity", "Inf"),
                                             ("-Infinity", "-Inf")])
def test_initial_loss_that_is_not_finite_says_so(tmp_path: Path, seeds: dict[str, Path],
                                                 loss: str, label: str) -> None:
    log = tmp_path / "ft.jsonl"
    log.write_text(f'{{"epoch": 0, "step": 0, "loss": {loss}}}\n')
    result = initial_loss_claim(_profile(seeds["k25"], log=log))
    assert (result.status, result.reason) == (Status.FAILED, "nonfinite_loss")
    assert result.details["loss"] == label
    assert result.observed is None


def test_vocab_alignment_needs_the_exact_count_not_one_more(tmp_path: Path) -> None:
    def map_file(name: str, ids: list[int]) -> Path:
        vmap = VocabMap.from_token_ids(ids, 256)
        assert vmap.t2d is not None
        return write_sparse(tmp_path / name, {
            "d2t": TensorSpec("I64", vmap.d2t.shape, data=vmap.d2t),
            "t2d": TensorSpec("BOOL", vmap.t2d.shape, data=vmap.t2d)})

    data = map_file("data.safetensors", list(range(0, 200, 2)))
    init = map_file("init.safetensors", [*range(0, 14, 2), *range(15, 201, 2)])
    assert 0.07 * 100 > 7  # 7.000000000000001: a plain ceiling would ask for 8
    raw = {"name": "t", "finetune": {"init": str(init), "vocab_map": str(data)},
           "thresholds": {"d2t_match_min": 0.07}}
    result = vocab_alignment_claim(parse_profile(raw))
    assert (result.status, result.observed, result.expected) == (Status.PASSED, 7, ">= 7")
