"""Paper noise vs accountant-calibrated noise for seed-004 E1 (MNIST, n = 1238, R = 35, delta = 1/n^2).

Every silo takes part in all 35 rounds (M = N = 25, the worst case for a silo's ledger), each
round releasing the clipped mean of K of its n records drawn without replacement plus Gaussian
noise. For each target epsilon it prints the paper's noise multiplier (seed-004 §5) and the
epsilon the two accountants give for it, then the smallest multiplier each accountant calibrates
for the same target, and the noise saved relative to the paper.

    python experiments/privacy_accounting/table.py
"""

from __future__ import annotations

import numpy as np

from fedray.privacy import calibrate_noise_multiplier
from fedray.protocols.isrl_dp.calibration import paper_batch_size, paper_minibatch_noise_multiplier
from fedray.privacy.accounting import participation_epsilon

N_TRAIN, ROUNDS = 1238, 35
DELTA = 1.0 / N_TRAIN**2


def row(epsilon: float) -> dict:
    k = paper_batch_size(N_TRAIN, epsilon, ROUNDS)
    z_paper = float(paper_minibatch_noise_multiplier(N_TRAIN, epsilon, DELTA, ROUNDS, k))
    out = {"eps": epsilon, "K": k, "z_paper": z_paper}
    for accountant in ("rdp", "pld"):
        out[f"eps_paper_{accountant}"] = participation_epsilon(z_paper, k, N_TRAIN, 1, ROUNDS, DELTA, accountant)
        z = calibrate_noise_multiplier(epsilon, DELTA, k, N_TRAIN, 1, ROUNDS, accountant)
        out[f"z_{accountant}"] = z
        out[f"eps_{accountant}"] = participation_epsilon(z, k, N_TRAIN, 1, ROUNDS, DELTA, accountant)
    return out


def main() -> None:
    rows = [row(eps) for eps in (0.75, 3.0, 18.0)]
    print("| target eps | K | paper multiplier | its eps (rdp) | its eps (pld) "
          "| accountant multiplier (rdp) | its eps | saved | accountant multiplier (pld) | its eps | saved |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['eps']:g} | {r['K']} | {r['z_paper']:.3f} | {r['eps_paper_rdp']:.3f} | {r['eps_paper_pld']:.3f} "
            f"| {r['z_rdp']:.3f} | {r['eps_rdp']:.3f} | {1 - r['z_rdp'] / r['z_paper']:+.0%} "
            f"| {r['z_pld']:.3f} | {r['eps_pld']:.3f} | {1 - r['z_pld'] / r['z_paper']:+.0%} |"
        )
    print(f"\nnoise std = multiplier x 2 l2_clip / K; delta = 1/{N_TRAIN}^2 = {DELTA:.3g}; R = {ROUNDS}")


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main()
