#!/bin/bash
# Reruns this result on one GPU: README.md beside this script says what it needs and makes.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "${HERE%/benchmarks/results/*}/benchmarks/rerun_common.sh"
RS_CUDA_GRAPHS=0 OUT=$RERUN bash "$RS/run_suite.sh" \
  --runs a_launch,b_attach,c_port_taken,c_wrong_flag,c_sigstop_attached
