"""GPU state from nvidia-smi: which GPUs there are, their memory, and which processes hold them."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import time
from collections.abc import Iterable, Sequence

from specgate.core.errors import SpecgateError

# uuid is queried besides the documented fields because compute apps name their GPU by uuid only.
GPU_QUERY = "index,uuid,name,driver_version,memory.total,memory.used"
APPS_QUERY = "pid,process_name,used_memory,gpu_uuid"
HELD_MEMORY_MIB = 1024  # an idle GPU shows 0 to a few hundred MiB of driver overhead


class NvidiaSmiError(SpecgateError):
    """nvidia-smi exists but failed or printed something that cannot be parsed."""


@dataclasses.dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str
    driver_version: str
    memory_total_mib: int | None
    memory_used_mib: int | None


@dataclasses.dataclass(frozen=True)
class GpuProcess:
    pid: int
    process_name: str
    used_memory_mib: int | None
    gpu_uuid: str
    gpu_index: int | None


@dataclasses.dataclass(frozen=True)
class GpuSnapshot:
    gpus: tuple[Gpu, ...]
    processes: tuple[GpuProcess, ...]
    taken_at: float

    def gpu(self, index: int) -> Gpu | None:
        return next((g for g in self.gpus if g.index == index), None)


@dataclasses.dataclass(frozen=True)
class GpuFacts:
    """What the GPUs a server runs on are (model, count, driver), from one nvidia-smi snapshot."""

    selected: tuple[int, ...] | str  # nvidia-smi indices, or CUDA_VISIBLE_DEVICES as written
    names: tuple[str, ...] = ()
    drivers: tuple[str, ...] = ()
    unknown: str = ""  # why there are no facts: no nvidia-smi here, or the error it gave


def facts(selected: Sequence[int] | str) -> GpuFacts:
    """The selected GPUs' facts from one snapshot (every GPU for a selection not by index)."""
    chosen = selected if isinstance(selected, str) else tuple(selected)
    try:
        snap = snapshot()
    except NvidiaSmiError as exc:
        return GpuFacts(chosen, unknown=f"nvidia-smi failed: {exc}")
    if snap is None:
        return GpuFacts(chosen, unknown="no nvidia-smi on this machine")
    gpus = [g for g in snap.gpus if isinstance(chosen, str) or g.index in chosen]
    return GpuFacts(chosen, tuple(sorted(g.name for g in gpus)),
                    tuple(sorted({g.driver_version for g in gpus})))


def parse_gpus(text: str) -> list[Gpu]:
    """Rows of `--query-gpu=GPU_QUERY --format=csv,noheader,nounits`."""
    gpus = []
    for fields in _rows(text, 6, "--query-gpu"):
        gpus.append(Gpu(
            index=_int(fields[0], "index") or 0,
            uuid=fields[1],
            name=fields[2],
            driver_version=fields[3],
            memory_total_mib=_int(fields[4], "memory.total"),
            memory_used_mib=_int(fields[5], "memory.used"),
        ))
    return gpus


def parse_apps(text: str, gpus: Iterable[Gpu] = ()) -> list[GpuProcess]:
    """Rows of `--query-compute-apps=APPS_QUERY --format=csv,noheader,nounits`."""
    index_of = {g.uuid: g.index for g in gpus}
    apps = []
    for fields in _rows(text, 4, "--query-compute-apps"):
        pid = _int(fields[0], "pid")
        if pid is None:
            continue
        apps.append(GpuProcess(
            pid=pid,
            process_name=fields[1],
            used_memory_mib=_int(fields[2], "used_memory"),
            gpu_uuid=fields[3],
            gpu_index=index_of.get(fields[3]),
        ))
    return apps


def snapshot(nvidia_smi: str = "nvidia-smi", timeout_s: float = 20.0) -> GpuSnapshot | None:
    """The GPUs and their compute processes now, or None where there is no nvidia-smi."""
    exe = shutil.which(nvidia_smi)
    if exe is None:
        return None
    gpus = parse_gpus(_query(exe, f"--query-gpu={GPU_QUERY}", timeout_s))
    apps = parse_apps(_query(exe, f"--query-compute-apps={APPS_QUERY}", timeout_s), gpus)
    return GpuSnapshot(tuple(gpus), tuple(apps), time.time())


def busy_on(snap: GpuSnapshot, gpus: Iterable[int] | None = None) -> list[GpuProcess]:
    """Compute processes on the given GPU indices (all GPUs when None)."""
    wanted = None if gpus is None else set(gpus)
    return [p for p in snap.processes
            if wanted is None or p.gpu_index is None or p.gpu_index in wanted]


def memory_held(snap: GpuSnapshot, gpus: Iterable[int] | None = None,
                min_mib: int = HELD_MEMORY_MIB) -> list[Gpu]:
    """GPUs (of the given indices) whose used memory is at least min_mib."""
    wanted = None if gpus is None else set(gpus)
    return [g for g in snap.gpus
            if (wanted is None or g.index in wanted)
            and g.memory_used_mib is not None and g.memory_used_mib >= min_mib]


def _query(exe: str, query: str, timeout_s: float) -> str:
    argv = [exe, query, "--format=csv,noheader,nounits"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    except subprocess.TimeoutExpired:
        raise NvidiaSmiError(f"{' '.join(argv)} did not answer within {timeout_s:.0f} s; "
                             "the driver may be hung (check dmesg)") from None
    except OSError as exc:
        raise NvidiaSmiError(f"{exe} could not be run: {exc}") from None
    if done.returncode != 0:
        said = (done.stdout + done.stderr).strip().splitlines()
        raise NvidiaSmiError(f"{' '.join(argv)} exited with code {done.returncode}: "
                             f"{said[0] if said else '(no output)'}")
    return done.stdout


def _rows(text: str, width: int, what: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("No running"):
            continue
        fields = [f.strip() for f in line.split(",")]
        # GPU names never contain commas today, but a process name might.
        if len(fields) > width and what == "--query-compute-apps":
            fields = [fields[0], ",".join(fields[1:-(width - 2)]), *fields[-(width - 2):]]
        if len(fields) != width:
            raise NvidiaSmiError(f"nvidia-smi {what}: expected {width} comma-separated fields, "
                                 f"found {len(fields)} in {line!r}")
        rows.append(fields)
    return rows


def _int(value: str, field: str) -> int | None:
    # [N/A] and [Not Supported] appear in containers, under MIG and on some drivers.
    if value.startswith("[") or value in ("", "N/A"):
        return None
    try:
        return int(float(value))
    except ValueError:
        raise NvidiaSmiError(f"nvidia-smi: field {field} is {value!r}, expected a number") from None
