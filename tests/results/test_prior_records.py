"""The launch-spread priors against the committed launch records they are taken from.

Every group of specgate/results/drift.py's prior tables is read again from the JSON committed
under benchmarks/results/ (launch records, verdicts, a tune, a variance run), launch by launch, and
every class's pooled spread is computed again from those values by hand: a launch changed in a
table or in a record fails here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specgate.results import drift

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"

Pointer = tuple[str | int, ...]
# "*" walks every item of a list; "id=X" picks the item of a list whose "id" is X.
BASELINE: Pointer = ("claims", "id=perf.baseline_tps", "details", "tps", "mean")
CYCLE: Pointer = ("claims", "id=spec.breakeven", "details", "cycle_ms")


def _launches(target: str, figure: str) -> Pointer:
    return ("targets", target, "launches", "*", figure)


# (figure, group) -> where each launch of the group is recorded, in the table's order.
SOURCES: dict[tuple[str, str], list[tuple[str, Pointer]]] = {
    ("tps", "tiny-llama-4l, CUDA graphs"): [
        ("2026-11-30-h200-tiny-llama-4l/drafter-129k/train-probe-s5-k1-d6/verdict.json", BASELINE),
        ("2026-11-30-h200-tiny-llama-4l/drafter-129k/probe-s5-k1-d6-repeat/verdict.json",
         BASELINE),
        ("2026-11-30-h200-tiny-llama-4l/drafter-507k-a/tune-s1-s6/tune.json",
         ("baseline", "measurement", "stats", "tps", "mean")),
        ("2026-11-30-h200-tiny-llama-4l/drafter-507k-b/probe-s10-k1-d11/verdict.json", BASELINE),
        ("2026-11-30-h200-tiny-llama-4l/no-deep-gemm/probe-s3-k1-d4/verdict.json", BASELINE),
    ],
    ("tps", "tiny-llama-4l, eager"): [
        *((f"2026-11-30-h200-tiny-llama-4l-eager/suite-launch-attach-faults/verdicts/{run}.json",
           BASELINE) for run in ("a_launch", "b_attach", "c_port_taken", "c_wrong_flag")),
        ("2026-11-30-h200-tiny-llama-4l-eager/drafter-43k-train-probe-s3-k1-d4/verdict.json",
         BASELINE),
    ],
    ("tps", "tiny-llama-64l, CUDA graphs"): [
        (f"2026-12-01-h200-tiny-llama-64l/{probe}/verdict.json", BASELINE) for probe in (
            "drafter-91k/probe-s10-k1-d11", "drafter-304k/probe-s6-k1-d7",
            "drafter-304k/probe-s10-k1-d11", "drafter-1291k/probe-s10-k1-d11",
            "drafter-1291k/probe-s10-k1-d11-repeat")
    ],
    ("tps", "SmolLM2-135M-Instruct, 14 prompts"): [
        ("2026-12-01-h200-smollm2-135m-instruct/launch-variance/variance.json", (i, "tps"))
        for i in (1, 2, 3)  # baseline-1, -2 and -3; entry 0 is the generation server
    ],
    ("tps", "SmolLM2-135M-Instruct, 42 prompts"): [
        (f"2026-12-01-h200-smollm2-135m-instruct/probe-trained-{i}/verdict.json", BASELINE)
        for i in (1, 2)
    ],
    ("tps", "SmolLM2-135M-Instruct, 16 requests"): [
        ("2026-12-03-h200-launch-spread/random-weights/launches.json",
         ("smol", "*", "median_tok_s")),
    ],
    ("tps", "SmolLM2-135M-Instruct, launch records"): [
        ("2026-12-03-h200-launch-spread/launch-records/launch-records.json",
         _launches("smollm2-135m-instruct", "median_tok_s")),
    ],
    ("tps", "Llama-3.2-1B shapes, dummy weights"): [
        ("2026-12-03-h200-launch-spread/launch-records/launch-records.json",
         _launches("llama1b-shapes", "median_tok_s")),
    ],
    ("cycle_ms", "tiny-llama-4l, 129k drafter, s5-k1-d6"): [
        ("2026-11-30-h200-tiny-llama-4l/drafter-129k/train-probe-s5-k1-d6/verdict.json", CYCLE),
        ("2026-11-30-h200-tiny-llama-4l/drafter-129k/probe-s5-k1-d6-repeat/verdict.json", CYCLE),
    ],
    ("cycle_ms", "tiny-llama-4l, 507k-a drafter, s6-k1-d7"): [
        ("2026-11-30-h200-tiny-llama-4l/drafter-507k-a/probe-s6-k1-d7/verdict.json", CYCLE),
        ("2026-11-30-h200-tiny-llama-4l/drafter-507k-a/probe-s6-k1-d7-repeat/verdict.json", CYCLE),
    ],
    ("cycle_ms", "tiny-llama-64l, 1291k drafter, s10-k1-d11"): [
        ("2026-12-01-h200-tiny-llama-64l/drafter-1291k/probe-s10-k1-d11/verdict.json", CYCLE),
        ("2026-12-01-h200-tiny-llama-64l/drafter-1291k/probe-s10-k1-d11-repeat/verdict.json",
         CYCLE),
    ],
    ("cycle_ms", "SmolLM2-135M-Instruct, trained drafter, s3-k1-d4"): [
        (f"2026-12-01-h200-smollm2-135m-instruct/probe-trained-{i}/verdict.json", CYCLE)
        for i in (1, 2)
    ],
}
H100_RUN = "2026-12-07-h100-llama8b-shapes-launches"
GPU_BOUND_SOURCES: dict[tuple[str, str], list[tuple[str, Pointer]]] = {
    ("tps", "H200: Llama-3-8B shapes, dummy weights"): [
        ("2026-12-03-h200-llama-shapes-dummy/launch-records/launch-records-llama8b-shapes.json",
         _launches("llama8b-shapes", "median_tok_s")),
    ],
    ("tps", "H200: Llama-3-8B shapes, random weights"): [
        ("2026-12-03-h200-launch-spread/random-weights/launches.json",
         ("big", "*", "median_tok_s")),
    ],
    ("cycle_ms", "H200: Llama-3-8B shapes, gpu_bound.py drafter, s3-k1-d4"): [
        (f"2026-12-03-h200-launch-spread/verify-cycle/launch-records-{i}.json",
         _launches("llama8b-shapes-eagle3", "median_cycle_ms")) for i in (1, 2)
    ],
    ("tps", "H100: Llama-3-8B shapes, gpu_bound.py target, alternating"): [
        (f"{H100_RUN}/alternating-6-and-5/launch-records.json",
         _launches("llama8b-shapes-target", "median_tok_s")),
    ],
    ("cycle_ms", "H100: Llama-3-8B shapes, gpu_bound.py drafter, s3-k1-d4, alternating"): [
        (f"{H100_RUN}/alternating-6-and-5/launch-records.json",
         _launches("llama8b-shapes-eagle3", "median_cycle_ms")),
    ],
    ("cycle_ms", "H100: Llama-3-8B shapes, gpu_bound.py drafter, s3-k1-d4, 3 launches"): [
        (f"{H100_RUN}/eagle3-3-launches/launch-records.json",
         _launches("llama8b-shapes-eagle3", "median_cycle_ms")),
    ],
}
# The GPU each GPU-bound record ran on, as its folder names it.
GPU_OF_FOLDER = {"-h200-": "H200", "-h100-": "H100"}
TABLES = {"host-bound": (drift.PRIOR_LAUNCHES, SOURCES),
          "GPU-bound": (drift.GPU_BOUND_LAUNCHES, GPU_BOUND_SOURCES)}


def _walk(node: Any, pointer: Pointer) -> Iterator[Any]:
    if not pointer:
        yield node
        return
    step, rest = pointer[0], pointer[1:]
    if step == "*":
        for item in node:
            yield from _walk(item, rest)
    elif isinstance(step, str) and step.startswith("id="):
        (item,) = [x for x in node if x.get("id") == step[3:]]
        yield from _walk(item, rest)
    else:
        yield from _walk(node[step], rest)


def recorded(sources: list[tuple[str, Pointer]], root: Path = RESULTS) -> list[float]:
    """Every launch's figure, read from the committed files in order."""
    values: list[float] = []
    for path, pointer in sources:
        doc = json.loads((root / path).read_text(encoding="utf-8"))
        values.extend(float(v) for v in _walk(doc, pointer))
    return values


