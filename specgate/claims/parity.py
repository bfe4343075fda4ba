"""spec.parity: the speculative server answers what the target answers, up to near-ties of
the target's own logprobs (results/parity.py judges; this words the claim)."""

from __future__ import annotations

import csv
import io
from typing import Any

from specgate.claims import ids
from specgate.claims import result as claims
from specgate.claims.live_run import PHASE, blocked, needs, sim
from specgate.claims.result import Attachment, ClaimResult
from specgate.core.profile import Profile
from specgate.results import parity
from specgate.results.answers import AnswerEvidence
from specgate.results.live import LiveResults

CLAIM = ids.PARITY.id
# Divergences named in the message (the attachment lists every prompt).
NAMED = 6


def parity_claim(profile: Profile, live: LiveResults) -> ClaimResult:
    """Each prompt's greedy answers from both servers, token by token: identical, or parted at
    a near-tie of the target that the baseline's own numerics could turn."""
    temperature = profile.bench.temperature
    if temperature != 0:
        return claims.skipped(
            CLAIM, PHASE, sim(live) + f"answers are sampled at temperature {temperature:g}, "
            "so two servers' texts differ by design; comparing their distributions is out of "
            "reach here: judge parity with [bench] temperature = 0", reason="sampled")
    base = needs(live.baseline, CLAIM, live, timed=False)
    if isinstance(base, ClaimResult):
        return base
    spec = needs(live.speculative, CLAIM, live, timed=False)
    if isinstance(spec, ClaimResult):
        return spec
    if not parity.answers_of(base) or not parity.answers_of(spec):
        side = "baseline" if not parity.answers_of(base) else "speculative"
        return blocked(CLAIM, live, f"the {side} server's answers carry no token ids "
                       "(output_ids), so the two servers' answers cannot be compared")
    found = parity.compare(base, spec, live.baseline.answers, live.speculative.answers,
                           live.baseline.server_info, live.speculative.server_info)
    details: dict[str, Any] = {**found.to_json(),
                               "baseline_evidence_error": _error(live.baseline.answers),
                               "speculative_evidence_error": _error(live.speculative.answers)}
    attachments = (Attachment("answers compared", _table(found), "csv"),)
    problems = []
    if found.settings:
        problems.append("the two servers compute the target differently: " + "; ".join(
            f"{key} {b} against {s}" for key, b, s in found.settings))
    if found.token_counts:
        problems.append("they tokenize the same prompts differently (another tokenizer or "
                        "chat template): " + ", ".join(
                            f"{pid} {b} against {s} tokens" for pid, b, s in
                            found.token_counts[:NAMED]))
    if found.unanswered:
        problems.append(f"{_count(len(found.unanswered), 'prompt')} got no answer with token "
                        "ids from one of the servers, so their answers were not compared: "
                        + ", ".join(found.unanswered[:NAMED]))
    not_ties, unjudged = found.not_ties, found.unjudged
    if not_ties:
        first = [d.prompt_id for d in not_ties if d.position == 0]
        problems.append(
            f"{_count(len(not_ties), 'diverging answer')} where the target has no near-tie: "
            + "; ".join(_named(d) for d in not_ties[:NAMED])
            + (f"; and {len(not_ties) - NAMED} more (attachment)"
               if len(not_ties) > NAMED else "")
            + (f". At the first token ({', '.join(first)}) both servers run the same prefill "
               "of the same prompt, so they do not serve the same model the same way: check "
               "the target folder, dtype, quantization, chat template and engine of each"
               if first else ""))
    if unjudged:
        problems.append(
            f"{_count(len(unjudged), 'divergence')} could not be judged, so the answers are "
            "not shown to be the target's: " + "; ".join(
                f"{d.where}: {d.tokens_text()}: {d.why}" for d in unjudged[:NAMED]))
    summary = _summary(found)
    observed = (len(not_ties) + len(unjudged) + len(found.token_counts)
                + len(found.unanswered) + len(found.settings))
    kw: dict[str, Any] = {"observed": observed, "expected": "0", "unit": "findings",
                          "details": details, "attachments": attachments}
    if problems:
        return claims.failed(CLAIM, PHASE, sim(live) + ". ".join(problems) + f". {summary}. "
                             "The speed-up compares unlike servers until they answer alike.",
                             **kw)
    return claims.passed(CLAIM, PHASE, sim(live) + summary, **kw)


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _summary(found: parity.Parity) -> str:
    explained = [d for d in found.divergences if d.explained]
    parts = [f"{_count(found.prompts, 'prompt')}, {len(found.identical)} answered "
             f"identically, {_count(len(found.divergences), 'diverging answer')}"]
    if explained:
        widest = max(abs(d.gap or 0.0) for d in explained)
        where = ", ".join(d.where
                          for d in sorted(explained, key=lambda d: d.position)[:NAMED])
        parts.append(f"{len(explained)} at a near-tie of the target (gaps up to {widest:.3f} "
                     f"nats; {where}{', …' if len(explained) > NAMED else ''})")
    parts.append(found.margin.text())
    if found.served:
        parts.append("they serve " + "; ".join(f"{key} {b} and {s}"
                                               for key, b, s in found.served))
    if found.uncompared:
        parts.append("not compared, as one server does not state it: "
                     + ", ".join(found.uncompared))
    return "; ".join(parts)


def _named(d: parity.Divergence) -> str:
    """One divergence: the prompt, the position, the two tokens and why it is not a tie."""
    lp = "" if d.baseline_logprob is None else f" (logprob {d.baseline_logprob:.3f})"
    theirs = "" if d.speculative_logprob is None else f" ({d.speculative_logprob:.3f})"
    view = ""
    if d.speculative_view is not None and None not in d.speculative_view:
        mine, own = d.speculative_view
        view = (f"; the speculative server's own prefill gives them {mine:.3f} and {own:.3f}"
                if mine is not None and own is not None else "")
    return (f"{d.where}: baseline {d.baseline_text!r}{lp}, "
            f"speculative {d.speculative_text!r}{theirs}: {d.why}{view}")


def _error(evidence: AnswerEvidence | None) -> str | None:
    return evidence.error or None if evidence is not None else None


def _table(found: parity.Parity) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["prompt", "answers", "repeat", "position", "baseline_token",
                     "speculative_token", "baseline_logprob", "speculative_logprob", "gap",
                     "margin", "why"])
    margin = "" if found.margin.value is None else round(found.margin.value, 5)
    for pid in found.identical:
        writer.writerow([pid, "identical", "", "", "", "", "", "", "", margin, ""])
    for d in found.divergences:
        kind = "near-tie" if d.explained else "not a tie" if d.judged else "not judged"
        writer.writerow([d.prompt_id, kind, d.repeat, d.position,
                         d.baseline_text, d.speculative_text,
                         "" if d.baseline_logprob is None else round(d.baseline_logprob, 5),
                         "" if d.speculative_logprob is None else round(d.speculative_logprob,
                                                                        5),
                         "" if d.gap is None else round(d.gap, 5), margin, d.why])
    for pid in found.unanswered:
        writer.writerow([pid, "no answer on one side", "", "", "", "", "", "", "", margin, ""])
    return buf.getvalue()
