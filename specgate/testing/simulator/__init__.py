"""A stand-in for an SGLang 0.5.x server: known timing and acceptance model, fault modes."""

from __future__ import annotations

from specgate.testing.simulator.model import SimParams, Truth, load_params, truth, truth_for_profile

__all__ = ["SimParams", "Truth", "load_params", "truth", "truth_for_profile"]
