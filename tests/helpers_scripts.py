"""Loading the scripts under benchmarks/real_sglang/ (not a package) as modules for their tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REAL_SGLANG = Path(__file__).resolve().parent.parent / "benchmarks" / "real_sglang"


def load_script(name: str) -> ModuleType:
    """benchmarks/real_sglang/<name>.py as the module rs_<name>; it stays in sys.modules, where
    dataclasses and pickling look a class's module up."""
    spec = importlib.util.spec_from_file_location(f"rs_{name}", REAL_SGLANG / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
