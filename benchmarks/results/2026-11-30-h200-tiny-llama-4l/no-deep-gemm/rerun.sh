#!/bin/bash
# Reruns this result on one GPU: README.md beside this script says what it needs and makes.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "${HERE%/benchmarks/results/*}/benchmarks/rerun_common.sh"
# As if sgl-deep-gemm were not installed: deep_gemm is kept from importing in every process the
# run starts (SGLang's own included), and the CUDA graphs stay on all the same.
BLOCK=$RS_WORK/without-deep-gemm
mkdir -p "$BLOCK"
printf 'import sys\nsys.modules["deep_gemm"] = None\n' > "$BLOCK/sitecustomize.py"
export PYTHONPATH=$BLOCK${PYTHONPATH:+:$PYTHONPATH} RS_CUDA_GRAPHS=force
OUT=$RERUN/probe-s3-k1-d4 bash "$RS/loop.sh" --skip-phase1 --train-args "--train-prompts 1200 \
  --train-tokens 128 --scratch-seconds 75 --finetune-seconds 25 --pack-tokens 4096 --gen-batch 256"
server_log_tail speculative "$RERUN/probe-s3-k1-d4/speculative-server.log.tail"
OUT=$RERUN/tune-s1-s7 TUNE_MODEL=$RS_WORK/model TUNE_STEPS=1,2,3,4,5,6,7 TUNE_BASELINE=1 \
  TUNE_PROMPTS=2 TUNE_TOKENS=128 TUNE_MARGIN=0.97 bash "$RS/tune.sh"
