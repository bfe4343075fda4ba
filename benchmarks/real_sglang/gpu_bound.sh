#!/bin/bash
# A first probe on a GPU-bound deployment: gpu_bound.py's target with Llama-3-8B's shapes
# (13.97 GB read per decode step) and its EAGLE-3 drafter, served by real SGLang with decode CUDA
# graphs to batch 4; `pytest -m probe` with no history and no stored baseline, as a user's first
# probe of a new deployment.
#
#   SMOLLM2_DIR=DIR bash benchmarks/real_sglang/gpu_bound.sh
#
# SMOLLM2_DIR: a Hugging Face folder whose tokenizer and chat template the target takes
#   (SmolLM2-135M-Instruct's, as in launch_records.sh).
# Environment: see env.sh. The models go to $RS_WORK/gpu-bound (built once, on the GPU, in about
# a minute); the probe's reports to $RS_WORK/gpu-bound-reports (emptied first). Writes to $OUT:
# gpu-bound.log, gpu-bound-probe.log (pytest's output), gpu-bound-verdict.json,
# gpu-bound-results.json (the live session's results) and gpu-bound-servers.tar.gz (server logs).
set -u
[ $# -eq 0 ] || { echo "no arguments (see the header of $0)"; exit 2; }
RS_LOG=gpu-bound.log
. "$(dirname "${BASH_SOURCE[0]}")/env.sh" || exit $?
[ -e "${SMOLLM2_DIR:-}/tokenizer.json" ] || { echo "SMOLLM2_DIR=${SMOLLM2_DIR:-}: no tokenizer.json there"; exit 2; }
MODELS=$WORK/gpu-bound
PROFILE=$MODELS/probe.toml
SIMFLAG=
[ "$SIM" = 1 ] && SIMFLAG="--sim --shapes tiny"
if [ ! -e "$MODELS/drafter/config.json" ]; then
  "$PY" -m benchmarks.real_sglang.gpu_bound "$MODELS" --tokenizer "$SMOLLM2_DIR" $SIMFLAG || exit 6
fi
"$PY" - "$MODELS" "$PROFILE" "$LAUNCHER" "$SIM" <<'PY' || exit 6
import shlex, sys
from pathlib import Path
from benchmarks.real_sglang import gpu_bound, suite  # the checkout's root is this folder
models, profile, launcher, sim = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
profile.write_text(suite.toml(gpu_bound.profile(models, shlex.split(launcher), sim)), encoding="utf-8")
PY
REPORTS=$WORK/gpu-bound-reports
rm -rf "$REPORTS"
echo "probe: $PROFILE"
"$PY" -m pytest -m probe --profile="$PROFILE" --reports="$REPORTS" -p no:cacheprovider \
  > "$OUT/gpu-bound-probe.log" 2>&1
RC=$?
tail -n 25 "$OUT/gpu-bound-probe.log"
cp "$REPORTS/verdict.json" "$OUT/gpu-bound-verdict.json" 2>/dev/null
cp "$REPORTS/live/results.json" "$OUT/gpu-bound-results.json" 2>/dev/null
(cd "$REPORTS" && find . -name '*.log' | tar czf "$OUT/gpu-bound-servers.tar.gz" -T -) 2>/dev/null
echo "total $(( $(date +%s) - T0 )) s, pytest exit $RC"
exit $RC
