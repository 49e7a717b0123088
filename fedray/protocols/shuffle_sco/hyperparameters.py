"""Seed 000's hyperparameter formulas (spec §3, with the typo readings of §6 and modes of A2).

Symbols: n users, d = the gradient's dimension, (eps, delta) P_vec's budget per invocation,
L = the gradient's l2 bound (P_vec's Delta2), D = diameter of Theta, B users per step,
T steps, eta the step size, MSE_vec(B) P_vec's mean squared error bound for B users.

Modes (A2): ``paper`` uses the formulas as printed (the paper drops P_vec's constants, so its
step sizes are far too large at moderate n: expect poor utility and say so); ``exact`` keeps the
batch-size formulas and sets eta = D / (L_G sqrt T) with the oracle's real second moment
L_G^2 = L^2 + MSE_vec(B) / B^2, the value Lemma 4.2 requires.

``sum_mse(eps, delta, d, B, L)`` is the error of the step's sum: P_vec's closed bound by default
(``pvec_mse``); the baselines pass their own (a Gaussian sum's, or 0 without privacy), so
``exact`` gives every arm the same B and T and the step size its own noise calls for.
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


def pvec_mse(epsilon: float, delta: float, dim: int, batch: int, lipschitz: float) -> float:
    """MSE_vec(B): P_vec's closed bound on E||o - sum||^2 for B users (seed-000 §2.2)."""
    return vector_sum_parameters(epsilon, delta, dim, batch, lipschitz).mse_bound()


def oracle_second_moment(epsilon: float, delta: float, dim: int, batch: int, lipschitz: float,
                         sum_mse=pvec_mse) -> float:
    """L_G^2 = L^2 + MSE(B) / B^2: a bound on E||g_t||^2 of the step's gradient estimate."""
    return lipschitz**2 + sum_mse(epsilon, delta, dim, batch, lipschitz) / batch**2


def sgd_schedule(mode: str, n: int, dim: int, epsilon: float, delta: float, lipschitz: float,
                 diameter: float, smoothness: float | None = None, sum_mse=pvec_mse) -> Schedule:
    """(B, T, eta) of P_SGD in ``mode`` ``paper`` or ``exact`` (module docstring)."""
    batch = clamp_batch(sgd_batch_size_raw(dim, epsilon, delta), n)
    steps = n // batch
    if mode == "paper":
        eta = sgd_step_size_paper(epsilon, delta, dim, batch, steps, lipschitz, diameter)
    else:
        eta = diameter / math.sqrt(oracle_second_moment(epsilon, delta, dim, batch, lipschitz, sum_mse) * steps)
    return Schedule(batch, steps, eta)


def agd_batch_size_raw(n: int, dim: int, epsilon: float, delta: float, lipschitz: float, smoothness: float,
                       diameter: float) -> float:
    """Thm 4.3: B = n^(3/5) d^(1/5) L^(2/5) ln^(2/5)(d/delta) / (eps^(2/5) beta^(2/5) D^(2/5))
    (reference: n = 1e5, d = 10, eps = 1, delta = 1e-6, L = 1, beta = 1, D = 2 -> 3651.9)."""
    return (n**0.6 * dim**0.2 * lipschitz**0.4 * math.log(dim / delta) ** 0.4
            / (epsilon**0.4 * smoothness**0.4 * diameter**0.4))


def agd_oracle_std(mode: str, epsilon: float, delta: float, dim: int, batch: int, lipschitz: float,
                   sum_mse=pvec_mse) -> float:
    """sigma: ``paper`` sigma^2 = L^2/B + d L^2 ln^2(d/delta)/(B^2 eps^2) (constants dropped, T3:
    sigma is the standard deviation); ``exact`` sigma^2 = L^2/B + MSE(B)/B^2."""
    if mode == "paper":
        return math.sqrt(lipschitz**2 / batch + dim * lipschitz**2 * math.log(dim / delta) ** 2 / (batch * epsilon) ** 2)
    return math.sqrt(lipschitz**2 / batch + sum_mse(epsilon, delta, dim, batch, lipschitz) / batch**2)


