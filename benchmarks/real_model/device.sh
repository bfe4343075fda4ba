#!/bin/bash
# The GPU machine's side of benchmarks/real_model (README.md): the bundles, the GGUF, then the whole
# run (to_hf.py, build.py, serve.py) detached with setsid, so that it outlives one device call;
# every later call waits on it for a while and packs what is finished into $OUT.
#
# In the repository root on the GPU machine, with this folder's tree carried as .rm/:
#   bash .rm/benchmarks/real_model/device.sh a           # carry .whlA: SGLang, kernels, FlashInfer
#   bash .rm/benchmarks/real_model/device.sh b           # carry .whlB .whlP: the rest
#   bash .rm/benchmarks/real_model/device.sh g1          # carry .gguf1
#   bash .rm/benchmarks/real_model/device.sh go SECONDS  # carry .gguf2 .rm: start the run, wait
#   bash .rm/benchmarks/real_model/device.sh wait SECONDS  # carry .rm: wait, pack
# Each call must start within 30 s of the last (/tmp is lost when the machine goes cold).
# RM_BUILD_ARGS / RM_SERVE_ARGS add flags to build.py / serve.py; RM_BUDGET (seconds from the
# run's start, default 1290) is the time after which serve.py skips what it cannot finish.
set -u
W=${RM_WORK:-/tmp/rm}
SITE=${RS_SITE:-/tmp/site}
GG=/tmp/gg
OUT=${OUT:-/tmp/rm-out}
mkdir -p "$OUT" "$W"
PIP="python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $SITE"

pack() {  # what the run has made so far, into $OUT (at most 8 files, 16 MiB each)
  cp "$W/pipeline.log" "$OUT/" 2>/dev/null
  ( cd "$W" && tar -czf "$OUT/results.tar.gz" --exclude='*.safetensors.part*' \
      build.json serve.json STATUS out logs profiles maps/*.safetensors \
      $(ls -d reports/*/verdict.json reports/*/live/results.json 2>/dev/null) \
      $(ls -d drafters/*/config.json drafters/*/summary.json drafters/*/prediction.json \
              drafters/*/logs 2>/dev/null) \
      dumps/heldout/metadata.json 2>/dev/null )
  for f in maps/tasks-train-tokens.npz maps/self-tokens.npz; do
    [ -e "$W/$f" ] && cp "$W/$f" "$OUT/"
  done
  if [ -e "$W/drafters/trained/model.safetensors" ]; then
    split -b 15000000 -d "$W/drafters/trained/model.safetensors" "$OUT/trained.safetensors.part"
  fi
  ls -la "$OUT"
}

wait_run() {  # wait_run SECONDS: follow the run's log until it ends or the time is up
  local end=$(( $(date +%s) + $1 )) seen=0 n
  while [ ! -e "$W/STATUS" ] && [ "$(date +%s)" -lt "$end" ]; do
    n=$(wc -l < "$W/pipeline.log" 2>/dev/null || echo 0)
    [ "$n" -gt "$seen" ] && sed -n "$((seen + 1)),${n}p" "$W/pipeline.log" && seen=$n
    sleep 5
  done
  n=$(wc -l < "$W/pipeline.log" 2>/dev/null || echo 0)
  [ "$n" -gt "$seen" ] && sed -n "$((seen + 1)),${n}p" "$W/pipeline.log"
  echo "status: $(cat "$W/STATUS" 2>/dev/null || echo running)"
  nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,pstate,memory.used --format=csv
  pack
}

case "${1:-}" in
  a)
    $PIP .whlA/*.whl && echo "bundle A in $SITE" ;;
  b)
    test -d "$SITE/sglang" || { echo "COLD: bundle A missing"; exit 3; }
    $PIP .whlB/*.whl && touch "$SITE/.bundle-b-done" || exit 4
    $PIP $(ls .whlP/*.whl | grep -v '/specgate-') || exit 4
    echo "bundle B and .whlP in $SITE" ;;
  g1)
    mkdir -p "$GG" && cp .gguf1/part.* "$GG/" && ls -la "$GG" ;;
  go)
    test -e "$SITE/.bundle-b-done" -a -e "$GG/part.00" || { echo "COLD: redo a, b, g1"; exit 3; }
    cp .gguf2/part.01 "$GG/" && cat "$GG/part.00" "$GG/part.01" "$GG/part.02" \
      > "$GG/SmolLM2-135M-Instruct.Q4_1.gguf" && rm "$GG"/part.0*
    sha256sum "$GG/SmolLM2-135M-Instruct.Q4_1.gguf"
    rm -rf "$W/code" && mkdir -p "$W/code" && cp -r .rm/. "$W/code/"
    nvidia-smi
    setsid nohup bash "$W/code/benchmarks/real_model/device.sh" pipeline \
      > "$W/pipeline.log" 2>&1 < /dev/null &
    sleep 2
    wait_run "${2:-540}" ;;
  wait)
    wait_run "${2:-540}" ;;
  pipeline)
    T0=$(date +%s)
    cd "$W/code" || exit 4
    ROOT=$W/code WORK=$W SIM=0 PY=python3
    export RS_CUDA_GRAPHS=${RS_CUDA_GRAPHS:-1} PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
    . benchmarks/real_sglang/env.sh || { echo "env failed: $?" > "$W/STATUS"; exit 4; }
    echo "[device] environment ready after $(( $(date +%s) - T0 )) s"
    if [ ! -e "$W/target/model.safetensors" ]; then
      python3 tools/to_hf.py "$GG/SmolLM2-135M-Instruct.Q4_1.gguf" "$W/target" \
        || { echo "to_hf failed" > "$W/STATUS"; exit 4; }
    fi
    echo "[device] target ready after $(( $(date +%s) - T0 )) s"
    python3 benchmarks/real_model/build.py --target "$W/target" --work "$W" --seed 0 \
      --tasks-file benchmarks/real_model/tasks.jsonl ${RM_BUILD_ARGS:-} \
      || echo "[device] build exit $?"
    echo "[device] build finished after $(( $(date +%s) - T0 )) s"
    python3 benchmarks/real_model/serve.py --work "$W" --target "$W/target" \
      --deadline $(( T0 + ${RM_BUDGET:-1290} )) ${RM_SERVE_ARGS:-} \
      || echo "[device] serve exit $?"
    echo "[device] all finished after $(( $(date +%s) - T0 )) s"
    echo "done" > "$W/STATUS" ;;
  *)
    sed -n 2,15p "$0"; exit 2 ;;
esac
