#!/bin/bash
# Reruns this result on one GPU: README.md beside this script says what it needs and makes.
#   SMOLLM2_DIR=DIR bash benchmarks/results/2026-12-07-h100-llama8b-shapes-launches/alternating-6-and-5/rerun.sh [--budget SECONDS]
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "${HERE%/benchmarks/results/*}/benchmarks/rerun_common.sh"
gpu_bound_models
# nvidia-smi every 5 s for the whole run (smi.csv), stopped when the launches are done
SMI=
sim_skips "nvidia-smi every 5 s" "it queries a GPU's driver" smi.csv || {
  nvidia-smi --query-gpu=timestamp,name,clocks.sm,clocks.mem,pstate,power.draw,temperature.gpu,memory.used,clocks_event_reasons.active \
    --format=csv -l 5 > "$RERUN/smi.csv" &
  SMI=$!
}
RS_CUDA_GRAPHS=1 OUT=$RERUN GPU_BOUND_DIR=$MODELS bash "$RS/launch_records.sh" \
  --only llama8b-shapes-target,llama8b-shapes-eagle3 --launches 6 "$@"
RC=$?
[ -z "$SMI" ] || kill "$SMI"
# every server's log, one a launch, packed
(cd "$RERUN" && tar czf servers.tar.gz llama8b-shapes-*.log && rm -f llama8b-shapes-*.log)
exit $RC
