"""The demo profile's assets: small generated drafters and a simulated target, made on first use."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from specgate import generate
from specgate.simulator.model import SIM_FILE

# Bump when the assets change, so old ones are rebuilt.
ASSETS_VERSION = "1"

# The seeds' deployment (decode 12.2 ms = 82 tok/s; a ~20 ms verify cycle at this speed-up)
# scaled ten times faster so the demo runs in seconds, with a drafter that clears break-even.
DEMO_TIMING = {
    "decode_ms": 1.22,
    "verify_ms": 1.8,
    "draft_step_ms": 0.1,
    "prefill_base_ms": 2.0,
    "prefill_ms_per_token": 0.01,
    "start_delay_s": 0.5,
}
DEMO_ACCEPTANCE = [0.85, 0.8]
REFERENCE_ACCEPTANCE = [0.8, 0.75]


def ensure_assets(root: Path) -> Path:
    """Write the demo target, drafter and reference drafter under root unless already there."""
    stamp = root / ".assets-version"
    if stamp.exists() and stamp.read_text().strip() == ASSETS_VERSION:
        return root
    if root.exists():
        shutil.rmtree(root)
    shape = generate.small()
    target = generate.write_target_config(root / "target", "small")
    _write_sim(target, DEMO_TIMING)
    ids = generate.default_token_ids(shape, seed=0)
    drafter = generate.write_drafter(root / "drafter", shape, token_ids=ids, seed=1,
                                     fill="random")
    _write_sim(drafter, {"acceptance": DEMO_ACCEPTANCE,
                         "categories": {"coding": {"keywords": ["code", "python", "function"],
                                                   "multiplier": 1.05},
                                        "translation": {"keywords": ["translate"],
                                                        "multiplier": 0.9}}})
    # The reference is a drafter of the same family saved the legacy way (midlayer.* names, no
    # embed_tokens), as the AQ-MedAI export is: shape parity must see through both differences.
    reference = generate.write_drafter(root / "reference", shape, token_ids=ids, seed=2,
                                       fill="random", name_style="midlayer",
                                       include_embed=False)
    _write_sim(reference, {"acceptance": REFERENCE_ACCEPTANCE})
    stamp.write_text(ASSETS_VERSION + "\n")
    return root


def _write_sim(folder: Path, data: dict[str, object]) -> None:
    (folder / SIM_FILE).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
