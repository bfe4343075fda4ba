#!/bin/bash
# The real-SGLang suite (suite.py): specgate's probe in launch and attach mode, then fault cases,
# against real SGLang 0.5.17 serving make_tiny.py's models on one GPU; each run checked for what
# it left behind (processes, GPU memory).
#
#   bash benchmarks/real_sglang/run_suite.sh [--runs a_launch,b_attach,...] [--budget SECONDS]
#
# --runs: the runs to make, in suite.py's order (default: every one; names in README.md).
# --budget SECONDS: start no run that would not finish within this many seconds of the start;
#   the ones left out are listed as skipped (default: no limit).
# Environment: see env.sh (OUT, RS_WORK, RS_PYTHON, RS_WHEELS, RS_CUDA_GRAPHS, RS_SIM, ...).
# Dry run against specgate's simulator (no GPU, no SGLang):
#   RS_SIM=1 RS_PYTHON=.venv/bin/python bash benchmarks/real_sglang/run_suite.sh
#
# Writes to $OUT: run.log, summary.json, summary.md, verdicts/<run>.json, live/<run>.json and
# runs.tar.gz (every run's files). Exit codes: 0 every run as expected, 1 some run not as
# expected, 2 bad arguments, 4-5 setup failed (env.sh), 6 the models could not be made.
set -u
RUNS=all
BUDGET=
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS=$2; shift 2 ;;
    --runs=*) RUNS=${1#*=}; shift ;;
    --budget) BUDGET=$2; shift 2 ;;
    --budget=*) BUDGET=${1#*=}; shift ;;
    *) echo "unknown argument $1 (see the header of $0)"; exit 2 ;;
  esac
done
RS_LOG=run.log
. "$(dirname "${BASH_SOURCE[0]}")/env.sh" || exit $?
echo "real-sglang suite: root $ROOT, work $WORK, out $OUT, sim $SIM, runs $RUNS, budget ${BUDGET:-none}"
if [ ! -e "$WORK/tiny/mid/config.json" ]; then
  "$PY" -m benchmarks.real_sglang.make_tiny "$WORK/tiny" $TINY_FLAGS || exit 6
fi
echo "setup done in $(( $(date +%s) - T0 )) s"
SIMFLAG=
[ "$SIM" = 1 ] && SIMFLAG=--sim
"$PY" -m benchmarks.real_sglang.suite --work "$WORK" --out "$OUT" --tiny "$WORK/tiny" --root "$ROOT" \
  --launcher "$LAUNCHER" --runs "$RUNS" --deadline $(( T0 + ${BUDGET:-604800} )) $SIMFLAG
RC=$?
echo "total $(( $(date +%s) - T0 )) s, suite exit $RC"
exit $RC
