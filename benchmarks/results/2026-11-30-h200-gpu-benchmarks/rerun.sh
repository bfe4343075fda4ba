#!/bin/bash
# Reruns this result on one GPU: README.md beside this script says what it needs and makes.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "${HERE%/benchmarks/results/*}/benchmarks/rerun_common.sh"
"$PY" -m benchmarks.gpu_eval --steps 2 > "$RERUN/gpu-eval-steps2.json"
"$PY" -m benchmarks.gpu_eval --steps 3 > "$RERUN/gpu-eval-steps3.json"
"$PY" -m benchmarks.gpu_health --dir "$RS_WORK/gpu-health" > "$RERUN/gpu-health.txt" 2>&1
nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used \
  --format=csv,noheader,nounits > "$RERUN/nvidia-smi.txt"
cat "$RERUN"/*
