"""The safetensors differential oracle at bench scale: tests/io/test_safetensors_oracle.py with
SPECGATE_ORACLE_EXAMPLES raised (CI runs 2,000 examples; `tox -e bench` runs 20,000), so more
generated files go to both safetensors.safe_open and specgate's reader and must agree."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

from benchmarks.common import ROOT

TEST = "tests/io/test_safetensors_oracle.py::test_specgate_agrees_with_the_safetensors_library"
FULL_EXAMPLES = 20_000
QUICK_EXAMPLES = 200


def run(examples: int) -> dict[str, Any]:
    env = {**os.environ, "SPECGATE_ORACLE_EXAMPLES": str(examples)}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", TEST, "-q", "-p", "no:cacheprovider",
                           "--hypothesis-show-statistics"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"the oracle disagreed or failed (exit {proc.returncode}):\n"
                           + proc.stdout[-4000:] + proc.stderr[-2000:])
    return {"examples": examples, "seconds": seconds, "agree": True,
            "statistics": proc.stdout[-3000:]}


def rows(result: dict[str, Any]) -> list[list[str]]:
    return [["6 safetensors oracle (generated files, safe_open decides)",
             f"{result['examples']:,} examples, all agree",
             "safetensors.safe_open", f"{result['seconds']:.0f} s",
             "every example agrees: ok" if result["agree"] else "MISSED"]]
