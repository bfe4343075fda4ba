"""Asking a server about its own answers, after its timed passes and before it stops: the
prompts' token ids, its answers to every prompt sent as one batch (the baseline), and its
logprobs along each answer it gave (results/answers.py holds what comes back)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from specgate.core.errors import SpecgateError
from specgate.results import parity
from specgate.results.answers import TOP_K, AnswerEvidence, Scored
from specgate.results.bench import Measurement, Sampling
from specgate.results.prompts import PromptSet
from specgate.serving.client import SGLangClient
from specgate.serving.launch import Config

Progress = Callable[[str], None]
# Sequences scored per /generate body: each position scored costs a logit row of the whole
# vocabulary (0.6 MB for a 164k vocabulary), so a body stays at a few answers.
SCORED_PER_BODY = 2


def collect(client: SGLangClient, prompts: PromptSet, sampling: Sampling, config: Config,
            measured: Mapping[int, Measurement], *,
            baseline: Mapping[int, Measurement] | None = None,
            say: Progress | None = None) -> AnswerEvidence | None:
    """The evidence spec.parity judges by, or None when answers are sampled (temperature > 0:
    two servers' samples differ by design). The baseline is asked for its answers to every
    prompt in one batch, with its logprobs, and scores each distinct answer it gave; the
    speculative server scores its answers where they part from the baseline's (`baseline`:
    the baseline's measurements by level; all of its answers without them). A server that
    will not answer says why in `error`, with what it did give."""
    if sampling.temperature != 0:
        return None
    found = _Found()
    try:
        _prompt_ids(client, prompts, found)
        if config == "baseline":
            _batch(client, prompts, sampling, found)
        wanted = list(_to_score(config, measured, found, baseline))
        if say is not None:
            say(f"{config}: scoring {len(wanted)} answers for spec.parity (untimed)")
        for start in range(0, len(wanted), SCORED_PER_BODY):
            _score(client, wanted[start:start + SCORED_PER_BODY], found)
    except (SpecgateError, ValueError, KeyError, TypeError, IndexError) as exc:
        found.error = f"{type(exc).__name__}: {exc}" if not isinstance(exc, SpecgateError) \
            else str(exc)
        if say is not None:
            say(f"{config}: the evidence for spec.parity is incomplete: {found.error}")
    return found.evidence()


class _Found:
    def __init__(self) -> None:
        self.prompt_ids: dict[str, tuple[int, ...]] = {}
        self.batch: dict[str, tuple[int, ...]] = {}
        self.batch_size = 0
        self.scored: list[Scored] = []
        self.texts: dict[int, str] = {}
        self.error = ""

    def evidence(self) -> AnswerEvidence:
        return AnswerEvidence(top_k=TOP_K, prompt_ids=dict(self.prompt_ids),
                              batch=dict(self.batch), batch_size=self.batch_size,
                              scored=tuple(self.scored), texts=dict(self.texts),
                              error=self.error)

    def learn(self, entries: Iterable[Any]) -> None:
        """Token texts from logprob entries ([logprob, token id, text])."""
        for entry in entries:
            if isinstance(entry, list) and len(entry) >= 3 and isinstance(entry[1], int) \
                    and isinstance(entry[2], str):
                self.texts.setdefault(entry[1], entry[2])


def _logprob_body(**extra: Any) -> dict[str, Any]:
    return {"return_logprob": True, "return_text_in_logprobs": True, **extra}


def _batch(client: SGLangClient, prompts: PromptSet, sampling: Sampling,
           found: _Found) -> None:
    """Every prompt in one body: the answers of this batch composition with the logprobs each
    decode chose by (the answers' only: a prompt's positions would each cost a logit row of the
    whole vocabulary, for every prompt of the batch at once)."""
    ids = [p.id for p in prompts.prompts]
    answers = client.generate_many(_logprob_body(
        text=list(prompts.texts), sampling_params=[sampling.params] * len(ids),
        logprob_start_len=-1, top_logprobs_num=TOP_K))
    _check_count(answers, ids)
    found.batch_size = len(ids)
    for pid, answer in zip(ids, answers, strict=True):
        meta = answer["meta_info"]
        tokens = tuple(int(t) for t in answer.get("output_ids") or ())
        found.batch[pid] = tokens
        entries = list(meta.get("output_token_logprobs") or ())
        tops = list(meta.get("output_top_logprobs") or ())
        if len(entries) != len(tokens) or len(tops) != len(tokens):
            raise ValueError(f"prompt {pid}: {len(tokens)} answer tokens but "
                             f"{len(entries)} logprobs and {len(tops)} best lists")
        found.learn(entries)
        for row in tops:
            found.learn(row or ())
        found.scored.append(Scored(pid, tokens, tuple(_value(e) for e in entries),
                                   tuple(_row(r) for r in tops), "decode",
                                   f"batch of {len(ids)}"))


def _prompt_ids(client: SGLangClient, prompts: PromptSet, found: _Found) -> None:
    """The prompts' token ids as this server tokenizes them: one prefill each (its prompt's
    logprobs cost a vocabulary-wide row per position, so never for every prompt at once)."""
    for prompt, text in prompts.sent():
        answer = client.generate_many(_logprob_body(
            text=text, sampling_params={"max_new_tokens": 1, "temperature": 0.0},
            logprob_start_len=0))
        _check_count(answer, [prompt.id])
        found.prompt_ids[prompt.id] = _input_ids(answer[0]["meta_info"])


def _to_score(config: Config, measured: Mapping[int, Measurement], found: _Found,
              baseline: Mapping[int, Measurement] | None
              ) -> Iterable[tuple[str, tuple[int, ...], str]]:
    """(prompt id, tokens, source) of every distinct sequence worth scoring."""
    seen: set[tuple[str, tuple[int, ...]]] = set()

    def once(pid: str, tokens: tuple[int, ...], source: str
             ) -> Iterable[tuple[str, tuple[int, ...], str]]:
        if tokens and (pid, tokens) not in seen and pid in found.prompt_ids:
            seen.add((pid, tokens))
            yield pid, tokens, source

    for level, m in sorted(measured.items()):
        where = "timed" if level == 1 else f"timed at {level} in flight"
        if config == "baseline" or baseline is None:
            for pid, tokens in parity.answers_of(m).items():
                yield from once(pid, tokens, where)
        else:
            base = parity.answers_of(baseline[level]) if level in baseline else {}
            for pid, answers in parity.distinct_answers(m).items():
                for _repeat, tokens in answers:
                    theirs = base.get(pid)
                    split = None if theirs is None else parity.first_divergence(theirs, tokens)
                    if theirs is None:
                        yield from once(pid, tokens, where)
                    elif split is not None:
                        yield from once(pid, tokens[:split + 1], where)
        if config == "baseline":
            for pid, tokens in parity.other_repeats(m):
                yield from once(pid, tokens, f"{where}, another repeat")
    if config == "baseline":
        for pid, tokens in found.batch.items():
            yield from once(pid, tokens, f"batch of {found.batch_size}")


def _score(client: SGLangClient, wanted: Sequence[tuple[str, tuple[int, ...], str]],
           found: _Found) -> None:
    """Prefill each sequence after its prompt and read the logprobs of every position."""
    bodies = [list(found.prompt_ids[pid]) + list(tokens) for pid, tokens, _ in wanted]
    # SGLang returns no logprob for the token at logprob_start_len itself ([None, id, text]):
    # starting at the prompt's last token, the entries after it are the sequence's own.
    starts = [len(found.prompt_ids[pid]) - 1 for pid, _t, _s in wanted]
    answers = client.generate_many(_logprob_body(
        input_ids=bodies, sampling_params={"max_new_tokens": 1, "temperature": 0.0},
        logprob_start_len=starts, top_logprobs_num=TOP_K))
    _check_count(answers, [pid for pid, _t, _s in wanted])
    for (pid, tokens, source), answer in zip(wanted, answers, strict=True):
        meta = answer["meta_info"]
        entries = list(meta.get("input_token_logprobs") or ())
        tops = list(meta.get("input_top_logprobs") or ())
        if not entries or _token(entries[0]) != found.prompt_ids[pid][-1]:
            raise ValueError(f"prompt {pid}: the scoring does not start at the prompt's last "
                             "token, where logprob_start_len put it")
        entries, tops = entries[1:], tops[1:]
        if len(entries) != len(tokens) or len(tops) != len(tokens):
            raise ValueError(f"prompt {pid}: scored {len(tokens)} tokens but the server sent "
                             f"{len(entries)} logprobs and {len(tops)} best lists")
        if [_token(e) for e in entries] != list(tokens):
            raise ValueError(f"prompt {pid}: the server scored other tokens than those sent")
        found.learn(entries)
        for row in tops:
            found.learn(row or ())
        found.scored.append(Scored(pid, tokens, tuple(_value(e) for e in entries),
                                   tuple(_row(r) for r in tops), "prefill", source))


def _check_count(answers: Sequence[Any], ids: Sequence[str]) -> None:
    if len(answers) != len(ids):
        raise ValueError(f"{len(ids)} prompts sent in one body, {len(answers)} answers back")


def _input_ids(meta: Mapping[str, Any]) -> tuple[int, ...]:
    entries = list(meta.get("input_token_logprobs") or ())
    tokens = tuple(_token(e) for e in entries)
    if not tokens or len(tokens) != meta.get("prompt_tokens"):
        raise ValueError(f"input_token_logprobs holds {len(tokens)} tokens for a prompt of "
                         f"{meta.get('prompt_tokens')}: the server does not return the "
                         "prompt's logprobs from logprob_start_len 0")
    return tokens


def _token(entry: Any) -> int:
    if not isinstance(entry, list) or len(entry) < 2 or not isinstance(entry[1], int):
        raise ValueError(f"a logprob entry is not [logprob, token id, …]: {entry!r}"[:200])
    return int(entry[1])


def _value(entry: Any) -> float | None:
    value = entry[0] if isinstance(entry, list) and entry else None
    if not isinstance(value, (int, float)) or isinstance(value, bool) \
            or not math.isfinite(value):
        return None
    return float(value)


def _row(row: Any) -> tuple[tuple[int, float], ...]:
    out = []
    for entry in row or ():
        value = _value(entry)
        if value is not None:
            out.append((_token(entry), value))
    return tuple(out)