def _decimals(value: float) -> int:
    text = repr(value)
    return len(text.split(".")[1]) if "." in text else 0


def _pooled_by_hand(groups: list[list[float]]) -> tuple[float, int, int]:
    squares, df, launches = 0.0, 0, 0
    for values in groups:
        logs = [math.log(v) for v in values]
        mean = sum(logs) / len(logs)
        squares += sum((x - mean) ** 2 for x in logs)
        df += len(logs) - 1
        launches += len(logs)
    return math.sqrt(squares / df), df, launches


@pytest.mark.parametrize("pool", sorted(TABLES))
def test_every_group_of_the_prior_tables_names_its_records(pool: str) -> None:
    table, sources = TABLES[pool]
    assert {(f, g) for f, named in table.items() for g in named} == set(sources)


@pytest.mark.parametrize(("pool", "figure", "group"), [
    (pool, figure, group) for pool, (_, sources) in sorted(TABLES.items())
    for figure, group in sources])
def test_every_launch_of_a_prior_group_is_the_committed_records(
        pool: str, figure: str, group: str) -> None:
    table, sources = TABLES[pool]
    values = recorded(sources[(figure, group)])
    listed = table[figure][group]
    assert len(values) == len(listed), f"{group}: {len(values)} launches recorded"
    assert _as_listed(values, listed) == list(listed)


