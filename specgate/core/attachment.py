"""A file shown beside a claim in the report."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Attachment:
    """A file shown beside a claim in the report (text, csv, json or png)."""

    name: str
    body: bytes | str
    kind: str = "text"
