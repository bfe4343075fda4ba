"""Baseline reuse (specgate.measure.reuse and run_live's use of it)."""

import json
import sys

from specgate.core.profile import parse_profile
from specgate.measure import bench, live, reuse
from specgate.measure.prompts import template_named


def _profile(tmp_path, *, env=None, bench_section=None, max_age=24.0):
    target, draft = tmp_path / "target", tmp_path / "draft"
    target.mkdir(exist_ok=True)
    draft.mkdir(exist_ok=True)
    if not (target / "config.json").exists():
        (target / "config.json").write_text(json.dumps({"hidden_size": 64}))
    raw = {"name": "reuse-test", "target": {"path": str(target)}, "drafter": {"path": str(draft)},
           "server": {"launcher": [sys.executable, "-m", "specgate.testing.simulator"],
                      "port": 0, "env": env or {"NCCL_PROTO": "Simple"}},
           "bench": {"max_new_tokens": 32, **({"baseline_max_age_h": max_age} if max_age else {}),
                     **(bench_section or {})}}
    return parse_profile(raw, source=tmp_path / "p.toml")


def test_fingerprint_follows_what_decides_the_baseline(tmp_path):
    fp = reuse.fingerprint(_profile(tmp_path)).id
    assert reuse.fingerprint(_profile(tmp_path)).id == fp  # stable
    assert reuse.fingerprint(_profile(tmp_path, env={"NCCL_PROTO": "LL"})).id != fp
    assert reuse.fingerprint(_profile(tmp_path, bench_section={"max_new_tokens": 64})).id != fp
    (tmp_path / "target" / "config.json").write_text(json.dumps({"hidden_size": 128}))
    assert reuse.fingerprint(_profile(tmp_path)).id != fp
    # the API key's value never reaches the fingerprint
    p = _profile(tmp_path, env={"HF_TOKEN": "hf_secretvalue123"})
    assert "hf_secretvalue123" not in json.dumps(reuse.fingerprint(p).components)


def test_find_respects_the_age_bound(tmp_path):
    fp = reuse.fingerprint(_profile(tmp_path))
    run = {"config": "baseline", "measurement": {"x": 1}, "failure": None}
    reuse.save(tmp_path / "reports", fp, run, now=1000.0)
    young = reuse.find(tmp_path / "reports", fp, 24.0, now=1000.0 + 23 * 3600)
    assert isinstance(young, reuse.Stored)
    assert abs(young.age_h - 23) < 1e-6
    old = reuse.find(tmp_path / "reports", fp, 24.0, now=1000.0 + 25 * 3600)
    assert isinstance(old, str)
    assert "older than" in old
    other = reuse.fingerprint(_profile(tmp_path, env={"NCCL_PROTO": "LL"}))
    assert "no stored baseline" in reuse.find(tmp_path / "reports", other, 24.0)


def test_recheck_names_each_disagreement():
    stored = {"model_path": "/m", "version": "0.5.17", "tp_size": 1}
    agreed, problems = reuse.recheck(stored, dict(stored))
    assert agreed == stored
    assert problems == []
    agreed, problems = reuse.recheck(stored, {**stored, "version": "0.5.18"})
    assert len(problems) == 1
    assert "version" in problems[0]
    assert "0.5.18" in problems[0]


def _measurement(config):
    samples = [bench.RequestSample(repeat=1, prompt_id=f"p{i}", category="c", prompt_tokens=5,
                                   completion_tokens=20 + i, spec_verify_ct=None, ttft_s=0.01,
                                   e2e_s=0.1 + 0.01 * i, server_e2e_s=None, finish_reason="stop",
                                   chunks=20) for i in range(3)]
    return bench.build_measurement(config=config, url="http://x", bench=_profile_bench(),
                                   template=template_named("plain", "test"), samples=samples)


def _profile_bench():
    from specgate.core.profile import BenchSection
    return BenchSection()


def test_run_live_reuses_then_remeasures_on_drift(tmp_path, monkeypatch):
    profile = _profile(tmp_path)
    calls = []
    version = {"v": "0.5.17"}

    def fake_run_config(prof, config, reports_dir, *, baseline=None, progress=None,
                        keep_going=None):
        calls.append(config)
        info = {"model_path": "/m", "version": version["v"], "tp_size": 1}
        return live.ConfigRun(config=config, server_info=info, measurement=_measurement(config))

    monkeypatch.setattr(live, "run_config", fake_run_config)
    first = live.run_live(profile, tmp_path / "reports")
    assert calls == ["baseline", "speculative"]
    assert first.baseline.reuse["reused"] is False
    calls.clear()
    second = live.run_live(profile, tmp_path / "reports")
    assert calls == ["speculative"]  # one launch
    assert second.baseline.reuse["reused"] is True
    assert second.baseline.measurement.stats["tps"].mean == first.baseline.measurement.stats[
        "tps"].mean
    facts = live.server_facts(tmp_path / "reports")
    assert facts["baseline_reuse"]["reused"] is True
    assert facts["chat_template"] == {"name": "plain", "source": "test",
                                      "digest": template_named("plain", "test").digest}
    calls.clear()
    version["v"] = "0.5.18"  # the server was upgraded: the stored baseline must not be used
    third = live.run_live(profile, tmp_path / "reports")
    assert calls == ["speculative", "baseline"]
    assert third.baseline.reuse["reused"] is False
    assert "version" in third.baseline.reuse["why"]
    calls.clear()
    live.run_live(_profile(tmp_path, max_age=None), tmp_path / "reports")
    assert calls == ["baseline", "speculative"]  # the policy is off: always fresh


def test_a_baseline_stored_by_another_specgate_is_measured_again(tmp_path):
    fp = reuse.fingerprint(_profile(tmp_path))
    run = {"config": "baseline", "measurement": {"x": 1}, "failure": None}
    path = reuse.save(tmp_path / "reports", fp, run, now=1000.0)
    doc = json.loads(path.read_text())
    doc["schema"] = reuse.SCHEMA + 1
    path.write_text(json.dumps(doc))
    found = reuse.find(tmp_path / "reports", fp, 24.0, now=1000.0 + 3600)
    assert isinstance(found, str)
    assert "another specgate" in found


def test_a_reused_baseline_is_judged_at_the_reusing_runs_confidence():
    from specgate.core.profile import BenchSection
    from specgate.measure import bench
    from specgate.measure.prompts import template_named

    samples = [bench.RequestSample(1, f"p{i}", "c", 5, 40 + i, None, 0.01, 0.01 + (39 + i) / (
        200.0 + 7 * i), None, "stop", 40) for i in range(6)]
    stored = bench.build_measurement(config="baseline", url="x", bench=BenchSection(
        repeats=3, max_repeats=3), template=template_named("plain", "t"), samples=samples)
    now = bench.restated(stored, BenchSection(repeats=2, max_repeats=6))
    assert stored.confidence == 0.95
    assert now.confidence == bench.judged_confidence(BenchSection(repeats=2, max_repeats=6))
    assert now.stats["tps"].mean == stored.stats["tps"].mean
    assert now.stats["tps"].half_width > stored.stats["tps"].half_width
