#!/bin/bash
# Stage what the GPU machine needs into ignored folders of the checkout that the device tool sends
# (README.md): the bundles (../../shared/tools), the GGUF in two halves, and .rm/ (this branch's
# committed tree, to_hf.py, and the seeded prompt file). Run here, with network.
# usage: PY=PYTHON bash benchmarks/real_model/stage.sh CHECKOUT [SEED]   (CHECKOUT: the repository
#        root the device tool sends, e.g. /work/main; this script's own committed tree is what goes
#        in .rm; PY: a Python that imports specgate, for prompts.py)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
TREE=$(cd "$HERE/../.." && pwd)
DEST=${1:?usage: stage.sh CHECKOUT [SEED]}
SEED=${2:-0}
TOOLS=${TOOLS:-$TREE/../shared/tools}
[ -d "$TOOLS/real-model" ] || TOOLS=$(cd "$TREE/../../shared/tools" && pwd)
EXCLUDE=$(git -C "$DEST" rev-parse --git-path info/exclude)
case "$EXCLUDE" in /*) ;; *) EXCLUDE="$DEST/$EXCLUDE" ;; esac
for p in /.rm/ /.whlA/ /.whlB/ /.whlP/ /.gguf1/ /.gguf2/ /.mypy_cache/; do
  grep -qx "$p" "$EXCLUDE" 2>/dev/null || echo "$p" >> "$EXCLUDE"
done
[ -d "$DEST/.whlA" ] || bash "$TOOLS/real-sglang/fetch.sh" "$DEST"
[ -d "$DEST/.gguf1" ] || bash "$TOOLS/real-model/fetch.sh" "$DEST"
[ -d "$DEST/.whlP" ] || bash "$TREE/benchmarks/real_sglang/fetch_extra.sh" "$DEST" || true
rm -rf "$DEST/.rm" && mkdir -p "$DEST/.rm/tools"
git -C "$TREE" archive HEAD | tar -x -C "$DEST/.rm"
rm -rf "$DEST/.rm/benchmarks/results" "$DEST/.rm/tests" "$DEST/.rm/docs"
cp "$TOOLS/real-model/to_hf.py" "$DEST/.rm/tools/"
PY=${PY:-python3}
(cd "$DEST/.rm" && "$PY" benchmarks/real_model/prompts.py benchmarks/real_model/tasks.jsonl \
  --family tasks --n 6000 --seed "$SEED")
du -sh "$DEST/.rm" "$DEST/.whlA" "$DEST/.whlB" "$DEST/.whlP" "$DEST/.gguf1" "$DEST/.gguf2"
