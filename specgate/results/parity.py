"""Whether the speculative server answers what the target answers: each prompt's two greedy
answers compared token by token, and where they part, whether the target's own logprobs there
show a near-tie that the baseline's own numerics could have turned (spec.parity).

Speculative decoding is lossless up to numerical ties: the verify pass runs the target on
several tokens at once, with other kernels and shapes than a one-token decode, and where the
target's best two tokens are within the rounding of its dtype the two forwards can pick
differently. The margin a tie may have is measured on the baseline itself, not assumed: how
far its decode of a batch and its prefill of the same text move the gap between its best two
tokens, and the gaps at which it chose otherwise by itself (another batch, another repeat, its
prefill against its decode). Anything wider is not a tie: the two servers do not serve the same
model the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from specgate.results.answers import AnswerEvidence
from specgate.results.bench import Measurement

# /server_info settings that change the numbers the target computes: a pair that differs in one
# compares unlike servers, whatever their answers.
COMPUTE_SETTINGS = ("dtype", "quantization", "kv_cache_dtype", "load_format")
# Settings that name what is served: reported when they differ (the same model can be served
# from two folders), judged by the answers.
SERVED_SETTINGS = ("model_path", "tokenizer_path", "revision")
# No rounding moves a gap this far (nats). For scale: SmolLM2-135M served in bf16 on an H100
# against its float32 arithmetic on a CPU, the decoded token trailed the best by at most 0.25;
# SGLang's own tests allow 0.35 between a decode's logprobs and a prefill's. A baseline that
# disagrees with itself by more is not reproducible to within rounding, and gives no margin.
MARGIN_CEILING = 1.0
BEYOND_KEPT = 10


def answers_of(m: Measurement) -> dict[str, tuple[int, ...]]:
    """Each prompt's answer (token ids) in the first repeat that has one."""
    out: dict[str, tuple[int, ...]] = {}
    for s in sorted(m.samples, key=lambda s: s.repeat):
        if s.output_ids and s.prompt_id not in out:
            out[s.prompt_id] = tuple(s.output_ids)
    return out


def distinct_answers(m: Measurement) -> dict[str, list[tuple[int, tuple[int, ...]]]]:
    """Each prompt's distinct answers, each with the first repeat that gave it, in repeat
    order (an empty answer, a server that sent no token ids, left out)."""
    out: dict[str, list[tuple[int, tuple[int, ...]]]] = {}
    for s in sorted(m.samples, key=lambda s: s.repeat):
        tokens = tuple(s.output_ids)
        found = out.setdefault(s.prompt_id, [])
        if tokens and all(tokens != t for _r, t in found):
            found.append((s.repeat, tokens))
    return {pid: found for pid, found in out.items() if found}


def other_repeats(m: Measurement) -> list[tuple[str, tuple[int, ...]]]:
    """Answers of later repeats that differ from their prompt's first."""
    first = answers_of(m)
    seen: set[tuple[str, tuple[int, ...]]] = set()
    out = []
    for s in m.samples:
        tokens = tuple(s.output_ids)
        if tokens and tokens != first.get(s.prompt_id) and (s.prompt_id, tokens) not in seen:
            seen.add((s.prompt_id, tokens))
            out.append((s.prompt_id, tokens))
    return out


def prompt_tokens_of(m: Measurement) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in sorted(m.samples, key=lambda s: s.repeat):
        out.setdefault(s.prompt_id, s.prompt_tokens)
    return out


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first position where two answers differ (the shorter one's end, when one goes on
    past it); None when they are the same."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@dataclasses.dataclass(frozen=True)
