#!/bin/bash
# Reruns this result on one GPU: README.md beside this script says what it needs and makes.
#   SMOLLM2_DIR=DIR bash benchmarks/results/2026-12-07-h100-llama8b-shapes-launches/alternating-6-and-5/rerun.sh [--budget SECONDS]
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "${HERE%/benchmarks/results/*}/benchmarks/rerun_common.sh"
TOK=${SMOLLM2_DIR:-}
case $TOK in /*|"") ;; *) TOK=$CALLER/$TOK ;; esac
[ -e "$TOK/tokenizer.json" ] || { echo "SMOLLM2_DIR=${SMOLLM2_DIR:-}: no tokenizer.json there" \
  "(the target takes SmolLM2-135M-Instruct's tokenizer)"; exit 2; }
MODELS=$RS_WORK/gpu-bound
if [ ! -e "$MODELS/drafter/config.json" ]; then
  "$PY" -m benchmarks.real_sglang.gpu_bound "$MODELS" --tokenizer "$TOK" || exit 6
fi
RS_CUDA_GRAPHS=1 OUT=$RERUN GPU_BOUND_DIR=$MODELS bash "$RS/launch_records.sh" \
  --only llama8b-shapes-target,llama8b-shapes-eagle3 --launches 6 "$@"
