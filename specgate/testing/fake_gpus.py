"""Fake GPUs for the simulator: an inventory, the processes on each, and an `nvidia-smi` over them.

A folder named by SPECGATE_SIM_GPUS holds `gpus.json` (the machine's GPUs: index, uuid, model,
driver, memory, clocks, power limit) and `procs/<pid>` (one file per simulated TP rank: the GPU
index it runs on and the MiB it holds). The simulator places each TP rank as SGLang does (CUDA
device base + rank × step among CUDA_VISIBLE_DEVICES) and records it there; `python -m
specgate.testing.fake_gpus` answers nvidia-smi's --query-gpu and --query-compute-apps from the
folder, listing only ranks whose process is still alive. Put a `nvidia-smi` that runs it first
on PATH (install_nvidia_smi) and specgate's GPU checks see the simulator's ranks on their GPUs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ENV_GPUS = "SPECGATE_SIM_GPUS"
INVENTORY = "gpus.json"
PROCS = "procs"
RANK_MIB = 2048


@dataclasses.dataclass(frozen=True)
class FakeGpu:
    index: int
    name: str = "NVIDIA H200"
    driver_version: str = "580.159.04"
    memory_total_mib: int = 143771
    clocks_max_sm: str = "1980"
    clocks_max_memory: str = "3201"
    clocks_applications_graphics: str = "1980"
    clocks_applications_memory: str = "3201"
    power_limit: str = "700.00"

    @property
    def uuid(self) -> str:
        return f"GPU-{self.index:08d}-5117-0000-0000-000000000000"


def make(folder: Path, gpus: Sequence[FakeGpu]) -> Path:
    """Write a machine's fake GPUs into folder (created); returns the folder."""
    (folder / PROCS).mkdir(parents=True, exist_ok=True)
    doc = [dataclasses.asdict(g) for g in gpus]
    (folder / INVENTORY).write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return folder


def inventory(folder: Path) -> list[FakeGpu]:
    doc = json.loads((folder / INVENTORY).read_text(encoding="utf-8"))
    return [FakeGpu(**entry) for entry in doc]


