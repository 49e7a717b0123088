"""P_vec's noise under the paper's calibration against the tight one (issue 44's four settings).

Per setting (eps, delta, d, n; Delta2 = 1): the fixed-point scale g (the same in both), the
paper's trials per user b and bit probability p (seed-000 §2.2), the epsilon the exact route
gives the paper's noise at the same delta (exact for d = 1, the unit-shift bound for d > 1:
``fedray.privacy.vector_sum_tight``), the tight calibration's b (p = 1/2) with its computed delta,
the ratio of the summed noise's standard deviations, sqrt(b p (1 - p)) paper over tight, and the
fewest trials any sound calibration at p = 1/2 needs (``axis_pair_bits``: the pair +-Delta2 e_1
alone; for d = 1 the tight b itself), which brackets the d > 1 relaxation's looseness.

    python experiments/privacy_accounting/p_vec_tight.py
"""

from __future__ import annotations

import math
import time

from fedray.privacy.vector_sum import vector_sum_parameters
from fedray.privacy.vector_sum_tight import axis_pair_bits, invocation_epsilon, tight_vector_sum_parameters

SETTINGS = [(1.0, 1e-3, 1, 100), (1.0, 1e-6, 1, 1000), (3.0, 1e-5, 1, 50), (1.0, 1e-5, 4, 200),
            (4.0, 1e-6, 10, 1000)]      # the last: the p_sgd_synthetic preset's invocation


def row(epsilon: float, delta: float, dim: int, users: int) -> dict:
    start = time.perf_counter()
    paper = vector_sum_parameters(epsilon, delta, dim, users, 1.0)
    tight = tight_vector_sum_parameters(epsilon, delta, dim, users, 1.0)
    spent = invocation_epsilon(delta, paper)
    ratio = math.sqrt(paper.noise_bits * paper.bit_probability * (1 - paper.bit_probability)
                      / (tight.noise_bits * tight.bit_probability * (1 - tight.bit_probability)))
    return {"setting": f"({epsilon:g}, {delta:g}, {dim}, {users})", "g": paper.scale, "b_paper": paper.noise_bits,
            "eps_of_paper": spent, "b_tight": tight.noise_bits, "delta_tight": tight.certified_delta,
            "route": tight.route, "std_ratio": ratio, "b_floor": axis_pair_bits(epsilon, delta, users, tight.scale),
            "seconds": time.perf_counter() - start}


def main() -> None:
    header = (f"{'(eps, delta, d, n)':<22}{'g':>4}{'paper b':>12}{'eps of paper b':>16}{'tight b':>9}"
              f"{'its delta':>11}{'route':>12}{'std ratio':>11}{'b floor':>9}{'s':>6}")
    print(header)
    for setting in SETTINGS:
        r = row(*setting)
        print(f"{r['setting']:<22}{r['g']:>4}{r['b_paper']:>12}{r['eps_of_paper']:>16.2e}{r['b_tight']:>9}"
              f"{r['delta_tight']:>11.2e}{r['route']:>12}{r['std_ratio']:>11.0f}{r['b_floor']:>9}{r['seconds']:>6.1f}")


if __name__ == "__main__":
    main()
