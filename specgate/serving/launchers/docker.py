"""Launching into a running container: `docker exec CONTAINER COMMAND` (podman, kubectl)."""

from __future__ import annotations

from typing import ClassVar

from specgate.serving.launchers.remote import FarSideLauncher


class DockerLauncher(FarSideLauncher):
    """`docker exec` runs its argv as it is (no shell) and attaches the command's standard
    input only with -i (`--interactive`), which is added where the launcher lacks it; podman
    and `kubectl exec` follow the same rules."""

    name: ClassVar[str] = "docker"
    programs: ClassVar[frozenset[str]] = frozenset({"docker", "podman", "kubectl"})

    @classmethod
    def keep_stdin(cls, words: list[str], source: str) -> list[str]:
        if len(words) < 2 or words[1] != "exec":
            return words
        options = _leading_options(words[2:])
        if any(o in ("-i", "--interactive") or (o[1:2] != "-" and "i" in o[1:])
               for o in options):
            return words
        return [*words[:2], "-i", *words[2:]]


def _leading_options(words: list[str]) -> list[str]:
    options = []
    for word in words:
        if not word.startswith("-") or word == "--":
            break
        options.append(word)
    return options
