"""Benchmark 5: server launches per `pytest -m probe` session with -n 1 and -n 4 (demo profile)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from benchmarks.common import PYTHON, ROOT, measure_child


def counting_launcher(root: Path) -> tuple[Path, Path]:
    """A launcher that appends one line per start to a file, then becomes the simulator
    (exec keeps the pid, so the harness's environment and stop checks still see the server)."""
    root.mkdir(parents=True, exist_ok=True)
    counter = root / "launches.txt"
    script = root / "count-and-simulate"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$$ $*" >> "{counter}"\n'
        f'exec "{PYTHON}" -m specgate.testing.simulator "$@"\n', encoding="utf-8")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, counter


def run(root: Path, workers: tuple[int, ...] = (1, 4), select: str = "probe") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in workers:
        work = root / f"launch-n{n}"
        script, counter = counting_launcher(work)
        counter.unlink(missing_ok=True)
        reports = work / "reports"
        argv = [PYTHON, "-m", "pytest", "-m", select, "-n", str(n), "-q", "-p",
                "no:cacheprovider", f"--reports={reports}", f"--sglang-launcher={script}"]
        child = measure_child(argv, cwd=ROOT, env={"PYTHONUNBUFFERED": "1"})
        lines = counter.read_text().splitlines() if counter.exists() else []
        progress = reports / "live" / "progress.log"
        said = [ln for ln in progress.read_text().splitlines() if ": launching " in ln] \
            if progress.exists() else []
        spec = sum(1 for ln in lines if "--speculative-algorithm" in ln)
        verdict_path = reports / "verdict.json"
        outcome = json.loads(verdict_path.read_text())["outcome"] if verdict_path.exists() \
            else None
        out[f"n{n}"] = {"launches": len(lines), "speculative": spec,
                        "baseline": len(lines) - spec, "progress_log_launches": len(said),
                        "wall_s": child.wall_s, "rc": child.rc, "outcome": outcome,
                        "summary": (child.stdout.strip().splitlines() or [""])[-1]}
    out["meets"] = {k: v["baseline"] == 1 and v["speculative"] == 1
                    for k, v in out.items() if k.startswith("n")}
    return out


def rows(result: dict[str, Any]) -> list[list[str]]:
    out = []
    for key, r in result.items():
        if not key.startswith("n"):
            continue
        out.append([f"5 server launches, pytest -m probe -n {key[1:]} (demo)",
                    f"baseline {r['baseline']}, speculative {r['speculative']}",
                    f"{r['wall_s']:.1f} s, outcome {r['outcome']}", "target 1 + 1",
                    "ok" if result["meets"][key] else "MISSED"])
    return out


if __name__ == "__main__":
    print(json.dumps(run(Path(os.environ.get("TMPDIR", "/tmp")) / "specgate-launches")))
