"""docs/profile.md, written from the profile model: every key, its type and default come from
specgate.core.profile; the sentences come from DESCRIPTIONS, which must name every key and no
other (`specgate profile-doc --check` and tests/core/test_profile_doc.py hold both to the model)."""

from __future__ import annotations

import json
import types
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from specgate.core.profile import MAX_EXPECT_KEYS, Profile

HEADER = """# Profile reference

A profile is a TOML file that describes one deployment: the target model, the drafter under test,
how to start SGLang, how to measure and what to require. Pass it with `--profile PATH`
(`--specgate-profile PATH` where another plugin owns `--profile`) or `SPECGATE_PROFILE`; a shipped
profile can be named instead of a path: `demo` (the default), `seeds-replay`,
`kimi-k2.5-8x-rtx-pro-6000`. Relative paths are relative to the profile's folder, except in a
profile with a `[demo]` section, where they name files inside its generated assets folder.
`~` and `$VARS` are expanded. A key that does not exist, or a value of the wrong type, is one
error naming the file, the key and what was expected.

This page is generated from the profile model (`specgate profile-doc --out docs/profile.md`);
a test fails when it differs from the model.
"""

DESCRIPTIONS: dict[str, str] = {
    "name": "the profile's name: in the verdict, the report and the run history",
    "description": "one line about the deployment, shown in the report",
    "simulated": "label the figures as simulated (default: when the launcher runs "
                 "specgate's SGLang simulator)",
    "target.path": "target model folder; its config.json is read for the compatibility claims",
    "drafter.path": "drafter checkpoint folder (config.json and *.safetensors) under test",
    "drafter.reference": "a second drafter to compare against (shape parity, vocab matches)",
    "drafter.expect": "config.json fields the drafter must carry, one `config.<key>` claim "
                      f"each; dotted keys reach nested fields; at most {MAX_EXPECT_KEYS} keys",
    "server.launcher": "argv prefix that starts an SGLang server (a list, or a string that is "
                       "shell-split); a leading `ssh`, `pct`, `docker` (podman, kubectl, "
                       "lxc-attach) makes it remote: the server then runs under a wrapper that "
                       "stops its process group on the far side when specgate lets go",
    "server.host": "address the server binds and specgate polls (for a remote launcher: the "
                   "GPU host's address as this machine reaches it); anything but loopback is "
                   "a warning",
    "server.port": "port of the speculative server (0: a free port for each launch)",
    "server.tp": "tensor-parallel size passed to SGLang",
    "server.startup_timeout_s": "seconds to wait for the server to answer /health",
    "server.stop_timeout_s": "seconds between SIGTERM and SIGKILL of the server's process tree "
                             "(on the far side too, for a remote launcher)",
    "server.args": "further SGLang arguments for both servers",
    "server.baseline_args": "further SGLang arguments for the baseline server only",
    "server.env": "environment the server must start with (checked by `env.server_env`)",
    "server.api_key_env": "name of an environment variable holding the API key (passed with "
                          "--api-key, sent as a Bearer token, redacted everywhere)",
    "server.url": "attach to this running speculative server instead of launching one",
    "server.baseline_url": "attach to this running baseline server instead of launching one",
    "server.stop_command": "argv run on every stop of a remote launch, in place of specgate's "
                           "own sweep of the server's tagged processes through the launcher",
    "server.gpus": ("GPU indices the server uses: passed to it as CUDA_VISIBLE_DEVICES; "
                    "TP rank r runs on the (--base-gpu-id + r × --gpu-id-step)-th of them, and "
                    "every one a rank uses is checked by `env.gpu_clean` before a launch "
                    "(default: the env's CUDA_VISIBLE_DEVICES, else every GPU)"),
    "server.baseline_gpus": ("the baseline server's own GPU indices (default: `gpus`): with "
                             "disjoint sets both servers can be resident at once; GPUs of "
                             "another model or driver than the speculative server's break "
                             "the comparison claims (reason gpu_mismatch)"),
    "server.parallel_launch": ("launch the baseline and the speculative server at the same "
                               "time so their loads overlap; both stay resident and are "
                               "measured one at a time (in turn with design interleaved)"),
    "speculative.algorithm": "SGLang's --speculative-algorithm",
    "speculative.num_steps": "--speculative-num-steps (all three of these, or none)",
    "speculative.eagle_topk": "--speculative-eagle-topk",
    "speculative.num_draft_tokens": "--speculative-num-draft-tokens (num_steps + 1 when "
                                    "eagle_topk is 1)",
    "bench.prompts": "`builtin`, or a JSONL file of prompts",
    "bench.max_new_tokens": "cap on generated tokens per request (natural stop otherwise)",
    "bench.temperature": "sampling temperature of the measured requests",
    "bench.warmup": "warm-up requests per server, not measured",
    "bench.repeats": "measured passes over the prompts before the first look at the intervals",
    "bench.max_repeats": "most passes while an interval straddles its threshold",
    "bench.confidence": "overall confidence of the intervals (split over the possible looks)",
    "bench.chat_template": "a built-in template (`chatml`, `llama3`, `kimi`, `plain`) instead "
                           "of the target's own; unset, prompts are rendered with the target's "
                           "chat_template.jinja or tokenizer_config.json as SGLang's chat "
                           "endpoint renders them, else sent as plain text",
    "bench.request_timeout_s": "seconds one request may take",
    "bench.categories": "only the builtin prompts of these categories",
    "bench.prompts_per_category": "at most this many builtin prompts per category",
    "bench.baseline_max_age_h": ("reuse a stored baseline measured at most this many hours "
                                 "ago with the same fingerprint (target folder, its config, "
                                 "tokenizer and weight files, SGLang version, baseline launch "
                                 "arguments, GPU model, count and driver, [server] env, the "
                                 "prompts as sent and the sampling), rechecked against the "
                                 "speculative server's /server_info; unset: measure the "
                                 "baseline on every run. While it is set, each freshly "
                                 "launched baseline is stored in REPORTS/baselines/"),
    "bench.design": ("how the two servers are launched and measured: `ab` the baseline, then "
                     "the speculative server; `aba` the baseline launched again after it, both "
                     "baseline launches pooled, their drift bounding this run's launch spread "
                     "(one more baseline launch); `interleaved` both servers resident at once, "
                     "each prompt sent to one and then the other, one request at a time (both "
                     "must fit in GPU memory: give each a --mem-fraction-static share)"),
    "bench.launch_spread": ("the launch-to-launch spread the timed claims' intervals add "
                            "(docs/claims.md): `learned` from this deployment's earlier "
                            "launches in REPORTS/history/launches.jsonl and its stored "
                            "baselines, the prior from real SGLang of the deployment's class "
                            "until there are enough (baseline tok/s 0.6 % on a GPU-bound "
                            "deployment, 11 % otherwise; 12 % for the verify cycle); or a fraction "
                            "you know for this deployment (the standard deviation of ln tok/s "
                            "between launches, e.g. 0.05)"),
    "bench.launch_spread_min_launches": ("launches of one configuration (or as many degrees "
                                         "of freedom over several) from which the learned "
                                         "spread alone replaces the prior; below it the "
                                         "prior is updated with the launches there are"),
    "bench.concurrency": ("requests in flight at once, one level per entry (e.g. [1, 4, 16]): "
                          "each level runs the same prompts with exactly that many streams "
                          "open, a new request starting the moment one ends, both ends held "
                          "with unmeasured filler requests; every level gets its claims "
                          "(`spec.speedup@c16`, …) and the report plots the speed-up against "
                          "the level"),
    "tune.steps": "`specgate tune`: the --speculative-num-steps to consider (chains: topk 1, "
                  "steps + 1 draft tokens); the first launch uses the largest",
    "tune.max_launches": "`specgate tune`: most speculative launches, the first included",
    "tune.margin": "`specgate tune`: launch a configuration only while the model predicts it "
                   "within this fraction of the best measured tok/s",
    "tune.repeats": "`specgate tune`: passes over the prompts before the first look at a "
                    "configuration's speed-up over the best (then up to bench.max_repeats)",
    "thresholds.baseline_tps_min": "decode tok/s the baseline must reach per request at the "
                                   "gate's concurrency, single stream by default "
                                   "(`perf.baseline_tps`)",
    "thresholds.accept_len_min": "accept length the drafter must reach, or `breakeven` "
                                 "(derived from the measured cycle time)",
    "thresholds.d2t_match_min": "fraction of draft positions that must map to the reference's "
                                "target token (`vocab.d2t_match`)",
    "thresholds.t2d_match_min": "fraction of target tokens both draft vocabularies must share "
                                "(`vocab.t2d_match`)",
    "thresholds.speedup_min": "speculative ÷ baseline tok/s must exceed this (`spec.speedup`)",
    "thresholds.tps_targets": "tok/s lines drawn in the report's plots",
    "thresholds.gate_concurrency": ("the [bench] concurrency level the gate decides at "
                                    "(default: the smallest level); its claims keep the plain "
                                    "ids (`spec.speedup`), the other levels' are reported "
                                    "with `@c<level>` ids and never gate"),
    "thresholds.regression_tolerance": "smallest drop counted as a regression against the last "
                                       "passing run (default 2 %)",
    "finetune.init": "the checkpoint a fine-tune starts from (`finetune.init_parity`)",
    "finetune.vocab_map": "the drafter whose d2t/t2d the fine-tune trains for",
    "finetune.log": "the fine-tune's JSONL training log (`finetune.initial_loss`, "
                    "`finetune.progress`)",
    "finetune.reference_log": "a reference run's JSONL log to compare progress with",
    "finetune.hidden_states": "a hidden-state dump for `eval.teacher_forced`",
    "eval.hidden_states": "a hidden-state dump of the served target on the probe's prompts "
                          "(sample files named by prompt id, or categories in its "
                          "metadata.json): `eval.live_agreement` compares the accept length "
                          "the offline evaluation predicts from it with the measured one "
                          "(overall, per category, and per prompt where the sample files are "
                          "named by prompt id); unset: that claim is skipped",
    "eval.tolerance": "`eval.live_agreement` passes when the prediction lies within the "
                      "measured interval widened by this fraction on each side",
    "eval.min_tokens": "`eval.live_agreement` judges a group (all, or one category) only when "
                       "the dump scores at least this many chain positions in it",
    "eval.device": "where `eval.teacher_forced` and `eval.live_agreement` run the drafter: "
                   "`cpu` (default), `cuda`, `cuda:N`, or `auto` (cuda when torch sees a GPU)",
    "data.path": "a dataset folder checked by the `data.*` claims",
    "demo.assets": "folder for the generated assets; relative: under $SPECGATE_CACHE, else "
                   "`.specgate/` in the working directory",
    "demo.kind": "`demo` (a small passing deployment) or `seeds` (full-size Kimi-K2.5 drafters "
                 "whose vocab maps are shifted against each other: a failing replay)",
}


