"""The target's own logits where committed answers part, computed on a CPU with transformers.

  python -m benchmarks.real_model.parity_cpu TARGET OUT_JSON RESULTS_JSON [RESULTS_JSON ...]

For each live/results.json (both servers greedy, answers' token ids kept) and each prompt, the
first position where the speculative answer leaves the baseline's (the first repeat of each),
and there the target's next-token logprobs given the prompt and the common prefix: in float32
(the exact arithmetic the kernels approximate) and in bfloat16 (as served), with the best five,
both tokens' logprobs and ranks. The prompts are rendered as specgate rendered them (its
built-in prompts, six per category, the target's chat template) and tokenized as SGLang's
/generate tokenizes text; each count is checked against the `prompt_tokens` the servers reported.
Needs torch and transformers 5.12.1 beside specgate.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("target", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("results", type=Path, nargs="+")
    args = parser.parse_args(argv)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specgate.core.profile import BenchSection
    from specgate.results import parity
    from specgate.results.live import LiveResults
    from specgate.results.prompts import load_for

    target, out, results = args.target, args.out, args.results
    tokenizer = AutoTokenizer.from_pretrained(target)
    sent = load_for(BenchSection(prompts="builtin", prompts_per_category=6), source=None,
                    target=target)
    prompt_ids = {p.id: list(tokenizer.encode(text)) for p, text in sent.sent()}
    models = {name: AutoModelForCausalLM.from_pretrained(target, dtype=dtype).eval()
              for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))}

    @torch.inference_mode()
    def at(context: list[int], name: str) -> Any:
        logits = models[name](input_ids=torch.tensor([context])).logits[0, -1]
        return torch.log_softmax(logits.float(), dim=-1)

    def text(token: int) -> str:
        return str(tokenizer.decode([token]))

    doc: dict[str, Any] = {"target": str(target), "template_digest": sent.template.digest,
                           "files": {}}
    for path in results:
        live = LiveResults.read(path)
        base, spec = live.baseline.measurement, live.speculative.measurement
        if base is None or spec is None:
            continue
        counts = {**parity.prompt_tokens_of(base)}
        wrong = [pid for pid, n in counts.items() if len(prompt_ids.get(pid, [])) != n]
        if wrong:
            print(f"{path}: prompts tokenized here to other lengths than served: {wrong}")
            return 1
        mine, theirs = parity.answers_of(base), parity.answers_of(spec)
        rows: dict[str, Any] = {}
        for pid, b in mine.items():
            s = theirs.get(pid)
            p = None if s is None else parity.first_divergence(b, s)
            if s is None or p is None:
                rows[pid] = {"identical": s is not None}
                continue
            row: dict[str, Any] = {"identical": False, "position": p,
                                   "baseline": [b[p], text(b[p])] if p < len(b) else None,
                                   "speculative": [s[p], text(s[p])] if p < len(s) else None}
            if p < len(b) and p < len(s):
                for name in models:
                    lp = at(prompt_ids[pid] + list(b[:p]), name)
                    values, ids = torch.topk(lp, 5)
                    row[name] = {
                        "best": [[int(i), text(int(i)), round(float(v), 5)]
                                 for v, i in zip(values, ids, strict=True)],
                        "baseline_logprob": float(lp[b[p]]),
                        "speculative_logprob": float(lp[s[p]]),
                        "gap": float(lp[b[p]] - lp[s[p]]),
                        "speculative_rank": int((lp > lp[s[p]]).sum()) + 1}
            rows[pid] = row
        parted = [r for r in rows.values() if not r["identical"] and "fp32" in r]
        widest = max((abs(r["fp32"]["gap"]) for r in parted), default=0.0)
        print(f"{path}: {sum(r['identical'] for r in rows.values())} identical, {len(parted)} "
              f"part; the widest fp32 gap {widest:.4f} nats; the speculative token's worst rank "
              f"{max((r['fp32']['speculative_rank'] for r in parted), default=0)}")
        doc["files"][str(path)] = rows
    out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
