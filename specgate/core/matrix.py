"""A checkpoint matrix: several drafters judged in one run against one profile, over GPU sets."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path
from typing import Any

from specgate.core import files
from specgate.core.errors import ProfileError
from specgate.core.profile import Profile, ServerSection

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
KEYS = frozenset({"name", "drafter", "reference"})


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """One drafter of the matrix: its name in node ids and folders, and its paths."""

    name: str
    drafter: str
    reference: str | None = None


@dataclasses.dataclass(frozen=True)
class Matrix:
    source: str
    checkpoints: tuple[Checkpoint, ...]

    def get(self, name: str) -> Checkpoint:
        return next(c for c in self.checkpoints if c.name == name)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.checkpoints]


def load_matrix(path: str | Path) -> Matrix:
    """The matrix file: `[[checkpoint]]` tables with drafter (required), name and reference;
    relative paths are relative to the file. One ProfileError naming the file and key."""
    file = Path(path)
    try:
        doc = tomllib.loads(files.read_text(file, limit=files.PROFILE_BYTES))
    except RecursionError:
        raise ProfileError(f"{file}: not valid TOML (arrays or inline tables nested too "
                           "deeply)") from None
    except OSError as exc:
        raise ProfileError(f"{file}: the checkpoint matrix cannot be read "
                           f"({exc.strerror or exc}); give --specgate-matrix a TOML file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{file}: not valid TOML ({exc})") from None
    extra = sorted(set(doc) - {"checkpoint"})
    if extra:
        raise ProfileError(f"{file}: unknown key {extra[0]!r}; a matrix file holds only "
                           "[[checkpoint]] tables")
    rows = doc.get("checkpoint")
    if not isinstance(rows, list) or not rows:
        raise ProfileError(f"{file}: no [[checkpoint]] table; list each drafter as "
                           "[[checkpoint]] with drafter = \"PATH\" (and optionally name)")
    out: list[Checkpoint] = []
    for i, row in enumerate(rows, start=1):
        out.append(_checkpoint(file, i, row))
    names = [c.name for c in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ProfileError(f"{file}: checkpoint name {twice[0]!r} is used twice; give each "
                           "[[checkpoint]] its own name")
    return Matrix(str(file), tuple(out))


def _checkpoint(file: Path, i: int, row: Any) -> Checkpoint:
    where = f"{file}: [[checkpoint]] number {i}"
    if not isinstance(row, dict):
        raise ProfileError(f"{where} is not a table")
    unknown = sorted(set(row) - KEYS)
    if unknown:
        raise ProfileError(f"{where}: unknown key {unknown[0]!r} (known: drafter, name, "
                           "reference)")
    drafter = row.get("drafter")
    if not isinstance(drafter, str) or not drafter:
        raise ProfileError(f"{where}: drafter = \"PATH\" (the checkpoint folder) is required")
    name = row.get("name", Path(drafter).name)
    if not isinstance(name, str) or not NAME.match(name):
        raise ProfileError(f"{where}: name {name!r} must be letters, digits, '.', '_' or '-' "
                           "(at most 64): it names the checkpoint's tests and folder")
    reference = row.get("reference")
    if reference is not None and not isinstance(reference, str):
        raise ProfileError(f"{where}: reference must be a path")
    return Checkpoint(name, _resolved(file, drafter),
                      _resolved(file, reference) if reference else None)


def _resolved(file: Path, value: str) -> str:
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else (file.parent / path).resolve())


def parse_gpu_sets(text: str) -> list[tuple[int, ...]]:
    """`0,1;2,3` into [(0, 1), (2, 3)]: GPU sets (nvidia-smi indices) the matrix spreads over."""
    sets: list[tuple[int, ...]] = []
    for part in text.split(";"):
        if not part.strip():
            continue
        try:
            chosen = tuple(int(v) for v in part.split(",") if v.strip())
        except ValueError:
            raise ProfileError(f"--specgate-gpu-sets {text!r}: {part.strip()!r} is not a list of "
                               "GPU indices; write sets as 0,1;2,3") from None
        if not chosen or any(i < 0 for i in chosen) or len(set(chosen)) != len(chosen):
            raise ProfileError(f"--specgate-gpu-sets {text!r}: {part.strip()!r} must list "
                               "distinct GPU indices")
        sets.append(chosen)
    if not sets:
        raise ProfileError(f"--specgate-gpu-sets {text!r}: no GPU set; write sets as 0,1;2,3")
    used = [i for s in sets for i in s]
    if len(set(used)) != len(used):
        raise ProfileError(f"--specgate-gpu-sets {text!r}: the sets overlap; each GPU may be in "
                           "one set only, so no two servers share it")
    return sets


def on_gpu_set(profile: Profile, gpus: tuple[int, ...]) -> Profile:
    """The profile with both servers on one GPU set of the matrix (its [server] gpus; any
    baseline_gpus or CUDA_VISIBLE_DEVICES of its own replaced). ProfileError when the set
    cannot hold the profile's TP ranks."""
    server = profile.server
    raw = {**server.model_dump(), "gpus": list(gpus), "baseline_gpus": None,
           "env": {k: v for k, v in server.env.items() if k != "CUDA_VISIBLE_DEVICES"}}
    try:
        placed = ServerSection.model_validate(raw)
    except ValueError as exc:
        detail = str(exc).splitlines()
        raise ProfileError(f"--specgate-gpu-sets: the set {','.join(map(str, gpus))} does not "
                           f"fit {profile.source or '<profile>'} [server]: "
                           f"{detail[-1].strip() if detail else exc}") from None
    return profile.model_copy(update={"server": placed})
