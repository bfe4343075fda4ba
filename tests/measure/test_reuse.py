"""Baseline reuse: which facts make a stored baseline reusable (the fingerprint, computed from the
live plan), the age bound, and the recheck against the speculative server's /server_info."""

from __future__ import annotations

import copy
import dataclasses
import json
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from specgate.core.profile import parse_profile
from specgate.measure import live, reuse
from specgate.measure import plan as live_plan
from specgate.results import bench
from specgate.results import live as results
from specgate.results.answers import AnswerEvidence
from specgate.results.prompts import template_named
from specgate.serving import gpu

KEY_ENV = "REUSE_TEST_KEY"
PROMPTS = [{"id": "a", "category": "chat", "prompt": "Hello there"},
           {"id": "b", "category": "chat", "prompt": "Write a haiku about rain"},
           {"id": "c", "category": "math", "prompt": "What is 17 * 23?"}]
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
LLAMA3 = ("{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
          "{{ m['content'] }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}"
          "<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
WEIGHTS_BYTES = 5 << 19  # 2.5 MiB: a head and a tail that do not overlap


class Machine:
    """A deployment as the plan sees it: the profile, the files it names, the GPUs nvidia-smi
    lists, the SGLang version installed, and the environment."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.monkeypatch = monkeypatch
        self.target = root / "target"
        self.target.mkdir()
        (self.target / "config.json").write_text(json.dumps({"hidden_size": 64}))
        (self.target / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML}))
        (self.target / "model.safetensors").write_bytes(bytes(range(256)) * (WEIGHTS_BYTES // 256))
        (root / "drafter").mkdir()
        (root / "drafter" / "config.json").write_text("{}")  # a folder SGLang would read
        self.prompts = root / "prompts.jsonl"
        self.write_prompts(PROMPTS)
        self.raw: dict[str, Any] = {
            "name": "reuse-test",
            "target": {"path": str(self.target)},
            "drafter": {"path": str(root / "drafter")},
            "server": {"launcher": [sys.executable, "-m", "sglang.launch_server"],
                       "host": "127.0.0.1", "port": 30000, "tp": 1, "gpus": [0],
                       "args": ["--trust-remote-code"], "api_key_env": KEY_ENV,
                       "env": {"NCCL_PROTO": "Simple", "HF_TOKEN": "hf_firsttokenvalue"}},
            "speculative": {"num_steps": 2, "eagle_topk": 1, "num_draft_tokens": 3},
            "bench": {"prompts": str(self.prompts), "max_new_tokens": 32, "temperature": 0.0,
                      "warmup": 2, "baseline_max_age_h": 24.0},
            "thresholds": {"baseline_tps_min": 10.0},
        }
        self.gpus = [gpu.Gpu(0, "GPU-0", "NVIDIA H200", "570.124.06", 143771, 0),
                     gpu.Gpu(1, "GPU-1", "NVIDIA H200", "570.124.06", 143771, 0)]
        self.gpu_processes: list[gpu.GpuProcess] = []
        self.sglang = "0.5.17"
        self.snapshots = 0
        self.reports = root / "reports"
        monkeypatch.setenv(KEY_ENV, "sk-reuse-first-key-0123")
        real_version = metadata.version
        monkeypatch.setattr(metadata, "version", lambda name: self.sglang if name == "sglang"
                            else real_version(name))
        monkeypatch.setattr(gpu, "snapshot", self._snapshot)

    def _snapshot(self) -> gpu.GpuSnapshot:
        self.snapshots += 1
        return gpu.GpuSnapshot(tuple(self.gpus), tuple(self.gpu_processes), 0.0)

    def write_prompts(self, rows: list[dict[str, str]], path: Path | None = None) -> None:
        (path or self.prompts).write_text("".join(json.dumps(r) + "\n" for r in rows))

    def plan(self) -> live_plan.LivePlan:
        profile = parse_profile(copy.deepcopy(self.raw), source=self.root / "profile.toml")
        return live_plan.resolve(profile, self.reports)

    def fingerprint(self) -> str:
        found = self.plan()
        assert found.fingerprint is not None, found.stored
        return found.fingerprint.id


def _set(section: str, key: str, value: Any) -> Callable[[Machine], None]:
    def change(m: Machine) -> None:
        m.raw.setdefault(section, {})[key] = value
    return change


def _edit_target(name: str, content: str) -> Callable[[Machine], None]:
    return lambda m: (m.target / name).write_text(content) and None


def _rewrite_weights(m: Machine) -> None:
    data = bytearray((m.target / "model.safetensors").read_bytes())
    data[100:110] = b"retrained!"
    (m.target / "model.safetensors").write_bytes(bytes(data))


def _move_target(m: Machine) -> None:
    other = m.root / "target-copy"
    other.mkdir()
    for f in m.target.iterdir():
        (other / f.name).write_bytes(f.read_bytes())
    m.raw["target"]["path"] = str(other)


def _move_prompts(m: Machine) -> None:
    other = m.root / "elsewhere.jsonl"
    m.write_prompts(PROMPTS, other)
    m.raw["bench"]["prompts"] = str(other)


def _gpu(**changes: Any) -> Callable[[Machine], None]:
    def change(m: Machine) -> None:
        m.gpus = [dataclasses.replace(g, **changes) for g in m.gpus]
    return change


def _busy_gpus(m: Machine) -> None:
    m.gpus = [dataclasses.replace(g, memory_used_mib=60000) for g in m.gpus]
    m.gpu_processes = [gpu.GpuProcess(4242, "python", 60000, "GPU-0", 0)]


def _sglang(version: str) -> Callable[[Machine], None]:
    return lambda m: setattr(m, "sglang", version)


def _env(name: str, value: str) -> Callable[[Machine], None]:
    return lambda m: m.monkeypatch.setenv(name, value)


# Each fact that changes what a baseline measures, and so the fingerprint.
DECIDING = {
    "max_new_tokens": _set("bench", "max_new_tokens", 64),
    "temperature": _set("bench", "temperature", 0.7),
    "warmup": _set("bench", "warmup", 0),
    "prompt text": lambda m: m.write_prompts([*PROMPTS[:2], {**PROMPTS[2], "prompt": "17*24?"}]),
    "prompts per category": _set("bench", "prompts_per_category", 1),
    "categories": _set("bench", "categories", ["chat"]),
    "configured chat template": _set("bench", "chat_template", "llama3"),
    "target's chat template": _edit_target("tokenizer_config.json",
                                           json.dumps({"chat_template": LLAMA3})),
    "target config.json": _edit_target("config.json", json.dumps({"hidden_size": 128})),
    "target generation_config.json": _edit_target("generation_config.json",
                                                  json.dumps({"top_p": 0.9})),
    "target weights rewritten": _rewrite_weights,
    "target weight file added": lambda m: (m.target / "extra.safetensors").write_bytes(b"x" * 64)
    and None,
    "target folder": _move_target,
    "launch args": _set("server", "args", ["--trust-remote-code", "--mem-fraction-static",
                                           "0.8"]),
    "baseline_args": _set("server", "baseline_args", ["--disable-cuda-graph"]),
    "tp": lambda m: m.raw["server"].update(tp=2, gpus=[0, 1]),
    "server env": _set("server", "env", {"NCCL_PROTO": "LL", "HF_TOKEN": "hf_firsttokenvalue"}),
    "GPU selection": _set("server", "gpus", [1]),
    "launcher": _set("server", "launcher", [sys.executable, "-X", "utf8", "-m",
                                            "sglang.launch_server"]),
    "GPU model": _gpu(name="NVIDIA H100 80GB HBM3"),
    "GPU driver": _gpu(driver_version="575.51.03"),
    "SGLang version": _sglang("0.5.18"),
    "concurrency levels": _set("bench", "concurrency", [1, 4]),
    "gate level": lambda m: m.raw.update(bench={**m.raw["bench"], "concurrency": [1, 4]},
                                         thresholds={**m.raw["thresholds"],
                                                     "gate_concurrency": 4}),
}

# Facts that do not change what a baseline measures: the fingerprint must stay.
NOT_DECIDING = {
    "port": _set("server", "port", 30123),
    "any free port": _set("server", "port", 0),
    "host": _set("server", "host", "0.0.0.0"),
    "API key value": _env(KEY_ENV, "sk-reuse-rotated-key-9876"),
    "secret env value": _set("server", "env", {"NCCL_PROTO": "Simple",
                                               "HF_TOKEN": "hf_rotatedtokenvalue"}),
    "repeats": _set("bench", "repeats", 5),
    "max_repeats": _set("bench", "max_repeats", 9),
    "confidence": _set("bench", "confidence", 0.99),
    "request timeout": _set("bench", "request_timeout_s", 30.0),
    "age bound": _set("bench", "baseline_max_age_h", 2.0),
    "thresholds": _set("thresholds", "baseline_tps_min", 99.0),
    "drafter": _set("drafter", "path", "/elsewhere/drafter"),
    "speculative chain": lambda m: m.raw.update(speculative={"num_steps": 3, "eagle_topk": 1,
                                                              "num_draft_tokens": 4}),
    "startup timeout": _set("server", "startup_timeout_s", 60.0),
    "stop command": _set("server", "stop_command", ["true"]),
    "profile name": lambda m: m.raw.update(name="renamed"),
    "prompt file moved": _move_prompts,
    "GPUs busy": _busy_gpus,
}


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Machine:
    return Machine(tmp_path, monkeypatch)


@pytest.mark.parametrize("change", DECIDING.values(), ids=DECIDING.keys())
def test_every_fact_that_decides_the_baseline_changes_the_fingerprint(
        machine: Machine, change: Callable[[Machine], None]) -> None:
    before = machine.fingerprint()
    assert machine.fingerprint() == before  # stable while nothing changes
    change(machine)
    assert machine.fingerprint() != before


@pytest.mark.parametrize("change", NOT_DECIDING.values(), ids=NOT_DECIDING.keys())
def test_facts_that_do_not_decide_the_baseline_leave_the_fingerprint(
        machine: Machine, change: Callable[[Machine], None]) -> None:
    before = machine.fingerprint()
    change(machine)
    assert machine.fingerprint() == before


def test_one_stream_keeps_the_fingerprint_it_had_before_concurrency_levels(
        machine: Machine) -> None:
    found = machine.plan().fingerprint
    assert found is not None
    assert "concurrency" not in found.components
    machine.raw["bench"]["concurrency"] = [1, 4]
    levels = machine.plan().fingerprint
    assert levels is not None
    assert levels.components["concurrency"] == {"levels": [1, 4], "gate": 1}


def test_the_fingerprint_holds_no_secret_and_the_plan_one_gpu_snapshot(machine: Machine) -> None:
    planned = machine.plan()
    assert machine.snapshots == 1  # the plan's GPU facts, reused by the fingerprint
    assert planned.fingerprint is not None
    text = json.dumps(planned.fingerprint.components)
    assert "hf_firsttokenvalue" not in text
    assert "sk-reuse-first-key" not in text
    assert planned.fingerprint.components["gpus"]["names"] == ["NVIDIA H200"]


def test_the_simulators_knobs_decide_a_simulated_baseline(machine: Machine) -> None:
    machine.raw["server"]["launcher"] = [sys.executable, "-m", "specgate.testing.simulator"]
    before = machine.fingerprint()
    machine.monkeypatch.setenv("SPECGATE_SIM_TRUTH", str(machine.root / "truth.jsonl"))
    assert machine.fingerprint() == before  # where the log goes, not what is measured
    machine.monkeypatch.setenv("SPECGATE_SIM_FAULT", "http500")
    assert machine.fingerprint() != before


def test_no_fingerprint_without_reuse_or_for_an_attached_baseline(machine: Machine) -> None:
    del machine.raw["bench"]["baseline_max_age_h"]
    off = machine.plan()
    assert off.fingerprint is None
    assert off.stored == ""
    machine.raw["bench"]["baseline_max_age_h"] = 24.0
    machine.raw["server"]["baseline_url"] = "http://127.0.0.1:9"
    attached = machine.plan()
    assert attached.fingerprint is None
    assert "attached" in str(attached.stored)


def _run(config: str = "baseline") -> dict[str, Any]:
    return {"config": config, "measurement": {"x": 1}, "failure": None}


def test_find_respects_the_age_bound(machine: Machine) -> None:
    fp = machine.plan().fingerprint
    assert fp is not None
    reuse.save(machine.reports, fp, _run(), now=1000.0)
    young = reuse.find(machine.reports, fp, 24.0, now=1000.0 + 23 * 3600)
    assert isinstance(young, reuse.Stored)
    assert abs(young.age_h - 23) < 1e-6
    old = reuse.find(machine.reports, fp, 24.0, now=1000.0 + 25 * 3600)
    assert isinstance(old, str)
    assert "older than" in old
    machine.raw["bench"]["max_new_tokens"] = 64
    other = machine.plan().fingerprint
    assert other is not None
    assert "no stored baseline" in reuse.find(machine.reports, other, 24.0)


def test_a_greedy_baseline_stored_without_its_answers_evidence_is_measured_again(
        machine: Machine) -> None:
    fp = machine.plan().fingerprint
    assert fp is not None
    greedy = {**_run(), "measurement": {"temperature": 0.0}}
    reuse.save(machine.reports, fp, greedy, now=1000.0)
    found = reuse.find(machine.reports, fp, 24.0, now=1000.0 + 3600)
    assert isinstance(found, str)
    assert "kept no evidence of its answers" in found
    reuse.save(machine.reports, fp, {**greedy, "answers": AnswerEvidence().to_json()},
               now=1000.0)
    assert isinstance(reuse.find(machine.reports, fp, 24.0, now=1000.0 + 3600), reuse.Stored)


def test_a_baseline_stored_by_another_specgate_is_measured_again(machine: Machine) -> None:
    fp = machine.plan().fingerprint
    assert fp is not None
    path = reuse.save(machine.reports, fp, _run(), now=1000.0)
    doc = json.loads(path.read_text())
    doc["schema"] = reuse.SCHEMA + 1
    path.write_text(json.dumps(doc))
    found = reuse.find(machine.reports, fp, 24.0, now=1000.0 + 3600)
    assert isinstance(found, str)
    assert "another specgate" in found


def test_the_plan_finds_the_stored_baseline(machine: Machine) -> None:
    fp = machine.plan().fingerprint
    assert fp is not None
    reuse.save(machine.reports, fp, _run())
    stored = machine.plan().stored
    assert isinstance(stored, reuse.Stored)
    assert stored.fingerprint == fp.id


# -- the recheck against the speculative server -----------------------------------------------

STORED_INFO = {"model_path": "/m", "version": "0.5.17", "tp_size": 1,
               "speculative_algorithm": None}


def test_recheck_names_each_disagreement() -> None:
    agreed, problems = reuse.recheck(STORED_INFO, dict(STORED_INFO))
    assert agreed == {"model_path": "/m", "version": "0.5.17", "tp_size": 1}
    assert problems == []
    agreed, problems = reuse.recheck(STORED_INFO, {**STORED_INFO, "version": "0.5.18"})
    assert len(problems) == 1
    assert "version" in problems[0]
    assert "0.5.18" in problems[0]


def _measurement(config: str) -> bench.Measurement:
    samples = [bench.RequestSample(repeat=1, prompt_id=f"p{i}", category="c", prompt_tokens=5,
                                   completion_tokens=20 + i, spec_verify_ct=None, ttft_s=0.01,
                                   e2e_s=0.1 + 0.01 * i, server_e2e_s=None, finish_reason="stop",
                                   chunks=20) for i in range(3)]
    return bench.build_measurement(config=config, url="http://x", sampling=bench.Sampling(),
                                   template=template_named("plain", "test"), samples=samples)


class FakeServers:
    """run_config as the live session calls it, answering /server_info with `info`."""

    def __init__(self) -> None:
        self.info = dict(STORED_INFO)
        self.calls: list[str] = []
        self.speculative_fails = False

    def __call__(self, plan: live_plan.LivePlan, config: str, *, baseline: Any = None,
                 progress: Any = None, keep_going: Any = None,
                 coverage: Any = None, classed: Any = None) -> results.ConfigRun:
        self.calls.append(config)
        if config == "speculative" and self.speculative_fails:
            # It started and answered /server_info, then died while measured.
            return results.ConfigRun(config=config, server_info=dict(self.info),
                                  failure=results.Failure("measure", "it died"))
        # As the real one, it keeps the evidence of its answers (spec.parity's).
        return results.ConfigRun(config=config, server_info=dict(self.info),
                              measurement=_measurement(config), answers=AnswerEvidence())


@pytest.fixture
def servers(machine: Machine, monkeypatch: pytest.MonkeyPatch) -> FakeServers:
    fake = FakeServers()
    monkeypatch.setattr(live, "run_config", fake)
    machine.raw["server"]["launcher"] = [sys.executable, "-m", "specgate.testing.simulator"]
    return fake


def _live(machine: Machine) -> results.LiveResults:
    profile = parse_profile(copy.deepcopy(machine.raw), source=machine.root / "profile.toml")
    return live.run_live(profile, machine.reports)


def test_a_stored_baseline_is_reused_once_the_speculative_server_agrees(
        machine: Machine, servers: FakeServers) -> None:
    first = _live(machine)
    assert servers.calls == ["baseline", "speculative"]
    assert first.baseline.reuse["reused"] is False
    servers.calls.clear()
    second = _live(machine)
    assert servers.calls == ["speculative"]  # one launch
    assert second.baseline.reuse["reused"] is True
    assert second.baseline.reuse["rechecked"] == {"model_path": "/m", "version": "0.5.17",
                                                  "tp_size": 1}
    assert second.baseline.measurement is not None
    assert first.baseline.measurement is not None
    assert second.baseline.measurement.stats["tps"].mean == pytest.approx(
        first.baseline.measurement.stats["tps"].mean)
    facts = results.server_facts(machine.reports)
    assert facts["baseline_reuse"]["reused"] is True
    assert facts["gpus"] == {"selected": [0], "names": ["NVIDIA H200"],
                             "drivers": ["570.124.06"], "unknown": "", "clocks": []}
    assert facts["gpus_by_server"]["baseline"]["selected"] == [0]
    assert facts["chat_template"] == {"name": "plain", "source": "test",
                                      "digest": template_named("plain", "test").digest}


@pytest.mark.parametrize(("key", "now"), [("model_path", "/other"), ("version", "0.5.18"),
                                          ("tp_size", 2), ("tp_size", None)])
def test_a_speculative_server_that_disagrees_makes_the_baseline_measured_again(
        machine: Machine, servers: FakeServers, key: str, now: Any) -> None:
    _live(machine)
    servers.calls.clear()
    if now is None:
        del servers.info[key]  # reported by one server only: not the same server either
    else:
        servers.info[key] = now
    again = _live(machine)
    assert servers.calls == ["speculative", "baseline"]
    assert again.baseline.reuse["reused"] is False
    assert f"/server_info {key}" in again.baseline.reuse["why"]


def test_what_the_recheck_does_not_compare_does_not_stop_reuse(
        machine: Machine, servers: FakeServers) -> None:
    _live(machine)
    servers.calls.clear()
    servers.info["speculative_algorithm"] = "EAGLE3"  # the speculative server's own settings
    servers.info["speculative_num_steps"] = 3
    assert _live(machine).baseline.reuse["reused"] is True
    assert servers.calls == ["speculative"]


def test_a_speculative_server_that_failed_cannot_vouch_for_a_stored_baseline(
        machine: Machine, servers: FakeServers) -> None:
    _live(machine)
    servers.calls.clear()
    servers.speculative_fails = True
    again = _live(machine)
    assert servers.calls == ["speculative", "baseline"]
    assert again.baseline.reuse["reused"] is False
    assert "could not be rechecked" in again.baseline.reuse["why"]


def test_a_speculative_server_not_launched_keeps_the_stored_baseline(
        machine: Machine, servers: FakeServers) -> None:
    """An empty drafter folder blocks the speculative launch before it starts; relaunching the
    baseline then would cost a whole target load for a verdict that is already decided."""
    _live(machine)
    servers.calls.clear()
    (machine.root / "drafter" / "config.json").unlink()
    again = _live(machine)
    assert "baseline" not in servers.calls
    assert again.baseline.reuse["reused"] is True
    assert again.baseline.reuse["rechecked"] == {}
    assert "not rechecked: no speculative server was launched" in again.baseline.reuse["why_safe"]


def test_reuse_off_measures_the_baseline_every_time(machine: Machine,
                                                    servers: FakeServers) -> None:
    del machine.raw["bench"]["baseline_max_age_h"]
    _live(machine)
    _live(machine)
    assert servers.calls == ["baseline", "speculative"] * 2
    assert not (machine.reports / reuse.STORE_DIR).exists()


def test_a_reused_baseline_is_judged_at_the_reusing_runs_confidence() -> None:
    samples = [bench.RequestSample(1, f"p{i}", "c", 5, 40 + i, None, 0.01, 0.01 + (39 + i) / (
        200.0 + 7 * i), None, "stop", 40) for i in range(6)]
    stored = bench.build_measurement(config="baseline", url="x", sampling=bench.Sampling(
        repeats=3, max_repeats=3), template=template_named("plain", "t"), samples=samples)
    now = bench.restated(stored, bench.Sampling(repeats=2, max_repeats=6))
    assert stored.confidence == 0.95
    assert now.confidence == bench.judged_confidence(bench.Sampling(repeats=2, max_repeats=6))
    assert now.stats["tps"].mean == stored.stats["tps"].mean
    assert now.stats["tps"].half_width > stored.stats["tps"].half_width


def test_the_speculative_fingerprint_adds_the_drafter_and_leaves_the_baselines_alone(
        machine: Machine) -> None:
    drafter = machine.root / "drafter"
    (drafter / "config.json").write_text(json.dumps({"hidden_size": 64}))
    (drafter / "model.safetensors").write_bytes(b"\x01" * 4096)
    planned = machine.plan()
    base, spec = reuse.fingerprint(planned), reuse.fingerprint(planned, "speculative")
    assert base.id == machine.fingerprint()
    assert spec.id != base.id
    assert spec.components["drafter"]["path"] == str(drafter)
    assert "--speculative-num-steps" in spec.components["launch"]
    (drafter / "model.safetensors").write_bytes(b"\x02" * 4096)  # a retrained drafter
    again = machine.plan()
    assert reuse.fingerprint(again, "speculative").id != spec.id
    assert reuse.fingerprint(again).id == base.id
    # Which launch speed the simulator draws is not what the configuration is; its spread is.
    machine.raw["server"]["env"]["SPECGATE_SIM_LAUNCH_SEED"] = "7"
    assert reuse.fingerprint(machine.plan()).id == base.id
    machine.raw["server"]["env"]["SPECGATE_SIM_LAUNCH_SPREAD"] = "0.1"
    assert reuse.fingerprint(machine.plan()).id != base.id
