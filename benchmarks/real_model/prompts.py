"""Training prompts for self-distillation from local text and templates, never the probe's own.

Two families, each seeded:

- family "tasks" (the trained drafter's data): templated user requests of the probe's kinds
  (chat, coding, math, summarization, translation, reasoning, extraction), filled from word lists
  and from the Python standard library's own docstrings and source lines.
- family "self" (the borrowed drafter's data): the instruct model writes the questions itself.
- family "written": the model writes requests of each of the seven kinds itself (or, for
  summarization, extraction and translation, the passage a request of that kind wraps);
  `written_requests` makes the asks, `written_prompts` the prompts.
  `question_requests` makes the requests ("Write one question that ... might ask about ...");
  the model's answers, cleaned by `question_from_answer`, become the prompts.

`excluded` rejects a prompt that is, or shares a run of SHINGLE words with, any prompt of the
probe's set (specgate/data/prompts.jsonl): none of those may reach the training data.

usage: python3 -m benchmarks.real_model.prompts OUT.jsonl [--family tasks] [--n 6000] [--seed 0]
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import random
import re
import sys
import sysconfig
from collections.abc import Iterable, Sequence
from pathlib import Path

SHINGLE = 6  # words: a shared run this long with a probe prompt excludes a training prompt
KINDS = ("chat", "coding", "math", "summarization", "translation", "reasoning", "extraction")
STDLIB_FILES = 120  # standard-library modules read for docstrings and code lines

NAMES = ["Ana", "Ben", "Chloe", "Dev", "Elif", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Kemal",
         "Lena", "Mateo", "Nadia", "Omar", "Priya", "Quentin", "Rosa", "Sami", "Tara"]
ITEMS = ["notebooks", "apples", "tickets", "lamps", "bicycles", "mugs", "plants", "chairs",
         "batteries", "jackets", "candles", "maps", "pencils", "cables", "blankets"]
PLACES = ["the library", "a small bakery", "the train station", "a hardware store",
          "the museum", "a rooftop garden", "the harbour", "a mountain hut", "the town hall",
          "a night market", "the school gym", "a bike workshop"]
HOBBIES = ["running", "chess", "baking bread", "learning the guitar", "photography", "gardening",
           "drawing", "swimming", "writing short stories", "rock climbing", "knitting",
           "learning Japanese", "birdwatching", "woodworking", "public speaking"]
SITUATIONS = ["I start a new job next week", "my flatmate never cleans the kitchen",
              "I keep waking up at 4 a.m.", "my team missed its last two deadlines",
              "I want to save money for a trip", "my old laptop is getting slow",
              "I have an exam in ten days", "my neighbour's dog barks all night",
              "I feel tired every afternoon", "I have to give a toast at a wedding",
              "I want to read more books this year", "my parents are visiting for a week"]
LANGUAGES = ["French", "Spanish", "German", "Italian", "Portuguese", "Dutch"]
VERBS = ["repaired", "painted", "delivered", "cancelled", "postponed", "booked", "returned",
         "ordered", "cleaned", "inspected", "photographed", "measured"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
TOPICS = ["volcanoes", "the history of printing", "bees", "compound interest", "black holes",
          "the water cycle", "vaccines", "ancient Rome", "electric cars", "sleep", "coffee",
          "tides", "the immune system", "recycling plastic", "glaciers", "rainbows", "ant colonies",
          "the stock market", "jazz", "photosynthesis", "the internet", "earthquakes", "whales",
          "solar panels", "the printing press", "chess openings", "bread yeast", "clouds",
          "the moon landing", "password security", "bridges", "deserts", "octopuses", "magnets",
          "the human heart", "coral reefs", "recipes with lentils", "time zones", "tea",
          "the Silk Road", "hurricanes", "languages of India", "penguins", "batteries"]
PERSONAS = ["a curious child", "a nervous student", "a retired teacher", "a small-business owner",
            "a new programmer", "a tourist", "a nurse on a night shift", "a farmer",
            "a journalist", "a parent", "a history buff", "an amateur astronomer"]


def normalize(text: str) -> list[str]:
    """Lower-case words without punctuation: what the exclusion compares."""
    return re.findall(r"[a-z0-9]+", text.lower())


def shingles(words: Sequence[str], n: int = SHINGLE) -> set[tuple[str, ...]]:
    return {tuple(words[i:i + n]) for i in range(max(len(words) - n + 1, 0))}


class ProbeFilter:
    """Rejects any prompt equal to, or sharing a run of SHINGLE words with, a probe prompt."""

    def __init__(self, probe_texts: Iterable[str], n: int = SHINGLE) -> None:
        texts = list(probe_texts)
        self.n = n
        self.whole = {" ".join(normalize(t)) for t in texts}
        self.runs: set[tuple[str, ...]] = set()
        for t in texts:
            self.runs |= shingles(normalize(t), n)

    def excluded(self, text: str) -> bool:
        words = normalize(text)
        return " ".join(words) in self.whole or bool(shingles(words, self.n) & self.runs)


def probe_texts() -> list[str]:
    """The probe's built-in prompts (specgate/data/prompts.jsonl)."""
    from specgate.results import prompts as probe_prompts

    return [p.text for p in probe_prompts.load_builtin()]