def agd_schedule(mode: str, n: int, dim: int, epsilon: float, delta: float, lipschitz: float,
                 diameter: float, smoothness: float | None = None, sum_mse=pvec_mse) -> Schedule:
    """(B, T, step size) of P_AGD: L_t = ((T + 2)^(3/2) sigma / D + beta) / (t + 1), carried as the
    AC-SA step size 2 / ((T + 2)^(3/2) sigma / D + beta) (``fedray.acsa``)."""
    if smoothness is None:
        raise ValueError("P_AGD's schedule needs the smoothness beta (the loss's, or algorithm.smoothness)")
    batch = clamp_batch(agd_batch_size_raw(n, dim, epsilon, delta, lipschitz, smoothness, diameter), n)
    steps = n // batch
    sigma = agd_oracle_std(mode, epsilon, delta, dim, batch, lipschitz, sum_mse)
    return Schedule(batch, steps, 2.0 / ((steps + 2) ** 1.5 * sigma / diameter + smoothness))


def gd_num_rounds(n: int, dim: int, epsilon: float, delta: float) -> int:
    """Thm 4.9 (T10: ln(n d / delta)): T = max(1, floor(min(n, eps^2 n^2 / (d ln^2(n d / delta)))))."""
    return max(1, math.floor(min(n, epsilon**2 * n**2 / (dim * math.log(n * dim / delta) ** 2))))


def gd_schedule(mode: str, n: int, dim: int, epsilon: float, delta: float, lipschitz: float, diameter: float,
                per_round_budget, sum_mse=pvec_mse) -> Schedule:
    """(n, T, eta) of P_GD: eta = D / (L sqrt T) (``paper``), or D / (L_G sqrt T) with L_G^2 =
    L^2 + MSE(n) / n^2 at the per-round (eps_0, delta_0) ``per_round_budget`` gives (``exact``)."""
    steps = gd_num_rounds(n, dim, epsilon, delta)
    if mode == "paper":
        return Schedule(n, steps, diameter / (lipschitz * math.sqrt(steps)))
    eps0, delta0, _, _ = per_round_budget(epsilon, delta, steps)
    return Schedule(n, steps, diameter / math.sqrt(oracle_second_moment(eps0, delta0, dim, n, lipschitz, sum_mse) * steps))


def smoothing_parameter(n: int, dim: int, epsilon: float, delta: float, lipschitz: float, diameter: float) -> float:
    """Thm 4.7: beta = eps^(2/3) n^(2/3) L / (d^(1/3) D ln^(2/3)(d / delta)), the Moreau envelope's
    smoothness for smoothed P_AGD (reference: n = 1e5, d = 10, eps = 1, delta = 1e-6, L = 1, D = 2
    -> 78.36)."""
    return epsilon ** (2 / 3) * n ** (2 / 3) * lipschitz / (dim ** (1 / 3) * diameter * math.log(dim / delta) ** (2 / 3))


def gd_smoothing_parameter(n: int, dim: int, epsilon: float, delta: float, lipschitz: float, diameter: float) -> float:
    """Thm 4.9 part 1: beta = (L / D) min(sqrt(n), eps n / (sqrt(d) ln^(3/2)(n d / delta))), the Moreau
    envelope's smoothness for smoothed P_GD (reference: n = 1e4, d = 10, eps = 1, delta = 1e-6, L = 1,
    D = 2 -> 12.40)."""
    return lipschitz / diameter * min(math.sqrt(n), epsilon * n / (math.sqrt(dim) * math.log(n * dim / delta) ** 1.5))


class PhaseSchedule(NamedTuple):
    batch_sizes: tuple     # B_j
    steps: tuple           # T_j
    step_sizes: tuple      # P_AGD's step size of phase j
    radii: tuple           # R_0 .. R_k, the D phase j's formulas use is R_{j-1}
    smoothings: tuple      # beta_j: the loss's (4.8b), or phase j's Moreau envelope's (4.8a)


def num_phases(n: int) -> int:
    """A1: k = max(1, ceil(log2 log2 n))."""
    return max(1, math.ceil(math.log2(math.log2(n)))) if n > 2 else 1


