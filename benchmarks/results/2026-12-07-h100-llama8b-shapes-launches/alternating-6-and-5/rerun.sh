#!/bin/bash
# Reruns this result on one GPU: README.md beside this script says what it needs and makes.
#   SMOLLM2_DIR=DIR bash benchmarks/results/2026-12-07-h100-llama8b-shapes-launches/alternating-6-and-5/rerun.sh [--budget SECONDS]
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "${HERE%/benchmarks/results/*}/benchmarks/rerun_common.sh"
gpu_bound_models
RS_CUDA_GRAPHS=1 OUT=$RERUN GPU_BOUND_DIR=$MODELS bash "$RS/launch_records.sh" \
  --only llama8b-shapes-target,llama8b-shapes-eagle3 --launches 6 "$@"
