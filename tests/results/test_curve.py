"""Tests for specgate.results.curve: the crossover from each level's paired speed-up."""

import math

import pytest

from specgate.results import curve
from specgate.results.stats import Summary


def _point(level: int, mean: float, half: float = 0.05) -> curve.LevelPoint:
    s = Summary(20, mean, 0.1, 0.1, mean - half, mean + half, 0.95, 19.0)
    return curve.LevelPoint(level, s, s)


def test_pays_up_to_the_last_paying_level_and_stops_at_the_next():
    found = curve.crossover([_point(1, 1.5), _point(4, 1.2), _point(16, 0.9)])
    assert (found.pays_up_to, found.stops_at) == (4, 16)
    # log2-linear between 4 (1.2) and 16 (0.9): 1 is two thirds of the way, at 2^(2 + 4/3).
    assert found.estimate == pytest.approx(2 ** (2 + 4 / 3))
    assert "pays up to 4 in flight and stops paying by 16, where it is slower" in found.text


def test_an_interval_that_holds_1_stops_the_paying_levels():
    found = curve.crossover([_point(1, 1.5), _point(4, 1.02), _point(16, 0.8)])
    assert (found.pays_up_to, found.stops_at) == (1, 4)
    assert "is not shown faster" in found.text
    assert 4 < found.estimate < 16  # the point estimates still cross between 4 and 16


def test_a_drafter_that_pays_everywhere_or_nowhere():
    everywhere = curve.crossover([_point(1, 1.5), _point(8, 1.3)])
    assert (everywhere.pays_up_to, everywhere.stops_at, everywhere.estimate) == (8, None, None)
    assert "pays at every measured level, up to 8" in everywhere.text
    nowhere = curve.crossover([_point(1, 0.8), _point(8, 0.6)])
    assert (nowhere.pays_up_to, nowhere.stops_at) == (None, 1)
    assert "does not pay even at 1 in flight" in nowhere.text


def test_a_curve_that_pays_again_says_so():
    found = curve.crossover([_point(1, 1.5), _point(4, 0.9), _point(16, 1.3)])
    assert (found.pays_up_to, found.stops_at, found.pays_again) == (1, 4, (16,))
    assert "pays again at 16" in found.text


def test_unmeasured_levels_are_left_out_and_shown():
    missing = curve.LevelPoint(16, None, None, why="stalled")
    found = curve.crossover([_point(1, 1.5), _point(4, 1.2), missing])
    assert (found.pays_up_to, found.stops_at) == (4, None)
    assert missing.verdict() == "unmeasured"
    assert missing.to_json()["why"] == "stalled"
    assert curve.crossover([missing]).text == "no level has a speed-up with an interval"
    no_interval = curve.LevelPoint(2, Summary(1, 1.2, math.nan, math.nan, math.nan, math.nan,
                                              0.95), None)
    assert no_interval.verdict() == "unmeasured"
