#!/bin/bash
# Reruns this result on one GPU: README.md beside this script says what it needs and makes.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "${HERE%/benchmarks/results/*}/benchmarks/rerun_common.sh"
export RS_CUDA_GRAPHS=${RS_CUDA_GRAPHS:-1}
OUT=$RERUN/train bash "$RS/loop.sh" --warm-up --skip-probe --skip-phase1 --tag -deep-train \
  --train-args "--layers 64 --train-prompts 1200 --train-tokens 128 --scratch-seconds 180 \
  --finetune-seconds 25 --pack-tokens 8192 --gen-batch 512 --max-steps 10"
OUT=$RERUN/probe-s10-k1-d11 bash "$RS/loop.sh" --steps 10 --tag -deep-s10 --skip-phase1 \
  --fresh-baseline
as_committed "$RERUN/probe-s10-k1-d11"
"$PY" -m benchmarks.real_sglang.walk_vs_live "$RERUN/train/prediction.json" - \
  "$RERUN/probe-s10-k1-d11/loop_summary-deep-s10.json" --out "$RERUN/walk-vs-live.md"
