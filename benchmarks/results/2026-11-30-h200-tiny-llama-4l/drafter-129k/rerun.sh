#!/bin/bash
# Reruns this result on one GPU: README.md beside this script says what it needs and makes.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "${HERE%/benchmarks/results/*}/benchmarks/rerun_common.sh"
export RS_CUDA_GRAPHS=${RS_CUDA_GRAPHS:-1}
OUT=$RERUN/train-probe-s5-k1-d6 bash "$RS/loop.sh" --steps 5 --train-args "--train-prompts 1200 \
  --train-tokens 128 --scratch-seconds 75 --finetune-seconds 25 --pack-tokens 4096 --gen-batch 256"
server_log_tail speculative "$RERUN/train-probe-s5-k1-d6/speculative-server.log.tail"
# the same files served again, with a baseline of its own
OUT=$RERUN/probe-s5-k1-d6-repeat bash "$RS/loop.sh" --steps 5 --tag -s5 --skip-phase1 \
  --fresh-baseline
as_committed "$RERUN/probe-s5-k1-d6-repeat"
server_log_tail speculative "$RERUN/probe-s5-k1-d6-repeat/speculative-server.log.tail"
