"""Launching into a Proxmox container: `pct exec VMID -- COMMAND`, or `lxc-attach`."""

from __future__ import annotations

from typing import ClassVar

from specgate.serving.launchers.remote import FarSideLauncher


class PctLauncher(FarSideLauncher):
    """`pct exec` hands the words after `--` to lxc-attach through Perl's list form of exec, so
    no shell re-parses them, and without a terminal the command gets pct's own standard
    streams: the argv passes as it is and standard input reaches the wrapper."""

    name: ClassVar[str] = "pct"
    programs: ClassVar[frozenset[str]] = frozenset({"pct", "lxc-attach"})
