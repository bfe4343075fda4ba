#!/bin/bash
# Close the loop on real SGLang (loop.py): train a drafter for a random Llama target with
# specgate's own EAGLE-3 forward, serve it with SGLang, run `pytest -m probe` and the Phase 1/2
# claims, and set the predicted accept length against the measured one.
#
#   bash benchmarks/real_sglang/loop.sh [--budget SECONDS] [--train-args "..."]
#        [--steps N|sN-kK-dD | --from-tune TUNE_JSON] [--tag T] [--skip-phase1] [--skip-probe]
#        [--warm-up] [--fresh-baseline] [--concurrency 1,4,16]
#
# A run without --train-args finds the trained model in $RS_WORK/model and only serves and probes
# it (e.g. --steps 5 --tag -s5 --skip-phase1); with --train-args it trains a new one there. Every
# run's probe writes to $RS_WORK/reports, so stored baselines and the run history carry from one
# run to the next. --budget SECONDS bounds the whole run: training shrinks to leave the probe and
# the Phase 1/2 claims their time (default: no limit). Flags: README.md.
# Environment: see env.sh (RS_WORK defaults to /tmp/loop, OUT to /tmp/loop-out here).
# Dry run against specgate's simulator:
#   RS_SIM=1 RS_PYTHON=.venv/bin/python bash benchmarks/real_sglang/loop.sh --train-args "--size tiny --device cpu"
set -u
BUDGET=
TRAIN_ARGS=
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) BUDGET=$2; shift 2 ;;
    --train-args) TRAIN_ARGS=$2; shift 2 ;;
    --steps|--tag|--from-tune|--concurrency) EXTRA+=("$1=$2"); shift 2 ;;
    --skip-phase1|--skip-probe|--warm-up|--fresh-baseline) EXTRA+=("$1"); shift ;;
    *) echo "unknown argument $1 (see the header of $0)"; exit 2 ;;
  esac
done
OUT=${OUT:-/tmp/loop-out}
RS_WORK=${RS_WORK:-/tmp/loop}
RS_LOG=loop.log
. "$(dirname "${BASH_SOURCE[0]}")/env.sh" || exit $?
echo "setup done in $(( $(date +%s) - T0 )) s"
SIMFLAG=
[ "$SIM" = 1 ] && SIMFLAG=--sim
"$PY" -m benchmarks.real_sglang.loop --work "$WORK" --out "$OUT" --root "$ROOT" --launcher "$LAUNCHER" \
  --deadline $(( T0 + ${BUDGET:-604800} )) --train-args "$TRAIN_ARGS" $SIMFLAG "${EXTRA[@]}"
RC=$?
echo "total $(( $(date +%s) - T0 )) s, loop exit $RC"
exit $RC
