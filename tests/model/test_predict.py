"""The chain model of accept length (specgate.model.predict)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from specgate.model.predict import (
    accept_length,
    accept_lengths,
    conditional_from_chain,
    request_accept_length,
)


def test_perfect_drafter_accepts_every_step_plus_bonus() -> None:
    assert accept_length([1.0, 1.0, 1.0], 3) == 4.0
    assert accept_length([1.0, 1.0, 1.0], 0) == 1.0


def test_products_not_sums_of_conditional_acceptance() -> None:
    # 1 + 0.5 + 0.5*0.5 + 0.5*0.5*0.5
    assert accept_length([0.5, 0.5, 0.5], 3) == pytest.approx(1.875)
    # a miss at position 1 ends the chain whatever comes after
    assert accept_length([0.0, 1.0, 1.0], 3) == 1.0
    assert accept_lengths([0.9, 0.8, 0.7, 0.6], [1, 2, 4]) == pytest.approx(
        {1: 1.9, 2: 1.9 + 0.72, 4: 1.9 + 0.72 + 0.504 + 0.3024})


def test_deeper_chains_never_predict_less() -> None:
    rng = np.random.default_rng(0)
    p = rng.uniform(0, 1, 6).tolist()
    taus = [accept_length(p, s) for s in range(7)]
    assert all(b >= a for a, b in itertools.pairwise(taus))
    assert taus[-1] <= 7.0


def test_chain_histogram_round_trips() -> None:
    p = [0.9, 0.5, 0.25]
    chain = np.cumprod(p).tolist()
    assert conditional_from_chain(chain) == pytest.approx(p)
    # once nothing survives, later positions are 0, not NaN
    assert conditional_from_chain([0.5, 0.0, 0.0]) == [0.5, 0.0, 0.0]


@pytest.mark.parametrize("bad", [[1.2], [-0.1], [float("nan")]])
def test_out_of_range_acceptance_is_refused(bad: list[float]) -> None:
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        accept_length(bad, 1)


def test_more_steps_than_measured_positions_is_refused() -> None:
    with pytest.raises(ValueError, match="--steps 3"):
        accept_length([0.9, 0.8], 3)


def test_increasing_chain_is_refused() -> None:
    with pytest.raises(ValueError, match="non-increasing"):
        conditional_from_chain([0.5, 0.6])


def test_request_figure_counts_the_prefill_token() -> None:
    # 256 tokens at tau 4: 255 verified tokens in 63.75 passes -> 256 / 63.75
    assert request_accept_length(4.0, 256) == pytest.approx(256 / 63.75)
    with pytest.raises(ValueError, match=">= 1"):
        request_accept_length(0.5, 10)
