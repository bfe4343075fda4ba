#!/bin/bash
# The real-SGLang suite: specgate's probe (launch and attach mode) and fault cases against real
# SGLang 0.5.17 serving a tiny Llama target with an EAGLE-3 drafter on the GPU machine.
#
# On the GPU machine (see README.md for the device calls), after bundle A is in /tmp/site:
#   bash benchmarks/real_sglang/run_suite.sh [--runs a_launch,b_attach,...] [--budget SECONDS]
# Dry run here, against specgate's simulator (no GPU, no SGLang):
#   RS_SIM=1 RS_PYTHON=.venv/bin/python bash benchmarks/real_sglang/run_suite.sh
#
# Environment: OUT (results; default /tmp/rs-out), RS_WORK (default /tmp/rs), RS_SITE (default
# /tmp/site), RS_SIM=1 (simulator dry run), RS_PYTHON (interpreter; default python3),
# RS_LAUNCHER (server launcher; default "python3 -m sglang.launch_server", or the simulator).
# The pytest option names live in one place: OPTIONS at the top of suite.py.
#
# Writes OUT/run.log, OUT/summary.json, OUT/summary.md, OUT/runs.tar.gz. Exit codes: 0 every run
# as expected, 1 some run not as expected, 3 /tmp/site lost (redo call 1), 4-6 setup failed.
set -u
T0=$(date +%s)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${OUT:-/tmp/rs-out}
WORK=${RS_WORK:-/tmp/rs}
SITE=${RS_SITE:-/tmp/site}
SIM=${RS_SIM:-0}
PY=${RS_PYTHON:-python3}
BUDGET=570          # seconds from the start of this script to the summary (a call has 600)
RUNS=all
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS=$2; shift 2 ;;
    --runs=*) RUNS=${1#*=}; shift ;;
    --budget) BUDGET=$2; shift 2 ;;
    --budget=*) BUDGET=${1#*=}; shift ;;
    *) echo "unknown argument $1 (see the header of $0)"; exit 2 ;;
  esac
done
mkdir -p "$OUT" "$WORK"
exec > >(tee -a "$OUT/run.log") 2>&1
echo "real-sglang suite: root $ROOT, work $WORK, out $OUT, sim $SIM, runs $RUNS, budget $BUDGET s"
cd "$ROOT" || exit 4

# SGLang, specgate and their environment (also used by loop.sh and tune.sh).
. "$HERE/env.sh" || exit $?
export PYTHONUNBUFFERED=1

# The tiny model (kept while the machine stays warm).
if [ ! -e "$WORK/tiny/mid/config.json" ]; then
  "$PY" "$HERE/make_tiny.py" "$WORK/tiny" $TINY_FLAGS || exit 6
fi
echo "setup done in $(( $(date +%s) - T0 )) s"

SIMFLAG=
[ "$SIM" = 1 ] && SIMFLAG=--sim
"$PY" "$HERE/suite.py" --work "$WORK" --out "$OUT" --tiny "$WORK/tiny" --root "$ROOT" \
  --launcher "$LAUNCHER" --runs "$RUNS" --deadline $(( T0 + BUDGET )) $SIMFLAG
RC=$?
echo "total $(( $(date +%s) - T0 )) s, suite exit $RC"
exit $RC
