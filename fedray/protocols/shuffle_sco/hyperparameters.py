"""Seed 000's hyperparameter formulas (spec §3, with the typo readings of §6 and modes of A2).

Symbols: n users, d = the gradient's dimension, (eps, delta) P_vec's budget per invocation,
L = the gradient's l2 bound (P_vec's Delta2), D = diameter of Theta, B users per step,
T steps, eta the step size, MSE_vec(B) P_vec's mean squared error bound for B users.

Modes (A2): ``paper`` uses the formulas as printed (the paper drops P_vec's constants, so its
step sizes are far too large at moderate n: expect poor utility and say so); ``exact`` keeps the
batch-size formulas and sets eta = D / (L_G sqrt T) with the oracle's real second moment
L_G^2 = L^2 + MSE_vec(B) / B^2, the value Lemma 4.2 requires.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from fedray.privacy.vector_sum import vector_sum_parameters

MODES = ("manual", "paper", "exact")


class Schedule(NamedTuple):
    batch_size: int      # B
    num_steps: int       # T
    step_size: float     # eta


def clamp_batch(raw: float, n: int) -> int:
    """A1: B = clamp(ceil(formula), 1, n)."""
    return int(min(max(math.ceil(raw), 1), n))


def sgd_batch_size_raw(dim: int, epsilon: float, delta: float) -> float:
    """Thm 4.1: B = sqrt(d) ln(d / delta) / eps (reference: d = 10, eps = 1, delta = 1e-6 -> 50.97)."""
    return math.sqrt(dim) * math.log(dim / delta) / epsilon


def sgd_step_size_paper(epsilon: float, delta: float, dim: int, batch: int, steps: int, lipschitz: float,
                        diameter: float) -> float:
    """Thm 4.1 as printed: eta = eps B D / (L sqrt T (eps B + sqrt(d) L ln(d / delta))) (T5: the
    inner L is dimensionally wrong; kept in this mode; the two readings agree at L = 1)."""
    bracket = epsilon * batch + math.sqrt(dim) * lipschitz * math.log(dim / delta)
    return epsilon * batch * diameter / (lipschitz * math.sqrt(steps) * bracket)


def oracle_second_moment(epsilon: float, delta: float, dim: int, batch: int, lipschitz: float) -> float:
    """L_G^2 = L^2 + MSE_vec(B) / B^2: a bound on E||g_t||^2 of the step's gradient estimate."""
    mse = vector_sum_parameters(epsilon, delta, dim, batch, lipschitz).mse_bound()
    return lipschitz**2 + mse / batch**2


def sgd_schedule(mode: str, n: int, dim: int, epsilon: float, delta: float, lipschitz: float,
                 diameter: float) -> Schedule:
    """(B, T, eta) of P_SGD in ``mode`` ``paper`` or ``exact`` (module docstring)."""
    batch = clamp_batch(sgd_batch_size_raw(dim, epsilon, delta), n)
    steps = n // batch
    if mode == "paper":
        eta = sgd_step_size_paper(epsilon, delta, dim, batch, steps, lipschitz, diameter)
    else:
        eta = diameter / math.sqrt(oracle_second_moment(epsilon, delta, dim, batch, lipschitz) * steps)
    return Schedule(batch, steps, eta)