# --- local text: the standard library ---------------------------------------------------------

def stdlib_material(limit: int = STDLIB_FILES) -> tuple[list[tuple[str, str]], list[str]]:
    """(qualified name, first docstring paragraph) of public functions, and code lines."""
    root = Path(sysconfig.get_paths()["stdlib"])
    docs: list[tuple[str, str]] = []
    lines: list[str] = []
    for file in sorted(root.glob("*.py"))[:limit]:
        try:
            source = file.read_text(encoding="utf-8", errors="ignore")
            tree = ast.parse(source)
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                doc = ast.get_docstring(node) or ""
                para = " ".join(doc.strip().split("\n\n")[0].split())
                if 40 <= len(para) <= 400:
                    docs.append((f"{file.stem}.{node.name}", para))
        lines += [ln.strip() for ln in source.splitlines() if 25 < len(ln.strip()) < 110
                  and not ln.strip().startswith("#")]
    return docs, lines


# --- family "tasks" ---------------------------------------------------------------------------

def _sentence(rng: random.Random) -> str:
    who, other = rng.sample(NAMES, 2)
    return (f"{who} {rng.choice(VERBS)} the {rng.choice(ITEMS)} at {rng.choice(PLACES)} "
            f"on {rng.choice(MONTHS)} {rng.randint(1, 28)} before {other} arrived.")


def _paragraph(rng: random.Random, docs: Sequence[tuple[str, str]]) -> str:
    if docs and rng.random() < 0.5:
        return " ".join(d for _, d in rng.sample(list(docs), min(len(docs), rng.randint(2, 3))))
    return " ".join(_sentence(rng) for _ in range(rng.randint(3, 6)))


def task_prompt(kind: str, rng: random.Random, docs: Sequence[tuple[str, str]],
                lines: Sequence[str]) -> str:
    """One user request of a kind, from templates, word lists and standard-library text."""
    if kind == "chat":
        return rng.choice([
            f"{rng.choice(SITUATIONS).capitalize()}. What would you suggest?",
            f"How do I get started with {rng.choice(HOBBIES)} if I only have weekends?",
            f"Give me three tips for {rng.choice(HOBBIES)} as a complete beginner.",
            f"My friend {rng.choice(NAMES)} says {rng.choice(TOPICS)} is a boring subject. "
            "How could I make it sound interesting?",
            f"Can you recommend a weekly plan for {rng.choice(HOBBIES)}?",
        ])
    if kind == "coding":
        name, doc = rng.choice(docs) if docs else ("helper", "Return the sum of a list.")
        line = rng.choice(lines) if lines else "x = sorted(items, key=len)"
        return rng.choice([
            f"Write a Python function that does the following: {doc}",
            f"Explain what this line of Python does:\n{line}",
            f"What does the Python standard library's `{name}` do? Give a short example.",
            f"Write a Python function that counts how many {rng.choice(ITEMS)} each person has "
            "in a list of (name, count) pairs, and add a docstring.",
            f"Is there a bug in this Python line? {line}",
            f"Rewrite this Python line to be easier to read:\n{line}",
        ])
    if kind == "math":
        a, b, c = rng.randint(3, 40), rng.randint(2, 12), rng.randint(5, 95)
        item = rng.choice(ITEMS)
        return rng.choice([
            f"A shop sells {item} at {c} cents each. How much do {a} {item} cost in dollars? "
            "Explain each step.",
            f"{rng.choice(NAMES)} has {a} {item} and gives away {b} of them each day. After how "
            "many days are fewer than 5 left?",
            f"What is {a} percent of {c * b}? Show the calculation.",
            f"A tank holds {a * 10} litres and drains {b} litres per minute. How long until it "
            "is half empty?",
            f"Solve for x: {b}x + {a} = {c + a * b}.",
            f"A rectangle is {a} cm by {b} cm. What are its area and perimeter?",
        ])
    if kind == "summarization":
        return rng.choice(["Summarize in two sentences: ", "Give a one-sentence summary of: ",
                           "Summarize the main point of this text: "]) + _paragraph(rng, docs)
    if kind == "translation":
        return f"Translate into {rng.choice(LANGUAGES)}: {_sentence(rng)}"
    if kind == "reasoning":
        x, y, z = rng.sample(NAMES, 3)
        return rng.choice([
            f"{x} is older than {y}, and {y} is older than {z}. Who is the youngest? Explain.",
            f"If every {rng.choice(ITEMS)[:-1]} in the box is red and this one is in the box, "
            "what colour is it? Explain your reasoning.",
            f"{x}, {y} and {z} sit in a row. {x} is not at either end and {z} is to the left of "
            f"{x}. Where does {y} sit?",
            f"A clock shows {rng.randint(1, 12)}:{rng.choice(['00', '15', '30', '45'])}. What "
            f"time will it show after {rng.randint(2, 30)} hours? Think step by step.",
        ])
    if kind == "extraction":
        text = " ".join(_sentence(rng) for _ in range(rng.randint(2, 4)))
        return rng.choice([
            f"List every person's name in this text: {text}",
            f"Extract all dates from this text as a JSON list: {text}",
            f"Which places are mentioned here? {text}",
            f"Make a table of who did what in this text: {text}",
        ])
    raise ValueError(f"unknown kind {kind!r} (kinds: {', '.join(KINDS)})")