class Margin:
    """The widest gap between two tokens that the baseline's own numerics moved or turned.

    value: nats, None when nothing measured it. shifts: positions where a decode and a prefill
    of the same text were compared; flips: tokens the baseline chose otherwise by itself."""

    value: float | None
    shifts: int = 0
    flips: int = 0
    widest: str = ""
    why_none: str = ""
    # Where the baseline disagreed with itself by more than MARGIN_CEILING (the widest few),
    # and how often it did.
    beyond: tuple[str, ...] = ()
    beyond_count: int = 0

    def text(self) -> str:
        if self.beyond:
            return (f"the baseline disagrees with itself by more than any rounding explains, "
                    f"{self.beyond_count} time{'' if self.beyond_count == 1 else 's'} over "
                    f"{MARGIN_CEILING:g} nat (the widest: "
                    f"{'; '.join(self.beyond[:3])}), so no margin can be measured")
        if self.value is None:
            return f"no margin was measured ({self.why_none})"
        return (f"the baseline's own numerics moved a gap between two tokens by up to "
                f"{self.value:.3f} nats ({self.widest}; {self.shifts} positions compared "
                f"between its decode and its prefill of the same text, {self.flips} tokens it "
                "chose otherwise by itself)")

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def noise_margin(evidence: AnswerEvidence | None, timed: Measurement | None) -> Margin:
    """The margin a near-tie may have, measured on the baseline server (see the module's
    docstring): the largest of the gap shifts between its decode of the batch and its prefill
    of the same answers, the deficits where its prefill ranks another token above one it
    decoded, and the gaps at which its answers to the same prompt part (the timed repeats, the
    batch)."""
    if evidence is None:
        return Margin(None, why_none="the baseline server was not asked for logprobs")
    widest: tuple[float, str] | None = None
    shifts = flips = 0
    beyond: list[tuple[float, str]] = []

    def take(value: float, where: str) -> None:
        nonlocal widest
        if value > MARGIN_CEILING:
            beyond.append((value, f"{value:.3f} nats, {where}"))
        elif widest is None or value > widest[0]:
            widest = (value, where)

    prefills = [s for s in evidence.scored if s.forward == "prefill"]
    for p in prefills:
        for j, token in enumerate(p.tokens):
            best, chosen = p.best(j), p.chosen[j]
            if best is not None and chosen is not None and best[0] != token:
                flips += 1
                take(best[1] - chosen, f"its prefill ranks another token {best[1] - chosen:.3f} "
                                       f"above the one it decoded, prompt {p.prompt_id} token {j}")
    for d in (s for s in evidence.scored if s.forward == "decode"):
        along = evidence.scored_along(d.prompt_id, d.tokens)
        if along is None:
            continue
        for j in range(min(len(d.tokens), len(along.tokens))):
            if len(along.top[j]) < 2:
                continue
            (t1, v1), (t2, v2) = along.top[j][0], along.top[j][1]
            d1, d2 = d.logprob(j, t1), d.logprob(j, t2)
            if d1 is None or d2 is None:
                continue
            shifts += 1
            take(abs((d1 - d2) - (v1 - v2)),
                 f"decode in a {d.source} against prefill, prompt {d.prompt_id} token {j}")
    if timed is not None:
        first = answers_of(timed)
        others = [*other_repeats(timed), *evidence.batch.items()]
        for pid, other in others:
            mine = first.get(pid)
            if mine is None:
                continue
            q = first_divergence(mine, other)
            if q is None or q >= len(mine) or q >= len(other):
                continue
            scored = evidence.scored_along(pid, mine[:q + 1])
            if scored is None:
                continue
            a, b = scored.logprob(q, mine[q]), scored.logprob(q, other[q])
            if a is not None and b is not None:
                flips += 1
                take(abs(a - b), f"its answers to prompt {pid} part at token {q}")
    if beyond:
        widest_few = sorted(beyond, key=lambda b: -b[0])[:BEYOND_KEPT]
        return Margin(None, shifts, flips, why_none="the baseline is not reproducible",
                      beyond=tuple(text for _v, text in widest_few), beyond_count=len(beyond))
    if widest is None:
        why = evidence.error or "no decode and prefill of the same text to compare"
        return Margin(None, shifts, flips, why_none=why)
    return Margin(widest[0], shifts, flips, widest[1])


