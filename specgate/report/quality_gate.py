"""The report's Quality Gates tab: specgate's gate outcome as Allure 3 quality-gate rules.

One rule, `specgate verdict`, holds the verdict's outcome; one more per claim that decided it
(each failed claim, each broken one, and each cause that broke several claims at once). Allure
3.14 lists only the rules that failed, each with a red cross: a passed verdict leaves the tab
empty and its counter at 0, and a verdict that did not pass lists the verdict and its claims.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

VERDICT_RULE = "specgate verdict"
# What every rule expects: the verdict's outcome, and each claim's status.
EXPECTED = "passed"
# Claim statuses that leave the gate passing: a claim the profile does not ask for is skipped.
_PASSING = ("passed", "skipped")


@dataclasses.dataclass(frozen=True)
class GateRule:
    """One quality-gate rule as the tab shows it: its name in bold, its message below."""

    rule: str
    actual: str
    success: bool
    message: str
    expected: str = EXPECTED

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def gate_rules(doc: Mapping[str, Any] | None, source: Path) -> list[GateRule]:
    """The rules of the verdict read from `source` (None: there is none, or it is not one)."""
    if doc is None or not doc.get("outcome") or not isinstance(doc.get("claims"), list):
        said = "is missing" if doc is None else "holds no outcome and claims"
        return [GateRule(VERDICT_RULE, "unknown", False,
                         f"UNKNOWN: {source} {said}, so no gate outcome goes with these "
                         "results; the gate cannot pass without one")]
    outcome = str(doc["outcome"])
    passed = outcome == EXPECTED
    claims = [c for c in doc["claims"] if isinstance(c, Mapping)]
    causes = [c for c in doc.get("causes") or []
              if isinstance(c, Mapping) and isinstance(c.get("claims"), list) and c["claims"]]
    by_cause = {str(cid) for cause in causes for cid in cause["claims"]}
    deciding = [c for c in claims if c.get("status") == "failed"]
    deciding += [c for c in claims
                 if c.get("status") == "broken" and str(c.get("id")) not in by_cause]
    decided: list[GateRule] = []
    for claim in deciding:
        where = f"[{claim['checkpoint']}] " if claim.get("checkpoint") else ""
        status = str(claim.get("status"))
        decided.append(GateRule(f"{where}{claim.get('id')}", status, status in _PASSING,
                                f"{status.upper()}: {claim.get('message') or ''}".rstrip()))
    for cause in causes:
        ids = [str(cid) for cid in cause["claims"]]
        count = f"{len(ids)} claims" if len(ids) > 1 else "1 claim"
        decided.append(GateRule(", ".join(ids), "broken", False,
                                f"BROKEN ({count} by one cause): {cause.get('message') or ''}"
                                .rstrip()))
    verdict = GateRule(VERDICT_RULE, outcome, passed,
                       _verdict_message(doc, outcome, passed, listed=bool(decided)))
    return _named_once([verdict, *decided])


def passed_note(doc: Mapping[str, Any] | None) -> str | None:
    """What the tab says for a passed verdict, whose rules Allure does not list; None for any
    other verdict."""
    rules = gate_rules(doc, Path("verdict.json"))
    if not all(rule.success for rule in rules):
        return None
    return (f"{VERDICT_RULE}: {rules[0].message}. Every rule passed, and Allure lists only the "
            "rules that failed; the overview shows the outcome and the key figures.")


def _verdict_message(doc: Mapping[str, Any], outcome: str, passed: bool, *,
                     listed: bool) -> str:
    counts = doc.get("counts")
    said = ", ".join(f"{v} {k}" for k, v in counts.items() if v) \
        if isinstance(counts, Mapping) else ""
    out = outcome.upper() + (f" ({said})" if said else "")
    if passed:
        out += ": the gate passes the job"
    else:
        out += ": the gate fails the job" + (", for the claims listed below" if listed else "")
    if doc.get("nothing_ran"):
        out += f". No claim ran: {doc['nothing_ran']}"
    if doc.get("interim") or doc.get("complete") is False:
        out += (". This verdict is not complete: the run stopped before every selected claim "
                "reported, or ended in a usage or internal error")
    return out


def _named_once(rules: list[GateRule]) -> list[GateRule]:
    """Allure keys each rule by its name: a name seen before gets a number."""
    seen: dict[str, int] = {}
    out = []
    for rule in rules:
        seen[rule.rule] = seen.get(rule.rule, 0) + 1
        if seen[rule.rule] > 1:
            rule = dataclasses.replace(rule, rule=f"{rule.rule} ({seen[rule.rule]})")
        out.append(rule)
    return out
