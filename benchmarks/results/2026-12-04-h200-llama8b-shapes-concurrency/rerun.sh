#!/bin/bash
# Reruns this result on one GPU: README.md beside this script says what it needs and makes.
#   SMOLLM2_DIR=DIR bash benchmarks/results/2026-12-04-h200-llama8b-shapes-concurrency/rerun.sh
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "${HERE%/benchmarks/results/*}/benchmarks/rerun_common.sh"
sim_smollm2
[ -e "${SMOLLM2_DIR:-}/tokenizer.json" ] || { echo "set SMOLLM2_DIR to a Hugging Face folder of SmolLM2-135M-Instruct (its tokenizer and chat template)"; exit 2; }
PEER=()
sim_skips "SGLang's bench_serving beside the probe" "it is SGLang's own client" "crossover/peer/*" \
  && PEER=(--no-peer)
OUT=$RERUN/crossover bash "$RS/crossover.sh" --pattern alternate --fit-levels 1,4,16 "${PEER[@]}"
OUT=$RERUN/crossover-48 bash "$RS/crossover.sh" --pattern alternate --levels 1,32,48,64 \
  --fit-levels 1,32 --no-peer
# the fit with the requests in flight as the batch at every level, 1, 4, 16 and 64
"$PY" -m specgate.cli calibrate-simulator "$RERUN/crossover/crossover-results.json" \
  --fit-levels 1,4,16,64 > "$RERUN/crossover/calibration-uncapped.json"
# the live sessions' results, gzipped as this folder keeps them
gzip -f "$RERUN/crossover/crossover-results.json" "$RERUN/crossover-48/crossover-results.json"