def _as_listed(values: list[float], listed: tuple[float, ...]) -> list[float]:
    """The recorded values rounded to the decimals the table writes each launch with."""
    return [round(v, _decimals(t)) for v, t in zip(values, listed, strict=True)]


def _gpu_of(sources: list[tuple[str, Pointer]]) -> str:
    (gpu,) = {GPU_OF_FOLDER[mark] for path, _ in sources for mark in GPU_OF_FOLDER
              if mark in path.split("/")[0]}
    return gpu


def _by_gpu(figure: str) -> dict[str, list[list[float]]]:
    out: dict[str, list[list[float]]] = {}
    for (f, _), where in GPU_BOUND_SOURCES.items():
        if f == figure:
            out.setdefault(_gpu_of(where), []).append(recorded(where))
    return out


def test_each_gpu_bound_group_is_filed_under_the_gpu_its_records_ran_on() -> None:
    for (figure, group), where in GPU_BOUND_SOURCES.items():
        gpu, name = group.split(": ", 1)
        assert gpu == _gpu_of(where)
        assert name in drift.GPU_BOUND_BY_GPU[gpu][figure]


def _f_sf_by_hand(f: float, d1: int, d2: int, steps: int = 20000) -> float:
    """P(F > f): the F density integrated from f outwards by the midpoint rule on t = 1/(1+x)."""
    log_c = (math.lgamma((d1 + d2) / 2) - math.lgamma(d1 / 2) - math.lgamma(d2 / 2)
             + d1 / 2 * math.log(d1 / d2))

    def density(x: float) -> float:
        return math.exp(log_c + (d1 / 2 - 1) * math.log(x)
                        - (d1 + d2) / 2 * math.log1p(d1 * x / d2))

    top = 1.0 / (1.0 + f)  # x from f to ∞ is t from 1/(1+f) to 0, dx = dt / t²
    width = top / steps
    return sum(density(1.0 / t - 1.0) / t**2 * width
               for t in ((i + 0.5) * width for i in range(steps)))


