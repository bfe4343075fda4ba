"""Launching through ssh: `ssh [options] gpu-box python -m sglang.launch_server`."""

from __future__ import annotations

from typing import ClassVar

from specgate.core.errors import ProfileError
from specgate.serving.launchers.remote import FarSideLauncher

# ssh options that take a value (ssh(1) SYNOPSIS), to find the destination after them.
_VALUE_OPTIONS = frozenset("BbcDEeFIiJLlmOoPpQRSWw")


class SshLauncher(FarSideLauncher):
    """ssh joins the words after the destination and the remote login shell splits them again,
    so every word the harness adds is shell-quoted; `-n` and `-f` are refused, as they leave
    the remote command without the standard input the wrapper watches."""

    name: ClassVar[str] = "ssh"
    programs: ClassVar[frozenset[str]] = frozenset({"ssh"})
    through_shell: ClassVar[bool] = True

    @classmethod
    def keep_stdin(cls, words: list[str], source: str) -> list[str]:
        refused = _stdin_flags(words[1:])
        if refused:
            raise ProfileError(
                f"{source}: [server] launcher uses ssh -{refused}, which leaves the remote "
                "command without standard input; specgate's wrapper on the GPU host watches "
                "it to stop the server when specgate goes away, so remove -" + refused)
        return words


def _stdin_flags(words: list[str]) -> str:
    """Which of ssh's -n (stdin from /dev/null) and -f (background) the options before the
    destination set, as their letters."""
    found = ""
    skip = False
    for word in words:
        if skip:
            skip = False
            continue
        if not word.startswith("-") or word == "--":
            break
        for j, letter in enumerate(word[1:]):
            if letter in "nf" and letter not in found:
                found += letter
            if letter in _VALUE_OPTIONS:
                skip = j == len(word) - 2  # the value is the next word
                break
    return found
