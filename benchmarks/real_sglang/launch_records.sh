#!/bin/bash
# Launch records on real SGLang 0.5.17 (launch_records.py): each target launched LAUNCHES times in
# turn and every launch measured by the same single-stream requests, first the 8B-shaped target,
# then the 1B-shaped one. Targets from make_tiny.py, served with `--load-format dummy` (a decode
# step reads as many bytes as real weights would), decode CUDA graphs to batch 4.
#
#   bash benchmarks/real_sglang/launch_records.sh [--launches N] [--budget SECONDS]
#
# --launches N: launches per target (default 5).
# --budget SECONDS: start no launch within 75 s of this many seconds from the start (a launch and
#   its measurement take 60-80 s on an H200); default: no limit.
# Environment: see env.sh. Writes $OUT/launch-records-<target>.json (rewritten after every
# launch) and $OUT/launch-records.log.
set -u
BUDGET=
LAUNCHES=5
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) BUDGET=$2; shift 2 ;;
    --launches) LAUNCHES=$2; shift 2 ;;
    *) echo "unknown argument $1 (see the header of $0)"; exit 2 ;;
  esac
done
RS_LOG=launch-records.log
RS_SIM=0
. "$(dirname "${BASH_SOURCE[0]}")/env.sh" || exit $?
if [ ! -e "$WORK/tiny/mid/config.json" ]; then
  "$PY" "$HERE/make_tiny.py" "$WORK/tiny" || exit 6
fi
FLAGS=(--load-format dummy --attention-backend triton --sampling-backend pytorch
       --grammar-backend none --cuda-graph-max-bs-decode 4 --cuda-graph-backend-prefill disabled
       --dtype bfloat16 --context-length 2048 --max-total-tokens 65536)
DEADLINE=$(( T0 + ${BUDGET:-604800} - 75 ))
"$PY" "$HERE/launch_records.py" "$OUT/launch-records-llama8b-shapes.json" \
  --target "llama8b-shapes=$WORK/tiny/big,0.5" --launches "$LAUNCHES" --deadline "$DEADLINE" \
  --python "$PY" -- "${FLAGS[@]}"
"$PY" "$HERE/launch_records.py" "$OUT/launch-records-llama1b-shapes.json" \
  --target "llama1b-shapes=$WORK/tiny/mid,0.3" --launches "$LAUNCHES" --deadline "$DEADLINE" \
  --python "$PY" -- "${FLAGS[@]}"
echo "total $(( $(date +%s) - T0 )) s"
