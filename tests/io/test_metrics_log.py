"""Metrics logs: JSONL and CSV read to the same rows; errors name the file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specgate.core.errors import DataError
from specgate.io.metrics_log import read_metrics

rows = st.lists(st.tuples(st.integers(0, 20), st.integers(0, 10**6),
                          st.floats(0, 30, allow_nan=False), st.floats(0, 1)),
                min_size=1, max_size=20)


@given(rows)
@settings(max_examples=50, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                             HealthCheck.too_slow])
def test_jsonl_and_csv_read_to_the_same_rows(tmp_path: Path,
                                             records: list[tuple[int, int, float, float]]) -> None:
    jsonl, csv = tmp_path / "m.jsonl", tmp_path / "m.csv"
    jsonl.write_text("".join(json.dumps({"epoch": e, "step": s, "loss": lo, "accuracy": a,
                                         "lr": 1e-4}) + "\n" for e, s, lo, a in records))
    csv.write_text("epoch,step,loss,accuracy,lr\n" + "".join(
        f"{e},{s},{lo!r},{a!r},0.0001\n" for e, s, lo, a in records))
    a, b = read_metrics(jsonl), read_metrics(csv)
    assert [(r.epoch, r.step, r.loss, r.accuracy) for r in a.rows] == \
           [(r.epoch, r.step, r.loss, r.accuracy) for r in b.rows]
    last = {}
    for e, _, _, acc in records:
        last[e] = acc
    assert a.accuracy_by_epoch() == last
    assert a.first_loss() is not None
    assert a.first_loss().loss == records[0][2]  # type: ignore[union-attr]


def test_rows_may_carry_only_loss_or_only_accuracy(tmp_path: Path) -> None:
    log = tmp_path / "m.jsonl"
    log.write_text('{"epoch": 0, "step": 1, "accuracy": 0.2}\n\n'
                   '{"epoch": 0.5, "step": 2, "loss": 9.1}\n')
    parsed = read_metrics(log)
    first = parsed.first_loss()
    assert first is not None
    assert (first.loss, first.line) == (9.1, 3)
    assert parsed.accuracy_by_epoch() == {0: 0.2}


@pytest.mark.parametrize(("name", "text", "match"), [
    ("m.jsonl", '{"epoch": 0, "step": 0, "loss": 1}\n{"epoch": 0, "step": 1, "loss": }\n',
     r"m\.jsonl:2: not valid JSON"),
    ("m.jsonl", '{"step": 0, "loss": 1}\n', r"m\.jsonl:1: record lacks 'epoch'"),
    ("m.jsonl", '{"epoch": 0, "step": 0, "accuracy": 38}\n', r"0\.38 for 38 %"),
    ("m.jsonl", '{"epoch": 0, "step": 0, "loss": "high"}\n', r"loss is 'high'"),
    ("m.jsonl", '{"epoch": 0, "step": 0}\n', "neither 'loss' nor 'accuracy'"),
    ("m.csv", "loss,accuracy\n1,0.1\n", r"m\.csv:1: the CSV header .* lacks epoch, step"),
    ("m.csv", "epoch,step,loss\n0,0,1\n0,1,x\n", r"m\.csv:3: loss is 'x'"),
    ("m.jsonl", "", "holds no records"),
    ("m.jsonl", "[1, 2]\n", "expected an object"),
])
def test_errors_name_file_and_line(tmp_path: Path, name: str, text: str, match: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(DataError, match=match):
        read_metrics(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not found"):
        read_metrics(tmp_path / "nope.jsonl")


def _steps_log(path: Path, steps_by_epoch: dict[int, range]) -> Path:
    path.write_text("".join(json.dumps({"epoch": e, "step": s, "accuracy": 0.5}) + "\n"
                            for e, steps in steps_by_epoch.items() for s in steps))
    return path


def test_an_epoch_is_finished_once_a_later_one_appears_or_it_spans_a_whole_epoch(
        tmp_path: Path) -> None:
    running = _steps_log(tmp_path / "a.jsonl", {0: range(0, 100, 10), 1: range(100, 140, 10)})
    assert read_metrics(running).finished_epochs() == {0}
    done = _steps_log(tmp_path / "b.jsonl", {0: range(0, 100, 10), 1: range(100, 200, 10)})
    assert read_metrics(done).finished_epochs() == {0, 1}
    one_row_per_epoch = _steps_log(tmp_path / "c.jsonl", {0: range(0, 1), 1: range(1000, 1001)})
    assert read_metrics(one_row_per_epoch).finished_epochs() == {0, 1}
    single = _steps_log(tmp_path / "d.jsonl", {0: range(0, 100, 10)})
    assert read_metrics(single).finished_epochs() == set()


@given(st.lists(st.integers(1, 30), min_size=1, max_size=8), st.integers(0, 30))
@settings(max_examples=50, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                             HealthCheck.too_slow])
def test_every_epoch_before_the_last_is_finished(tmp_path: Path, widths: list[int],
                                                 last_width: int) -> None:
    steps, start = {}, 0
    for e, w in enumerate([*widths, last_width]):
        steps[e] = range(start, start + w + 1)
        start += w + 1
    log = read_metrics(_steps_log(tmp_path / "m.jsonl", steps))
    last = len(widths)
    assert set(range(last)) <= log.finished_epochs()
    assert (last in log.finished_epochs()) == (last_width >= widths[-1])
