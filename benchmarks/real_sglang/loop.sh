#!/bin/bash
# Close the loop on real SGLang: train a drafter for the tiny target with specgate's
# own EAGLE-3 forward, serve it with SGLang, run `pytest -m probe` and the Phase 1/2 claims, and
# set the predicted accept length against the measured one. See loop.py.
#
# On the GPU machine, after bundle A is in /tmp/site (see README.md):
#   bash benchmarks/real_sglang/loop.sh [--budget SECONDS] [--train-args "..."]
#        [--steps N|sN-kK-dD | --from-tune TUNE_JSON] [--tag T] [--skip-phase1] [--skip-probe]
#        [--warm-up] [--fresh-baseline] [--concurrency 1,4,16]
# A second call on the same warm machine without --train-args finds the trained model in
# $RS_WORK/model and only serves and probes it (e.g. --steps 5 --tag -s5 --skip-phase1); with
# --train-args it trains a new one there. --skip-probe trains and judges
# the Phase 1/2 claims only; --warm-up starts and stops one SGLang server while the drafter
# trains, so a later call's launches find SGLang's kernels compiled. Every call's probe writes to
# $RS_WORK/reports (stored baselines and history carry over: a second probe, or a probe after
# tune.sh with TUNE_REPORTS=$RS_WORK/reports, reuses the baseline). RS_CUDA_GRAPHS=1 runs decode
# in CUDA graphs on both servers (see suite.py).
# Dry run here, against specgate's simulator:
#   RS_SIM=1 RS_PYTHON=.venv/bin/python bash benchmarks/real_sglang/loop.sh --train-args "--size tiny --device cpu"
#
# Environment as run_suite.sh (OUT, RS_WORK default /tmp/loop, RS_SITE, RS_SIM, RS_PYTHON).
set -u
T0=$(date +%s)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${OUT:-/tmp/loop-out}
WORK=${RS_WORK:-/tmp/loop}
SITE=${RS_SITE:-/tmp/site}
SIM=${RS_SIM:-0}
PY=${RS_PYTHON:-python3}
BUDGET=570
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
mkdir -p "$OUT" "$WORK"
exec > >(tee -a "$OUT/loop.log") 2>&1
cd "$ROOT" || exit 4
. "$HERE/env.sh" || exit $?
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
echo "setup done in $(( $(date +%s) - T0 )) s"
SIMFLAG=
[ "$SIM" = 1 ] && SIMFLAG=--sim
"$PY" "$HERE/loop.py" --work "$WORK" --out "$OUT" --root "$ROOT" --launcher "$LAUNCHER" \
  --deadline $(( T0 + BUDGET )) --train-args "$TRAIN_ARGS" $SIMFLAG "${EXTRA[@]}"
RC=$?
echo "total $(( $(date +%s) - T0 )) s, loop exit $RC"
exit $RC
