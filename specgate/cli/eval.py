"""`specgate eval`: its arguments, the evaluation they ask for, and the tables it prints."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable, Mapping, Sequence

from specgate.core.errors import SpecgateError
from specgate.core.profile import Profile, choose_profile_path, load_profile
from specgate.model.evaluate import (
    DEFAULT_STEPS,
    MIN_TOKENS,
    ServedPrediction,
    compare_table,
    predict_served,
    served_table,
    teacher_forced,
)
from specgate.results import prompts

# The probe's prompt ids → category for a profile (None: the builtin prompts).
ProbeNames = Callable[[Profile | None], Mapping[str, str]]


def probe_prompt_categories(profile: Profile | None) -> dict[str, str]:
    """The probe's prompt ids and their categories: the profile's [bench] prompts (all of them,
    before any category selection), else the builtin set."""
    chosen = profile.bench.prompts if profile is not None else prompts.BUILTIN
    if chosen == prompts.BUILTIN or profile is None:
        found = prompts.load_builtin()
    else:
        path = profile.resolve(chosen)
        found = prompts.load_jsonl(path) if path is not None else []
    return {p.id: p.category for p in found}


@dataclasses.dataclass(frozen=True)
class _EvalPlan:
    """What `specgate eval` was asked, after the profile filled in what the options left out."""

    drafters: list[str]
    hidden_states: str
    target: str | None
    served_steps: int | None
    min_tokens: int
    profile: Profile | None


def _plan(args: argparse.Namespace) -> _EvalPlan | str:
    """The evaluation to run, or why it cannot be (one sentence naming the option or key)."""
    profile = load_profile(choose_profile_path(args.profile)) if args.profile else None

    def from_profile(value: str | None) -> str | None:
        path = profile.resolve(value) if profile is not None else None
        return str(path) if path is not None else None

    drafters = list(args.drafter or [])
    if not drafters and profile is not None and profile.drafter_path is not None:
        drafters = [str(profile.drafter_path)]
    if not drafters:
        return "give --drafter (or --profile with a [drafter] path)"
    hidden = args.hidden_states or (from_profile(profile.eval.hidden_states)
                                    or from_profile(profile.finetune.hidden_states)
                                    if profile is not None else None)
    if not hidden:
        return ("give --hidden-states (or --profile with [eval] hidden_states or [finetune] "
                "hidden_states)")
    served = args.served_steps
    spec = profile.speculative if profile is not None else None
    if served is None and spec is not None and spec.num_steps is not None:
        if spec.eagle_topk is not None and spec.eagle_topk > 1:
            return (f"{profile.source if profile else 'the profile'}: [speculative] eagle_topk = "
                    f"{spec.eagle_topk} serves a tree; the chain model predicts topk 1 only "
                    "(a chain's acceptance cannot tell how often a second-ranked draft would "
                    "have been right). Give --served-steps N to predict a chain of N steps")
        served = spec.num_steps
    if served is None and (args.by_category or args.by_sample):
        served = args.steps
    if served is not None and served < 1:
        return f"--served-steps must be at least 1, got {served}"
    if args.min_tokens is not None and args.min_tokens < 1:
        return f"--min-tokens must be at least 1, got {args.min_tokens}"
    min_tokens = args.min_tokens if args.min_tokens is not None else (
        profile.eval.min_tokens if profile else MIN_TOKENS)
    target_path = profile.target_path if profile is not None else None
    target = args.target_model or (str(target_path) if target_path is not None else None)
    return _EvalPlan(drafters, hidden, target, served, min_tokens, profile)


def main_eval(argv: Sequence[str] | None = None, *,
              probe_names: ProbeNames = probe_prompt_categories) -> int:
    """`specgate eval --drafter D [--drafter D2 ...] --hidden-states H [--vocab-map M]`, and the
    served chain's predicted accept length (`--served-steps N` or `--profile P`,
    `--by-category`, `--completion-tokens N`)."""
    parser = argparse.ArgumentParser(prog="specgate eval", description="Teacher-forced offline "
                                     "evaluation of EAGLE-3 drafters on a hidden-state dump.")
    parser.add_argument("--drafter", action="append",
                        help="drafter folder (repeat to compare several on the same dump)")
    parser.add_argument("--hidden-states", help="hidden-state dump folder")
    parser.add_argument("--target-model", help="target model folder (for its embed_tokens)")
    parser.add_argument("--vocab-map", help="read the first drafter's lm_head through this map "
                        "(a fine-tune init as training will see it)")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="draft chain depth")
    parser.add_argument("--profile", help="a profile (file or shipped name): its [drafter] path, "
                        "[target] path and [eval] hidden_states stand in for options not "
                        "given, and its [speculative] chain is predicted as served")
    parser.add_argument("--served-steps", type=int, help="predict the accept length of a served "
                        "chain of this many draft steps (topk 1, steps + 1 draft tokens)")
    parser.add_argument("--by-category", action="store_true", help="the served prediction per "
                        "category too (from the dump's metadata.json samples, else sample files "
                        "named after the probe's prompt ids)")
    parser.add_argument("--by-sample", action="store_true", help="the served prediction per "
                        "dump sample too (a probe dump's samples are its prompts: the ones the "
                        "drafter is blind to show up near 1.0)")
    parser.add_argument("--completion-tokens", type=float, help="also the per-request figure "
                        "SGLang reports (completion tokens / verify passes) at this mean number "
                        "of completion tokens per request")
    parser.add_argument("--min-tokens", type=int, help="scored positions below which a group "
                        f"is marked too few tokens (default [eval] min_tokens, {MIN_TOKENS})")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    try:
        plan = _plan(args)
        if isinstance(plan, str):
            print(f"specgate eval: {plan}", file=sys.stderr)
            return 2
        reports = [teacher_forced(d, plan.hidden_states, steps=args.steps,
                                  target_path=plan.target, device=args.device,
                                  dtype=args.dtype, vocab_map=args.vocab_map if i == 0 else None)
                   for i, d in enumerate(plan.drafters)]
        served: list[ServedPrediction] = []
        if plan.served_steps is not None:
            names = probe_names(plan.profile) if args.by_category else None
            for d in plan.drafters:
                pred = predict_served(d, plan.hidden_states, steps=plan.served_steps,
                                      target_path=plan.target, names=names,
                                      completion_tokens=args.completion_tokens,
                                      min_tokens=plan.min_tokens, device=args.device,
                                      dtype=args.dtype, by_sample=args.by_sample)
                served.append(pred if args.by_category
                              else dataclasses.replace(pred, categories={}))
    except (SpecgateError, KeyError, ValueError) as exc:
        print(f"specgate eval: {exc}", file=sys.stderr)
        return 2
    except ImportError:
        print("specgate eval: needs torch (pip install 'specgate[eval]')", file=sys.stderr)
        return 2
    if args.json:
        docs = [r.to_json() for r in reports]
        for doc, pred in zip(docs, served, strict=False):
            doc["served"] = pred.to_json()
        print(json.dumps(docs, indent=2))
    else:
        print(compare_table(reports), end="")
        for pred in served:
            print()
            print(served_table(pred), end="")
    return 0
