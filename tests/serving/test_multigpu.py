"""Tensor parallelism and GPU sets on the simulator: one process per TP rank on fake GPU indices,
a fake nvidia-smi that lists them, both servers loading at once, and GPU sets that differ."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from ckpt_support import tiny_drafter

from specgate.claims import env as env_claims
from specgate.claims import live_run
from specgate.claims import spec as spec_claims
from specgate.claims.result import Status
from specgate.core.errors import ProfileError
from specgate.core.profile import Profile, parse_profile
from specgate.measure import live, plan, server_session
from specgate.results import live as live_results
from specgate.serving import gpu, server
from specgate.serving.launch import Config, LaunchSettings, ServerPlan, plan_server
from specgate.serving.server import StopReport
from specgate.testing import fake_gpus
from specgate.testing.simulator import model

H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Four fake H200s (0–3), and an nvidia-smi on PATH that lists the simulator's ranks."""
    folder = fake_gpus.make(tmp_path / "gpus", [fake_gpus.FakeGpu(i) for i in range(4)])
    bin_dir = tmp_path / "bin"
    fake_gpus.install_nvidia_smi(bin_dir)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv(fake_gpus.ENV_GPUS, str(folder))
    return folder


def _raw(tmp_path: Path, server_keys: dict[str, Any], *, start_delay_s: float = 0.1,
         bench: dict[str, Any] | None = None) -> dict[str, Any]:
    target, draft = tmp_path / "target", tmp_path / "draft"
    target.mkdir(exist_ok=True)
    draft.mkdir(exist_ok=True)
    if not (draft / "config.json").exists():
        tiny_drafter(draft, config_overrides={"max_position_embeddings": 8192})
    (target / "specgate_sim.json").write_text(json.dumps(
        {"decode_ms": 2.0, "verify_ms": 3.5, "draft_step_ms": 0.25,
         "start_delay_s": start_delay_s, "health_generate_s": 0.05}))
    (draft / "specgate_sim.json").write_text(json.dumps({"acceptance": [0.9, 0.8]}))
    return {
        "name": "multigpu",
        "target": {"path": str(target)},
        "drafter": {"path": str(draft)},
        "server": {"launcher": [sys.executable, "-m", "specgate.testing.simulator"],
                   "port": 0, "startup_timeout_s": 30, "stop_timeout_s": 5,
                   "env": {"NCCL_PROTO": "Simple", "NCCL_P2P_DISABLE": "1"}, **server_keys},
        "speculative": {"algorithm": "EAGLE3", "num_steps": 2, "eagle_topk": 1,
                        "num_draft_tokens": 3},
        "bench": {"prompts_per_category": 1, "max_new_tokens": 32, "warmup": 1, "repeats": 2,
                  "max_repeats": 2, **(bench or {})},
        "thresholds": {"accept_len_min": 2.0},
    }


def _profile(tmp_path: Path, server_keys: dict[str, Any], **kw: Any) -> Profile:
    return parse_profile(_raw(tmp_path, server_keys, **kw), source=tmp_path / "profile.toml")


def _planned(tmp_path: Path, server_keys: dict[str, Any],
             config: Config) -> tuple[Profile, ServerPlan]:
    """The profile of these server keys, and the launch planned for one of its servers."""
    profile = _profile(tmp_path, server_keys)
    return profile, plan_server(LaunchSettings.of(profile), config,
                                tmp_path / f"{config[0]}.log")


def _stopped_clean(handle: server.ServerHandle) -> StopReport:
    """The server stopped: its report clean, and no rank left on a GPU."""
    report = handle.stop()
    assert report.clean, report.summary()
    assert _ranks_on_gpus() == {}
    return report


def _ranks_on_gpus() -> dict[int, int]:
    """pid -> GPU index of every compute process the (fake) nvidia-smi lists."""
    snap = gpu.snapshot()
    assert snap is not None
    return {p.pid: p.gpu_index for p in snap.processes if p.gpu_index is not None}


# -- which GPUs a server's ranks use --

