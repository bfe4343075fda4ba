"""What a server said about its own answers outside the timed passes: the prompts' token ids,
its answers to every prompt sent as one batch, and its logprobs along answers (the evidence
spec.parity judges divergences by, results/parity.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

# How many of a position's best tokens a server is asked for.
TOP_K = 5


@dataclasses.dataclass(frozen=True)
class Scored:
    """A server's logprobs along one token sequence after a prompt: at position j, the logprob
    of tokens[j] given the prompt and tokens[:j], and the server's best (token, logprob) there.

    forward: "prefill" when the server scored the whole sequence as input (a scoring request),
    "decode" when it reported them with an answer it generated (each from the forward that
    chose it)."""

    prompt_id: str
    tokens: tuple[int, ...]
    chosen: tuple[float | None, ...]
    top: tuple[tuple[tuple[int, float], ...], ...]
    forward: str
    source: str

    def best(self, j: int) -> tuple[int, float] | None:
        return self.top[j][0] if j < len(self.top) and self.top[j] else None

    def logprob(self, j: int, token: int) -> float | None:
        """The logprob of `token` at position j: the sequence's own, or one of the best."""
        if j < len(self.tokens) and self.tokens[j] == token and self.chosen[j] is not None:
            return self.chosen[j]
        if j < len(self.top):
            for candidate, value in self.top[j]:
                if candidate == token:
                    return value
        return None

    def to_json(self) -> dict[str, Any]:
        return {"prompt_id": self.prompt_id, "tokens": list(self.tokens),
                "chosen": [None if v is None else round(v, 5) for v in self.chosen],
                "top": [[[t, round(v, 5)] for t, v in row] for row in self.top],
                "forward": self.forward, "source": self.source}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Scored:
        return cls(prompt_id=str(data["prompt_id"]),
                   tokens=tuple(int(t) for t in data["tokens"]),
                   chosen=tuple(None if v is None else float(v) for v in data["chosen"]),
                   top=tuple(tuple((int(t), float(v)) for t, v in row) for row in data["top"]),
                   forward=str(data["forward"]), source=str(data["source"]))


@dataclasses.dataclass(frozen=True)
class AnswerEvidence:
    """One server's evidence. error: why it could not all be gathered ("" when it was)."""

    top_k: int = TOP_K
    prompt_ids: Mapping[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    # Its answers to every prompt sent in one /generate body (another batch composition than
    # the timed passes'), and how many that batch held.
    batch: Mapping[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    batch_size: int = 0
    scored: tuple[Scored, ...] = ()
    texts: Mapping[int, str] = dataclasses.field(default_factory=dict)  # token id → its text
    error: str = ""

    def scored_along(self, prompt_id: str, tokens: Sequence[int], forward: str = "prefill"
                     ) -> Scored | None:
        """A scoring of this prompt whose sequence starts with `tokens` (the longest first)."""
        found = [s for s in self.scored if s.prompt_id == prompt_id and s.forward == forward
                 and tuple(s.tokens[:len(tokens)]) == tuple(tokens)]
        return max(found, key=lambda s: len(s.tokens), default=None)

    def text(self, token: int) -> str:
        return self.texts.get(token, f"<token {token}>")

    def to_json(self) -> dict[str, Any]:
        return {"top_k": self.top_k,
                "prompt_ids": {k: list(v) for k, v in self.prompt_ids.items()},
                "batch": {k: list(v) for k, v in self.batch.items()},
                "batch_size": self.batch_size,
                "scored": [s.to_json() for s in self.scored],
                "texts": {str(k): v for k, v in sorted(self.texts.items())},
                "error": self.error}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AnswerEvidence:
        return cls(top_k=int(data.get("top_k", TOP_K)),
                   prompt_ids={str(k): tuple(int(t) for t in v)
                               for k, v in (data.get("prompt_ids") or {}).items()},
                   batch={str(k): tuple(int(t) for t in v)
                          for k, v in (data.get("batch") or {}).items()},
                   batch_size=int(data.get("batch_size", 0)),
                   scored=tuple(Scored.from_json(s) for s in data.get("scored") or ()),
                   texts={int(k): str(v) for k, v in (data.get("texts") or {}).items()},
                   error=str(data.get("error", "")))
