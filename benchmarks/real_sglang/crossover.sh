#!/bin/bash
# Speed-up against concurrency on a GPU-bound deployment (crossover.py): gpu_bound.py's target
# with Llama-3-8B's shapes and its EAGLE-3 drafter, both servers started once and kept running,
# specgate's probe attached to them at every level, SGLang's bench_serving beside it, and the
# simulator's batching fitted to some levels and checked at the others.
#
#   SMOLLM2_DIR=DIR bash benchmarks/real_sglang/crossover.sh [--pattern alternate|same]
#       [--levels 1,2,4,8,16,32,64] [--peer-levels 1,16,64] [--fit-levels 1,4,16]
#       [--graphs-max-bs 64] [--max-running N] [--no-peer]
#
# SMOLLM2_DIR: a Hugging Face folder whose tokenizer and chat template the target takes.
# --pattern alternate (default): the target's answers alternate between two tokens and the
#   drafter gets the first draft of each cycle right, accept length 2.0: it pays alone and stops
#   paying where a batch's verify costs twice its decode step. same: every draft is accepted.
# --graphs-max-bs: decode CUDA graphs up to this batch on both servers (default 64, every level;
#   0 or RS_CUDA_GRAPHS=0: eager).
# --no-peer: leave SGLang's bench_serving out.
# --max-running N: --max-running-requests N on both servers (default: SGLang's own, which runs at
#   most 48 requests at once on the speculative server; above that the rest wait in its queue).
# Environment: see env.sh (RS_CUDA_GRAPHS defaults to 1 here). The models go to
# $RS_WORK/crossover-<pattern> (built once, on the GPU, in about 20 s). Writes to $OUT:
# crossover.log, crossover.md and crossover.json (the summary), crossover-verdict.json,
# crossover-results.json, calibration.json, peer/ (bench_serving's output), servers/ (logs),
# crossover-profile.toml and crossover-probe.log.
set -u
PATTERN=alternate
ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --pattern) PATTERN=$2; shift 2 ;;
    --levels|--peer-levels|--fit-levels|--graphs-max-bs|--max-running) ARGS+=("$1" "$2"); shift 2 ;;
    --no-peer) ARGS+=("$1"); shift ;;
    *) echo "unknown argument $1 (see the header of $0)"; exit 2 ;;
  esac
done
case "$PATTERN" in alternate|same) ;; *) echo "--pattern $PATTERN: alternate or same"; exit 2 ;; esac
export RS_CUDA_GRAPHS=${RS_CUDA_GRAPHS:-1}
RS_LOG=crossover.log
. "$(dirname "${BASH_SOURCE[0]}")/env.sh" || exit $?
[ -e "${SMOLLM2_DIR:-}/tokenizer.json" ] || { echo "SMOLLM2_DIR=${SMOLLM2_DIR:-}: no tokenizer.json there"; exit 2; }
MODELS=$WORK/crossover-$PATTERN
SIMFLAG=
[ "$SIM" = 1 ] && SIMFLAG="--sim --shapes tiny"
if [ ! -e "$MODELS/drafter/config.json" ]; then
  "$PY" -m benchmarks.real_sglang.gpu_bound "$MODELS" --tokenizer "$SMOLLM2_DIR" --pattern "$PATTERN" $SIMFLAG || exit 6
fi
[ "${RS_CUDA_GRAPHS:-0}" = 0 ] && ARGS+=(--graphs-max-bs 0)
[ "$SIM" = 1 ] && ARGS+=(--sim)
"$PY" -m benchmarks.real_sglang.crossover --models "$MODELS" --out "$OUT" --work "$WORK" \
  --launcher "$LAUNCHER" "${ARGS[@]}"
RC=$?
echo "total $(( $(date +%s) - T0 )) s, exit $RC"
exit $RC