def test_the_gpu_set_is_one_gpu_per_rank_as_sglang_places_them() -> None:
    def gpus(server_keys: dict[str, Any], config: str = "speculative") -> object:
        return parse_profile({"name": "t", "server": server_keys}).server.server_gpus(config)

    assert gpus({"tp": 2}) == [0, 1]
    assert gpus({"tp": 2, "gpus": [4, 6]}) == [4, 6]
    assert gpus({"tp": 2, "args": ["--base-gpu-id", "2"]}) == [2, 3]
    assert gpus({"tp": 2, "args": ["--base-gpu-id=1", "--gpu-id-step", "2"]}) == [1, 3]
    # The ordinals count among the visible devices.
    assert gpus({"tp": 2, "env": {"CUDA_VISIBLE_DEVICES": "4,5,6,7"},
                 "args": ["--base-gpu-id", "2"]}) == [6, 7]
    assert gpus({"tp": 2, "gpus": [0, 1], "baseline_gpus": [2, 3]}, "baseline") == [2, 3]
    assert gpus({"tp": 2, "gpus": [0, 1], "baseline_gpus": [2, 3]}) == [0, 1]
    assert gpus({"tp": 2, "baseline_args": ["--base-gpu-id", "2"]}, "baseline") == [2, 3]


@pytest.mark.parametrize(("server_keys", "said"), [
    ({"tp": 2, "gpus": [0]}, "gpus lists 1 GPU (0) but tp = 2 needs CUDA devices [0, 1]"),
    ({"tp": 2, "env": {"CUDA_VISIBLE_DEVICES": "3"}},
     "env CUDA_VISIBLE_DEVICES lists 1 GPU (3) but tp = 2"),
    ({"tp": 2, "gpus": [0, 1, 2], "args": ["--base-gpu-id", "2"]},
     "needs CUDA devices [2, 3] from --base-gpu-id 2 --gpu-id-step 1"),
    ({"tp": 2, "gpus": [0, 1], "baseline_gpus": [2]}, "baseline_gpus lists 1 GPU (2)"),
    ({"gpus": [1, 1]}, "must list distinct GPU indices"),
])
def test_too_few_gpus_for_tp_is_a_profile_error_naming_the_key(
        server_keys: dict[str, Any], said: str) -> None:
    with pytest.raises(ProfileError, match="key 'server'") as err:
        parse_profile({"name": "t", "server": server_keys})
    assert said in str(err.value)


def test_each_server_gets_its_own_gpus_on_its_command() -> None:
    p = parse_profile({"name": "t", "target": {"path": "/t"}, "drafter": {"path": "/d"},
                       "server": {"tp": 2, "gpus": [0, 1], "baseline_gpus": [2, 3],
                                  "env": {"NCCL_PROTO": "Simple"}}})
    settings = LaunchSettings.of(p)
    base = plan_server(settings, "baseline", Path("/tmp/b.log"))
    spec = plan_server(settings, "speculative", Path("/tmp/s.log"))
    assert base.gpus == (2, 3)
    assert spec.gpus == (0, 1)
    assert base.spec is not None
    assert spec.spec is not None
    assert base.spec.env == {"NCCL_PROTO": "Simple", "CUDA_VISIBLE_DEVICES": "2,3"}
    assert spec.spec.env == {"NCCL_PROTO": "Simple", "CUDA_VISIBLE_DEVICES": "0,1"}
    assert base.spec.server_args[base.spec.server_args.index("--tp-size") + 1] == "2"
    # Over ssh the variables travel on the command line, each server's own.
    remote = parse_profile({"name": "t", "target": {"path": "/t"}, "drafter": {"path": "/d"},
                            "server": {"launcher": "ssh gpu-box python3 -m sglang.launch_server",
                                       "tp": 2, "gpus": [0, 1], "baseline_gpus": [2, 3]}})
    rs = LaunchSettings.of(remote)
    assert "CUDA_VISIBLE_DEVICES=2,3" in plan_server(rs, "baseline", Path("/b")).spec.argv
    assert "CUDA_VISIBLE_DEVICES=0,1" in plan_server(rs, "speculative", Path("/s")).spec.argv


