#!/usr/bin/env bash
# E2 at the paper's scale: every N of the authors' code, 20 trials each, then one report.
# (N, M): (10, 5) is the paper's main setting, (3, 3) its Fig. 9; for N = 5 and 15 we take
# M = N (the code's comments use M = N and M = 2 besides the default 5).
set -euo pipefail
cd "$(dirname "$0")"
start=$SECONDS
for setting in "10 5" "3 3" "5 5" "15 15"; do
    set -- $setting
    N=$1 M=$2 NO_REPORT=1 ./run.sh
done
echo "E2 all settings: $((SECONDS - start)) s"
cd ../.. && python -m experiments.report e2_insurance
