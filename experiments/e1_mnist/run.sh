#!/usr/bin/env bash
# E1 sweeps (seed-004 §5): the private algorithms (each job carries the eps grid x step grid x
# 3 repetitions as 180 replicas), then the non-private baselines (30 replicas), for M = 25 and
# M = 12, trials 0..TRIALS-1 (the paper: 20). Then the report. Prints the wall time of each part.
set -euo pipefail
TRIALS=${TRIALS:-20}
cd "$(dirname "$0")/../.."
start=$SECONDS
python -m fedray -m experiment=e1_mnist "trial=range(0,$TRIALS)" participation.silos_per_round=25,12 \
    algorithm=isrl_dp_mb_sgd,isrl_dp_local_sgd
private=$((SECONDS - start))
python -m fedray -m experiment=e1_mnist "trial=range(0,$TRIALS)" participation.silos_per_round=25,12 \
    algorithm=mb_sgd,local_sgd privacy=none
echo "E1 sweeps: private ${private} s, baselines $((SECONDS - start - private)) s, total $((SECONDS - start)) s"
# The extra curve (not in the paper's figure): accelerated ISRL-DP MB-SGD (AC-SA, seed-004 Alg. 1).
if [ -z "${NO_EXTRA:-}" ]; then
    extra=$SECONDS
    python -m fedray -m experiment=e1_mnist "trial=range(0,$TRIALS)" participation.silos_per_round=25,12 \
        algorithm=isrl_dp_accelerated
    echo "E1 extra sweep: $((SECONDS - extra)) s"
fi
python -m experiments.report e1_mnist
