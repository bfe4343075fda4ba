# Sourced by run_suite.sh, loop.sh and tune.sh: installs bundle B, specgate's missing
# dependencies and specgate itself into $SITE (once per warm machine), and exports what SGLang
# needs (PYTHONPATH, LD_LIBRARY_PATH, CUDA_HOME). Needs ROOT, WORK, SITE, SIM and PY set, and the
# current directory at ROOT. Sets LAUNCHER and TINY_FLAGS. Returns 3 when bundle A is missing
# (the machine went cold: redo call 1), 4-5 when setup fails. RS_PREINSTALLED=1 (a GPU machine
# of your own with SGLang installed for $PY) installs nothing: see below.
if [ "$SIM" = 1 ]; then
  LAUNCHER=${RS_LAUNCHER:-python -m specgate.testing.simulator}
  TINY_FLAGS=--no-tokenizer
  if "$PY" -c 'import tokenizers' 2>/dev/null; then TINY_FLAGS=; fi
else
  LAUNCHER=${RS_LAUNCHER:-python3 -m sglang.launch_server}
  TINY_FLAGS=
  # RS_PREINSTALLED=1: a machine of your own, where $PY already imports SGLang 0.5.17, its
  # kernels and specgate; nothing is installed, the imports are checked, and the server is
  # started by that same interpreter.
  case "${RS_PREINSTALLED:-0}" in
    0|1) ;;
    *) echo "RS_PREINSTALLED=${RS_PREINSTALLED}: set 1 (SGLang is installed) or 0"; return 4 ;;
  esac
  if [ "${RS_PREINSTALLED:-0}" = 1 ]; then
    LAUNCHER=${RS_LAUNCHER:-$PY -m sglang.launch_server}
  else
    test -d "$SITE/sglang" -a -d "$SITE/sgl_kernel" -a -d "$SITE/flashinfer" \
      || { echo "COLD: $SITE lacks SGLang (bundle A); redo call 1"; return 3; }
    PIP="$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $SITE"
    # Bundle B (SGLang's other dependencies), once per warm machine.
    if [ ! -e "$SITE/.bundle-b-done" ]; then
      ls .whlB/*.whl >/dev/null 2>&1 || { echo "bundle B missing: carry .whlB"; return 4; }
      $PIP .whlB/*.whl && touch "$SITE/.bundle-b-done" || return 4
    fi
    # specgate's missing dependencies, and specgate itself (its pytest11 entry point loads the
    # plugin): built from this working tree when setuptools is there, else the wheel in .whlP.
    if ls .whlP/*.whl >/dev/null 2>&1; then
      $PIP $(ls .whlP/*.whl | grep -v '/specgate-') || return 4
    fi
    if ! "$PY" -m pip install -q --no-deps --no-build-isolation --no-compile --no-cache-dir \
          --upgrade --target "$SITE" . 2>"$WORK/pip-specgate.err"; then
      echo "building specgate here failed ($(tail -n 1 "$WORK/pip-specgate.err")); using .whlP's wheel"
      $PIP .whlP/specgate-*.whl || return 4
    fi
    export PYTHONPATH="$SITE"
  fi
  NV=$("$PY" -c 'import nvidia,os;print(os.path.join(list(nvidia.__path__)[0],"cu13","lib"))' 2>/dev/null)
  export LD_LIBRARY_PATH="${NV}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  if [ -z "${CUDA_HOME:-}" ] && command -v nvcc >/dev/null; then
    CUDA_HOME=$(dirname "$(dirname "$(command -v nvcc)")")
  fi
  export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
  "$PY" - <<'EOF' || return 5
import importlib.metadata as md
import torch, transformers, sgl_kernel, flashinfer, sglang.launch_server
import allure, pydantic, specgate_fixtures.plugin
print("imports ok: sglang", md.version("sglang"), "torch", torch.__version__, "transformers",
      transformers.__version__, "pydantic", pydantic.__version__, "specgate", md.version("specgate"))
EOF
  # RS_CUDA_GRAPHS=1 (suite.py): SGLang's EAGLE worker imports these while capturing its
  # draft-extend graph; without them the speculative server dies during start, so fall back.
  if [ "${RS_CUDA_GRAPHS:-0}" = 1 ]; then
    if "$PY" -c 'import deep_gemm, sglang.srt.layers.attention.dsa_backend, sglang.srt.layers.attention.deepseek_v4_backend, sglang.srt.layers.attention.flashmla_backend' 2>"$WORK/graph-imports.err"; then
      echo "CUDA graphs: on (decode, max batch 4); the EAGLE graph imports load"
    else
      echo "CUDA graphs: OFF, the EAGLE graph imports fail: $(tail -n 1 "$WORK/graph-imports.err")"
      export RS_CUDA_GRAPHS=0
    fi
  fi
fi
