#!/bin/bash
# Reruns this result on one GPU: README.md beside this script says what it needs and makes.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "${HERE%/benchmarks/results/*}/benchmarks/rerun_common.sh"
sim_skips "nvidia-smi before the faults" "it queries a GPU's driver" nvidia-smi-before.txt ||
  nvidia-smi > "$RERUN/nvidia-smi-before.txt"
# the server logs of the three starts that fail, kept below
FAILING="drafter-wide:speculative oom-fraction:baseline oom-holder:baseline"
sim_skips "c_oom_fraction and c_oom_holder" "the suite leaves them out on the simulator, which
holds no GPU memory" "verdicts/c_oom_*" "logs/oom-*" && FAILING=drafter-wide:speculative
RS_CUDA_GRAPHS=0 OUT=$RERUN bash "$RS/run_suite.sh" --runs c_kill_attached,c_kill_launched,\
c_sigstop_launched,c_drafter_wide,c_oom_fraction,c_oom_holder,c_drafter_narrow_in
RC=$?
sim_skips "nvidia-smi after the faults" "it queries a GPU's driver" nvidia-smi-after.txt ||
  nvidia-smi > "$RERUN/nvidia-smi-after.txt"
mkdir -p "$RERUN/logs"
for run in $FAILING; do
  name=${run%%:*} config=${run#*:}
  cp "$RS_WORK/runs/c_${name//-/_}/reports/live/$config-server.log" \
    "$RERUN/logs/$name-$config-server.log"
done
exit $RC
