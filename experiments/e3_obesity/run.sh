#!/usr/bin/env bash
# E3 sweeps (seed-004 §5): the full protocol, 3 trials. Then the report.
set -euo pipefail
cd "$(dirname "$0")/../.."
python -m fedray -m experiment=e3_obesity "trial=range(0,3)" \
    algorithm=isrl_dp_mb_sgd,isrl_dp_local_sgd privacy.epsilon=0.5,1,3,6,9
python -m fedray -m experiment=e3_obesity "trial=range(0,3)" algorithm=mb_sgd,local_sgd privacy=none
python -m fedray.report e3_obesity
