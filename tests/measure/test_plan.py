"""Tests for specgate.measure.plan: the profile resolved once into the live plan."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from specgate.core.profile import parse_profile
from specgate.io.checkpoint import empty_folder
from specgate.measure import plan as live_plan
from specgate.measure import server_session
from specgate.measure.plan import Blocked
from specgate.results import live as results
from specgate.results import prompts
from specgate.serving import gpu
from specgate.serving.launch import ServerPlan


def _profile(tmp_path: Path, **sections: Any) -> Any:
    (tmp_path / "target").mkdir(exist_ok=True)
    (tmp_path / "drafter").mkdir(exist_ok=True)
    (tmp_path / "drafter" / "config.json").write_text("{}")  # not an empty folder
    (tmp_path / "prompts.jsonl").write_text(
        json.dumps({"id": "a", "category": "chat", "prompt": "Hi"}) + "\n"
        + json.dumps({"id": "b", "category": "code", "prompt": "Sort a list"}) + "\n")
    raw: dict[str, Any] = {
        "name": "plan-test", "target": {"path": "target"}, "drafter": {"path": "drafter"},
        "server": {"launcher": [sys.executable, "-m", "specgate.testing.simulator"],
                   "port": 0, "env": {"NCCL_PROTO": "Simple"}},
        "speculative": {"num_steps": 2, "eagle_topk": 1, "num_draft_tokens": 3},
        "bench": {"prompts": "prompts.jsonl", "chat_template": "chatml", "max_new_tokens": 16,
                  "warmup": 0, "repeats": 2, "max_repeats": 4},
    }
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    return parse_profile(raw, source=tmp_path / "profile.toml")


def test_the_plan_holds_the_profile_resolved_once(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    loads: list[Path] = []
    real_load = prompts.load_jsonl
    monkeypatch.setattr(prompts, "load_jsonl", lambda p: loads.append(p) or real_load(p))
    snapshots: list[int] = []
    monkeypatch.setattr(gpu, "snapshot", lambda: snapshots.append(1))
    planned = live_plan.resolve(_profile(tmp_path), tmp_path / "reports")
    assert loads == [tmp_path / "prompts.jsonl"]  # loaded once, the path resolved beside it
    assert len(snapshots) == 1
    assert planned.prompts is not None
    assert planned.prompts.texts == ("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
                                     "<|im_start|>user\nSort a list<|im_end|>\n"
                                     "<|im_start|>assistant\n")
    assert planned.prompts.label == str(tmp_path / "prompts.jsonl")
    assert planned.target == tmp_path / "target"
    assert planned.simulated
    assert (planned.sampling.max_new_tokens, planned.sampling.repeats,
            planned.sampling.max_repeats) == (16, 2, 4)
    for config in live_plan.CONFIGS:
        server = planned.server(config)
        assert isinstance(server, ServerPlan)
        assert server.spec is not None
        assert server.url == server.spec.url
        assert server.log_path == tmp_path / "reports" / "live" / f"{config}-server.log"
        assert server.env == {"NCCL_PROTO": "Simple"}
        assert server.any_port
    speculative = planned.speculative
    assert isinstance(speculative, ServerPlan)
    assert speculative.spec is not None
    assert str(tmp_path / "drafter") in speculative.spec.argv
    assert planned.fingerprint is None  # reuse is off


def test_a_server_that_cannot_be_planned_does_not_stop_the_other(tmp_path: Path) -> None:
    planned = live_plan.resolve(_profile(tmp_path, drafter={"path": ""}), tmp_path)
    assert isinstance(planned.baseline, ServerPlan)
    assert isinstance(planned.speculative, live_plan.Blocked)
    assert planned.speculative.stage == "start"
    assert "[drafter] path is required to launch a server" in planned.speculative.message
    run = server_session.run_config(planned, "speculative")
    assert run.failure == results.Failure("start", planned.speculative.message)


def test_an_unset_api_key_blocks_both_servers_with_the_variable_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PLAN_TEST_KEY", raising=False)
    planned = live_plan.resolve(_profile(tmp_path, server={"api_key_env": "PLAN_TEST_KEY"}),
                                tmp_path)
    for config in live_plan.CONFIGS:
        blocked = planned.server(config)
        assert isinstance(blocked, live_plan.Blocked)
        assert "PLAN_TEST_KEY is not set" in blocked.message
    assert planned.prompts is not None  # what does not need the key is still resolved


def test_prompts_that_cannot_be_read_fail_each_run_at_the_prompts_stage(tmp_path: Path) -> None:
    planned = live_plan.resolve(_profile(tmp_path, bench={"prompts": "missing.jsonl"}),
                                tmp_path / "reports")
    assert planned.prompts is None
    assert "missing.jsonl: prompt file not found" in planned.no_prompts
    run = server_session.run_config(planned, "baseline")
    assert run.failure is not None
    assert run.failure.stage == "prompts"
    assert "prompt file not found" in run.failure.message
    assert not (tmp_path / "reports" / "live" / "baseline-server.log").exists()


def test_attached_servers_are_planned_without_a_launch(tmp_path: Path) -> None:
    profile = _profile(tmp_path).with_overrides(server_url="http://127.0.0.1:9",
                                                baseline_url="http://127.0.0.1:8")
    planned = live_plan.resolve(profile, tmp_path)
    assert isinstance(planned.baseline, ServerPlan)
    assert isinstance(planned.speculative, ServerPlan)
    assert (planned.baseline.url, planned.speculative.url) == ("http://127.0.0.1:8",
                                                               "http://127.0.0.1:9")
    assert planned.baseline.spec is None
    assert planned.speculative.spec is None
    assert planned.baseline.log_path is None
    assert planned.gpus is None  # nothing launched here: no GPU to know


def test_the_plan_measures_the_gates_level_first_then_the_others_ascending(
        tmp_path: Path) -> None:
    plain = live_plan.resolve(_profile(tmp_path), tmp_path / "reports")
    assert (plain.levels, plain.gate_level, plain.measured_levels) == ((1,), 1, (1,))
    planned = live_plan.resolve(_profile(tmp_path, bench={"concurrency": [16, 1, 4]},
                                         thresholds={"gate_concurrency": 4}),
                                tmp_path / "reports")
    assert (planned.levels, planned.gate_level) == ((1, 4, 16), 4)
    assert planned.measured_levels == (4, 1, 16)


def test_an_empty_drafter_folder_blocks_the_speculative_launch_with_the_offline_cause(
        tmp_path: Path) -> None:
    """SGLang would refuse it after a whole start; the plan says so before, in the words of the
    offline claims that read the folder, so the two are one cause."""
    profile = _profile(tmp_path)
    (tmp_path / "drafter" / "config.json").unlink()
    planned = live_plan.resolve(profile, tmp_path / "reports")
    assert isinstance(planned.baseline, ServerPlan)
    blocked = planned.speculative
    assert isinstance(blocked, Blocked), blocked
    assert blocked.cause == blocked.message == empty_folder(tmp_path / "drafter")
