"""One exception type per kind of user-facing failure."""

from __future__ import annotations


class SpecgateError(Exception):
    """Base of every error specgate reports to a user as a message, not a traceback."""


class ProfileError(SpecgateError):
    """A profile file is missing, malformed, or names a key that does not exist."""


class CheckpointError(SpecgateError):
    """A drafter checkpoint (config.json, safetensors, shard index, vocab map) cannot be read."""


class ServerError(SpecgateError):
    """The SGLang server could not be launched, did not get ready, died, or answered wrongly."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail
        if log_tail:
            self.add_note("last lines of the server log:\n" + log_tail)

    def full_message(self) -> str:
        text = str(self)
        if self.log_tail:
            text += "\n--- last lines of the server log ---\n" + self.log_tail
        return text


class DataError(SpecgateError):
    """A hidden-state dump, metrics log or map file cannot be read."""
