"""Tests for specgate.results.prompts: the built-in set, JSONL files and chat templates."""

import json
from pathlib import Path

import pytest

from specgate.core.errors import DataError, ProfileError
from specgate.results import prompts


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


SMOLLM2 = Path(__file__).parents[1] / "data" / "chat-templates" / "smollm2-135m-instruct"
# transformers 5.12.1's apply_chat_template(add_generation_prompt=True) on the files above.
SMOLLM2_HELLO = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
                 "Hugging Face<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
                 "<|im_start|>assistant\n")
LLAMA3 = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}"
          "<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
          "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n"
          "{% endif %}")


def test_the_targets_own_jinja_template_renders_as_the_chat_endpoint_does():
    chosen = prompts.choose_template(None, SMOLLM2)
    assert chosen.name == prompts.TARGET
    assert str(SMOLLM2 / "chat_template.jinja") in chosen.source
    assert chosen.render("Hello") == SMOLLM2_HELLO


def test_chat_template_jinja_wins_over_tokenizer_config(tmp_path):
    (tmp_path / "chat_template.jinja").write_text("A{{ messages[0]['content'] }}")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "B"}))
    assert prompts.choose_template(None, tmp_path).render("x") == "Ax"


def _llama3(tmp_path, *, adds_bos: bool):
    cfg = {"chat_template": LLAMA3, "bos_token": {"content": "<|begin_of_text|>"},
           "eos_token": "<|eot_id|>"}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    single = [{"Sequence": {"id": "A", "type_id": 0}}]
    if adds_bos:
        single.insert(0, {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}})
    processor = {"type": "Sequence", "processors": [
        {"type": "ByteLevel"}, {"type": "TemplateProcessing", "single": single}]}
    (tmp_path / "tokenizer.json").write_text(json.dumps({"post_processor": processor}))
    return prompts.choose_template(None, tmp_path)


def test_a_bos_the_servers_tokenizer_adds_itself_is_not_sent_twice(tmp_path):
    # The chat endpoint tokenizes the rendered text without special tokens; /generate text gets
    # the tokenizer's own BOS, so the template's must go.
    chosen = _llama3(tmp_path, adds_bos=True)
    assert chosen.render(" Q ") == ("<|start_header_id|>user<|end_header_id|>\n\nQ<|eot_id|>"
                                    "<|start_header_id|>assistant<|end_header_id|>\n\n")
    kept = _llama3(tmp_path, adds_bos=False)
    assert kept.render("Q").startswith("<|begin_of_text|><|start_header_id|>user")
    assert chosen.digest != kept.digest


def test_a_template_that_does_not_render_is_a_clear_error(tmp_path):
    (tmp_path / "chat_template.jinja").write_text("{% if %}")
    with pytest.raises(DataError, match=r"chat_template\.jinja: the target's chat template"):
        prompts.choose_template(None, tmp_path)
    (tmp_path / "chat_template.jinja").write_text("{{ raise_exception('no user turns') }}")
    with pytest.raises(DataError, match="no user turns"):
        prompts.choose_template(None, tmp_path)


def test_transformers_renders_the_same_text_for_every_builtin_prompt():
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    if not (SMOLLM2 / "tokenizer.json").exists():
        pytest.skip("the SmolLM2 tokenizer.json (3.5 MB) is not kept here; the golden string "
                    "above holds what transformers renders")
    tok = transformers.AutoTokenizer.from_pretrained(SMOLLM2)
    chosen = prompts.choose_template(None, SMOLLM2)
    for p in prompts.load_builtin():
        chat = [{"role": "user", "content": p.text}]
        assert chosen.render(p.text) == tok.apply_chat_template(
            chat, tokenize=False, add_generation_prompt=True)


def test_configured_template_wins_and_unknown_is_refused(tmp_path):
    chosen = prompts.choose_template("llama3", SMOLLM2)
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
    cfg = {"chat_template": [{"name": "tool_use", "template": "T{{ messages[0].content }}"},
                             {"name": "default", "template": "D{{ messages[0].content }}"}]}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    chosen = prompts.choose_template(None, tmp_path)
    assert chosen.render("x") == "Dx"
    assert "tokenizer_config.json" in chosen.source


def test_chatml_render():
    t = prompts.template_named("chatml", "test")
    assert t.render("Hello") == "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
