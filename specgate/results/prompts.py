"""Benchmark prompts (built-in or JSONL) and the chat template that wraps them as users send."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specgate.core import files
from specgate.core.errors import DataError, ProfileError
from specgate.core.profile import BenchSection
from specgate.io import jsonl

if TYPE_CHECKING:
    import jinja2
    import jinja2.parser

BUILTIN = "builtin"

# Text around one user turn, ending where the assistant's reply starts, for targets whose folder
# has no chat template of its own (or is not readable here, as on a remote GPU host). The BOS
# token is left out on purpose: SGLang's tokenizer adds it to /generate text, and a second one
# shifts the distribution the drafter was trained on.
TEMPLATES: dict[str, tuple[str, str]] = {
    "chatml": ("<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"),
    "llama3": ("<|start_header_id|>user<|end_header_id|>\n\n",
               "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
    "kimi": ("<|im_user|>user<|im_middle|>", "<|im_end|><|im_assistant|>assistant<|im_middle|>"),
    "plain": ("", ""),
}
# The target's own Jinja template (chat_template.jinja, else tokenizer_config.json), rendered as
# SGLang's chat endpoint renders it.
TARGET = "target"
JINJA_FILE = "chat_template.jinja"
TOKENIZER_CONFIG = "tokenizer_config.json"
TOKENIZER_FILE = "tokenizer.json"
# The special tokens transformers hands a chat template (its special_tokens_map).
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                  "mask_token")


@dataclasses.dataclass(frozen=True)
class Prompt:
    """One benchmark prompt: a stable id, its category and the user's text."""

    id: str
    category: str
    text: str


@dataclasses.dataclass(frozen=True)
class ChatTemplate:
    """How a user's text is wrapped before it goes to /generate, and where that choice came from.

    A built-in family wraps the text in a fixed prefix and suffix; the target's own template is
    Jinja source rendered as transformers' apply_chat_template renders it (what SGLang's chat
    endpoint sends), less a leading BOS that the server's tokenizer adds to /generate text itself.
    """

    name: str
    source: str
    prefix: str = ""
    suffix: str = ""
    jinja: str | None = None
    special_tokens: tuple[tuple[str, str], ...] = ()
    strip_prefix: str = ""

    def render(self, text: str) -> str:
        if self.jinja is None:
            return f"{self.prefix}{text}{self.suffix}"
        rendered = _render_jinja(self.jinja, text, self.special_tokens)
        if self.strip_prefix and rendered.startswith(self.strip_prefix):
            rendered = rendered[len(self.strip_prefix):]
        return rendered

    @property
    def digest(self) -> str:
        """A short sha256 of what decides the rendering, for the verdict and the reuse key."""
        body = json.dumps([self.name, self.prefix, self.suffix, self.jinja,
                           list(self.special_tokens), self.strip_prefix])
        return hashlib.sha256(body.encode("utf-8")).hexdigest()[:16]

    def describe(self) -> str:
        return f"{self.name} ({self.source})"


def load_builtin() -> list[Prompt]:
    """The project's own prompt set (specgate/data/prompts.jsonl)."""
    ref = resources.files("specgate") / "data" / "prompts.jsonl"
    return _parse_jsonl(ref.read_text(encoding="utf-8"), "specgate/data/prompts.jsonl")


def load_jsonl(path: Path) -> list[Prompt]:
    """Prompts from a JSONL file: `prompt` or `text`, optional `category` and `id` per line."""
    try:
        text = files.read_text(path, limit=files.PROMPTS_BYTES)
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
                           f"expected one of {sorted(TEMPLATES)}, or leave it out to use the "
                           "target's own template")
    prefix, suffix = TEMPLATES[name]
    return ChatTemplate(name, source, prefix=prefix, suffix=suffix)


def target_template(target_dir: Path | None) -> ChatTemplate | None:
    """The target's own chat template, as transformers loads it: chat_template.jinja first, then
    tokenizer_config.json's chat_template (the "default" one of a list); None without either."""
    if target_dir is None:
        return None
    config = _read_json(target_dir / TOKENIZER_CONFIG)
    jinja_path = target_dir / JINJA_FILE
    source: Path = jinja_path
    try:
        jinja: str | None = files.read_text(jinja_path, limit=files.TEMPLATE_BYTES)
    except FileNotFoundError:
        jinja, source = _config_template(config), target_dir / TOKENIZER_CONFIG
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{jinja_path}: cannot read the target's chat template: {exc}") from None
    if jinja is None:
        return None
    special = tuple((key, token) for key in SPECIAL_TOKENS
                    if (token := _token_text(config.get(key))) is not None)
    bos = dict(special).get("bos_token")
    strip = bos if bos and _tokenizer_adds_bos(target_dir, config, bos) else ""
    template = ChatTemplate(TARGET, f"the target's own template, {source}", jinja=jinja,
                            special_tokens=special, strip_prefix=strip)
    try:
        template.render("specgate checks that the template renders")
    except Exception as exc:  # jinja2's errors, and raise_exception() in the template
        raise DataError(f"{source}: the target's chat template does not render one user "
                        f"message: {type(exc).__name__}: {exc}; set [bench] chat_template to "
                        f"one of {sorted(TEMPLATES)}") from None
    return template