def install_nvidia_smi(bin_dir: Path, python: str = sys.executable) -> Path:
    """An executable `nvidia-smi` in bin_dir that answers from $SPECGATE_SIM_GPUS."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / "nvidia-smi"
    exe.write_text(f'#!/bin/sh\nexec "{python}" -m specgate.testing.fake_gpus "$@"\n',
                   encoding="utf-8")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return exe


def folder_of(env: Mapping[str, str]) -> Path | None:
    value = env.get(ENV_GPUS)
    return Path(value) if value else None


class PlacementError(Exception):
    """A TP rank would need a CUDA device the machine (or CUDA_VISIBLE_DEVICES) does not have."""


def place(env: Mapping[str, str], tp_size: int, base_gpu_id: int = 0,
          gpu_id_step: int = 1) -> list[int | None]:
    """The GPU index each TP rank runs on, as SGLang places them: device ordinal base + rank ×
    step among the visible devices. None for a rank whose GPU has no index (no fake GPUs, or a
    CUDA_VISIBLE_DEVICES of UUIDs)."""
    folder = folder_of(env)
    known = [g.index for g in inventory(folder)] if folder is not None else None
    written = env.get("CUDA_VISIBLE_DEVICES")
    parts = [p.strip() for p in written.split(",") if p.strip()] if written is not None else None
    if parts is not None and not all(p.isdigit() for p in parts):
        return [None] * tp_size
    visible = [int(p) for p in parts] if parts is not None else known
    placed: list[int | None] = []
    for rank in range(tp_size):
        ordinal = base_gpu_id + rank * gpu_id_step
        if visible is None:
            placed.append(None)
            continue
        if ordinal >= len(visible):
            raise PlacementError(
                f"RuntimeError: CUDA error: invalid device ordinal (TP rank {rank} wants CUDA "
                f"device {ordinal}; {len(visible)} visible"
                + (f": CUDA_VISIBLE_DEVICES={written}" if written is not None else "") + ")")
        index = visible[ordinal]
        if known is not None and index not in known:
            raise PlacementError(
                f"RuntimeError: CUDA error: invalid device ordinal (CUDA_VISIBLE_DEVICES names "
                f"GPU {index}; this machine has GPUs {known})")
        placed.append(index)
    return placed


def record(env: Mapping[str, str], pid: int, index: int | None, mib: int = RANK_MIB) -> None:
    """Note that pid holds mib MiB on GPU index (nothing without fake GPUs)."""
    folder = folder_of(env)
    if folder is None or index is None:
        return
    (folder / PROCS).mkdir(parents=True, exist_ok=True)
    (folder / PROCS / str(pid)).write_text(f"{index},{mib}\n", encoding="utf-8")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def processes(folder: Path) -> list[tuple[int, int, int]]:
    """(pid, GPU index, MiB) of every recorded rank still alive."""
    out = []
    procs = folder / PROCS
    for path in sorted(procs.iterdir()) if procs.is_dir() else []:
        if not path.name.isdigit() or not _alive(int(path.name)):
            continue
        try:
            index, mib = (int(v) for v in path.read_text(encoding="utf-8").split(","))
        except (OSError, ValueError):
            continue
        out.append((int(path.name), index, mib))
    return out


def _gpu_field(gpu: FakeGpu, used: int, field: str) -> str:
    values: dict[str, Any] = {
        "index": gpu.index, "uuid": gpu.uuid, "name": gpu.name,
        "driver_version": gpu.driver_version, "memory.total": gpu.memory_total_mib,
        "memory.used": used, "clocks.max.sm": gpu.clocks_max_sm,
        "clocks.max.memory": gpu.clocks_max_memory,
        "clocks.applications.graphics": gpu.clocks_applications_graphics,
        "clocks.applications.memory": gpu.clocks_applications_memory,
        "power.limit": gpu.power_limit,
    }
    if field not in values:
        raise KeyError(field)
    return str(values[field])


def answer(folder: Path, argv: Sequence[str]) -> tuple[int, str]:
    """nvidia-smi's exit code and output for argv (the two queries specgate sends)."""
    query = next((a for a in argv if a.startswith("--query-")), None)
    if query is None or "--format=csv,noheader,nounits" not in argv:
        return 2, "fake nvidia-smi: only --query-gpu/--query-compute-apps with " \
                  "--format=csv,noheader,nounits are answered\n"
    kind, _, fields = query.partition("=")
    gpus = inventory(folder)
    procs = processes(folder)
    lines = []
    if kind == "--query-gpu":
        for gpu in gpus:
            used = sum(mib for _pid, index, mib in procs if index == gpu.index)
            try:
                lines.append(", ".join(_gpu_field(gpu, used, f) for f in fields.split(",")))
            except KeyError as exc:
                return 2, f'Field "{exc.args[0]}" is not a valid field to query.\n'
    elif kind == "--query-compute-apps":
        uuid = {g.index: g.uuid for g in gpus}
        for pid, index, mib in procs:
            row = {"pid": str(pid), "process_name": "python3", "used_memory": str(mib),
                   "gpu_uuid": uuid.get(index, "GPU-unknown")}
            lines.append(", ".join(row.get(f, "[N/A]") for f in fields.split(",")))
    else:
        return 2, f"fake nvidia-smi: {kind} is not answered\n"
    return 0, "".join(line + "\n" for line in lines)


def main(argv: Sequence[str] | None = None) -> int:
    folder = folder_of(os.environ)
    if folder is None:
        print(f"fake nvidia-smi: {ENV_GPUS} is not set", file=sys.stderr)
        return 9  # as nvidia-smi without a driver
    code, text = answer(folder, list(sys.argv[1:] if argv is None else argv))
    (sys.stdout if code == 0 else sys.stderr).write(text)
    return code


if __name__ == "__main__":
    sys.exit(main())
