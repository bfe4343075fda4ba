# The setup every GPU harness shares (run_suite.sh, loop.sh, tune.sh, launch_records.sh and
# ../real_model/earn.sh). Sourced after the harness has read its own arguments, with RS_LOG set to
# the name of its log file:
#
#   RS_LOG=run.log; . "$(dirname "${BASH_SOURCE[0]}")/env.sh" || exit $?
#
# It sets the run's folders, copies everything the harness prints to $OUT/$RS_LOG, makes sure
# the Python that runs specgate imports SGLang 0.5.17 and specgate (installing them first from a
# folder of wheels when RS_WHEELS names one), and exports what SGLang needs to find CUDA.
#
# Environment (defaults in brackets):
#   OUT              where the results go [/tmp/rs-out]
#   RS_WORK          working folder: models, reports, run history [/tmp/rs]
#   RS_PYTHON        the Python that runs specgate, pytest and SGLang [python3]
#   RS_WHEELS=DIR[:DIR...]  a GPU box without network: install every wheel in these folders
#                    (made by fetch_wheels.sh on a machine with network) into $RS_SITE, once,
#                    and specgate from this checkout beside them. Unset: RS_PYTHON must already
#                    import SGLang 0.5.17 and specgate (`python3 -m pip install .`)
#   RS_SITE          where RS_WHEELS installs [$RS_WORK/site]
#   RS_LAUNCHER      the server launcher [$RS_PYTHON -m sglang.launch_server]
#   RS_CUDA_GRAPHS   0: SGLang decodes eagerly; 1: decode in CUDA graphs up to batch 4 on both
#                    servers, falling back to eager when the EAGLE graph imports fail (saying
#                    so); force: keep the graphs on even then [0]
#   RS_SIM=1         a dry run against specgate's simulator: no GPU, no SGLang [0]
#
# Sets T0, HERE (this folder), ROOT (the checkout), WORK, SITE, SIM, PY, LAUNCHER, TINY_FLAGS and
# changes to ROOT. Returns 4 when the wheels cannot be installed, 5 when SGLang or specgate does
# not import.
T0=${T0:-$(date +%s)}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${OUT:-/tmp/rs-out}
WORK=${RS_WORK:-/tmp/rs}
SITE=${RS_SITE:-$WORK/site}
SIM=${RS_SIM:-0}
PY=${RS_PYTHON:-python3}
mkdir -p "$OUT" "$WORK"
OUT=$(cd "$OUT" && pwd)
WORK=$(cd "$WORK" && pwd)
exec > >(tee -a "$OUT/${RS_LOG:-run.log}") 2>&1
cd "$ROOT" || return 4
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false

if [ "$SIM" = 1 ]; then
  LAUNCHER=${RS_LAUNCHER:-python -m specgate.testing.simulator}
  TINY_FLAGS=--no-tokenizer
  if "$PY" -c 'import tokenizers' 2>/dev/null; then TINY_FLAGS=; fi
  return 0
fi
LAUNCHER=${RS_LAUNCHER:-$PY -m sglang.launch_server}
TINY_FLAGS=
case "${RS_CUDA_GRAPHS:-0}" in
  0|1|force) ;;
  *) echo "RS_CUDA_GRAPHS=${RS_CUDA_GRAPHS}: set 0, 1 or force"; return 4 ;;
esac

if [ -n "${RS_WHEELS:-}" ]; then
  mkdir -p "$SITE"
  SITE=$(cd "$SITE" && pwd)
  PIP="$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $SITE"
  IFS=: read -r -a RS_WHEEL_DIRS <<< "$RS_WHEELS"
  for dir in "${RS_WHEEL_DIRS[@]}"; do
    ls "$dir"/*.whl >/dev/null 2>&1 || { echo "RS_WHEELS: no wheels in $dir"; return 4; }
    done_mark="$SITE/.installed-$(cd "$dir" && pwd | cksum | cut -d' ' -f1)"
    if [ ! -e "$done_mark" ]; then
      echo "installing the wheels of $dir into $SITE"
      # specgate itself comes from this checkout, below
      $PIP $(ls "$dir"/*.whl | grep -v '/specgate-') || { echo "installing $dir failed"; return 4; }
      touch "$done_mark"
    fi
  done
  if ! "$PY" -m pip install -q --no-deps --no-build-isolation --no-compile --no-cache-dir \
        --upgrade --target "$SITE" . 2>"$WORK/pip-specgate.err"; then
    # building needs setuptools; fetch_wheels.sh leaves specgate's own wheel in the folder
    wheel=$(ls "${RS_WHEEL_DIRS[@]/%//specgate-*.whl}" 2>/dev/null | head -n 1)
    [ -n "$wheel" ] || { echo "building specgate here failed: $(tail -n 1 "$WORK/pip-specgate.err")"; return 4; }
    echo "building specgate here failed; installing $wheel"
    $PIP "$wheel" || return 4
  fi
  export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$SITE"
fi

# SGLang finds the CUDA runtime through torch's own libraries and CUDA_HOME.
NV=$("$PY" -c 'import nvidia,os;print(os.path.join(list(nvidia.__path__)[0],"cu13","lib"))' 2>/dev/null)
export LD_LIBRARY_PATH="${NV:+$NV:}/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ -z "${CUDA_HOME:-}" ] && command -v nvcc >/dev/null; then
  CUDA_HOME=$(dirname "$(dirname "$(command -v nvcc)")")
fi
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
"$PY" - <<'EOF' || { echo "$PY does not import SGLang and specgate: install them (README.md), or set RS_WHEELS"; return 5; }
import importlib.metadata as md
import torch, transformers, sgl_kernel, flashinfer, sglang.launch_server
import allure, pydantic, specgate_fixtures.plugin
print("imports ok: sglang", md.version("sglang"), "torch", torch.__version__, "transformers",
      transformers.__version__, "pydantic", pydantic.__version__, "specgate", md.version("specgate"))
EOF

# SGLang 0.5.17's EAGLE worker imports these while it captures its draft graphs; without them a
# speculative server with CUDA graphs dies during start.
if [ "${RS_CUDA_GRAPHS:-0}" = 1 ]; then
  if "$PY" -c 'import deep_gemm, sglang.srt.layers.attention.dsa_backend, sglang.srt.layers.attention.deepseek_v4_backend, sglang.srt.layers.attention.flashmla_backend' 2>"$WORK/graph-imports.err"; then
    echo "CUDA graphs: on (decode); the EAGLE graph imports load"
  else
    echo "CUDA graphs: OFF, the EAGLE graph imports fail: $(tail -n 1 "$WORK/graph-imports.err")"
    export RS_CUDA_GRAPHS=0
  fi
fi
return 0
