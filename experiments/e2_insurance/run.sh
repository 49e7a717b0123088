#!/usr/bin/env bash
# E2 sweeps (seed-004 §5) for one (N, M): the private algorithms (each job carries the eps grid x
# clip grid x step grid x 3 repetitions as replicas, fedray/conf/experiment/e2_insurance.yaml), then the
# non-private baselines (clip grid x step grid x 3 repetitions), trials 0..TRIALS-1 (the paper:
# 20). Then the report.
# The paper's (N, M) settings: N=10 M=5 (main), N=M=3 (Fig. 9): N=3 M=3 ./run.sh; all.sh runs all.
set -euo pipefail
TRIALS=${TRIALS:-20}; N=${N:-10}; M=${M:-5}
cd "$(dirname "$0")/../.."
start=$SECONDS
python -m fedray -m experiment=e2_insurance "trial=range(0,$TRIALS)" data.spec.num_silos=$N \
    participation.silos_per_round=$M algorithm=isrl_dp_mb_sgd,isrl_dp_local_sgd
python -m fedray -m experiment=e2_insurance "trial=range(0,$TRIALS)" data.spec.num_silos=$N \
    participation.silos_per_round=$M algorithm=mb_sgd,local_sgd privacy=none
echo "E2 sweeps N=$N M=$M: $((SECONDS - start)) s"
if [ -z "${NO_REPORT:-}" ]; then python -m experiments.report e2_insurance; fi