def task_prompts(n: int, seed: int, keep: ProbeFilter,
                 material: tuple[list[tuple[str, str]], list[str]] | None = None,
                 ) -> tuple[list[dict[str, str]], dict[str, int]]:
    """n distinct prompts of the KINDS in turn, and how many were dropped as probe-like or as
    duplicates."""
    rng = random.Random(seed)
    docs, lines = material if material is not None else stdlib_material()
    out: list[dict[str, str]] = []
    seen: set[str] = set()
    dropped = {"probe": 0, "duplicate": 0}
    tries = 0
    while len(out) < n and tries < 20 * n:
        tries += 1
        kind = KINDS[len(out) % len(KINDS)]
        text = task_prompt(kind, rng, docs, lines)
        if keep.excluded(text):
            dropped["probe"] += 1
            continue
        if text in seen:
            dropped["duplicate"] += 1
            continue
        seen.add(text)
        out.append({"id": f"tasks-{len(out):05d}", "category": kind, "prompt": text})
    return out, dropped


# --- family "self": questions the instruct model writes ---------------------------------------

def question_requests(n: int, seed: int) -> list[dict[str, str]]:
    """Requests that make the model write one question each (topics x personas, seeded)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        topic, persona = rng.choice(TOPICS), rng.choice(PERSONAS)
        style = rng.choice(["a short question", "one question", "a detailed question",
                            "a question that needs a step-by-step answer"])
        out.append({"id": f"ask-{i:05d}", "category": "self",
                    "prompt": f"Write {style} that {persona} might ask about {topic}. "
                              "Reply with the question only."})
    return out


def question_from_answer(text: str) -> str | None:
    """The question in a model's answer: its first non-empty line, unquoted; None when that is
    not a usable question (too short or too long)."""
    for line in text.splitlines():
        line = line.strip().strip('"').strip()
        line = re.sub(r"^(question|q)\s*[:.]\s*", "", line, flags=re.IGNORECASE)
        if line:
            return line if 12 <= len(line) <= 300 else None
    return None


class Kept:
    """Prompts kept in order, each distinct and none of the probe's, numbered `{prefix}-00000`
    on; and how many were dropped as unusable (None), probe-like or duplicates."""

    def __init__(self, prefix: str, keep: ProbeFilter) -> None:
        self.prefix, self.keep = prefix, keep
        self.out: list[dict[str, str]] = []
        self.seen: set[str] = set()
        self.dropped = {"unusable": 0, "probe": 0, "duplicate": 0}

    def offer(self, prompt: str | None, category: str) -> None:
        if prompt is None:
            self.dropped["unusable"] += 1
        elif self.keep.excluded(prompt):
            self.dropped["probe"] += 1
        elif prompt in self.seen:
            self.dropped["duplicate"] += 1
        else:
            self.seen.add(prompt)
            self.out.append({"id": f"{self.prefix}-{len(self.out):05d}", "category": category,
                             "prompt": prompt})


def self_prompts(answers: Sequence[str],
                 keep: ProbeFilter) -> tuple[list[dict[str, str]], dict[str, int]]:
    """The model's questions as prompts (distinct, none of the probe's), and how many were
    dropped as unusable, probe-like or duplicates."""
    kept = Kept("self", keep)
    for text in answers:
        kept.offer(question_from_answer(text), "self")
    return kept.out, kept.dropped


# --- family "written": requests of the probe's seven kinds that the model writes --------------

# What the model is asked to write per kind: a request ("ask") sent as it is, or a passage
# ("passage") that a request of that kind then wraps. {persona} and {topic} are filled in.
WRITE = {
    "chat": ("ask", ["Write one message that {persona} might send to an assistant asking for "
                     "everyday advice about {topic}. Reply with the message only.",
                     "Write a short, personal question about {topic} that {persona} might ask "
                     "a friend for help with. Reply with the question only."]),
    "coding": ("ask", ["Write one programming task about {topic} that asks for a Python "
                       "function. Reply with the task only.",
                       "Write one request that {persona} learning to code might make: a small "
                       "program that handles data about {topic}. Reply with the request only."]),
    "math": ("ask", ["Write one arithmetic word problem about {topic} with concrete numbers. "
                     "Reply with the problem only.",
                     "Write one math question about {topic} that needs a few steps of "
                     "calculation. Reply with the question only."]),
    "reasoning": ("ask", ["Write one logic puzzle about {topic} that can be solved step by step. "
                          "Reply with the puzzle only.",
                          "Write one question about {topic} that asks why something happens and "
                          "needs careful reasoning. Reply with the question only."]),
    "summarization": ("passage", ["Write a paragraph of five sentences about {topic}, as "
                                  "{persona} would tell it. Reply with the paragraph only.",
                                  "Write a short news report about {topic}. Reply with the "
                                  "report only."]),
    "extraction": ("passage", ["Write a short email from {persona} about {topic} that mentions "
                               "names, dates and amounts. Reply with the email only.",
                               "Write a short notice about an event related to {topic}, with a "
                               "date, a place and a price. Reply with the notice only."]),
    "translation": ("passage", ["Write two sentences that {persona} might say about {topic}. "
                                "Reply with the sentences only.",
                                "Write one sentence about {topic}. Reply with the sentence "
                                "only."]),
}
WRAP = {
    "summarization": ["Summarize in two sentences: {text}", "Give the main points of this "
                      "text as a short list: {text}", "Summarize this for a busy reader: {text}",
                      "What is this text about? Answer in one sentence: {text}"],
    "extraction": ["Extract every name, date and amount from this text as a list: {text}",
                   "List the people and the dates mentioned here: {text}",
                   "From the text below, extract the key facts as JSON: {text}",
                   "What is the date and the place in this notice? {text}"],
    "translation": ["Translate into {language}: {text}", "How would you say this in "
                    "{language}? {text}", "Translate the following into {language}: {text}"],
}


def written_requests(n: int, seed: int) -> list[dict[str, str]]:
    """Requests that make the model write a request (or a passage) of each of the probe's seven
    kinds in turn, over topics x personas x phrasings, seeded."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        kind = KINDS[i % len(KINDS)]
        _form, asks = WRITE[kind]
        text = rng.choice(asks).format(persona=rng.choice(PERSONAS), topic=rng.choice(TOPICS))
        out.append({"id": f"write-{i:05d}", "category": kind, "prompt": text})
    return out


