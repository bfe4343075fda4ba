"""Tests for specgate.serving.gpu: nvidia-smi parsing on captured samples and a fake nvidia-smi."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from specgate.serving import gpu

DATA = Path(__file__).parents[1] / "data" / "nvidia-smi"


def _read(name: str) -> str:
    return (DATA / name).read_text()


def test_idle_h200() -> None:
    gpus = gpu.parse_gpus(_read("gpus-h200-idle.csv"))
    assert len(gpus) == 1
    g = gpus[0]
    assert (g.index, g.name, g.driver_version) == (0, "NVIDIA H200", "580.159.04")
    assert (g.memory_total_mib, g.memory_used_mib) == (143771, 0)
    assert g.uuid == "GPU-cede08a2-8c40-5319-b85d-211e72caf9fd"
    assert gpu.parse_apps(_read("apps-h200-idle.csv"), gpus) == []


def test_h200_held_by_a_process() -> None:
    gpus = gpu.parse_gpus(_read("gpus-h200-busy.csv"))
    apps = gpu.parse_apps(_read("apps-h200-busy.csv"), gpus)
    assert apps == [gpu.GpuProcess(427, "python3", 4334, gpus[0].uuid, 0)]
    snap = gpu.GpuSnapshot(tuple(gpus), tuple(apps), 0.0)
    assert [g.memory_used_mib for g in gpu.memory_held(snap, [0])] == [4343]
    assert gpu.busy_on(snap, [1]) == []


def test_stale_processes_on_eight_gpus() -> None:
    gpus = gpu.parse_gpus(_read("gpus-8x-busy.csv"))
    apps = gpu.parse_apps(_read("apps-8x-stale-sglang.csv"), gpus)
    snap = gpu.GpuSnapshot(tuple(gpus), tuple(apps), 0.0)
    assert [a.gpu_index for a in apps] == list(range(8))
    assert [p.pid for p in gpu.busy_on(snap, [2, 5])] == [41232, 41235]
    assert len(gpu.busy_on(snap)) == 8
    assert [g.index for g in gpu.memory_held(snap, [0, 1])] == [0, 1]
    assert snap.gpu(7) is not None
    assert snap.gpu(8) is None


def test_not_available_fields_are_none() -> None:
    gpus = gpu.parse_gpus(_read("gpus-mig-na.csv"))
    assert gpus[0].memory_used_mib is None
    apps = gpu.parse_apps(_read("apps-container-na.csv"), gpus)
    assert apps[0].used_memory_mib is None
    assert apps[0].gpu_index == 0
    snap = gpu.GpuSnapshot(tuple(gpus), tuple(apps), 0.0)
    assert gpu.memory_held(snap) == []


def test_malformed_row_is_an_error_naming_the_line() -> None:
    with pytest.raises(gpu.NvidiaSmiError, match="expected 6"):
        gpu.parse_gpus("0, NVIDIA H200, 143771\n")


def _fake_smi(bin_dir: Path, body: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "nvidia-smi"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_snapshot_runs_nvidia_smi_from_path(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    gpus_csv, apps_csv = DATA / "gpus-8x-busy.csv", DATA / "apps-8x-stale-sglang.csv"
    _fake_smi(tmp_path, f'case "$1" in --query-gpu=*) cat {gpus_csv};; '
                        f'--query-compute-apps=*) cat {apps_csv};; esac\n')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    snap = gpu.snapshot()
    assert snap is not None
    assert len(snap.gpus) == 8
    assert len(snap.processes) == 8
    assert snap.processes[3].gpu_index == 3


def test_snapshot_without_nvidia_smi_is_none(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert gpu.snapshot() is None


def test_failing_nvidia_smi_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_smi(tmp_path, "echo \"NVIDIA-SMI has failed because it couldn't communicate with the "
                        "NVIDIA driver.\"; exit 9\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(gpu.NvidiaSmiError, match="code 9: NVIDIA-SMI has failed"):
        gpu.snapshot()


def test_a_far_side_launcher_lists_the_gpu_hosts_gpus(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Through `docker exec` (the stand-in of tests/standins/, with the container's PATH its
    own), nvidia-smi runs where the server will: this machine has none, the GPU host has 8."""
    from specgate.serving import launchers

    standin = Path(__file__).parents[1] / "standins" / "docker"
    far, here = tmp_path / "far", tmp_path / "here"
    gpus_csv, apps_csv = DATA / "gpus-8x-busy.csv", DATA / "apps-8x-stale-sglang.csv"
    _fake_smi(far, f'case "$1" in --query-gpu=*) cat {gpus_csv};; '
                   f'--query-compute-apps=*) cat {apps_csv};; esac\n')
    here.mkdir()
    docker = here / "docker"
    docker.write_text(f'#!/bin/sh\nPATH="{far}:$PATH" exec {standin} "$@"\n')
    docker.chmod(docker.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{here}{os.pathsep}/usr/bin{os.pathsep}/bin")
    assert gpu.snapshot() is None  # not on this machine
    launcher = launchers.pick(["docker", "exec", "sglang-box", "python3", "-m",
                               "sglang.launch_server"])
    snap = launcher.gpu_snapshot()
    assert snap is not None
    assert len(snap.gpus) == 8
    assert len(snap.processes) == 8
    assert launcher.gpu_host() == "the GPU host (docker exec sglang-box)"
    (far / "nvidia-smi").unlink()
    assert launcher.gpu_snapshot() is None  # 127 from the far side: none there either
