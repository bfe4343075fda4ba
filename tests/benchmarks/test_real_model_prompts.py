"""benchmarks/real_model/prompts.py: training prompts never include the probe's own prompts."""

from __future__ import annotations

import random
from types import ModuleType

import pytest
from script_support import load_real_model_script

from specgate.results.prompts import load_builtin

MATERIAL = ([("json.dumps", "Serialize obj to a JSON formatted str."),
             ("textwrap.fill", "Wrap a single paragraph of text, returning a single string.")],
            ["result = sorted(items, key=lambda item: item[1])",
             "return ''.join(reversed(word)) if word else word"])


@pytest.fixture(scope="module")
def prompts() -> ModuleType:
    return load_real_model_script("prompts")


@pytest.fixture(scope="module")
def probe_texts() -> list[str]:
    return [p.text for p in load_builtin()]


def test_every_probe_prompt_is_excluded(prompts: ModuleType, probe_texts: list[str]) -> None:
    keep = prompts.ProbeFilter(probe_texts)
    assert probe_texts
    assert all(keep.excluded(t) for t in probe_texts)
    # case and punctuation do not hide one
    assert keep.excluded(probe_texts[0].upper().replace(",", " ,"))


def test_a_run_of_six_probe_words_inside_a_prompt_is_excluded(prompts: ModuleType,
                                                              probe_texts: list[str]) -> None:
    keep = prompts.ProbeFilter(probe_texts)
    words = probe_texts[5].split()
    assert keep.excluded("Please help: " + " ".join(words[2:8]) + " and nothing else.")
    assert not keep.excluded("Please help: " + " ".join(words[2:6]) + " and nothing else.")


def test_task_prompts_are_distinct_seeded_cover_every_kind_and_avoid_the_probe(
        prompts: ModuleType, probe_texts: list[str]) -> None:
    keep = prompts.ProbeFilter(probe_texts)
    rows, dropped = prompts.task_prompts(140, 3, keep, MATERIAL)
    again, _ = prompts.task_prompts(140, 3, keep, MATERIAL)
    assert rows == again
    assert len(rows) == 140
    assert len({r["prompt"] for r in rows}) == 140
    assert {r["category"] for r in rows} == set(prompts.KINDS)
    assert not any(keep.excluded(r["prompt"]) for r in rows)
    assert set(dropped) == {"probe", "duplicate"}


def test_a_filter_that_matches_a_template_drops_those_prompts(prompts: ModuleType) -> None:
    """The exclusion acts inside the generator: a 'probe' that shares a template's words loses
    every prompt of that template, and the generator says so."""
    keep = prompts.ProbeFilter(["List every person's name in this text: nothing here."])
    rows, dropped = prompts.task_prompts(70, 0, keep, MATERIAL)
    assert not any("List every person's name" in r["prompt"] for r in rows)
    assert dropped["probe"] > 0


def test_questions_written_by_the_model_are_cleaned_and_filtered(
        prompts: ModuleType, probe_texts: list[str]) -> None:
    keep = prompts.ProbeFilter(probe_texts)
    answers = ['"Why do volcanoes erupt more in some places than others?"\nBecause...',
               "Question: How do bees find their way home?",
               "ok",
               probe_texts[0],
               "Question: How do bees find their way home?"]
    rows, dropped = prompts.self_prompts(answers, keep)
    assert [r["prompt"] for r in rows] == [
        "Why do volcanoes erupt more in some places than others?",
        "How do bees find their way home?"]
    assert dropped == {"unusable": 1, "probe": 1, "duplicate": 1}


def test_question_requests_are_seeded(prompts: ModuleType) -> None:
    a, b = prompts.question_requests(20, 1), prompts.question_requests(20, 1)
    assert a == b
    assert a != prompts.question_requests(20, 2)
    assert all(r["prompt"].endswith("Reply with the question only.") for r in a)


def test_task_prompt_refuses_an_unknown_kind(prompts: ModuleType) -> None:
    with pytest.raises(ValueError, match="unknown kind"):
        prompts.task_prompt("poetry", random.Random(0), *MATERIAL)


def test_written_requests_ask_for_every_kind_in_turn_and_are_seeded(prompts: ModuleType) -> None:
    a = prompts.written_requests(21, 3)
    assert a == prompts.written_requests(21, 3)
    assert a != prompts.written_requests(21, 4)
    assert [r["category"] for r in a] == list(prompts.KINDS) * 3
    assert all("{" not in r["prompt"] and r["prompt"].startswith("Write") for r in a)


def test_written_prompts_keep_asks_wrap_passages_and_drop_the_rest(
        prompts: ModuleType, probe_texts: list[str]) -> None:
    keep = prompts.ProbeFilter(probe_texts)
    asks = [{"id": f"w{i}", "category": k, "prompt": "..."} for i, k in enumerate(
        ["chat", "summarization", "translation", "math", "extraction", "chat", "coding"])]
    passage = "The harbour was quiet on Monday. Fishing boats stayed in because of the storm."
    answers = ['"How do I keep my balcony plants alive in winter?"',
               passage,
               "Too short.",
               "Question: A tank holds 40 litres and leaks 3 litres an hour. When is it empty?",
               "Ana paid 40 euros on May 3 for the harbour tour; Ben paid 25.",
               "How do I keep my balcony plants alive in winter?",
               probe_texts[0]]
    rows, dropped = prompts.written_prompts(asks, answers, 0, keep)
    got = {r["category"]: r["prompt"] for r in rows}
    assert got["chat"] == "How do I keep my balcony plants alive in winter?"
    assert got["math"].startswith("A tank holds 40 litres")
    # a passage reaches the model inside a request of its own kind, word for word
    assert passage in got["summarization"]
    assert got["summarization"] != passage
    assert any(got["summarization"] == w.format(text=passage)
               for w in prompts.WRAP["summarization"])
    assert "Ana paid 40 euros" in got["extraction"]
    assert "translation" not in got  # the passage was too short to translate
    assert dropped == {"unusable": 1, "probe": 1, "duplicate": 1}
    assert rows == prompts.written_prompts(asks, answers, 0, keep)[0]