def choose_template(configured: str | None, target_dir: Path | None) -> ChatTemplate:
    """[bench] chat_template when set, else the target's own template, else plain text
    (recorded as a fallback)."""
    if configured:
        return template_named(configured, "[bench] chat_template")
    own = target_template(target_dir)
    if own is not None:
        return own
    where = (f"neither {target_dir / JINJA_FILE} nor a chat_template in "
             f"{target_dir / TOKENIZER_CONFIG}" if target_dir else "no target path")
    return template_named("plain", f"fallback: {where}; set [bench] chat_template to send "
                                   "prompts as users do")


def _read_json(path: Path, limit: int = files.CONFIG_BYTES) -> dict[str, Any]:
    try:
        data = files.read_json(path, limit=limit)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: cannot read it as JSON: {exc}") from None
    return data if isinstance(data, dict) else {}


def _config_template(config: dict[str, Any]) -> str | None:
    raw = config.get("chat_template")
    if isinstance(raw, list):  # several named templates: transformers uses "default"
        raw = next((t.get("template") for t in raw
                    if isinstance(t, dict) and t.get("name") == "default"), None)
    return raw if isinstance(raw, str) else None


def _token_text(value: object) -> str | None:
    """A special token as tokenizer_config.json holds it: a string or an AddedToken object."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def _tokenizer_adds_bos(target_dir: Path, config: dict[str, Any], bos: str) -> bool:
    """Whether encoding /generate text adds the BOS token itself (tokenizer.json's post-processor
    puts it first, or tokenizer_config.json says add_bos_token)."""
    if config.get("add_bos_token") is True:
        return True
    processor = _read_json(target_dir / TOKENIZER_FILE, files.TOKENIZER_BYTES).get("post_processor")
    return _processor_adds(processor, bos)


def _processor_adds(processor: object, bos: str) -> bool:
    if not isinstance(processor, dict):
        return False
    if processor.get("type") == "Sequence":
        return any(_processor_adds(p, bos) for p in processor.get("processors") or [])
    if processor.get("type") != "TemplateProcessing":
        return False
    single = processor.get("single") or []
    first = single[0] if isinstance(single, list) and single else None
    special = first.get("SpecialToken") if isinstance(first, dict) else None
    return isinstance(special, dict) and special.get("id") == bos


@functools.lru_cache(maxsize=8)
def _compiled(source: str) -> jinja2.Template:
    """The template compiled in the environment transformers' apply_chat_template uses."""
    import jinja2
    import jinja2.nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        """{% generation %}…{% endgeneration %}: transformers marks assistant text with it."""

        tags = {"generation"}  # noqa: RUF012  (jinja2's own class attribute)

        def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body
                                          ).set_lineno(lineno)

        def _body(self, caller: Callable[[], str]) -> str:
            return caller()

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value: object, ensure_ascii: bool = False, indent: int | None = None,
               separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        return _dt.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


def _render_jinja(source: str, text: str, special: tuple[tuple[str, str], ...]) -> str:
    return _compiled(source).render(messages=[{"role": "user", "content": text}], tools=None,
                                    documents=None, add_generation_prompt=True, **dict(special))


@dataclasses.dataclass(frozen=True)
class PromptSet:
    """The prompts a probe sends, each rendered through `template`, and where they came from."""

    prompts: tuple[Prompt, ...]  # as written, after [bench] categories and prompts_per_category
    texts: tuple[str, ...]  # each prompt rendered: the text /generate gets
    label: str  # "builtin" or the JSONL file
    template: ChatTemplate
    # A sha256 of what the servers are sent: ids, categories and rendered texts.
    digest: str = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        body = json.dumps([[p.id, p.category, t] for p, t in self.sent()])
        object.__setattr__(self, "digest", hashlib.sha256(body.encode("utf-8")).hexdigest()[:20])

    @classmethod
    def rendered(cls, prompts: Sequence[Prompt], template: ChatTemplate,
                 label: str = BUILTIN) -> PromptSet:
        """The prompts, each rendered through template."""
        return cls(tuple(prompts), tuple(template.render(p.text) for p in prompts), label,
                   template)

    def sent(self) -> Iterator[tuple[Prompt, str]]:
        return zip(self.prompts, self.texts, strict=True)


def load_for(bench: BenchSection, *, source: Path | None, target: Path | None) -> PromptSet:
    """[bench]'s prompt set (the built-in one when source is None), selected and rendered through
    the chat template chosen for the target folder."""
    chosen = load_builtin() if source is None else load_jsonl(source)
    chosen = select(chosen, bench.categories, bench.prompts_per_category)
    template = choose_template(bench.chat_template, target)
    return PromptSet.rendered(chosen, template, BUILTIN if source is None else str(source))
