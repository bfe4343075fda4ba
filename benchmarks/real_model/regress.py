"""What regress.sh derives from an earn.sh run's work folder: the training command of a smaller
data size (the judged drafter's own, on the first 1/N of the data's seeded order), and the probe
profile with only the drafter changed (its name, and so its probe history, kept).

    python3 -m benchmarks.real_model.regress command WORK SIZE    # prints the sf_train.py flags
    python3 -m benchmarks.real_model.regress profile WORK SIZE OUT_TOML

Exit 3 with a message naming the file when WORK holds no such record or profile.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

SIZES = {"third": 3, "ninth": 9}


class RegressError(Exception):
    """WORK lacks what the derivation needs; the message names the file."""


def record(work: Path) -> dict[str, Any]:
    path = work / "earn.json"
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RegressError(f"{path}: not readable ({exc}); run earn.sh with RS_WORK={work} "
                           "first") from exc
    if not isinstance(rec, dict):
        raise RegressError(f"{path}: not a JSON object")
    return rec


def judged(rec: dict[str, Any]) -> str:
    return str(rec.get("judged") or "trained")


def size_command(work: Path, size: str) -> list[str]:
    """sf_train.py's flags for SIZE: the judged drafter's recorded command with its own map and
    folder, on the first samples // N rows; --specforge left for the caller."""
    if size not in SIZES:
        raise RegressError(f"--size {size}: one of {', '.join(SIZES)}")
    rec = record(work)
    name = judged(rec)
    argv = ((rec.get("train_commands") or {}).get(name) or [])[1:]
    # the rows earn.py gave the size and built its map from (maps.SIZE.samples), else the
    # judged drafter's over N
    rows = ((rec.get("maps") or {}).get(size) or {}).get("samples")
    samples = ((rec.get("drafters") or {}).get(name) or {}).get("samples")
    if not isinstance(rows, int) and isinstance(samples, int):
        rows = samples // SIZES[size]
    if not argv or not isinstance(rows, int) or "--rows" in argv or len(argv) % 2:
        raise RegressError(f"{work / 'earn.json'}: no training command of {name} over all the "
                           f"data (train_commands.{name}, maps.{size} or drafters.{name}) to "
                           f"derive {size}'s from")
    out: list[str] = []
    for flag, value in zip(argv[::2], argv[1::2], strict=True):
        if flag == "--specforge":
            continue
        if flag == "--vocab-map":
            value = str(work / "maps" / f"{size}.safetensors")
        elif flag == "--out":
            value = str(work / "drafters" / size)
        out += [flag, value]
    return [*out, "--rows", str(rows)]


def size_profile(work: Path, size: str) -> str:
    """WORK/profiles/probe.toml with the judged drafter's path replaced by SIZE's."""
    path = work / "profiles" / "probe.toml"
    try:
        text = path.read_text()
    except OSError as exc:
        raise RegressError(f"{path}: not readable ({exc})") from exc
    old = f'"{work / "drafters" / judged(record(work))}"'
    if text.count(old) != 1:
        raise RegressError(f"{path}: names the drafter {old} {text.count(old)} times, not once")
    return text.replace(old, f'"{work / "drafters" / size}"')


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        if len(args) == 3 and args[0] == "command":
            print(shlex.join(size_command(Path(args[1]), args[2])))
        elif len(args) == 4 and args[0] == "profile":
            text = size_profile(Path(args[1]), args[2])
            Path(args[3]).write_text(text)
        else:
            print(__doc__.split("\n\n")[1], file=sys.stderr)
            return 2
    except RegressError as exc:
        print(f"regress.py: {exc}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
