"""The table of claims (specgate/claims/ids.py) against what runs them and what documents them:
one claim test per id in the suites, with the markers the table gives it, and every id in the
claims reference."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import specgate_suites

from specgate.claims import ids

ROOT = Path(__file__).resolve().parents[2]
LEVEL_SUFFIX = "@c{concurrency_level}"


def _claim_tests() -> Iterator[tuple[str, set[str], str]]:
    """(claim id as marked, the test's markers, where) for every claim test of the suites."""
    for info in pkgutil.walk_packages(specgate_suites.__path__, "specgate_suites."):
        module = importlib.import_module(info.name)
        marks = {m.name for m in getattr(module, "pytestmark", [])}
        for name, func in vars(module).items():
            if not name.startswith("test_") or not callable(func):
                continue
            own = getattr(func, "pytestmark", [])
            claim = [m.args[0] for m in own if m.name == "claim"]
            assert len(claim) == 1, f"{info.name}.{name} names no claim or several"
            yield claim[0], marks | {m.name for m in own if m.name != "claim"}, \
                f"{info.name}.{name}"


def test_every_claim_has_one_test_with_the_markers_of_its_row() -> None:
    plain: dict[str, tuple[set[str], str]] = {}
    per_level: dict[str, tuple[set[str], str]] = {}
    for claim_id, marks, where in _claim_tests():
        if claim_id.endswith(LEVEL_SUFFIX):
            per_level[claim_id.removesuffix(LEVEL_SUFFIX)] = (marks, where)
        else:
            assert claim_id not in plain, f"{claim_id}: two tests ({where})"
            plain[claim_id] = (marks, where)
    assert set(plain) == set(ids.BY_ID)
    assert set(per_level) == {c.id for c in ids.PER_LEVEL}
    for claim in ids.ALL:
        marks, where = plain[claim.id]
        wanted = {claim.phase} | ({"gate"} if claim.gate else set()) | (
            {"live"} if claim.live else set()) | ({"probe"} if claim.probe else set())
        assert marks == wanted, f"{where}: markers {sorted(marks)}, the table {sorted(wanted)}"
    for claim in ids.PER_LEVEL:
        marks, where = per_level[claim.id]
        # reported at each other level, never gating
        assert marks == {claim.phase, "probe", "live", "concurrency"}, where


@pytest.mark.parametrize("claim", ids.ALL, ids=[c.id for c in ids.ALL])
def test_every_claim_is_in_the_claims_reference(claim: ids.Claim) -> None:
    reference = (ROOT / "docs" / "claims.md").read_text(encoding="utf-8")
    shown = claim.id.replace("{config_field}", "<field>")
    assert f"`{shown}`" in reference or f"`{claim.family}.*`" in reference