def written_prompts(requests: Sequence[dict[str, str]], answers: Sequence[str], seed: int,
                    keep: ProbeFilter) -> tuple[list[dict[str, str]], dict[str, int]]:
    """Prompts from what the model wrote: a request as it is, or a passage wrapped in a request
    of its kind; distinct, none of the probe's. Returns them and how many were dropped."""
    rng = random.Random(seed)
    kept = Kept("written", keep)
    for req, text in zip(requests, answers, strict=True):
        kind = req["category"]
        form, _asks = WRITE[kind]
        body = " ".join(text.split()).strip().strip('"').strip()
        if form == "ask":
            q = question_from_answer(text)
            prompt = q
        else:
            prompt = (rng.choice(WRAP[kind]).format(text=body, language=rng.choice(LANGUAGES))
                      if 40 <= len(body) <= 1500 else None)
        kept.offer(prompt, kind)
    return kept.out, kept.dropped


def write_jsonl(rows: Sequence[dict[str, str]], path: Path) -> str:
    """Write rows, return the file's sha256."""
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--family", choices=("tasks", "questions"), default="tasks",
                    help="tasks: the templated requests; questions: the requests that make the "
                         "model write its own questions")
    ap.add_argument("--n", type=int, default=6000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    keep = ProbeFilter(probe_texts())
    if args.family == "tasks":
        rows, dropped = task_prompts(args.n, args.seed, keep)
    else:
        rows, dropped = question_requests(args.n, args.seed), {}
    digest = write_jsonl(rows, args.out)
    print(f"{args.out}: {len(rows)} prompts (dropped: {dropped}), "
          f"sha256 {digest}, Python {sys.version.split()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
