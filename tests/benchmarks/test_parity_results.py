"""The figures of the SmolLM2 parity result's README, recomputed from its committed record."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

RESULT = (Path(__file__).resolve().parents[2] / "benchmarks" / "results"
          / "2026-12-07-smollm2-135m-instruct-parity" / "cpu")


def _points() -> dict[tuple[str, int, int, int], dict]:
    doc = json.loads((RESULT / "logits.json").read_text(encoding="utf-8"))
    points = {}
    for rows in doc["files"].values():
        for pid, row in rows.items():
            if not row["identical"] and "fp32" in row:
                key = (pid, row["position"], row["baseline"][0], row["speculative"][0])
                points[key] = row
    return points


def test_the_readme_states_what_the_cpu_logits_record_holds() -> None:
    readme = (RESULT / "README.md").read_text(encoding="utf-8")
    points = _points()
    fp32 = [abs(r["fp32"]["gap"]) for r in points.values()]
    bf16 = [abs(r["bf16"]["gap"]) for r in points.values()]
    ranks = [r["fp32"]["speculative_rank"] for r in points.values()]
    assert f"over the ten files | {len(points)} |" in readme
    assert f"median / largest | {statistics.median(fp32):.4f} / {max(fp32):.4f} nats" in readme
    assert f"largest; exact ties | {max(bf16):.2f} nats; {bf16.count(0.0)} of {len(points)}" \
        in readme
    assert f"first / second / third | {ranks.count(1)} / {ranks.count(2)} / {ranks.count(3)}" \
        in readme
    within = " / ".join(str(sum(g <= t for g in fp32)) for t in (0.1, 0.2, 0.3))
    assert f"within 0.1 / 0.2 / 0.3 nats in float32 | {within} of {len(points)}" in readme


def test_both_first_token_divergences_are_the_near_ties_the_readme_gives() -> None:
    readme = (RESULT / "README.md").read_text(encoding="utf-8")
    first = {k[0]: r for k, r in _points().items() if k[1] == 0}
    assert sorted(first) == ["reasoning-5", "translation-4"]
    english = first["translation-4"]["fp32"]
    assert f"\"English\" −{-english['baseline_logprob']:.4f} against \"I\" " \
           f"−{-english['speculative_logprob']:.4f} in float32" in readme
    assert f"({abs(english['gap']):.4f} nats apart, {abs(first['translation-4']['bf16']['gap'])}"\
           in readme
    when = first["reasoning-5"]
    assert when["bf16"]["gap"] == 0.0
    assert f"\"When\" −{-when['fp32']['speculative_logprob']:.4f} against \"To\" " \
           f"−{-when['fp32']['baseline_logprob']:.4f}" in readme
    assert f"exactly −{-when['bf16']['baseline_logprob']:.4f}" in readme


H100 = RESULT.parent / "h100"


def _parity(pair: str) -> dict:
    doc = json.loads((H100 / pair / "verdict.json").read_text(encoding="utf-8"))
    (claim,) = [c for c in doc["claims"] if c["id"] == "spec.parity"]
    return claim


def test_the_h100_readme_states_what_its_verdicts_hold() -> None:
    readme = (H100 / "README.md").read_text(encoding="utf-8")
    alike = _parity("alike")
    assert alike["status"] == "passed"
    found = alike["details"]
    divergences = found["divergences"]
    prompts = len(found["identical"]) + len({d["prompt_id"] for d in divergences})
    assert f"| {len(found['identical'])} of {prompts} |" in readme
    assert all(d["explained"] for d in divergences)
    assert f"near-tie of the target | {len(divergences)} of {len(divergences)} |" in readme
    widest = max(abs(d["gap"]) for d in divergences)
    assert f"(the baseline's prefill logprobs) | {widest:.3f} nats |" in readme
    margin = found["margin"]
    assert f"measured | {margin['value']:.3f} nats |" in readme
    assert f"were compared | {margin['shifts']:,} |" in readme
    assert f"ranks another first) | {margin['flips']} |" in readme
    assert sorted({round(abs(d["gap"]), 4) for d in divergences}) == [0.0, 0.0625, 0.125, 0.25]
    english = next(d for d in divergences if d["prompt_id"] == "translation-4")
    assert english["position"] == 0
    assert f"\"English\" {english['baseline_logprob']:.3f} and \"I\" " \
           f"{english['speculative_logprob']:.3f}".replace("-", "−") in readme
    view = english["speculative_view"]
    assert f"gives {view[0]:.3f} and {view[1]:.3f}".replace("-", "−") in readme
    when = next(d for d in divergences if d["prompt_id"] == "reasoning-5")
    assert when["position"] == 0
    assert when["gap"] == 0.0
    assert when["speculative_view"][0] == when["speculative_view"][1]


def test_the_unlike_pairs_fail_as_the_readme_says() -> None:
    readme = (H100 / "README.md").read_text(encoding="utf-8")
    dtype = _parity("dtype")
    assert dtype["status"] == "failed"
    assert dtype["details"]["settings"] == [["dtype", "bfloat16", "float16"]]
    divergences = dtype["details"]["divergences"]
    assert all(d["explained"] for d in divergences)
    assert f"| {len(divergences)} of 42, all within " \
           f"{max(abs(d['gap']) for d in divergences):.3f} nats |" in readme
    fp8 = _parity("fp8")
    assert fp8["status"] == "failed"
    assert fp8["details"]["settings"] == [["quantization", "fp8", "None"]]
    beyond = fp8["details"]["margin"]["beyond"]
    widest = max(float(b.split()[0]) for b in beyond)
    assert not any(d["judged"] for d in fp8["details"]["divergences"])
    n = len(fp8["details"]["divergences"])
    assert f"| {n} of 42 |" in readme
    assert f"none of the {n} could be judged" in readme
    assert f"({len(beyond)} times over 1 nat, the widest {widest:.3f} nats)" in readme


def test_every_committed_h100_divergence_is_a_near_tie_by_the_real_engine() -> None:
    readme = (H100 / "README.md").read_text(encoding="utf-8")
    explained = sorted((H100 / "explained").glob("*.json"))
    assert len(explained) == 8
    widest = 0.0
    for path in explained:
        doc = json.loads(path.read_text(encoding="utf-8"))
        assert doc["baseline_answers_identical"] is True
        assert len(doc["divergences"]) == 32
        assert all(d["explained"] for d in doc["divergences"])
        widest = max(widest, *(abs(d["gap"]) for d in doc["divergences"]))
        assert doc["margin"]["value"] == pytest.approx(
            _parity("alike")["details"]["margin"]["value"], abs=1e-6)
    assert f"the widest gap is {widest:.3f} nats" in readme
