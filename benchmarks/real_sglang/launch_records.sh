#!/bin/bash
# Launch records on real SGLang 0.5.17: each target launched LAUNCHES times and measured by the
# same single-stream requests (launch_records.py), first the 8B-shaped target, then the 1B-shaped
# one, until the budget is spent. Targets from make_tiny.py, served with `--load-format dummy`
# (the decode reads as many bytes as real weights would), decode CUDA graphs to batch 4.
#
#   bash benchmarks/real_sglang/launch_records.sh [--budget SECONDS] [--launches N]
#
# Environment as run_suite.sh (OUT, RS_WORK, RS_SITE, RS_PYTHON, RS_PREINSTALLED). Writes
# OUT/launch-records-<target>.json (rewritten after every launch) and OUT/launch-records.log.
set -u
T0=$(date +%s)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${OUT:-/tmp/rs-out}
WORK=${RS_WORK:-/tmp/rs}
SITE=${RS_SITE:-/tmp/site}
SIM=0
PY=${RS_PYTHON:-python3}
BUDGET=540
LAUNCHES=5
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) BUDGET=$2; shift 2 ;;
    --launches) LAUNCHES=$2; shift 2 ;;
    *) echo "unknown argument $1 (see the header of $0)"; exit 2 ;;
  esac
done
mkdir -p "$OUT" "$WORK"
exec > >(tee -a "$OUT/launch-records.log") 2>&1
cd "$ROOT" || exit 4
. "$HERE/env.sh" || exit $?
export PYTHONUNBUFFERED=1
if [ ! -e "$WORK/tiny/mid/config.json" ]; then
  "$PY" "$HERE/make_tiny.py" "$WORK/tiny" || exit 6
fi
FLAGS=(--load-format dummy --attention-backend triton --sampling-backend pytorch
       --grammar-backend none --cuda-graph-max-bs-decode 4 --cuda-graph-backend-prefill disabled
       --dtype bfloat16 --context-length 2048 --max-total-tokens 65536)
# No new launch within 75 s of the budget's end (a launch and its measurement take 60-80 s).
DEADLINE=$(( T0 + BUDGET - 75 ))
"$PY" "$HERE/launch_records.py" "$OUT/launch-records-llama8b-shapes.json" \
  --target "llama8b-shapes=$WORK/tiny/big,0.5" --launches "$LAUNCHES" --deadline "$DEADLINE" \
  --python "$PY" -- "${FLAGS[@]}"
"$PY" "$HERE/launch_records.py" "$OUT/launch-records-llama1b-shapes.json" \
  --target "llama1b-shapes=$WORK/tiny/mid,0.3" --launches "$LAUNCHES" --deadline "$DEADLINE" \
  --python "$PY" -- "${FLAGS[@]}"
echo "total $(( $(date +%s) - T0 )) s"
