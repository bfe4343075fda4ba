"""Benchmark prompts (built-in or JSONL) and the chat template that wraps them as users send."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from specgate.core.errors import DataError, ProfileError
from specgate.io import jsonl

BUILTIN = "builtin"

# Text around one user turn, ending where the assistant's reply starts. The BOS token is left
# out on purpose: SGLang's tokenizer adds it to /generate text, and a second one shifts the
# distribution the drafter was trained on.
TEMPLATES: dict[str, tuple[str, str]] = {
    "chatml": ("<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"),
    "llama3": ("<|start_header_id|>user<|end_header_id|>\n\n",
               "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
    "kimi": ("<|im_user|>user<|im_middle|>", "<|im_end|><|im_assistant|>assistant<|im_middle|>"),
    "plain": ("", ""),
}

# Markers that identify a tokenizer_config.json chat_template as one of the families above.
_MARKERS: tuple[tuple[str, str], ...] = (
    ("<|im_user|>", "kimi"),
    ("<|start_header_id|>", "llama3"),
    ("<|im_start|>", "chatml"),
)


@dataclasses.dataclass(frozen=True)
class Prompt:
    """One benchmark prompt: a stable id, its category and the user's text."""

    id: str
    category: str
    text: str


@dataclasses.dataclass(frozen=True)
class ChatTemplate:
    """How a user's text is wrapped before it goes to /generate, and where that choice came from."""

    name: str
    prefix: str
    suffix: str
    source: str

    def render(self, text: str) -> str:
        return f"{self.prefix}{text}{self.suffix}"


def load_builtin() -> list[Prompt]:
    """The project's own prompt set (specgate/data/prompts.jsonl)."""
    ref = resources.files("specgate") / "data" / "prompts.jsonl"
    return _parse_jsonl(ref.read_text(encoding="utf-8"), "specgate/data/prompts.jsonl")


def load_jsonl(path: Path) -> list[Prompt]:
    """Prompts from a JSONL file: `prompt` or `text`, optional `category` and `id` per line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: prompt file not found (set [bench] prompts to a JSONL file "
                        "or to \"builtin\")") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read the prompt file: {exc}") from None
    return _parse_jsonl(text, str(path))


def _parse_jsonl(text: str, label: str) -> list[Prompt]:
    prompts: list[Prompt] = []
    seen: set[str] = set()
    for lineno, obj in jsonl.objects(text, label, 'an object like {"prompt": "..."}'):
        body = obj.get("prompt", obj.get("text"))
        if not isinstance(body, str) or not body.strip():
            raise DataError(f"{label} line {lineno}: needs a non-empty string field \"prompt\" "
                            f"(or \"text\"); found keys {sorted(obj)}")
        pid = str(obj.get("id", f"line-{lineno}"))
        if pid in seen:
            raise DataError(f"{label} line {lineno}: duplicate prompt id {pid!r}; ids must be "
                            "unique so per-request results can be told apart")
        seen.add(pid)
        prompts.append(Prompt(pid, str(obj.get("category") or "uncategorized"), body))
    if not prompts:
        raise DataError(f"{label}: no prompts found (expected one JSON object per line)")
    return prompts


def select(prompts: Sequence[Prompt], categories: Sequence[str] | None = None,
           per_category: int | None = None) -> list[Prompt]:
    """Keep the named categories (in file order) and at most per_category prompts of each."""
    if categories is not None:
        known = {p.category for p in prompts}
        missing = [c for c in categories if c not in known]
        if missing:
            raise ProfileError(f"[bench] categories: {missing} not among the prompt categories "
                               f"{sorted(known)}")
    counts: dict[str, int] = {}
    out: list[Prompt] = []
    for prompt in prompts:
        if categories is not None and prompt.category not in categories:
            continue
        counts[prompt.category] = counts.get(prompt.category, 0) + 1
        if per_category is not None and counts[prompt.category] > per_category:
            continue
        out.append(prompt)
    return out


def template_named(name: str, source: str) -> ChatTemplate:
    if name not in TEMPLATES:
        raise ProfileError(f"[bench] chat_template = {name!r} is not a built-in template; "
                           f"expected one of {sorted(TEMPLATES)}")
    prefix, suffix = TEMPLATES[name]
    return ChatTemplate(name, prefix, suffix, source)


def detect_template(target_dir: Path | None) -> ChatTemplate | None:
    """The family of the target's tokenizer_config.json chat_template, when it is a known one."""
    if target_dir is None:
        return None
    config = target_dir / "tokenizer_config.json"
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    raw = data.get("chat_template") if isinstance(data, dict) else None
    if isinstance(raw, list):  # several named templates: use "default"
        raw = next((t.get("template") for t in raw
                    if isinstance(t, dict) and t.get("name") == "default"), None)
    if not isinstance(raw, str):
        return None
    for marker, name in _MARKERS:
        if marker in raw:
            return template_named(name, f"detected from {config}")
    return None


def choose_template(configured: str | None, target_dir: Path | None) -> ChatTemplate:
    """[bench] chat_template when set, else the target's own family, else plain text (recorded)."""
    if configured:
        return template_named(configured, "[bench] chat_template")
    detected = detect_template(target_dir)
    if detected is not None:
        return detected
    where = f"{target_dir}/tokenizer_config.json" if target_dir else "no target path"
    return template_named("plain", f"fallback: no known chat_template in {where}; set "
                                   "[bench] chat_template to send prompts as users do")
