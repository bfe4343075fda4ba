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

if [ "$SIM" = 1 ]; then
  LAUNCHER=${RS_LAUNCHER:-python -m specgate.testing.simulator}
  TINY_FLAGS=--no-tokenizer
  "$PY" -c 'import tokenizers' 2>/dev/null && TINY_FLAGS=
else
  LAUNCHER=${RS_LAUNCHER:-python3 -m sglang.launch_server}
  TINY_FLAGS=
  test -d "$SITE/sglang" -a -d "$SITE/sgl_kernel" -a -d "$SITE/flashinfer" \
    || { echo "COLD: $SITE lacks SGLang (bundle A); redo call 1"; exit 3; }
  PIP="$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $SITE"
  # Bundle B (SGLang's other dependencies), once per warm machine.
  if [ ! -e "$SITE/.bundle-b-done" ]; then
    ls .whlB/*.whl >/dev/null 2>&1 || { echo "bundle B missing: carry .whlB"; exit 4; }
    $PIP .whlB/*.whl && touch "$SITE/.bundle-b-done" || exit 4
  fi
  # specgate's missing dependencies, and specgate itself (its pytest11 entry point loads the
  # plugin): built from this working tree when setuptools is there, else the wheel in .whlP.
  if ls .whlP/*.whl >/dev/null 2>&1; then
    $PIP $(ls .whlP/*.whl | grep -v '/specgate-') || exit 4
  fi
  if ! "$PY" -m pip install -q --no-deps --no-build-isolation --no-compile --no-cache-dir \
        --upgrade --target "$SITE" . 2>"$WORK/pip-specgate.err"; then
    echo "building specgate here failed ($(tail -n 1 "$WORK/pip-specgate.err")); using .whlP's wheel"
    $PIP .whlP/specgate-*.whl || exit 4
  fi
  export PYTHONPATH="$SITE"
  NV=$("$PY" -c 'import nvidia,os;print(os.path.join(list(nvidia.__path__)[0],"cu13","lib"))' 2>/dev/null)
  export LD_LIBRARY_PATH="${NV}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  if [ -z "${CUDA_HOME:-}" ] && command -v nvcc >/dev/null; then
    CUDA_HOME=$(dirname "$(dirname "$(command -v nvcc)")")
  fi
  export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
  "$PY" - <<'EOF' || exit 5
import importlib.metadata as md
import torch, transformers, sgl_kernel, flashinfer, sglang.launch_server
import allure, pydantic, specgate_fixtures.plugin
print("imports ok: sglang", md.version("sglang"), "torch", torch.__version__, "transformers",
      transformers.__version__, "pydantic", pydantic.__version__, "specgate", md.version("specgate"))
EOF
fi
export PYTHONUNBUFFERED=1

# The tiny model (kept while the machine stays warm).
if [ ! -e "$WORK/tiny/draft_ref/model.safetensors" ]; then
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
