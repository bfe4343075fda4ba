"""The report's PNG charts: real PNGs of a readable size, and clear errors for bad input."""

from __future__ import annotations

import io
import struct
import sys
from collections.abc import Callable

import numpy as np
import pytest
from matplotlib import image as mpimg

from specgate.plot import figures as plots

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _size(png: bytes) -> tuple[int, int]:
    assert png[:8] == PNG_SIGNATURE
    assert png[12:16] == b"IHDR"
    width, height = struct.unpack(">II", png[16:24])
    return width, height


CHARTS: dict[str, Callable[[], bytes]] = {
    "tps_repeats": lambda: plots.tps_repeats([82.1, 81.5, 82.6], [60.2, 59.1, 61.0],
                                             (80.9, 83.2), (58.0, 62.2)),
    "accept_per_prompt": lambda: plots.accept_per_prompt(
        [2.1, 1.8, 2.6, 1.5], ["p0", "p1", "p2", "p3"], ["code", "code", "chat", "math"]),
    "accept_per_category": lambda: plots.accept_per_category({"code": 2.1, "chat": 1.9}),
    "breakeven_chart": lambda: plots.breakeven_chart(30.0, 82.0, 1.9, 60.2, [150.0, 200.0]),
    "per_position_acceptance": lambda: plots.per_position_acceptance([0.75, 0.52, 0.31]),
}


@pytest.mark.parametrize("name", sorted(CHARTS))
def test_chart_is_a_png_of_a_readable_size(name: str) -> None:
    png = CHARTS[name]()
    width, height = _size(png)
    assert 500 <= width <= 1400
    assert 250 <= height <= 2400
    # A blank canvas of that size compresses to a few kB; drawn text and marks take more.
    assert len(png) > 10_000
    pixels = _decode(png)
    assert pixels.shape[:2] == (height, width)
    ink = (pixels[..., :3] < 0.9).any(axis=-1).mean()
    assert 0.01 < ink < 0.9, ink  # axes, text and marks, on a mostly white page
    # The data marks are coloured (text and axes are grey): some saturated pixels must exist.
    assert _coloured(pixels) > 200, name


def _decode(png: bytes) -> np.ndarray:  # type: ignore[type-arg]
    return np.asarray(mpimg.imread(io.BytesIO(png), format="png"))


def _coloured(pixels: np.ndarray) -> int:  # type: ignore[type-arg]
    rgb = pixels[..., :3]
    return int(((rgb.max(axis=-1) - rgb.min(axis=-1)) > 0.25).sum())


def test_charts_do_not_touch_pyplot_state() -> None:
    CHARTS["breakeven_chart"]()
    pyplot = sys.modules.get("matplotlib.pyplot")
    assert pyplot is None or pyplot.get_fignums() == []


def test_breakeven_chart_without_a_measured_tps_predicts_one() -> None:
    _size(plots.breakeven_chart(30.0, 82.0, 3.1, None, []))


def test_breakeven_chart_rejects_a_zero_cycle() -> None:
    with pytest.raises(ValueError, match="cycle_ms must be > 0"):
        plots.breakeven_chart(0.0, 82.0, 1.9, None, [150.0])


def test_accept_per_prompt_rejects_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="one of each per prompt"):
        plots.accept_per_prompt([2.0, 1.0], ["a"], ["x", "y"])


def test_many_prompts_stay_a_bounded_image() -> None:
    n = 120
    png = plots.accept_per_prompt([1.0 + (i % 25) / 10 for i in range(n)],
                                  [f"prompt {i}" for i in range(n)],
                                  [("code", "chat", "math")[i % 3] for i in range(n)])
    _, height = _size(png)
    assert height <= 20 * 110 + 1


@pytest.mark.parametrize("make", [
    lambda: plots.tps_repeats([], [], None, None),
    lambda: plots.accept_per_prompt([], [], []),
    lambda: plots.accept_per_category({}),
    lambda: plots.per_position_acceptance([]),
])
def test_empty_input_still_draws(make: Callable[[], bytes]) -> None:
    png = make()
    width, height = _size(png)
    pixels = _decode(png)
    assert pixels.shape[:2] == (height, width)
    # Axes and a title are drawn even without data: the page is not blank.
    assert (pixels[..., :3] < 0.9).any(axis=-1).mean() > 0.001
