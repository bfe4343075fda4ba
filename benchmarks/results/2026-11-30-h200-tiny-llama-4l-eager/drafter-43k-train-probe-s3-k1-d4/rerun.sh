#!/bin/bash
# Reruns this result on one GPU: README.md beside this script says what it needs and makes.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "${HERE%/benchmarks/results/*}/benchmarks/rerun_common.sh"
# train_drafter.py's defaults (--seed 0 only makes the run train afresh), served at s3-k1-d4
RS_CUDA_GRAPHS=0 OUT=$RERUN bash "$RS/loop.sh" --train-args "--seed 0"
