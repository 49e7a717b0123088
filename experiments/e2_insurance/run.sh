#!/usr/bin/env bash
# E2 sweeps (seed-004 §5) for one (N, M): the private algorithms over the clip grid (each job
# carries the eps grid x step grid x 3 repetitions as replicas), then the non-private baselines
# over the clip grid, trials 0..TRIALS-1 (the paper: 20). Then the report.
# The paper's (N, M) settings: N=10 M=5 (main), N=M=3 (Fig. 9): N=3 M=3 ./run.sh; all.sh runs all.
set -euo pipefail
TRIALS=${TRIALS:-20}; N=${N:-10}; M=${M:-5}
cd "$(dirname "$0")/../.."
CLIPS=100,10000,1000000,100000000,1e32
start=$SECONDS
python -m fedray -m experiment=e2_insurance "trial=range(0,$TRIALS)" data.spec.num_silos=$N \
    participation.silos_per_round=$M algorithm=isrl_dp_mb_sgd,isrl_dp_local_sgd privacy.l2_clip=$CLIPS
python -m fedray -m experiment=e2_insurance "trial=range(0,$TRIALS)" data.spec.num_silos=$N \
    participation.silos_per_round=$M algorithm=mb_sgd,local_sgd privacy=none privacy.l2_clip=$CLIPS
echo "E2 sweeps N=$N M=$M: $((SECONDS - start)) s"
if [ -z "${NO_REPORT:-}" ]; then python -m experiments.report e2_insurance; fi
