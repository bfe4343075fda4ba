#!/bin/bash
# Reruns this result on one GPU: README.md beside this script says what it needs and makes.
#   SMOLLM2_DIR=DIR bash benchmarks/results/2026-12-03-h200-launch-spread/rerun.sh
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "${HERE%/benchmarks/results/*}/benchmarks/rerun_common.sh"
sim_smollm2
[ -e "${SMOLLM2_DIR:-}/config.json" ] || { echo "set SMOLLM2_DIR to a Hugging Face folder of SmolLM2-135M-Instruct"; exit 2; }
OUT=$RERUN/launch-records bash "$RS/launch_records.sh" --only llama1b-shapes,smollm2-135m-instruct --launches 5
OUT=$RERUN/first-probe-gpu-bound RS_CUDA_GRAPHS=1 bash "$RS/gpu_bound.sh"
# named as this folder keeps them
for f in probe.log verdict.json results.json; do
  mv "$RERUN/first-probe-gpu-bound/gpu-bound-$f" "$RERUN/first-probe-gpu-bound/$f"
done
OUT=$RERUN/verify-cycle GPU_BOUND_DIR=$RS_WORK/gpu-bound bash "$RS/launch_records.sh" --only llama8b-shapes-eagle3 --launches 3
