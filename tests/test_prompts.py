"""Tests for specgate.measure.prompts: the built-in set, JSONL files and chat templates."""

import json

import pytest

from specgate.core.errors import DataError, ProfileError
from specgate.measure import prompts


def test_builtin_set_has_several_categories_and_unique_ids():
    items = prompts.load_builtin()
    cats = {p.category for p in items}
    assert {"chat", "coding", "math", "summarization", "translation", "reasoning",
            "extraction"} <= cats
    assert len({p.id for p in items}) == len(items)
    for cat in cats:
        assert sum(p.category == cat for p in items) >= 5


def test_jsonl_accepts_prompt_or_text_and_defaults(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a", "category": "x", "id": "one"}\n\n{"text": "b"}\n')
    items = prompts.load_jsonl(path)
    assert items == [prompts.Prompt("one", "x", "a"), prompts.Prompt("line-3", "uncategorized",
                                                                      "b")]


@pytest.mark.parametrize(("body", "match"), [
    ('{"prompt": "a"}\nnot json\n', r"p\.jsonl:2: not valid JSON"),
    ('[1, 2]\n', r"p\.jsonl:1: holds JSON list"),
    ('{"question": "a"}\n', r"line 1: needs a non-empty string field \"prompt\""),
    ('{"prompt": "a", "id": "k"}\n{"prompt": "b", "id": "k"}\n', r"line 2: duplicate prompt id"),
    ('\n\n', r"no prompts found"),
])
def test_jsonl_errors_name_file_and_line(tmp_path, body, match):
    path = tmp_path / "p.jsonl"
    path.write_text(body)
    with pytest.raises(DataError, match=match):
        prompts.load_jsonl(path)


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="prompt file not found"):
        prompts.load_jsonl(tmp_path / "nope.jsonl")


def test_select_by_category_and_count():
    items = prompts.load_builtin()
    chosen = prompts.select(items, ["math", "coding"], 2)
    assert [p.category for p in chosen] == ["coding", "coding", "math", "math"]
    assert len(prompts.select(items, None, 1)) == len({p.category for p in items})
    with pytest.raises(ProfileError, match="poetry"):
        prompts.select(items, ["poetry"])


@pytest.mark.parametrize(("template", "name"), [
    ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}",
     "chatml"),
    ("<|begin_of_text|>{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>"
     "{% endfor %}", "llama3"),
    ("{%- for m in messages -%}<|im_user|>user<|im_middle|>{{ m.content }}<|im_end|>"
     "<|im_start|>{% endfor %}", "kimi"),
])
def test_template_detected_from_tokenizer_config(tmp_path, template, name):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    chosen = prompts.choose_template(None, tmp_path)
    assert chosen.name == name
    assert "tokenizer_config.json" in chosen.source
    assert chosen.render("hi").count("hi") == 1


def test_configured_template_wins_and_unknown_is_refused(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "<|im_start|>"}))
    chosen = prompts.choose_template("llama3", tmp_path)
    assert chosen.name == "llama3"
    assert chosen.render("Q").endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    with pytest.raises(ProfileError, match="vicuna"):
        prompts.choose_template("vicuna", None)


def test_fallback_is_plain_and_says_so(tmp_path):
    chosen = prompts.choose_template(None, tmp_path)
    assert chosen.name == "plain"
    assert chosen.render("x") == "x"
    assert "fallback" in chosen.source


def test_named_template_list_uses_default(tmp_path):
    cfg = {"chat_template": [{"name": "tool_use", "template": "<|start_header_id|>"},
                             {"name": "default", "template": "<|im_start|>"}]}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    assert prompts.choose_template(None, tmp_path).name == "chatml"


def test_chatml_render():
    t = prompts.template_named("chatml", "test")
    assert t.render("Hello") == "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