@dataclasses.dataclass(frozen=True)
class Divergence:
    """Where one prompt's two answers part, and what the target's logprobs say there."""

    prompt_id: str
    position: int
    baseline_token: int | None  # None: that answer ended here
    speculative_token: int | None
    baseline_text: str
    speculative_text: str
    baseline_logprob: float | None = None  # the target's (the baseline server's prefill)
    speculative_logprob: float | None = None  # None: not among the target's best
    floor: float | None = None  # the worst of the target's best, when the other is below it
    gap: float | None = None  # baseline_logprob − speculative_logprob
    explained: bool = False
    why: str = ""
    # The speculative server's own prefill at the same place: (its logprob of the baseline's
    # token, of its own), when it was asked.
    speculative_view: tuple[float | None, float | None] | None = None
    # Whether the target's logprobs there were read: False when the divergence could not be
    # judged (no evidence), so its failing says nothing of the two servers' models.
    judged: bool = False
    repeat: int = 1  # the speculative server's repeat that first gave this answer

    @property
    def where(self) -> str:
        again = f" (its repeat {self.repeat})" if self.repeat > 1 else ""
        return f"{self.prompt_id} at token {self.position}{again}"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def tokens_text(self) -> str:
        return f"baseline {self.baseline_text!r}, speculative {self.speculative_text!r}"


@dataclasses.dataclass(frozen=True)
class Parity:
    """One concurrency level's comparison of every prompt both servers answered."""

    prompts: int
    identical: tuple[str, ...]
    divergences: tuple[Divergence, ...]
    margin: Margin
    unanswered: tuple[str, ...] = ()  # prompts without token ids on one side
    token_counts: tuple[tuple[str, int, int], ...] = ()  # (prompt, baseline, speculative)
    settings: tuple[tuple[str, str, str], ...] = ()  # (setting, baseline, speculative)
    served: tuple[tuple[str, str, str], ...] = ()
    uncompared: tuple[str, ...] = ()  # COMPUTE_SETTINGS one side does not state

    @property
    def unexplained(self) -> tuple[Divergence, ...]:
        return tuple(d for d in self.divergences if not d.explained)

    @property
    def not_ties(self) -> tuple[Divergence, ...]:
        """Divergences the target's logprobs show are no near-tie."""
        return tuple(d for d in self.divergences if not d.explained and d.judged)

    @property
    def unjudged(self) -> tuple[Divergence, ...]:
        """Divergences without the evidence to judge them."""
        return tuple(d for d in self.divergences if not d.judged)

    def to_json(self) -> dict[str, Any]:
        return {"prompts": self.prompts, "identical": list(self.identical),
                "divergences": [d.to_json() for d in self.divergences],
                "margin": self.margin.to_json(), "unanswered": list(self.unanswered),
                "token_counts": [list(t) for t in self.token_counts],
                "settings": [list(t) for t in self.settings],
                "served": [list(t) for t in self.served], "uncompared": list(self.uncompared)}


def compare(base: Measurement, spec: Measurement, base_evidence: AnswerEvidence | None,
            spec_evidence: AnswerEvidence | None, base_info: Mapping[str, Any],
            spec_info: Mapping[str, Any]) -> Parity:
    """Both servers' answers at one level: every distinct answer the speculative server gave a
    prompt (any repeat) against the baseline's, each divergence judged against the margin."""
    margin = noise_margin(base_evidence, base)
    mine, theirs = answers_of(base), distinct_answers(spec)
    prompts = [p for p in dict.fromkeys([*prompt_tokens_of(base), *prompt_tokens_of(spec)])]
    identical: list[str] = []
    divergences: list[Divergence] = []
    unanswered: list[str] = []
    for pid in prompts:
        a, answers = mine.get(pid), theirs.get(pid)
        if a is None or not answers:
            unanswered.append(pid)
            continue
        parted = [(repeat, b, p) for repeat, b in answers
                  if (p := first_divergence(a, b)) is not None]
        if not parted:
            identical.append(pid)
        for repeat, b, p in parted:
            found = _judge(pid, p, a, b, margin, base_evidence, spec_evidence)
            divergences.append(dataclasses.replace(found, repeat=repeat))
    counts_a, counts_b = prompt_tokens_of(base), prompt_tokens_of(spec)
    token_counts = tuple((pid, counts_a[pid], counts_b[pid]) for pid in prompts
                         if pid in counts_a and pid in counts_b
                         and counts_a[pid] != counts_b[pid])
    return Parity(prompts=len(prompts), identical=tuple(identical),
                  divergences=tuple(divergences), margin=margin, unanswered=tuple(unanswered),
                  token_counts=token_counts,
                  settings=_differ(COMPUTE_SETTINGS, base_info, spec_info),
                  served=_differ(SERVED_SETTINGS, base_info, spec_info),
                  uncompared=tuple(k for k in COMPUTE_SETTINGS
                                   if _stated(base_info, k) != _stated(spec_info, k)
                                   and None in (_stated(base_info, k), _stated(spec_info, k))))


