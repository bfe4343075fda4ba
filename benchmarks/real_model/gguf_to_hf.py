"""Turn a Llama-family GGUF into the Hugging Face folder SGLang serves: bf16 safetensors,
config, tokenizer and chat template, through transformers' own GGUF loader (which needs the
`gguf` and `accelerate` packages). Prints the model's shape and its greedy answer to one
question, so a broken conversion shows at once.

    python3 -m benchmarks.real_model.gguf_to_hf MODEL.gguf OUT_DIR
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

QUESTION = "What is the capital of France?"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("gguf", type=Path, help="the .gguf file")
    ap.add_argument("out", type=Path, help="the Hugging Face folder to write")
    args = ap.parse_args(argv)
    if not args.gguf.is_file():
        print(f"{args.gguf}: no such file", file=sys.stderr)
        return 2
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    where, name = str(args.gguf.resolve().parent), args.gguf.name
    tokenizer = AutoTokenizer.from_pretrained(where, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(where, gguf_file=name, dtype=torch.bfloat16)
    # A GGUF's config names no architecture; SGLang picks its model class by this field.
    model.config.architectures = [type(model).__name__]
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    ids = tokenizer.apply_chat_template([{"role": "user", "content": QUESTION}],
                                        add_generation_prompt=True, return_tensors="pt")
    if not torch.is_tensor(ids):
        ids = ids["input_ids"]
    answer = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=20,
                            do_sample=False)
    cfg = model.config
    print(f"{args.out}: {type(model).__name__}, {cfg.num_hidden_layers} layers, hidden "
          f"{cfg.hidden_size}, vocab {cfg.vocab_size}; {QUESTION!r} -> "
          f"{tokenizer.decode(answer[0][ids.shape[1]:], skip_special_tokens=True)!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
