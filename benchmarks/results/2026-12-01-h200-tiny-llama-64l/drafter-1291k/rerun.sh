#!/bin/bash
# Reruns this result on one GPU: README.md beside this script says what it needs and makes.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "${HERE%/benchmarks/results/*}/benchmarks/rerun_common.sh"
export RS_CUDA_GRAPHS=${RS_CUDA_GRAPHS:-1}
OUT=$RERUN/train bash "$RS/loop.sh" --warm-up --skip-probe --skip-phase1 --tag -cover-train \
  --train-args "--layers 64 --train-prompts 16000 \
  --prompt-mix random=4,code=3,long=2,sentence=1,chat=1 --train-tokens 128 --gen-batch 2048 \
  --scratch-seconds 220 --finetune-seconds 25 --pack-tokens 8192 --max-steps 10 \
  --freeze-head --fc-init last"
OUT=$RERUN/probe-s10-k1-d11 bash "$RS/loop.sh" --steps 10 --tag -cover-s10 --skip-phase1 \
  --fresh-baseline
as_committed "$RERUN/probe-s10-k1-d11"
per_prompt_csv "$RERUN/probe-s10-k1-d11/verdict.json" "$RERUN/per-prompt-s10.csv"
claim_message "$RERUN/probe-s10-k1-d11/verdict.json" spec.speedup \
  > "$RERUN/speedup-by-prompt-s10.txt"
# the same files again: regress.* compares with the probe before it
OUT=$RERUN/probe-s10-k1-d11-repeat bash "$RS/loop.sh" --steps 10 --tag -cover-s10-2 \
  --fresh-baseline
as_committed "$RERUN/probe-s10-k1-d11-repeat"
"$PY" -m benchmarks.real_sglang.walk_vs_live "$RERUN/train/prediction.json" - \
  "$RERUN/probe-s10-k1-d11/loop_summary-cover-s10.json" \
  "$RERUN/probe-s10-k1-d11-repeat/loop_summary-cover-s10-2.json" --out "$RERUN/walk-vs-live.md"
# a model without its target's weights (as model.tar.gz packs it): made again from the seed
rm -f "$RS_WORK/model/target/model.safetensors"
OUT=$RERUN/rebuilt-target-probe bash "$RS/loop.sh" --steps 10 --tag -cover-s10-ids \
  --skip-phase1 --fresh-baseline
as_committed "$RERUN/rebuilt-target-probe"
cp "$RS_WORK/rebuild.log" "$RERUN/rebuilt-target-probe/"
