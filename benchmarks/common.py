"""Shared benchmark plumbing: fresh-process measurement, the generated drafter pair, tables."""

from __future__ import annotations

import dataclasses
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def with_root(env: dict[str, str] | None = None) -> dict[str, str]:
    """A child's environment (this process's, or `env`) with the checkout's root on PYTHONPATH:
    a child runs a benchmark as `python -m benchmarks.<module>` from any folder. The root comes
    last, so a specgate installed where PYTHONPATH already points (RS_SITE) is the one imported."""
    out = dict(os.environ if env is None else env)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (out.get("PYTHONPATH", ""), str(ROOT)) if p)
    return out


def json_object(path: Path, what: str) -> dict[str, Any]:
    """The JSON object a file holds; a ValueError naming the file and `what` it should hold
    ("a tune result") when it cannot be read or holds something else."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read {what} ({exc})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not {what} (a JSON object)")
    return doc


def import_package(root: Path, name: str) -> types.ModuleType:
    """Package `name` from a folder that is not on sys.path (an unpacked wheel): its submodules
    then import as usual (`from name.x import y`), through the package's own path."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.machinery.PathFinder.find_spec(name, [str(root)])
    if spec is None or spec.loader is None:
        raise ImportError(f"{root}: holds no package {name!r} (unpack its wheel there)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


@dataclasses.dataclass(frozen=True)
class ChildRun:
    """One child process: wall seconds, its own peak RSS (MB), exit code and stdout."""

    wall_s: float
    peak_rss_mb: float
    rc: int
    stdout: str
    stderr: str

    def json_out(self) -> dict[str, Any]:
        """The last stdout line, which every child entry point prints as JSON."""
        lines = [ln for ln in self.stdout.splitlines() if ln.strip()]
        if self.rc != 0 or not lines:
            raise RuntimeError(f"child exited {self.rc}: {self.stderr[-2000:]}")
        out: dict[str, Any] = json.loads(lines[-1])
        return out


def run_child(argv: Sequence[str], *, env: dict[str, str] | None = None,
              unset: Sequence[str] = (), cwd: Path | None = None,
              timeout_s: float = 600.0) -> ChildRun:
    """Run argv to completion; stdout and stderr are kept, the peak RSS read from the wrapper's
    tag on stderr when there is one (see measured())."""
    full_env = with_root()
    full_env.update(env or {})
    for name in unset:
        full_env.pop(name, None)
    started = time.perf_counter()
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=full_env, cwd=cwd, text=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    wall = time.perf_counter() - started
    rss = _rss_from(err)
    return ChildRun(wall, rss, proc.returncode, out, err)


RSS_TAG = "@@rusage "
RUSAGE_WRAPPER = (
    "import os, resource, subprocess, sys\n"
    "p = subprocess.Popen(sys.argv[1:])\n"
    "_, status, ru = os.wait4(p.pid, 0)\n"
    "sys.stderr.write(f'\\n" + RSS_TAG + "{ru.ru_maxrss}\\n')\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


def measured(argv: Sequence[str]) -> list[str]:
    """argv wrapped so that its own peak RSS is reported: the wrapper wait4()s for exactly that
    pid (RUSAGE_CHILDREN here would be a running maximum over every child ever reaped)."""
    return [PYTHON, "-c", RUSAGE_WRAPPER, *argv]


def _rss_from(stderr: str) -> float:
    for line in reversed(stderr.splitlines()):
        if line.startswith(RSS_TAG):
            return int(line[len(RSS_TAG):]) / 1024.0  # Linux reports KiB
    return float("nan")


def measure_child(argv: Sequence[str], **kwargs: Any) -> ChildRun:
    """run_child on the wrapped argv: wall time of the whole process, peak RSS of the tree's
    largest process (ru_maxrss covers the child and the descendants it waited for)."""
    return run_child(measured(argv), **kwargs)


def drop_cache(paths: Sequence[Path]) -> None:
    """Evict the files' pages (fadvise DONTNEED works without root; clean pages only)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def weight_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.safetensors"))


def allocated_bytes(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def fmt_ratio(a: float, b: float) -> str:
    return f"{a / b:.1f}×" if b > 0 else "n/a"


def table(rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table (header first) that pastes into the README."""
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for k, row in enumerate(rows):
        cells = (str(c).ljust(w) for c, w in zip(row, widths, strict=True))
        lines.append("| " + " | ".join(cells) + " |")
        if k == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def trials_main(run: Callable[[int], dict[str, Any]],
                rows: Callable[[dict[str, Any]], list[list[str]]],
                shown: Callable[[dict[str, Any]], Any] = lambda result: result) -> int:
    """The command line of a simulation benchmark: --trials N (default 400), then the part of
    its result `shown` picks as JSON and its table, one row a line."""
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=400)
    result = run(ap.parse_args().trials)
    print(json.dumps(shown(result), indent=1))
    for row in rows(result):
        print(" | ".join(row))
    return 0
