#!/usr/bin/env bash
# The few wheels specgate needs on the GPU machine beyond what it has (pytest 9.1.1, pluggy,
# psutil, requests, numpy, safetensors, matplotlib, filelock) and bundle B (pydantic 2.14.4,
# pydantic-core, annotated-types, typing-inspection), plus specgate's own wheel, into DEST/.whlP
# (about 5.3 MB with sgl-deep-gemm). Run here, with network; the GPU machine has none.
# usage: bash benchmarks/real_sglang/fetch_extra.sh [DEST]   (DEST: the repository root)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DEST=${1:-$(cd "$HERE/../.." && pwd)}
P="$DEST/.whlP"
# Python 3.12 like the GPU machine; all pure-Python wheels.
WHEELS=(
  allure-pytest==2.16.2          # the plugin imports allure; allure-results for the report
  allure-python-commons==2.16.2
  attrs==26.1.0                  # allure-python-commons needs it
  pytest-xdist==3.8.0            # a dependency of specgate (-n), with execnet
  execnet==2.1.2
)
rm -rf "$P"
mkdir -p "$P"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation py --platform any -d "$P" "${WHEELS[@]}"
# SGLang 0.5.17 requires sgl-deep-gemm, which bundle A/B leave out: its EAGLE worker imports
# deep_gemm while capturing the draft-extend CUDA graph (eagle_worker_v2._capture_cuda_graphs ->
# layers/attention/dsa_backend.py), so without it a speculative server with CUDA graphs exits
# during start. 4.8 MB; needs apache-tvm-ffi, which bundle B has.
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux2014_x86_64 -d "$P" sgl-deep-gemm==0.1.5.post1
python3 -m pip wheel -q --no-deps -w "$P" "$DEST"
# Keep .whlP out of git (it travels with `carry`), in this checkout's exclude file.
EXCLUDE=$(git -C "$DEST" rev-parse --git-path info/exclude)
case "$EXCLUDE" in /*) ;; *) EXCLUDE="$DEST/$EXCLUDE" ;; esac
grep -qx '/.whlP/' "$EXCLUDE" 2>/dev/null || echo '/.whlP/' >> "$EXCLUDE"
ls -l "$P"
du -sh "$P"
