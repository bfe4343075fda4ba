"""junit.xml in claims: each claim test's testcase named by its claim id, and a claim the harness
could not judge written as an <error> with its message and cause (a <failure> is a drafter that
failed a claim). pytest writes the file; this rewrites it once pytest has, before it is
published, from what every claim test recorded in it (its properties)."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import xml.etree.ElementTree as ET
from pathlib import Path

from .state import CAUSE_PROP, CHECKPOINT_PROP, CLAIM_ID_PROP, CLAIM_PROP


def rewrite(path: Path) -> None:
    """Rewrite pytest's junit.xml at path in claims; OSError or ParseError when it cannot."""
    tree = ET.parse(path)
    changed = False
    for suite in tree.getroot().iter("testsuite"):
        moved = 0
        for case in suite.iter("testcase"):
            props = {p.get("name", ""): p.get("value", "")
                     for p in case.iterfind("properties/property")}
            claim_id = props.get(CLAIM_ID_PROP)
            if not claim_id:
                continue
            checkpoint = props.get(CHECKPOINT_PROP)
            case.set("name", f"{claim_id}[{checkpoint}]" if checkpoint else claim_id)
            changed = True
            status, message, cause = _claim(props)
            failures = case.findall("failure")
            if status != "broken" and not (status is None and failures):
                continue
            for element in failures + case.findall("error"):
                if status is None and element.tag == "error":
                    continue  # no claim result: pytest's own words are all there is
                moved += element.tag == "failure"
                element.tag = "error"
                if message or cause:
                    element.set("message", f"{claim_id}: {message}" if message else claim_id)
                    element.text = "\n\n".join(t for t in (message, cause) if t)
        if moved:
            for key, step in (("failures", -moved), ("errors", moved)):
                with contextlib.suppress(ValueError):
                    suite.set(key, str(int(suite.get(key, "0")) + step))
    if changed:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tree.write(tmp, encoding="utf-8", xml_declaration=True)
        os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))  # the mode pytest's file had
        os.replace(tmp, path)


def _claim(props: dict[str, str]) -> tuple[str | None, str, str]:
    """The recorded claim's status, message and cause; no status where the claim test recorded
    no result (the harness broke around it: a fixture's error, whose cause it carries)."""
    recorded = props.get(CLAIM_PROP)
    if recorded:
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            doc = json.loads(recorded)
            return (str(doc.get("status")), str(doc.get("message") or ""),
                    str(doc.get("cause") or ""))
    cause = props.get(CAUSE_PROP, "")
    if cause:
        first = next((ln.strip() for ln in cause.splitlines() if ln.strip()), "")
        return "broken", first, cause
    return None, "", ""
