"""The machine-readable verdict: reports/verdict.json, written atomically and often."""

from __future__ import annotations

import datetime as _dt
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from specgate.claims.figures import decidable_of, key_figures, latency_of
from specgate.claims.result import ClaimResult, Status
from specgate.core import files
from specgate.core.redact import redact_urls

SCHEMA = 1


def outcome_of(claims: Iterable[ClaimResult], *, interrupted: bool = False,
               internal_error: bool = False) -> str:
    """passed, failed, error or interrupted for a set of claim results.

    A definite failure outranks a broken claim: the checkpoint is known not to meet a claim even
    if another could not be evaluated. A run with no evaluated claim is an error, never a pass.
    """
    if interrupted:
        return "interrupted"
    statuses = [c.status for c in claims]
    if Status.FAILED in statuses:
        return "failed"
    if internal_error or Status.BROKEN in statuses:
        return "error"
    if not any(s is Status.PASSED for s in statuses):
        return "error"
    return "passed"


def build(
    claims: list[ClaimResult],
    *,
    profile: str,
    drafter: str | None,
    outcome: str,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "profile": profile,
        "drafter": drafter,
        "outcome": outcome,
        "written_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }
    if extra:
        doc.update(extra)
    doc["counts"] = {s.value: sum(1 for c in claims if c.status is s) for s in Status}
    doc["figures"] = {f.key: f.to_json() for f in key_figures(claims)}
    doc["latency"] = latency_of(claims)
    doc["decidable"] = decidable_of(claims)
    doc["causes"] = causes_of(claims)
    doc["claims"] = [{k: v for k, v in c.to_json().items() if k != "cause"} for c in claims]
    return doc


def build_matrix(
    by_checkpoint: list[tuple[str, ClaimResult]],
    run_wide: list[ClaimResult],
    *,
    profile: str,
    outcome: str,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A checkpoint matrix's verdict over all its checkpoints: every claim of every checkpoint,
    each named with its checkpoint, then the claims of the run itself (a refused reports folder,
    a profile that could not be read), which name none.

    The figures, latency and decidable speed-up are each checkpoint's own, in its row of
    "checkpoints" (rows named in `extra`, else one a checkpoint): at the top they stay empty, since
    no one checkpoint's speed-up is the matrix's."""
    claims = [result for _name, result in by_checkpoint] + run_wide
    doc = build(claims, profile=profile, drafter=None, outcome=outcome, extra=extra)
    named = [name for name, _result in by_checkpoint] + [None] * len(run_wide)
    doc["claims"] = [{**claim, "checkpoint": name}
                     for claim, name in zip(doc["claims"], named, strict=True)]
    own: dict[str, list[ClaimResult]] = {}
    for name, result in by_checkpoint:
        own.setdefault(name, []).append(result)
    rows = {str(row.get("checkpoint")): row for row in doc.get("checkpoints") or []
            if isinstance(row, dict)}
    order = list(rows) + [name for name in own if name not in rows]
    doc["checkpoints"] = [rows.get(name, {"checkpoint": name}) | {
        "figures": {f.key: f.to_json() for f in key_figures(own.get(name, []))},
        "latency": latency_of(own.get(name, [])), "decidable": decidable_of(own.get(name, []))}
        for name in order]
    doc["figures"], doc["latency"], doc["decidable"] = {}, None, None
    return doc


def causes_of(claims: Iterable[ClaimResult]) -> list[dict[str, Any]]:
    """Each reason that kept claims from being evaluated, once, with the claims it broke (in
    the order they ran): a server that did not start is one cause of every live claim."""
    grouped: dict[str, list[str]] = {}
    for claim in claims:
        if claim.cause and claim.status is Status.BROKEN:
            grouped.setdefault(claim.cause, []).append(claim.id)
    return [{"message": cause, "claims": ids} for cause, ids in grouped.items()]


def write(path: Path, doc: dict[str, Any]) -> None:
    """Write atomically: a reader (or a crash) never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".verdict-", dir=path.parent)
    try:
        # mkstemp makes the file 0600; the verdict is read like junit.xml (a CI uploader running
        # as another user), so it takes the mode any file the run writes gets from the umask.
        os.fchmod(fd, 0o666 & ~files.umask())
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            # No URL's password (--server-url=http://user:PASSWORD@host) reaches the file.
            fh.write(redact_urls(dumps(doc)))
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def dumps(doc: dict[str, Any]) -> str:
    """The verdict as text: indented, with one claim a line.

    Indented JSON goes through Python's pure encoder; the claims, which grow with the run, are
    each encoded by the C encoder on a line of their own, so writing stays cheap per claim."""
    head = {k: v for k, v in doc.items() if k != "claims"}
    text = json.dumps(head, indent=2, allow_nan=False)
    if "claims" not in doc:
        return text
    lines = ",\n".join("    " + json.dumps(c, allow_nan=False) for c in doc["claims"])
    body = f"[\n{lines}\n  ]" if lines else "[]"
    return text[:-2] + f',\n  "claims": {body}\n}}' if head else f'{{\n  "claims": {body}\n}}'


def read(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = files.read_json(path, limit=files.LOG_BYTES)
    return data
