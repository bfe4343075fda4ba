#!/bin/bash
# Reruns this result on one GPU: README.md beside this script says what it needs and makes.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "${HERE%/benchmarks/results/*}/benchmarks/rerun_common.sh"
SMALL=
[ "$SIM" = 1 ] && SMALL=--small  # a dry run: the benchmarks' small shapes, on the CPU
"$PY" -m benchmarks.gpu_eval --steps 2 $SMALL > "$RERUN/gpu-eval-steps2.json"
"$PY" -m benchmarks.gpu_eval --steps 3 $SMALL > "$RERUN/gpu-eval-steps3.json"
"$PY" -m benchmarks.gpu_health --dir "$RS_WORK/gpu-health" $SMALL > "$RERUN/gpu-health.txt" 2>&1
sim_skips nvidia-smi "it queries a GPU's driver" nvidia-smi.txt ||
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used \
    --format=csv,noheader,nounits > "$RERUN/nvidia-smi.txt"
cat "$RERUN"/*
