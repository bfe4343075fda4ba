"""Loading the scripts under benchmarks/real_sglang/ and benchmarks/real_model/ (not packages) as
modules for their tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REAL_SGLANG = Path(__file__).resolve().parent.parent / "benchmarks" / "real_sglang"
REAL_MODEL = REAL_SGLANG.parent / "real_model"


def load_script(name: str, folder: Path = REAL_SGLANG, prefix: str = "rs") -> ModuleType:
    """<folder>/<name>.py as the module <prefix>_<name>; it stays in sys.modules, where
    dataclasses and pickling look a class's module up."""
    spec = importlib.util.spec_from_file_location(f"{prefix}_{name}", folder / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def load_real_model_script(name: str) -> ModuleType:
    """benchmarks/real_model/<name>.py as the module rm_<name>."""
    return load_script(name, REAL_MODEL, "rm")