def _stated(info: Mapping[str, Any], key: str) -> str | None:
    """A setting as a server states it; None where it does not say, or leaves it to "auto"
    (the model's own: what that is, /server_info does not tell)."""
    value = info.get(key, None)
    return None if key not in info or value == "auto" else str(value)


def _differ(keys: Sequence[str], a: Mapping[str, Any], b: Mapping[str, Any]
            ) -> tuple[tuple[str, str, str], ...]:
    """Settings both servers state, differently (a quantization of None is stated: none)."""
    return tuple((k, str(a.get(k)), str(b.get(k))) for k in keys
                 if k in a and k in b and a.get(k) != b.get(k)
                 and "auto" not in (a.get(k), b.get(k)))


def _judge(pid: str, p: int, base: Sequence[int], spec: Sequence[int], margin: Margin,
           base_evidence: AnswerEvidence | None,
           spec_evidence: AnswerEvidence | None) -> Divergence:
    b = base[p] if p < len(base) else None
    s = spec[p] if p < len(spec) else None

    def text(token: int | None) -> str:
        if token is None:
            return "(the answer ends)"
        for evidence in (base_evidence, spec_evidence):
            if evidence is not None and token in evidence.texts:
                return evidence.texts[token]
        return f"<token {token}>"

    view: tuple[float | None, float | None] | None = None
    if spec_evidence is not None and s is not None:
        theirs = spec_evidence.scored_along(pid, spec[:p + 1])
        if theirs is not None:
            view = (theirs.logprob(p, b) if b is not None else None, theirs.logprob(p, s))
    scored = (base_evidence.scored_along(pid, base[:p + 1])
              if base_evidence is not None and b is not None else None)
    here = Divergence(prompt_id=pid, position=p, baseline_token=b, speculative_token=s,
                      baseline_text=text(b), speculative_text=text(s), speculative_view=view)
    if b is None or s is None:
        return dataclasses.replace(here, judged=True,
                                   why="one answer ends where the other goes on")
    if scored is None:
        why = (base_evidence.error if base_evidence is not None and base_evidence.error
               else "the baseline server scored no answer that reaches this position")
        return dataclasses.replace(here, why=f"no target logprobs here: {why}")
    lp_b, lp_s = scored.logprob(p, b), scored.logprob(p, s)
    here = dataclasses.replace(here, baseline_logprob=lp_b, speculative_logprob=lp_s)
    if margin.beyond:
        return dataclasses.replace(here, why=margin.text())
    if lp_b is None:
        return dataclasses.replace(here, why="the baseline server sent no logprob for its own "
                                             "token")
    if lp_s is None:
        row = scored.top[p] if p < len(scored.top) else ()
        floor = min((v for _t, v in row), default=None)
        bound = f" (the worst of them {floor:.3f}: a gap over {lp_b - floor:.3f} nats)" \
            if floor is not None else ""
        return dataclasses.replace(here, floor=floor, judged=bool(row), why=(
            f"the speculative token is not among the target's best {len(row)}{bound}"))
    gap = lp_b - lp_s
    here = dataclasses.replace(here, gap=gap, judged=True)
    if margin.value is None:
        return dataclasses.replace(here, explained=gap == 0.0, judged=gap == 0.0, why=(
            "an exact tie" if gap == 0.0 else f"a gap of {abs(gap):.3f} nats, and "
                                              f"{margin.text()}"))
    near = abs(gap) <= margin.value
    return dataclasses.replace(here, explained=near, why=(
        f"a near-tie: the target's gap {abs(gap):.3f} nats is within the margin "
        f"{margin.value:.3f}" if near else
        f"not a near-tie: the target's gap {abs(gap):.3f} nats is wider than the margin "
        f"{margin.value:.3f}"))
