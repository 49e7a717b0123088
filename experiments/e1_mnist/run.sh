#!/usr/bin/env bash
# E1 sweeps (seed-004 §5): the private algorithms over the eps grid, then the non-private
# baselines, for M = 25 and M = 12, trials 0..TRIALS-1 (the paper: 20). Then the report.
set -euo pipefail
TRIALS=${TRIALS:-20}
cd "$(dirname "$0")/../.."
python -m fedray -m experiment=e1_mnist "trial=range(0,$TRIALS)" participation.silos_per_round=25,12 \
    algorithm=isrl_dp_mb_sgd,isrl_dp_local_sgd privacy.epsilon=0.75,1.5,3,6,12,18
python -m fedray -m experiment=e1_mnist "trial=range(0,$TRIALS)" participation.silos_per_round=25,12 \
    algorithm=mb_sgd,local_sgd privacy=none
python -m fedray.report e1_mnist
