#!/bin/bash
# Reruns this result on one GPU: README.md beside this script says what it needs and makes.
#   SMOLLM2_DIR=DIR bash benchmarks/results/2026-12-04-h200-llama8b-shapes-concurrency/rerun.sh
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "${HERE%/benchmarks/results/*}/benchmarks/rerun_common.sh"
[ -e "${SMOLLM2_DIR:-}/tokenizer.json" ] || { echo "set SMOLLM2_DIR to a Hugging Face folder of SmolLM2-135M-Instruct (its tokenizer and chat template)"; exit 2; }
OUT=$RERUN/crossover bash "$RS/crossover.sh" --pattern alternate
