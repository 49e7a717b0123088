"""P_GD's noise under the paper's calibration against the tight one (rounds calibrated together).

Per setting (eps, delta, d, n, T; Delta2 the arm's clip): the paper's trials per user b and bit
probability p at the per-round (eps_0, delta_0) of advanced composition (seed-000 §3.5,
``per_round_budget``), the tight calibration's b (p = 1/2, ``fedray.privacy.vector_sum_rounds``:
the T rounds' unit pairs bounded by the binomial's moments), the ratio of the summed noise's
standard deviations, sqrt(b p (1 - p)) paper over tight, the epsilon the accountant certifies for
the T rounds at the tight b (``rounds_epsilon``, at delta) with its delta bound at the target eps. The settings are X2's P_GD cells (d = 10,
Delta2 = 2), X3's (d = 20, n = 8,000, Delta2 = 1) and ``experiment=p_gd_synthetic``'s.

    python experiments/privacy_accounting/p_gd_tight.py
"""

from __future__ import annotations

import math
import time

from fedray.privacy.vector_sum import vector_sum_parameters
from fedray.privacy.vector_sum_rounds import tight_rounds_parameters
from fedray.protocols.shuffle_sco.hyperparameters import gd_num_rounds
from fedray.protocols.shuffle_sco.planning import per_round_budget

# (eps, delta, d, n, Delta2): X2 (P_GD cells), X3 (P_GD cells), the p_gd_synthetic preset
SETTINGS = [(1.0, 1e-6, 10, 1000, 2.0), (4.0, 1e-6, 10, 1000, 2.0), (1.0, 1e-6, 10, 3000, 2.0),
            (4.0, 1e-6, 10, 3000, 2.0), (1.0, 1e-6, 20, 8000, 1.0), (4.0, 1e-6, 20, 8000, 1.0),
            (4.0, 1e-6, 10, 10000, 1.0)]


def row(epsilon: float, delta: float, dim: int, users: int, l2: float) -> dict:
    start = time.perf_counter()
    rounds = gd_num_rounds(users, dim, epsilon, delta)
    eps0, delta0, _, _ = per_round_budget(epsilon, delta, rounds)
    paper = vector_sum_parameters(eps0, delta0, dim, users, l2)
    tight = tight_rounds_parameters(epsilon, delta, dim, users, l2, rounds)
    ratio = math.sqrt(paper.noise_bits * paper.bit_probability * (1 - paper.bit_probability)
                      / (tight.noise_bits * tight.bit_probability * (1 - tight.bit_probability)))
    return {"setting": f"({epsilon:g}, {delta:g}, {dim}, {users}, {rounds})", "eps0": eps0, "g": paper.scale,
            "b_paper": paper.noise_bits, "p_paper": paper.bit_probability, "b_tight": tight.noise_bits,
            "std_ratio": ratio, "eps_tight": tight.rounds_epsilon(rounds), "delta_tight": tight.certified_delta, "seconds": time.perf_counter() - start}


def main() -> None:
    print(f"{'(eps, delta, d, n, T)':<28}{'eps_0':>9}{'g':>5}{'paper b':>20}{'tight b':>11}{'std ratio':>11}"
          f"{'certified eps':>15}{'its delta':>11}{'s':>6}")
    for setting in SETTINGS:
        r = row(*setting)
        print(f"{r['setting']:<28}{r['eps0']:>9.2e}{r['g']:>5}{r['b_paper']:>20,}{r['b_tight']:>11,}"
              f"{r['std_ratio']:>11.0f}{r['eps_tight']:>15.4f}{r['delta_tight']:>11.2e}"
              f"{r['seconds']:>6.1f}")


if __name__ == "__main__":
    main()
