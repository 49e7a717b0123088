#!/usr/bin/env bash
# E3 sweeps (seed-004 §5): the full protocol, 3 trials; each private job carries the eps grid x
# step grid x 3 repetitions as replicas. Then the report.
set -euo pipefail
cd "$(dirname "$0")/../.."
start=$SECONDS
python -m fedray -m experiment=e3_obesity "trial=range(0,3)" algorithm=isrl_dp_mb_sgd,isrl_dp_local_sgd
python -m fedray -m experiment=e3_obesity "trial=range(0,3)" algorithm=mb_sgd,local_sgd privacy=none
echo "E3 sweeps: $((SECONDS - start)) s"
python -m experiments.report e3_obesity
