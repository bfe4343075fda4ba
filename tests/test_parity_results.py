"""The figures of the SmolLM2 parity result's README, recomputed from its committed record."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

RESULT = (Path(__file__).resolve().parents[1] / "benchmarks" / "results"
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
