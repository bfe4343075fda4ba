#!/bin/bash
# Reruns this result on one GPU: README.md beside this script says what it needs and makes.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "${HERE%/benchmarks/results/*}/benchmarks/rerun_common.sh"
export RS_CUDA_GRAPHS=${RS_CUDA_GRAPHS:-1}
OUT=$RERUN/train bash "$RS/loop.sh" --warm-up --skip-probe --train-args "--train-prompts 4800 \
  --train-tokens 128 --scratch-seconds 270 --finetune-seconds 40 --pack-tokens 8192 \
  --gen-batch 512 --max-steps 6"
# the tune stores its baseline where the probes look for one (same prompts, same tokens)
OUT=$RERUN/tune-s1-s6 TUNE_MODEL=$RS_WORK/model TUNE_STEPS=1,2,3,4,5,6 TUNE_BASELINE=1 \
  TUNE_PROMPTS=6 TUNE_TOKENS=128 TUNE_MAX_REPEATS=2 TUNE_REPORTS=$RS_WORK/reports \
  bash "$RS/tune.sh"
TUNE=$RS_WORK/reports/tune/tune.json
OUT=$RERUN/probe-s6-k1-d7 bash "$RS/loop.sh" --from-tune "$TUNE" --tag -tuned
OUT=$RERUN/probe-s6-k1-d7-repeat bash "$RS/loop.sh" --from-tune "$TUNE" --tag -tuned-2 \
  --skip-phase1
as_committed "$RERUN/probe-s6-k1-d7"
as_committed "$RERUN/probe-s6-k1-d7-repeat"
"$PY" -m benchmarks.real_sglang.walk_vs_live "$RERUN/train/prediction.json" "$RERUN/tune-s1-s6/tune.json" \
  "$RERUN/probe-s6-k1-d7/loop_summary-tuned.json" \
  "$RERUN/probe-s6-k1-d7-repeat/loop_summary-tuned-2.json" --out "$RERUN/walk-vs-live.md"
"$PY" -m specgate.cli eval --drafter "$RS_WORK/model/drafter" \
  --hidden-states "$RS_WORK/model/dump/heldout" --served-steps 6 --steps 6 --by-category \
  --completion-tokens 128 > "$RERUN/offline-eval-cpu.txt"
