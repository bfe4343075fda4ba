"""The launchers, one module each behind one interface (base.py); `pick` chooses the profile's."""

from __future__ import annotations

from collections.abc import Sequence

from specgate.serving.launchers.base import Launcher
from specgate.serving.launchers.docker import DockerLauncher
from specgate.serving.launchers.local import LocalLauncher
from specgate.serving.launchers.pct import PctLauncher
from specgate.serving.launchers.ssh import SshLauncher

# Asked in order; the local launcher takes any argv the others do not claim.
LAUNCHERS: tuple[type[Launcher], ...] = (SshLauncher, PctLauncher, DockerLauncher, LocalLauncher)


def pick(argv: Sequence[str], source: str = "<profile>") -> Launcher:
    """The launcher for a `[server] launcher` argv (by its first word's program name)."""
    kind = next(k for k in LAUNCHERS if k.handles(argv))
    return kind(argv, source)