# -- the simulator's ranks on fake GPUs --

@pytest.mark.slow
@pytest.mark.parametrize("server_keys", [
    {"tp": 2, "gpus": [2, 3]},
    {"tp": 2, "args": ["--base-gpu-id", "2"]},
])
def test_ranks_run_on_their_gpus_and_teardown_leaves_none(
        machine: Path, tmp_path: Path, server_keys: dict[str, Any]) -> None:
    _, planned = _planned(tmp_path, server_keys, "baseline")
    assert planned.gpus == (2, 3)
    with server.serve(planned, lambda _m: None) as handle:
        on_gpus = _ranks_on_gpus()
        ranks, _where = server.rank_envs(handle)
        assert sorted(r.rank for r in ranks) == [0, 1]
        assert {on_gpus[r.pid] for r in ranks} == {2, 3}
        assert [on_gpus[r.pid] for r in ranks] == [2, 3]  # rank r on the r-th GPU of the set
        check = server_session.check_env(planned.env, handle, planned.tp)
        assert check.checked
        assert not check.mismatched
        assert not check.rank_mismatched
        assert check.ranks_unread == []
    _stopped_clean(handle)


@pytest.mark.slow
def test_a_rank_that_ignores_sigterm_is_killed_and_leaves_no_gpu_behind(
        machine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECGATE_SIM_FAULT", "rank_ignores_term")
    _, planned = _planned(tmp_path, {"tp": 2, "gpus": [0, 1], "stop_timeout_s": 1},
                          "speculative")
    with server.serve(planned, lambda _m: None) as handle:
        ranks = [r.pid for r in server.rank_envs(handle)[0]]
        assert set(_ranks_on_gpus()) == set(ranks)
    report = _stopped_clean(handle)
    assert set(ranks) <= set(report.killed), report.summary()


@pytest.mark.slow
def test_the_profile_env_must_reach_every_tp_rank(
        machine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECGATE_SIM_FAULT", "rank_env_dropped")
    profile, planned = _planned(tmp_path, {"tp": 2, "gpus": [0, 1]}, "speculative")
    with server.serve(planned, lambda _m: None) as handle:
        check = server_session.check_env(planned.env, handle, planned.tp)
    assert check.checked
    assert check.mismatched == {}  # the serving process has them: only rank 1 lost them
    (lost,) = check.rank_mismatched.items()
    assert lost[0].startswith("TP1 (pid ")
    assert lost[1] == {"NCCL_PROTO": None, "NCCL_P2P_DISABLE": None}
    results = live_results.LiveResults(profile="multigpu", simulated=True,
                                       baseline=live_results.ConfigRun("baseline"),
                                       speculative=live_results.ConfigRun("speculative",
                                                                          env=check))
    claim = env_claims.server_env_claim(profile, results)
    assert claim.status is Status.FAILED
    assert "speculative, TP1 (pid" in claim.message
    assert "NCCL_PROTO=None (expected 'Simple')" in claim.message


@pytest.mark.slow
def test_a_gpu_index_the_machine_lacks_fails_the_start_as_cuda_would(
        machine: Path, tmp_path: Path) -> None:
    _, planned = _planned(tmp_path, {"tp": 2, "gpus": [3, 4]}, "baseline")
    check = server_session.check_gpus(planned)
    assert not check.checked
    assert "GPUs [4] of the server's set [3, 4] are not on this machine" in check.reason
    with pytest.raises(server.ServerError, match="invalid device ordinal"), \
            server.serve(planned, lambda _m: None):
        pass


# -- both servers at once --

def _requests_never_overlap(truth: Path) -> list[str]:
    # The streamed requests are the timed ones; spec.parity's untimed evidence (one batch of
    # every prompt, then scoring prefills) is sent as plain requests after them.
    requests = sorted((r for r in model.read_truth(truth) if r.stream),
                      key=lambda r: r.t_received)
    for earlier, later in itertools.pairwise(requests):
        assert later.t_received >= earlier.t_delivered, "two requests were served at once"
    return ["speculative" if r.verify_ct else "baseline" for r in requests
            if r.completion_tokens > 1]


@pytest.mark.slow
def test_both_servers_load_at_once_on_disjoint_gpu_sets_and_are_measured_one_at_a_time(
        machine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    truth = tmp_path / "truth.jsonl"
    monkeypatch.setenv(model.ENV_TRUTH, str(truth))
    profile = _profile(tmp_path, {"tp": 2, "gpus": [0, 1], "baseline_gpus": [2, 3],
                                  "parallel_launch": True}, start_delay_s=1.5)
    reports = tmp_path / "reports"
    results = live.run_live(profile, reports)
    assert results.baseline.failure is None, results.baseline.failure
    assert results.speculative.failure is None, results.speculative.failure
    base, spec = model.read_launches(truth)
    assert {base.role, spec.role} == {"baseline", "speculative"}
    # Each started before the other was ready: the loads overlapped.
    assert base.t_ready is not None
    assert spec.t_ready is not None
    assert spec.t_started < base.t_ready
    assert base.t_started < spec.t_ready
    # Measured one at a time: all of the baseline's requests, then the speculative server's.
    served = _requests_never_overlap(truth)
    assert served == sorted(served)
    assert results.baseline.gpu is not None
    assert results.speculative.gpu is not None
    assert results.baseline.gpu.gpus == (2, 3)
    assert results.speculative.gpu.gpus == (0, 1)
    assert results.gpus_by_server is not None
    assert results.gpus_by_server["baseline"]["selected"] == (2, 3)
    assert results.gpus_by_server["speculative"]["selected"] == (0, 1)
    assert results.gpu_differences == ()
    back = live_results.LiveResults.read(reports / "live" / "results.json")
    claims = {c.id: c for c in (env_claims.gpu_clean_claim(profile, back),
                                env_claims.server_env_claim(profile, back),
                                spec_claims.speedup_claim(profile, back))}
    assert claims["env.gpu_clean"].status is Status.PASSED
    assert claims["env.gpu_clean"].details["gpus_checked"] == {"baseline": [2, 3],
                                                               "speculative": [0, 1]}
    env_claim = claims["env.server_env"]
    assert env_claim.status is Status.PASSED, env_claim.message
    assert "baseline: serving process and TP ranks 0, 1" in env_claim.message
    assert "speculative: serving process and TP ranks 0, 1" in env_claim.message
    assert claims["spec.speedup"].status is not Status.BROKEN, claims["spec.speedup"].message
    facts = live_results.server_facts(reports)
    assert facts["gpus_by_server"]["baseline"]["selected"] == [2, 3]
    for config in ("baseline", "speculative"):
        assert facts["servers_stopped"][config]["clean"] is True
    assert _ranks_on_gpus() == {}


@pytest.mark.slow
def test_both_servers_on_one_gpu_load_together_and_neither_runs_while_the_other_is_measured(
        machine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    truth = tmp_path / "truth.jsonl"
    monkeypatch.setenv(model.ENV_TRUTH, str(truth))
    profile = _profile(tmp_path, {"gpus": [1], "parallel_launch": True}, start_delay_s=1.0,
                       bench={"design": "aba"})
    results = live.run_live(profile, tmp_path / "reports")
    assert results.baseline.failure is None, results.baseline.failure
    first, second, again = model.read_launches(truth)
    assert again.role == "baseline"
    assert second.t_started < first.t_ready  # the first two loaded together
    assert again.t_started > max(first.t_ready or 0.0, second.t_ready or 0.0)
    served = _requests_never_overlap(truth)
    assert served.index("speculative") > 0
    assert results.baseline_after is not None
    assert results.baseline_after.failure is None
    # Both resident on GPU 1: the second's check before the launches found nothing there.
    assert results.speculative.gpu is not None
    assert results.speculative.gpu.offenders == ()


# -- GPU sets that differ --

def _differing(machine: Path, tmp_path: Path, gpus: list[fake_gpus.FakeGpu]
               ) -> tuple[Profile, plan.LivePlan]:
    fake_gpus.make(machine, gpus)
    profile = _profile(tmp_path, {"tp": 2, "gpus": [0, 1], "baseline_gpus": [2, 3]})
    return profile, plan.resolve(profile, tmp_path / "reports")


def _results_of(planned: plan.LivePlan) -> live_results.LiveResults:
    return live_results.LiveResults(
        profile="multigpu", simulated=True, baseline=live_results.ConfigRun("baseline"),
        speculative=live_results.ConfigRun("speculative"),
        gpus_by_server={c: dataclasses.asdict(f) for c, f in planned.gpu_facts.items()},
        gpu_differences=planned.gpu_differences)


def test_another_gpu_model_for_the_baseline_breaks_the_comparison(
        machine: Path, tmp_path: Path) -> None:
    gpus = [fake_gpus.FakeGpu(0), fake_gpus.FakeGpu(1),
            fake_gpus.FakeGpu(2, name=H100), fake_gpus.FakeGpu(3, name=H100)]
    profile, planned = _differing(machine, tmp_path, gpus)
    assert planned.gpus_of("baseline").names == (H100, H100)
    (model_line,) = planned.gpu_differences
    assert model_line.startswith("GPU model: the baseline on GPUs [2, 3]")
    results = _results_of(planned)
    for claim in (spec_claims.speedup_claim(profile, results),
                  spec_claims.breakeven_claim(profile, results)):
        assert claim.status is Status.BROKEN
        assert claim.reason == "gpu_mismatch"
        assert H100 in claim.message
    reports = tmp_path / "reports"
    results.write(reports / "live" / "results.json")
    assert live_results.server_facts(reports)["gpu_mismatch"] == [model_line]
    (warning,) = live_results.gpu_warnings(reports)
    assert warning.startswith(live_results.GPU_MISMATCH_WARNING)
    # The fingerprints of the two servers name their own GPUs.
    from specgate.measure import reuse

    assert planned.fingerprint is None  # reuse is off here; computed on demand
    assert reuse.fingerprint(planned, "baseline").components["gpus"]["selected"] == [2, 3]
    assert reuse.fingerprint(planned, "speculative").components["gpus"]["names"] == [
        "NVIDIA H200", "NVIDIA H200"]


def test_another_driver_breaks_it_and_other_clocks_are_reported_only(
        machine: Path, tmp_path: Path) -> None:
    driver = [fake_gpus.FakeGpu(0), fake_gpus.FakeGpu(1),
              fake_gpus.FakeGpu(2, driver_version="570.124.06"),
              fake_gpus.FakeGpu(3, driver_version="570.124.06")]
    profile, planned = _differing(machine, tmp_path, driver)
    assert [d.split(":")[0] for d in planned.gpu_differences] == ["driver"]
    assert spec_claims.speedup_claim(profile, _results_of(planned)).reason == "gpu_mismatch"

    clocks = [fake_gpus.FakeGpu(0), fake_gpus.FakeGpu(1),
              fake_gpus.FakeGpu(2, clocks_applications_graphics="1500"),
              fake_gpus.FakeGpu(3, clocks_applications_graphics="1500")]
    profile, planned = _differing(machine, tmp_path, clocks)
    (clock_line,) = planned.gpu_differences
    assert clock_line.startswith("clocks: the baseline on GPUs [2, 3]")
    assert "applications 1500/3201 MHz" in clock_line
    results = _results_of(planned)
    assert live_run.gpu_threat("spec.speedup", results) is None
    noted = live_run.gpu_noted(spec_claims.speedup_claim(profile, results), results)
    assert noted.details["gpu_differences"] == [clock_line]
    assert "the two servers' GPUs differ in clocks" in noted.message


def test_the_same_gpus_for_both_servers_are_never_a_mismatch(
        machine: Path, tmp_path: Path) -> None:
    fake_gpus.make(machine, [fake_gpus.FakeGpu(0, name=H100), fake_gpus.FakeGpu(1)])
    profile = _profile(tmp_path, {"gpus": [0]})
    assert plan.resolve(profile, tmp_path / "reports").gpu_differences == ()
