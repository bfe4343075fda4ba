"""The table of claims: each claim id once, with its phase, family, what it needs and does,
and the key figures it carries. Claim modules, levels, figures, the history and the report read
their ids here; the suites' tests name them (tests/claims/test_claim_table.py holds the two
together, and docs/claims.md to both)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Claim:
    """One claim: its stable id (users' CI scripts read it), its phase, and how it runs."""

    id: str
    phase: str
    gate: bool  # a drafter checkpoint can miss it: `pytest -m gate` selects it
    live: bool = False  # it needs the servers
    probe: bool = True  # Phase 0's quick probe selects it
    per_level: bool = False  # also judged at each other [bench] concurrency level, `<id>@c<N>`
    # The key figures it measures, by their name in verdict.json's "figures" and the history.
    figures: tuple[str, ...] = ()

    @property
    def family(self) -> str:
        return self.id.split(".", 1)[0]

    def at(self, level: int) -> str:
        """Its id at another concurrency level: spec.speedup@c16."""
        return f"{self.id}@c{level}"

    def of(self, field: str) -> str:
        """A parametrized claim's id for one field (config.hidden_size)."""
        return self.id.replace("{config_field}", field)


# Phase 0, offline: the checkpoint.
CONFIG_FIELD = Claim("config.{config_field}", "phase0", gate=True)
TARGET_COMPAT = Claim("config.target_compat", "phase0", gate=True)
WEIGHTS_LAYOUT = Claim("weights.layout", "phase0", gate=True)
SHAPE_PARITY = Claim("weights.shape_parity", "phase0", gate=True)
WEIGHTS_HEALTH = Claim("weights.health", "phase0", gate=True)
VOCAB_INVARIANTS = Claim("vocab.invariants", "phase0", gate=True)
D2T_MATCH = Claim("vocab.d2t_match", "phase0", gate=True)
T2D_MATCH = Claim("vocab.t2d_match", "phase0", gate=True)
# Phase 0, live: the deployment.
GPU_CLEAN = Claim("env.gpu_clean", "phase0", gate=False, live=True)
SERVER_ENV = Claim("env.server_env", "phase0", gate=False, live=True)
BASELINE_TPS = Claim("perf.baseline_tps", "phase0", gate=False, live=True, per_level=True,
                     figures=("baseline_tps",))
ACCEPT_LEN = Claim("spec.accept_len", "phase0", gate=True, live=True, per_level=True,
                   figures=("accept_len", "accept_pos"))
BREAKEVEN = Claim("spec.breakeven", "phase0", gate=True, live=True, per_level=True,
                  figures=("breakeven",))
SPEEDUP = Claim("spec.speedup", "phase0", gate=True, live=True, per_level=True,
                figures=("speedup", "spec_tps"))
PARITY = Claim("spec.parity", "phase0", gate=True, live=True, per_level=True)
LIVE_AGREEMENT = Claim("eval.live_agreement", "phase0", gate=False, live=True)
REGRESS_ACCEPT_LEN = Claim("regress.accept_len", "phase0", gate=True, live=True)
REGRESS_TPS = Claim("regress.tps", "phase0", gate=True, live=True)
REGRESS_ACCEPT_POS = Claim("regress.accept_pos", "phase0", gate=True, live=True)
# Phase 1: a fine-tune.
INIT_PARITY = Claim("finetune.init_parity", "phase1", gate=False, probe=False)
VOCAB_ALIGNMENT = Claim("finetune.vocab_alignment", "phase1", gate=False, probe=False)
INITIAL_LOSS = Claim("finetune.initial_loss", "phase1", gate=False, probe=False)
PROGRESS = Claim("finetune.progress", "phase1", gate=False, probe=False)
TEACHER_FORCED = Claim("eval.teacher_forced", "phase1", gate=False, probe=False)
# Phase 2: the data of a scale-up.
DATA_COUNTS = Claim("data.counts", "phase2", gate=False, probe=False)
DATA_SHAPES = Claim("data.shapes", "phase2", gate=False, probe=False)
DATA_DTYPES = Claim("data.dtypes", "phase2", gate=False, probe=False)
DATA_FINITE = Claim("data.finite", "phase2", gate=False, probe=False)
DATA_CAPTURE_LAYERS = Claim("data.capture_layers", "phase2", gate=False, probe=False)
DATA_VOCAB_MAP = Claim("data.vocab_map", "phase2", gate=False, probe=False)

ALL: tuple[Claim, ...] = tuple(v for v in dict(globals()).values() if isinstance(v, Claim))
BY_ID: dict[str, Claim] = {c.id: c for c in ALL}
PER_LEVEL: tuple[Claim, ...] = tuple(c for c in ALL if c.per_level)
