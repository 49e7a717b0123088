"""Alg. 1's step size (seed 001, vertex sampling) under the paper's calibration against the tight one.

Per setting of E1 (the padded bilinear game, regime (7), K = 1, L0 = 1, d = 64, delta = 1e-6):
Thm 3.1's T and B, the k = 2 T (K + 1) vertex draws, the paper's tau_priv (Prop. 3.3, Cor. 3.6
with the paper's factor-2 rule) and the epsilon the ledger charges for it, the tight tau_priv
(each draw (4 tau L0 / B)-bounded-range, composed in zCDP:
``fedray.privacy.composition.bounded_range_budget``) and its epsilon, the ratio of the two step
sizes, and the optimal composition of k pure eps0-DP draws (Kairouz, Oh & Viswanath 2015: k-fold
randomised response, summed exactly) at the tight per-draw epsilon, which shows what the
bounded-range property itself buys over any pure-DP argument.

    python experiments/privacy_accounting/smd_tight.py
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from fedray.privacy.composition import bounded_range_composition, pure_advanced_composition
from fedray.protocols.mirror_descent.calibration import (
    draw_epsilon, draws_per_step, log_dimensions, private_step_size, steps_for,
)

DELTA, DIM, DRAWS = 1e-6, 64, 1
SETTINGS = [(10**3, 3.0), (10**4, 3.0), (10**5, 3.0), (10**6, 3.0), (10**5, 0.3), (10**5, 1.0), (10**5, 10.0)]


def optimal_pure_epsilon(epsilon0: float, count: int, delta: float) -> float:
    """The smallest eps at which k eps0-DP mechanisms are (eps, delta)-DP (KOV 2015): k-fold
    randomised response, whose loss is (k - 2 l) eps0 with l ~ Bin(k, 1 / (1 + e^eps0)), by
    bisection on delta(eps) = E[(1 - e^(eps - loss))_+]."""
    lower = np.arange(count + 1)
    loss = (count - 2 * lower) * epsilon0
    mass = stats.binom.pmf(lower, count, 1 / (1 + math.exp(epsilon0)))

    def delta_at(eps: float) -> float:
        above = loss > eps
        return float(np.sum(mass[above] * -np.expm1(eps - loss[above])))

    low, high = 0.0, count * epsilon0
    for _ in range(100):
        middle = 0.5 * (low + high)
        low, high = (low, middle) if delta_at(middle) <= delta else (middle, high)
    return high


def row(n: int, epsilon: float) -> dict:
    steps, draws = steps_for("bilinear", n, epsilon, DELTA, log_dimensions(DIM, DIM))
    batch, count = n // steps, steps * draws_per_step(draws)
    paper = private_step_size(batch, steps, draws, epsilon, DELTA, 1.0, "paper")
    tight = private_step_size(batch, steps, draws, epsilon, DELTA, 1.0, "tight")
    tight_draw = draw_epsilon(tight, 1.0, batch)
    return {"n": n, "eps": epsilon, "T": steps, "B": batch, "k": count, "tau_paper": paper,
            "eps_paper": float(pure_advanced_composition(draw_epsilon(paper, 1.0, batch), count, DELTA)[0]),
            "tau_tight": tight, "eps_tight": float(bounded_range_composition(tight_draw, count, DELTA)[0]),
            "ratio": tight / paper, "eps_optimal_pure": optimal_pure_epsilon(tight_draw, count, DELTA)}


def main() -> None:
    print(f"{'n':>9}{'eps':>6}{'T':>9}{'B':>5}{'draws k':>10}{'paper tau':>12}{'its eps':>9}{'tight tau':>12}"
          f"{'its eps':>9}{'ratio':>7}{'optimal pure-DP eps of tight':>30}")
    for n, epsilon in SETTINGS:
        r = row(n, epsilon)
        print(f"{r['n']:>9,}{r['eps']:>6g}{r['T']:>9,}{r['B']:>5}{r['k']:>10,}{r['tau_paper']:>12.4g}"
              f"{r['eps_paper']:>9.3f}{r['tau_tight']:>12.4g}{r['eps_tight']:>9.3f}{r['ratio']:>7.2f}"
              f"{r['eps_optimal_pure']:>30.3f}")


if __name__ == "__main__":
    main()
