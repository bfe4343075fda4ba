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
# What else decides a GPU's speed: its maximum and application clocks (MHz) and power limit (W).
CLOCKS_QUERY = ("index,clocks.max.sm,clocks.max.memory,clocks.applications.graphics,"
                "clocks.applications.memory,power.limit")
HELD_MEMORY_MIB = 1024  # an idle GPU shows 0 to a few hundred MiB of driver overhead


class NvidiaSmiError(SpecgateError):
    """nvidia-smi exists but failed or printed something that cannot be parsed."""


class NvidiaSmiMissing(NvidiaSmiError):
    """The machine a launcher reaches has no nvidia-smi."""


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
    """What the GPUs a server runs on are (model, count, driver, clocks), from one nvidia-smi
    snapshot."""

    selected: tuple[int, ...] | str  # nvidia-smi indices, or CUDA_VISIBLE_DEVICES as written
    names: tuple[str, ...] = ()
    drivers: tuple[str, ...] = ()
    unknown: str = ""  # why there are no facts: no nvidia-smi here, or the error it gave
    # Each distinct "max SM/memory MHz, applications MHz, power limit W" of the selected GPUs;
    # empty when nvidia-smi could not say.
    clocks: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class GpuClocks:
    index: int
    max_sm: str
    max_memory: str
    app_graphics: str
    app_memory: str
    power_limit: str

    def text(self) -> str:
        return (f"max {self.max_sm}/{self.max_memory} MHz, applications "
                f"{self.app_graphics}/{self.app_memory} MHz, power limit {self.power_limit} W")


def facts(selected: Sequence[int] | str) -> GpuFacts:
    """The selected GPUs' facts from one snapshot (every GPU for a selection not by index)."""
    return facts_of([selected])[0]


def facts_of(selections: Sequence[Sequence[int] | str]) -> list[GpuFacts]:
    """Each selection's facts, all from one snapshot (one selection per server)."""
    chosen = [s if isinstance(s, str) else tuple(s) for s in selections]
    try:
        snap = snapshot()
    except NvidiaSmiError as exc:
        return [GpuFacts(c, unknown=f"nvidia-smi failed: {exc}") for c in chosen]
    if snap is None:
        return [GpuFacts(c, unknown="no nvidia-smi on this machine") for c in chosen]
    try:
        clocks = {c.index: c.text() for c in query_clocks()}
    except NvidiaSmiError:
        clocks = {}  # a driver without these fields: the model and driver still count
    out = []
    for selection in chosen:
        gpus = [g for g in snap.gpus if isinstance(selection, str) or g.index in selection]
        known = all(g.index in clocks for g in gpus)
        out.append(GpuFacts(selection, tuple(sorted(g.name for g in gpus)),
                            tuple(sorted({g.driver_version for g in gpus})),
                            clocks=tuple(sorted({clocks[g.index] for g in gpus})) if known
                            else ()))
    return out


# A difference of these makes two servers' figures incomparable: other kernels, another memory
# system. Clocks and power limits are limits, not the clocks a GPU ran at: reported, not decisive.
DECISIVE = ("GPU model:", "driver:")


def decisive(differences: Sequence[str]) -> list[str]:
    """The differences (from `differences`) of GPU model or driver."""
    return [d for d in differences if d.startswith(DECISIVE)]


def differences(a: GpuFacts, b: GpuFacts,
                names: tuple[str, str] = ("baseline", "speculative")) -> list[str]:
    """How two servers' GPUs differ in what decides their speed (model and count, driver,
    clocks and power limit), one sentence each; [] when they agree or either is unknown."""
    if a.unknown or b.unknown:
        return []

    def where(facts: GpuFacts) -> str:
        chosen = facts.selected if isinstance(facts.selected, str) else list(facts.selected)
        return f"GPUs {chosen}"

    def listed(values: tuple[str, ...]) -> str:
        return "; ".join(values) or "?"

    out = []
    if a.names != b.names:
        out.append(f"GPU model: the {names[0]} on {where(a)} ({listed(a.names)}), the "
                   f"{names[1]} on {where(b)} ({listed(b.names)})")
    if a.drivers != b.drivers:
        out.append(f"driver: the {names[0]} on {listed(a.drivers)}, the {names[1]} on "
                   f"{listed(b.drivers)}")
    if a.clocks and b.clocks and a.clocks != b.clocks:
        out.append(f"clocks: the {names[0]} on {where(a)} ({listed(a.clocks)}), the "
                   f"{names[1]} on {where(b)} ({listed(b.clocks)})")
    return out


def query_clocks(nvidia_smi: str = "nvidia-smi", timeout_s: float = 20.0) -> list[GpuClocks]:
    """Every GPU's clocks and power limit ([] where there is no nvidia-smi)."""
    exe = shutil.which(nvidia_smi)
    if exe is None:
        return []
    return parse_clocks(_query(exe, f"--query-gpu={CLOCKS_QUERY}", timeout_s))


def parse_clocks(text: str) -> list[GpuClocks]:
    """Rows of `--query-gpu=CLOCKS_QUERY --format=csv,noheader,nounits`."""
    return [GpuClocks(_int(f[0], "index") or 0, *f[1:]) for f in _rows(text, 6, "--query-gpu")]


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


def snapshot(nvidia_smi: str = "nvidia-smi", timeout_s: float = 20.0,
             prefix: Sequence[str] = ()) -> GpuSnapshot | None:
    """The GPUs and their compute processes now, or None where there is no nvidia-smi. prefix:
    a launcher's command that reaches another machine (`ssh gpu-box`), whose GPUs are listed."""
    exe = nvidia_smi if prefix else shutil.which(nvidia_smi)
    if exe is None:
        return None
    try:
        gpus = parse_gpus(_query(exe, f"--query-gpu={GPU_QUERY}", timeout_s, prefix))
    except NvidiaSmiMissing:
        return None
    apps = parse_apps(_query(exe, f"--query-compute-apps={APPS_QUERY}", timeout_s, prefix), gpus)
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


def _query(exe: str, query: str, timeout_s: float, prefix: Sequence[str] = ()) -> str:
    argv = [*prefix, exe, query, "--format=csv,noheader,nounits"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                              check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise NvidiaSmiError(f"{' '.join(argv)} did not answer within {timeout_s:.0f} s; "
                             "the driver may be hung (check dmesg)") from None
    except OSError as exc:
        raise NvidiaSmiError(f"{exe} could not be run: {exc}") from None
    if prefix and done.returncode == 127:  # the shell there found no such command
        raise NvidiaSmiMissing(f"{exe} is not on the far side's PATH")
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
