"""Secret redaction for commands, log tails and anything else a report shows."""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence

MASK = "***"
MIN_SECRET_LEN = 8

# Names whose values are credentials; matched anywhere in the variable name.
_SECRET_NAME = re.compile(
    r"(TOKEN|API_?KEY|SECRET|PASSWORD|PASSWD|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL)", re.IGNORECASE
)
KNOWN_SECRET_VARS = (
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HUGGINGFACE_TOKEN",
    "OPENAI_API_KEY",
    "WANDB_API_KEY",
    "ANTHROPIC_API_KEY",
    "AWS_SECRET_ACCESS_KEY",
    "GITHUB_TOKEN",
)

# Values that SGLang and its clients print even when the key itself is unknown to us.
_PATTERNS = (
    # --api-key X, --admin-api-key=X (also quoted for a remote shell)
    re.compile(r"""(--(?:admin-)?api-key(?:=|\s+))(['"]?)(?!None\b)([^\s'"]+)(['"]?)"""),
    # ServerArgs(api_key='X'), admin_api_key="X", api_key=X
    re.compile(r"""(\b(?:admin_)?api_key\s*=\s*)(['"]?)(?!None\b)([^\s'",)]+)(['"]?)"""),
    # JSON: "api_key": "X"
    re.compile(r"""("(?:admin_)?api_key"\s*:\s*)(")([^"]+)(")"""),
    # Authorization: Bearer X
    re.compile(r"""(\bBearer\s+)()(?!None\b)([^\s'",]+)()""", re.IGNORECASE),
    # NAME=value for credential-like variable names (env K=V on a remote command line)
    re.compile(
        r"""(\b[A-Z0-9_]*(?:TOKEN|API_?KEY|SECRET|PASSWORD|PASSWD|ACCESS_KEY)[A-Z0-9_]*=)(['"]?)"""
        r"""([^\s'"]+)(['"]?)"""
    ),
)


# Credentials inside URLs: the password of http://user:PASSWORD@host (the user name is kept, it
# says which account), and the value of a credential-looking query parameter
# (?token=…, &api_key=…, &sig=…).
_URL_USERINFO = re.compile(r"""(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s/@:'"<>]*:)([^\s/@'"<>]+)(@)""")
_URL_QUERY = re.compile(
    r"""([?&;](?:[a-z0-9_.-]*(?:token|key|secret|password|passwd|pwd|auth|credential|signature)"""
    r"""[a-z0-9_.-]*|sig|pass)=)([^\s&#'"<>]+)""", re.IGNORECASE)


def redact_urls(text: str) -> str:
    """text with every URL's password and credential-looking query values replaced by ***."""
    if "://" not in text and ("=" not in text or not any(c in text for c in "?&;")):
        return text  # neither pattern can match: no scheme, and no query separator before =
    text = _URL_USERINFO.sub(lambda m: m.group(0) if m.group(2) == MASK
                             else f"{m.group(1)}{MASK}{m.group(3)}", text)
    return _URL_QUERY.sub(lambda m: f"{m.group(1)}{MASK}", text)


def is_secret_name(name: str) -> bool:
    """Whether an environment variable's name says its value is a credential."""
    return name.upper() in KNOWN_SECRET_VARS or bool(_SECRET_NAME.search(name))


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    """env with the values of credential-like variables replaced by ***, for reports."""
    return {k: MASK if is_secret_name(k) else v for k, v in env.items()}


def secrets_from_env(env: Mapping[str, str], extra_names: Iterable[str] = ()) -> list[str]:
    """Values of credential-like variables (and of extra_names) long enough to be real secrets."""
    names = set(extra_names)
    found = []
    for name, value in env.items():
        if (name in names or is_secret_name(name)) and len(value) >= MIN_SECRET_LEN:
            found.append(value)
    return found


class Redactor:
    """Replaces known secret values and recognisable key patterns with ***."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        self._secrets: set[str] = set()
        for secret in secrets:
            self.add(secret)

    def add(self, secret: str | None) -> None:
        # Short values (a port, "1") would mask innocent text everywhere.
        if secret and len(secret) >= MIN_SECRET_LEN:
            self._secrets.add(secret)

    def redact(self, text: str) -> str:
        # Longest first, so a secret that contains another is masked whole.
        for secret in sorted(self._secrets, key=len, reverse=True):
            text = text.replace(secret, MASK)
        for pattern in _PATTERNS:
            text = pattern.sub(_mask_match, text)
        return redact_urls(text)

    def redact_argv(self, argv: Sequence[str]) -> list[str]:
        """argv with the value after --api-key masked and every element redacted."""
        out: list[str] = []
        mask_next = False
        for arg in argv:
            if mask_next:
                out.append(MASK)
                mask_next = False
                continue
            if arg in ("--api-key", "--admin-api-key", "'--api-key'", "'--admin-api-key'"):
                mask_next = True
                out.append(arg)
                continue
            out.append(self.redact(arg))
        return out


def _mask_match(match: re.Match[str]) -> str:
    prefix, open_quote, value, close_quote = match.groups()
    if value == MASK:
        return match.group(0)
    return f"{prefix}{open_quote}{MASK}{close_quote}"


@dataclasses.dataclass(frozen=True)
class ShownCommand:
    """A command as reports, logs and messages show it: every secret as ***."""

    argv: tuple[str, ...]
    env: dict[str, str]  # the environment it adds, credential-like values masked
    line: str  # `K=V … argv` as one shell line


def show_command(argv: Sequence[str], env: Mapping[str, str],
                 secrets: Iterable[str | None]) -> ShownCommand:
    """argv and its added environment with the given secrets and recognisable keys masked."""
    redactor = Redactor(secrets)
    shown = tuple(redactor.redact_argv(argv))
    # argv is masked element by element already: the line is not masked again, where a secret
    # that is also a piece of a flag's name ("--api-ke") would mask the flag
    assignments = redactor.redact(" ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()))
    line = shlex.join(shown)
    return ShownCommand(shown, mask_env(env), f"{assignments} {line}" if assignments else line)
