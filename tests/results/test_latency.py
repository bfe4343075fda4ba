"""Latency as sglang.bench_serving users read it: TTFT and TPOT mean and p50/p90/p99 per server,
and the speculative server's over the baseline's, in the verdict, the closing block, the
summary and the report, recomputed here from the run's own per-request records (live/results.json),
never from the table under test."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import DEMO_SPEEDUP_GATE, GateRun
from specgate.results import latency
from specgate.results.bench import RequestSample

PERCENTILES = (50, 90, 99)


def _sample(ttft_s: float, e2e_s: float, tokens: int) -> RequestSample:
    return RequestSample(repeat=1, prompt_id="p", category="c", prompt_tokens=10,
                         completion_tokens=tokens, spec_verify_ct=None, ttft_s=ttft_s,
                         e2e_s=e2e_s, server_e2e_s=None, finish_reason="stop", chunks=tokens)


def test_tpot_is_bench_servings_and_leaves_one_token_answers_out() -> None:
    samples = [_sample(0.010, 0.110, 101), _sample(0.020, 0.420, 201), _sample(0.5, 0.5, 1)]
    server = latency.ServerLatency.of(samples)
    # (e2e − ttft) / (output tokens − 1): 100 ms / 100 and 400 ms / 200.
    assert server.tpot_requests == 2
    assert server.tpot_ms is not None
    assert server.tpot_ms["mean"] == pytest.approx(1.5)
    assert server.tpot_ms["p50"] == pytest.approx(1.5)
    assert server.ttft_ms is not None
    assert server.requests == 3
    assert server.ttft_ms["p50"] == pytest.approx(20.0)
    assert server.ttft_ms["p90"] == pytest.approx(20.0 + 0.8 * 480.0)


def _live_samples(results: dict[str, Any], config: str) -> list[dict[str, Any]]:
    samples: list[dict[str, Any]] = results[config]["measurement"]["samples"]
    return samples


def _expected(samples: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    ttft = [1000.0 * s["ttft_s"] for s in samples]
    tpot = [1000.0 * (s["e2e_s"] - s["ttft_s"]) / (s["completion_tokens"] - 1)
            for s in samples if s["completion_tokens"] > 1]
    out = {}
    for name, values in (("ttft_ms", ttft), ("tpot_ms", tpot)):
        out[name] = {"mean": float(np.mean(values)),
                     **{f"p{p}": float(np.percentile(values, p)) for p in PERCENTILES}}
    return out


@pytest.mark.slow
@pytest.mark.xdist_group(DEMO_SPEEDUP_GATE)
def test_a_gate_reports_ttft_and_tpot_per_server(demo_speedup_gate: GateRun) -> None:
    proc = demo_speedup_gate
    assert proc.returncode == 0, proc.stdout + proc.stderr
    reports = proc.reports
    doc = json.loads((reports / "verdict.json").read_text())
    results = json.loads((reports / "live" / "results.json").read_text())
    table = doc["latency"]
    assert table["claim"] == "spec.speedup"
    assert table["concurrency"] == 1
    expected = {}
    for config in ("baseline", "speculative"):
        samples = _live_samples(results, config)
        assert len(samples) >= 21
        server = table["servers"][config]
        assert server["requests"] == len(samples)
        expected[config] = _expected(samples)
        for metric in ("ttft_ms", "tpot_ms"):
            assert server[metric] == pytest.approx(expected[config][metric], rel=1e-9), \
                (config, metric)
    for metric in ("ttft_ms", "tpot_ms"):
        for stat in ("mean", "p50", "p90", "p99"):
            assert table["ratio"][metric][stat] == pytest.approx(
                expected["speculative"][metric][stat] / expected["baseline"][metric][stat])
    # The demo's drafter makes each token quicker: the speculative server's TPOT is below the
    # baseline's at the median.
    assert table["ratio"]["tpot_ms"]["p50"] < 1.0

    block = proc.stdout[proc.stdout.index("= specgate verdict ="):]
    (ttft_line,) = [line for line in block.splitlines() if "TTFT p50/p90/p99" in line]
    (tpot_line,) = [line for line in block.splitlines() if "TPOT p50/p90/p99" in line]
    p50 = expected["baseline"]["tpot_ms"]["p50"]
    # Three significant figures, to the millisecond from 100 ms.
    digits = 0 if p50 >= 100 else 1 if p50 >= 10 else 2 if p50 >= 1 else 3
    assert f"baseline {p50:.{digits}f}/" in tpot_line, tpot_line
    ratio = expected["speculative"]["ttft_ms"]["p99"] / expected["baseline"]["ttft_ms"]["p99"]
    assert ttft_line.rstrip().endswith(f"/{ratio:.2f}"), ttft_line

    speedup = next(c for c in doc["claims"] if c["id"] == "spec.speedup")
    assert "latency per request as sglang.bench_serving reports it" in speedup["message"]
    assert tpot_line.split("TPOT p50/p90/p99", 1)[1].strip() in speedup["message"]

    # The report's overview (environment.properties) and the job summary show the same lines.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SPECGATE_"))}
    done = subprocess.run([sys.executable, "-m", "specgate.cli", "summary"],
                          cwd=proc.reports.parent, env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert tpot_line.split("TPOT p50/p90/p99", 1)[1].strip() in done.stdout
    properties = _properties((reports / "allure-results" / "environment.properties").read_text())
    for line in (ttft_line, tpot_line):
        label, text = line.strip().split("  ", 1)
        assert properties[label] == text.strip(), (label, properties.get(label))


def _unescape(text: str) -> str:
    return re.sub(r"\\u([0-9a-fA-F]{4})|\\(.)",
                  lambda m: chr(int(m.group(1), 16)) if m.group(1) else m.group(2), text)


def _properties(text: str) -> dict[str, str]:
    """environment.properties as Java reads it (the escapes the report's writer uses)."""
    pairs = (re.split(r"(?<!\\)=", line, maxsplit=1) for line in text.splitlines() if line)
    return {_unescape(key): _unescape(value) for key, value in pairs}


def test_compare_puts_both_runs_latency_side_by_side(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from specgate.cli import main

    def verdict(run_id: str, spec_ttft: list[float]) -> Path:
        base = [_sample(0.010, 0.110, 101), _sample(0.012, 0.212, 101)]
        spec = [_sample(t, t + 0.060, 101) for t in spec_ttft]
        doc = {"outcome": "passed", "run": {"id": run_id}, "claims": [],
               "latency": latency.table(spec, base, 1)}
        path = tmp_path / f"{run_id}.json"
        path.write_text(json.dumps(doc))
        return path

    a, b = verdict("run-a", [0.011, 0.013]), verdict("run-b", [0.022, 0.026])
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    (row,) = [line for line in out.splitlines() if line.startswith("TTFT speculative")]
    a_p = [float(np.percentile([11.0, 13.0], p)) for p in PERCENTILES]
    b_p = [float(np.percentile([22.0, 26.0], p)) for p in PERCENTILES]
    assert row.split()[2:] == ["/".join(f"{v:.3g}" for v in a_p),
                               "/".join(f"{v:.3g}" for v in b_p),
                               "/".join(f"{y / x:.2f}" for x, y in zip(a_p, b_p, strict=True))]
    (base_row,) = [line for line in out.splitlines() if line.startswith("TTFT baseline")]
    assert base_row.split()[-1] == "1.00/1.00/1.00"