def keys() -> list[tuple[str, Any]]:
    """(dotted key, pydantic field) for every key a profile may hold, in the model's order."""
    found: list[tuple[str, Any]] = []
    for name, field in Profile.model_fields.items():
        if name == "source":
            continue
        section = _section_model(field.annotation)
        if section is None:
            found.append((name, field))
        else:
            found += [(f"{name}.{sub}", f) for sub, f in section.model_fields.items()]
    return found


def _section_model(annotation: Any) -> type[BaseModel] | None:
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _type_name(annotation: Any) -> str:
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        parts = [a for a in get_args(annotation) if a is not type(None)]
        return " or ".join(_type_name(a) for a in parts)
    if origin is Literal:
        return " or ".join(json.dumps(a) for a in get_args(annotation))
    if origin is list:
        return f"list of {_type_name(get_args(annotation)[0])}s"
    if origin is dict:
        return "table"
    return {str: "string", int: "integer", float: "number", bool: "true/false"}.get(
        annotation, getattr(annotation, "__name__", str(annotation)))


def _default(field: Any) -> str:
    if field.is_required():
        return "required"
    value = field.default_factory() if field.default_factory is not None else field.default
    if value is None or value is PydanticUndefined:
        return "—"
    if isinstance(value, str):
        return f'`"{value}"`'
    return f"`{json.dumps(value, ensure_ascii=False)}`"


def render() -> str:
    missing = [k for k, _ in keys() if k not in DESCRIPTIONS]
    unknown = sorted(set(DESCRIPTIONS) - {k for k, _ in keys()})
    if missing or unknown:
        raise ValueError(f"profile_doc.DESCRIPTIONS is out of step with the profile model: "
                         f"undescribed {missing}, no such key {unknown}")
    out = [HEADER]
    section = None
    for key, field in keys():
        head = key.split(".", 1)[0] if "." in key else ""
        if head != section:
            section = head
            out.append(f"\n## {'[' + head + ']' if head else 'Top level'}\n")
            out.append("| key | type | default | meaning |\n|---|---|---|---|")
        name = key.split(".", 1)[1] if head else key
        out.append(f"| `{name}` | {_type_name(field.annotation)} | {_default(field)} | "
                   f"{DESCRIPTIONS[key]} |")
    return "\n".join(out) + "\n"
