"""The scripts under benchmarks/real_sglang/ and benchmarks/real_model/ as modules for their tests;
a test runs one as `python -m benchmarks.…` with benchmarks.common.with_root's environment."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
REAL_SGLANG = ROOT / "benchmarks" / "real_sglang"
REAL_MODEL = REAL_SGLANG.parent / "real_model"


def load_script(name: str) -> ModuleType:
    """benchmarks/real_sglang/<name>.py, imported as benchmarks.real_sglang.<name>."""
    return importlib.import_module(f"benchmarks.real_sglang.{name}")


def load_real_model_script(name: str) -> ModuleType:
    """benchmarks/real_model/<name>.py, imported as benchmarks.real_model.<name>."""
    return importlib.import_module(f"benchmarks.real_model.{name}")
