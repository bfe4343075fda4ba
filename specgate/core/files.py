"""Opening the files specgate reads. Each is checked to be a regular file of bounded size before
a byte of it is read, and JSON is parsed only once its nesting is known to be bounded, so a wrong
path (a named pipe, a device, a folder, a 30 GB file where a config belongs) or a hostile file
(JSON nested thousands of levels deep) is one sentence naming the file: never a run blocked on a
pipe, memory taken by a file that was never meant to be read whole, or a RecursionError.

Every reader of input files goes through here: profiles and matrices, config.json, safetensors
headers and tensor data, shard indexes, d2t/t2d maps, prompt files, chat templates, metrics logs,
JSON Lines stores and hidden-state dumps.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import IO, Any

import numpy as np

# The nesting the safetensors library reads in a header; configs, indexes, prompt records and
# metrics lines nest a handful of levels.
MAX_JSON_DEPTH = 127

MiB = 1 << 20
# Bounds by kind of file: each far above what a real one holds, far below what would hurt.
CONFIG_BYTES = 16 * MiB  # a model's config.json, a tokenizer_config.json, a dump's metadata
TOKENIZER_BYTES = 256 * MiB  # a tokenizer.json (the largest vocabularies': tens of MB)
INDEX_BYTES = 64 * MiB  # model.safetensors.index.json (a 1 TB checkpoint's is a few MB)
PROFILE_BYTES = 1 * MiB  # a profile or a matrix (the shipped ones are a few KB)
TEMPLATE_BYTES = 1 * MiB  # a chat template
PROMPTS_BYTES = 256 * MiB  # a prompt file
LOG_BYTES = 1024 * MiB  # a metrics log, a JSON Lines store
MAP_BYTES = 1024 * MiB  # a .pt vocab map (d2t and t2d of the largest vocabularies: a few MB)
LINE_BYTES = 64 * MiB  # one line of a JSON Lines store


class UnreadableFile(OSError):
    """A path specgate will not read: not a regular file, or over the bound for its kind.

    An OSError, so every reader's handler for an unreadable file reports it; str() is the
    reason alone (the handlers name the file themselves)."""

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(reason)
        self.strerror = reason
        self.filename = str(path)

    def __str__(self) -> str:
        return str(self.strerror)


class JsonTooDeep(ValueError):
    """JSON nested deeper than MAX_JSON_DEPTH."""


def umask() -> int:
    """The process's file mode creation mask, read without changing it (Linux reports it in
    /proc/self/status; elsewhere it is set and restored at once)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, kind in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a plain file"


def check_regular(path: Path | str, *, limit: int | None = None) -> os.stat_result:
    """stat() of path, refused (UnreadableFile) unless it is a regular file of at most limit
    bytes. Symbolic links are followed."""
    st = os.stat(path)
    _check(path, st, limit)
    return st


def _check(path: Path | str, st: os.stat_result, limit: int | None) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise UnreadableFile(path, f"is {kind_of(st.st_mode)}, not a regular file")
    if limit is not None and st.st_size > limit:
        raise UnreadableFile(path, f"is {st.st_size} bytes, over the {limit} bytes specgate "
                                   "reads from a file of this kind; is this the right file?")


def open_regular(path: Path | str, *, limit: int | None = None) -> IO[bytes]:
    """path opened for binary reading, once it is known to be a regular file of at most limit
    bytes. A named pipe is refused before it is opened, and a path swapped for one in between is
    opened without waiting for a writer, then refused."""
    check_regular(path, limit=limit)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        _check(path, os.fstat(fd), limit)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: Path | str, *, limit: int) -> bytes:
    """The whole of a regular file of at most limit bytes (a file that grows past the bound
    while it is read, or reports a size it does not have, is refused too)."""
    with open_regular(path, limit=limit) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise UnreadableFile(path, f"holds more than the {limit} bytes specgate reads from a "
                                   "file of this kind")
    return data


def read_text(path: Path | str, *, limit: int, errors: str = "strict") -> str:
    """read_bytes decoded as UTF-8 (UnicodeDecodeError on bad bytes unless errors says)."""
    return read_bytes(path, limit=limit).decode("utf-8", errors)


def read_json(path: Path | str, *, limit: int, **kwargs: Any) -> Any:
    """A JSON file of at most limit bytes, its nesting bounded (loads_json)."""
    return loads_json(read_bytes(path, limit=limit), **kwargs)


def json_object_since(path: Path | str, since: float, *, limit: int) -> dict[str, Any] | None:
    """The JSON object a file holds when it was last written at or after `since` (a Unix time);
    None when it is older, cannot be read, or holds no JSON object."""
    try:
        if os.stat(path).st_mtime < since:
            return None
        doc = read_json(path, limit=limit)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def loads_json(text: str | bytes, *, max_depth: int = MAX_JSON_DEPTH, **kwargs: Any) -> Any:
    """json.loads, refusing (JsonTooDeep) a document nested deeper than max_depth before the
    parser, which recurses per level, sees it."""
    deepest = json_depth(text)
    if deepest > max_depth:
        raise JsonTooDeep(f"nests JSON too deeply ({deepest} levels; specgate reads at most "
                          f"{max_depth})")
    return json.loads(text, **kwargs)


def json_depth(text: str | bytes, chunk: int = 1 << 20) -> int:
    """The deepest nesting of brackets outside strings, as a JSON parser lexes them, counted in
    linear time (numpy, in 1 MiB pieces). For text that is not valid JSON, the count up to the
    first error is the parser's, and the parser stops there."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if b"\\" in raw:
        # Escapes live inside strings: pairs of backslashes first, then escaped quotes, so that
        # every quote left delimits a string.
        raw = raw.replace(b"\\\\", b"__").replace(b'\\"', b"__")
    deepest, depth, inside = 0, 0, 0
    for at in range(0, len(raw), chunk):
        b = np.frombuffer(raw, dtype=np.uint8, count=min(chunk, len(raw) - at), offset=at)
        quotes = np.cumsum(b == 0x22, dtype=np.int64)
        quotes += inside
        outside = (quotes & 1) == 0
        step = ((b == 0x5B) | (b == 0x7B)).view(np.int8).astype(np.int32)
        step -= ((b == 0x5D) | (b == 0x7D)).view(np.int8)
        step *= outside
        running = np.cumsum(step, dtype=np.int64)
        running += depth
        if running.size:
            deepest = max(deepest, int(running.max()))
            depth, inside = int(running[-1]), int(quotes[-1]) & 1
    return deepest
