#!/bin/bash
# Reruns this result on the CPU (specgate's simulator): README.md beside this script says what it
# makes. A dry run (RS_SIM=1) takes a few trials of each.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "${HERE%/benchmarks/results/*}/benchmarks/rerun_common.sh"
TRIALS=()
[ "$SIM" = 1 ] && TRIALS=(--false-trials 6 --trials 2)
"$PY" -m benchmarks.first_probe "${TRIALS[@]}" --json "$RERUN/first-probe.json" \
  > "$RERUN/first-probe.txt"
RC=$?
# a miss of the false-pass limit or of the GPU-bound goals exits 1 with the result written
[ "$RC" -le 1 ] || exit $RC
tail -n 12 "$RERUN/first-probe.txt"