def agd_phase_schedule(mode: str, n: int, dim: int, epsilon: float, delta: float, lipschitz: float,
                       diameter: float, smoothness: float | None, strong_convexity: float,
                       sum_mse=pvec_mse) -> PhaseSchedule:
    """Thm 4.8 with the choices of A6: k phases on disjoint groups of n_j = floor(n / k) users; phase
    j runs P_AGD with n := n_j and D := R_{j-1}, R_0 = min(D, 2L / lambda), R_j = min(D, sqrt(2 Delta_j /
    lambda)), Delta_j the convex rate at (n_j, R_{j-1}) with C = 1:

    4.8b (lambda-strongly convex, beta-smooth): Delta_j = R L / sqrt(n_j) + A R^(6/5) / n_j^(4/5),
        A = d^(2/5) beta^(1/5) L^(4/5) ln^(4/5)(d/delta) / eps^(4/5) (Thm 4.3);
    4.8a (``smoothness`` None, non-smooth): phase j is smoothed P_AGD, beta_j = ``smoothing_parameter``
        at (n_j, R_{j-1}) and L_eff = 2 L in B and sigma (Thm 4.7), and
        Delta_j = R L / sqrt(n_j) + R L d^(1/3) ln^(2/3)(d/delta) / (eps n_j)^(2/3)."""
    k = num_phases(n)
    group = n // k
    log = math.log(dim / delta)

    def phase(radius: float):
        if smoothness is None:
            beta = smoothing_parameter(group, dim, epsilon, delta, lipschitz, radius)
            schedule = agd_schedule(mode, group, dim, epsilon, delta, 2.0 * lipschitz, radius, beta, sum_mse)
            gap = radius * lipschitz / math.sqrt(group) + radius * lipschitz * dim ** (1 / 3) * log ** (2 / 3) / (
                epsilon * group) ** (2 / 3)
            return (schedule, beta), gap
        schedule = agd_schedule(mode, group, dim, epsilon, delta, lipschitz, radius, smoothness, sum_mse)
        a = dim**0.4 * smoothness**0.2 * lipschitz**0.8 * log**0.8 / epsilon**0.8
        return (schedule, smoothness), radius * lipschitz / math.sqrt(group) + a * radius**1.2 / group**0.8

    results, radii = _localized(k, diameter, lipschitz, strong_convexity, phase)
    schedules, smoothings = zip(*results)
    return PhaseSchedule(tuple(s.batch_size for s in schedules), tuple(s.num_steps for s in schedules),
                         tuple(s.step_size for s in schedules), radii, tuple(smoothings))


def _localized(phases: int, diameter: float, lipschitz: float, strong_convexity: float, phase) -> tuple[list, tuple]:
    """A6's radius recursion for phased methods: R_0 = min(D, 2L / lambda); ``phase(R_{j-1})`` gives
    phase j's result and its rate Delta_j; R_j = min(D, sqrt(2 Delta_j / lambda)). Returns the phases'
    results and (R_0, .., R_k)."""
    radii, results = [min(diameter, 2.0 * lipschitz / strong_convexity)], []
    for _ in range(phases):
        result, gap = phase(radii[-1])
        results.append(result)
        radii.append(min(diameter, math.sqrt(2.0 * gap / strong_convexity)))
    return results, tuple(radii)


class GdPhaseSchedule(NamedTuple):
    group_size: int        # n_j = floor(n / k), the same for every phase
    rounds: int            # T_j = T(n_j), the same for every phase, so every round spends (eps_0, delta_0)
    step_sizes: tuple      # eta_j, with D := R_{j-1}
    radii: tuple           # R_0 .. R_k


def gd_phase_schedule(mode: str, n: int, dim: int, epsilon: float, delta: float, lipschitz: float, diameter: float,
                      strong_convexity: float, per_round_budget, sum_mse=pvec_mse) -> GdPhaseSchedule:
    """Thm 4.9 part 2 (the Feldman-Koren-Talwar reduction, Lemma B.7) with the choices of A6, as
    ``agd_phase_schedule``: k = ceil(log2 log2 n) phases of P_GD on disjoint groups of n_j = floor(n / k)
    users, warm-started from the previous phase's average; phase j's eta from ``gd_schedule`` at
    (n_j, D := R_{j-1}), R_0 = min(D, 2L / lambda), R_j = min(D, sqrt(2 Delta_j / lambda)) with the convex
    rate Delta_j = R L / sqrt(n_j) + R L sqrt(d) ln^(3/2)(n_j d / delta) / (eps n_j) (C = 1; the paper
    gives no group sizes, spec §3.5)."""
    k = num_phases(n)
    group = n // k

    def phase(radius: float):
        schedule = gd_schedule(mode, group, dim, epsilon, delta, lipschitz, radius, per_round_budget, sum_mse)
        return schedule, radius * lipschitz / math.sqrt(group) + radius * lipschitz * math.sqrt(dim) * math.log(
            group * dim / delta) ** 1.5 / (epsilon * group)

    schedules, radii = _localized(k, diameter, lipschitz, strong_convexity, phase)
    return GdPhaseSchedule(group, schedules[-1].num_steps, tuple(s.step_size for s in schedules), radii)
