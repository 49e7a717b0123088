#!/usr/bin/env bash
# E2 at the paper's scale: every (N, M) of the authors' code, 20 trials each, then one report.
# One Hydra multirun over the union of fedray/conf/experiment/e2_insurance_all.yaml's grids: for each
# setting, the private algorithms, then the non-private baselines (privacy=none); one interpreter,
# one Ray and one MLflow parent run for the whole protocol. run.sh runs a single setting.
set -euo pipefail
TRIALS=${TRIALS:-20}
cd "$(dirname "$0")/../.."
start=$SECONDS
python -m fedray -m experiment=e2_insurance_all "trial=range(0,$TRIALS)"
echo "E2 all settings: $((SECONDS - start)) s"
python -m experiments.report e2_insurance
