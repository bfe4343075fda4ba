#!/bin/bash
# Reruns this result on one GPU: README.md beside this script says what it needs and makes.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "${HERE%/benchmarks/results/*}/benchmarks/rerun_common.sh"
export RS_CUDA_GRAPHS=${RS_CUDA_GRAPHS:-1}
OUT=$RERUN/train bash "$RS/loop.sh" --warm-up --skip-probe --skip-phase1 --train-args \
  "--train-prompts 4800 --train-tokens 128 --scratch-seconds 270 --finetune-seconds 40 \
  --pack-tokens 8192 --gen-batch 512 --max-steps 10"
OUT=$RERUN/probe-s10-k1-d11 bash "$RS/loop.sh" --steps 10 --tag -s10 --skip-phase1 \
  --fresh-baseline
as_committed "$RERUN/probe-s10-k1-d11"
"$PY" -m benchmarks.real_sglang.walk_vs_live "$RERUN/train/prediction.json" - \
  "$RERUN/probe-s10-k1-d11/loop_summary-s10.json" --out "$RERUN/walk-vs-live.md"
"$PY" -m specgate.cli eval --drafter "$RS_WORK/model/drafter" \
  --hidden-states "$RS_WORK/model/dump/heldout" --served-steps 10 --steps 10 --by-category \
  --completion-tokens 128 > "$RERUN/offline-eval-cpu.txt"