@pytest.mark.parametrize("figure", ["tps", "cycle_ms"])
def test_the_gpu_kinds_are_taken_apart_only_where_the_f_test_of_their_records_says(
        figure: str) -> None:
    spreads = {gpu: _pooled_by_hand(groups) for gpu, groups in _by_gpu(figure).items()}
    (wide, (sd_w, df_w, _)), (narrow, (sd_n, df_n, _)) = sorted(
        spreads.items(), key=lambda kv: -kv[1][0])
    f = sd_w**2 / sd_n**2
    p = min(1.0, 2 * _f_sf_by_hand(f, df_w, df_n))
    test = drift.kind_test(figure)
    assert test is not None
    assert (test.wide, test.narrow, test.df_wide, test.df_narrow) == (wide, narrow, df_w, df_n)
    assert test.f == pytest.approx(f, rel=1e-9)
    assert test.p == pytest.approx(p, rel=1e-3)
    assert test.split == (p < 0.05)
    for gpu in spreads:
        prior = drift.prior(figure, "GPU-bound", f"NVIDIA {gpu}")
        groups = _by_gpu(figure)[gpu] if test.split else \
            [g for groups in _by_gpu(figure).values() for g in groups]
        sd, df, launches = _pooled_by_hand(groups)
        assert (prior.prior, prior.gpu, prior.stand_in) == (
            "GPU-bound", gpu if test.split else "", False)
        assert (prior.df, prior.prior_launches) == (df, launches)
        assert prior.sd == pytest.approx(sd, rel=1e-4)


@pytest.mark.parametrize("figure", ["tps", "cycle_ms"])
def test_a_gpu_of_a_kind_not_measured_takes_the_widest_kinds_prior_where_kinds_differ(
        figure: str) -> None:
    prior = drift.prior(figure, "GPU-bound", "NVIDIA RTX PRO 6000 Blackwell Server Edition")
    spreads = {gpu: _pooled_by_hand(groups)[0] for gpu, groups in _by_gpu(figure).items()}
    test = drift.kind_test(figure)
    assert test is not None
    if test.split:
        assert (prior.gpu, prior.stand_in) == (max(spreads, key=spreads.__getitem__), True)
        assert prior.sd == pytest.approx(max(spreads.values()), rel=1e-4)
        assert "none of this GPU's kind" in prior.describe()
    else:  # pooled: every kind's launches, the one prior every GPU takes
        assert (prior.gpu, prior.stand_in) == ("", False)
        assert prior == drift.prior(figure, "GPU-bound", "NVIDIA H200")


def test_the_host_bound_prior_is_the_pooled_spread_of_its_records() -> None:
    for figure in ("tps", "cycle_ms"):
        groups = [recorded(where) for (f, _), where in SOURCES.items() if f == figure]
        sd, df, launches = _pooled_by_hand(groups)
        prior = drift.prior(figure, "host-bound")
        assert prior.prior == "host-bound"
        assert (prior.df, prior.prior_launches) == (df, launches)
        assert prior.sd == pytest.approx(sd, rel=1e-4)


def test_a_changed_launch_in_a_record_is_seen(tmp_path: Path) -> None:
    (path, pointer), = GPU_BOUND_SOURCES[("tps", "H200: Llama-3-8B shapes, random weights")]
    doc = json.loads((RESULTS / path).read_text(encoding="utf-8"))
    doc["big"][2]["median_tok_s"] = 216.8
    (tmp_path / path).parent.mkdir(parents=True)
    (tmp_path / path).write_text(json.dumps(doc), encoding="utf-8")
    changed = recorded([(path, pointer)], root=tmp_path)
    listed = drift.GPU_BOUND_BY_GPU["H200"]["tps"]["Llama-3-8B shapes, random weights"]
    assert _as_listed(recorded([(path, pointer)]), listed) == list(listed)
    assert _as_listed(changed, listed) != list(listed)


@pytest.mark.parametrize("figure", ["tps", "cycle_ms"])
def test_docs_state_the_f_test_of_each_figure_as_the_records_give_it(figure: str) -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "claims.md").read_text("utf-8")
    section = docs[docs.index("**Priors by GPU kind.**"):]
    section = section[:section.index("\n\n", section.index("| figure | H200 | H100 |"))]
    test = drift.kind_test(figure)
    assert test is not None
    start = {"tps": "| baseline tok/s |", "cycle_ms": "| verify cycle |"}[figure]
    (row,) = [line for line in section.splitlines() if line.startswith(start)]
    said = f"F = {test.f:.3g} on {test.df_wide} and {test.df_narrow}, p = {test.p:.2g}"
    assert said in row, (said, row)
    assert row.endswith("| by kind |") if test.split else "| pooled: " in row
    for gpu in ("H200", "H100"):
        sd, df, _, _ = drift.pooled_sd(drift.GPU_BOUND_BY_GPU[gpu][figure].values())
        assert f"{sd * 100:.2f} % ({df} df" in row, (gpu, row)
