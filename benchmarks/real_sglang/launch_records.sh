#!/bin/bash
# Launch records on real SGLang 0.5.17 (launch_records.py): each target launched LAUNCHES times in
# turn (8B-shaped, 1B-shaped, SmolLM2-135M-Instruct, then again) and every launch measured by the
# same single-stream requests. The 8B- and 1B-shaped targets come from make_tiny.py and are served
# with `--load-format dummy` (a decode step reads as many bytes as real weights would); SmolLM2 is
# the real checkpoint. Decode CUDA graphs to batch 4.
#
#   SMOLLM2_DIR=DIR GPU_BOUND_DIR=DIR bash benchmarks/real_sglang/launch_records.sh
#       [--launches N] [--budget SECONDS] [--only NAME,NAME...]
#
# SMOLLM2_DIR: a Hugging Face folder of SmolLM2-135M-Instruct (config.json, safetensors,
#   tokenizer); unset: the two generated targets alone.
# GPU_BOUND_DIR: a folder gpu_bound.py wrote (target/ and drafter/): adds llama8b-shapes-target,
#   that target served alone (the baseline a first probe of it launches), and
#   llama8b-shapes-eagle3, the same target served with its EAGLE-3 drafter, whose launches record
#   the verify cycle.
# --only: launch these targets alone (llama8b-shapes, llama1b-shapes, smollm2-135m-instruct,
#   llama8b-shapes-target, llama8b-shapes-eagle3).
# --launches N: launches per target (default 5).
# --budget SECONDS: every launch ends within this many seconds of the start: a launch starts only
#   when the longest one so far (90 s before the first) still fits; default: no limit.
# RS_SIM=1: a dry run against specgate's simulator (the flags it lacks left out, no nvidia-smi).
# Environment: see env.sh. Writes $OUT/launch-records.json (rewritten after every launch), one
# server log per launch and $OUT/launch-records.log.
set -u
BUDGET=
LAUNCHES=5
ONLY=
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) BUDGET=$2; shift 2 ;;
    --launches) LAUNCHES=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    *) echo "unknown argument $1 (see the header of $0)"; exit 2 ;;
  esac
done
RS_LOG=launch-records.log
. "$(dirname "${BASH_SOURCE[0]}")/env.sh" || exit $?
FLAGS=(--attention-backend triton --sampling-backend pytorch
       --grammar-backend none --cuda-graph-max-bs-decode 4 --cuda-graph-backend-prefill disabled
       --dtype bfloat16 --context-length 2048 --max-total-tokens 65536)
if [ "$SIM" = 1 ]; then
  LAUNCHER=${RS_LAUNCHER:-$PY -m specgate.testing.simulator}
  # the simulator exits 2 on the flags it does not know, as SGLang's argparse does
  FLAGS=(--attention-backend triton --sampling-backend pytorch
         --dtype bfloat16 --context-length 2048 --max-total-tokens 65536)
fi
TARGETS=(--target "llama8b-shapes=$WORK/tiny/big,0.5,dummy"
         --target "llama1b-shapes=$WORK/tiny/mid,0.3,dummy")
if [ -n "${SMOLLM2_DIR:-}" ]; then
  [ -e "$SMOLLM2_DIR/config.json" ] || { echo "SMOLLM2_DIR=$SMOLLM2_DIR: no config.json there"; exit 2; }
  TARGETS+=(--target "smollm2-135m-instruct=$SMOLLM2_DIR,0.3")
else
  echo "SMOLLM2_DIR is not set: no smollm2-135m-instruct"
fi
if [ -n "${GPU_BOUND_DIR:-}" ]; then
  [ -e "$GPU_BOUND_DIR/drafter/config.json" ] || { echo "GPU_BOUND_DIR=$GPU_BOUND_DIR: no drafter/config.json there"; exit 2; }
  TARGETS+=(--target "llama8b-shapes-target=$GPU_BOUND_DIR/target,0.5"
            --target "llama8b-shapes-eagle3=$GPU_BOUND_DIR/target,0.5,,$GPU_BOUND_DIR/drafter")
fi
if [ -n "$ONLY" ]; then
  KEPT=()
  IFS=, read -r -a WANTED <<< "$ONLY"
  for want in "${WANTED[@]}"; do
    found=
    for ((i = 0; i < ${#TARGETS[@]}; i += 2)); do
      [ "${TARGETS[i+1]%%=*}" = "$want" ] && { KEPT+=(--target "${TARGETS[i+1]}"); found=1; }
    done
    [ -n "$found" ] || { echo "--only $ONLY: $want is not set up (see the header of $0 for what each target needs)"; exit 2; }
  done
  TARGETS=("${KEPT[@]}")
fi
case " ${TARGETS[*]} " in
  *"=$WORK/tiny/"*)
    if [ ! -e "$WORK/tiny/mid/config.json" ]; then
      "$PY" -m benchmarks.real_sglang.make_tiny "$WORK/tiny" $TINY_FLAGS || exit 6
    fi ;;
esac
DEADLINE=$(( T0 + ${BUDGET:-604800} ))
"$PY" -m benchmarks.real_sglang.launch_records "$OUT/launch-records.json" "${TARGETS[@]}" \
  --launches "$LAUNCHES" --deadline "$DEADLINE" --python "$PY" --launcher "$LAUNCHER" \
  -- "${FLAGS[@]}"
RC=$?
echo "total $(( $(date +%s) - T0 )) s"
exit $RC
