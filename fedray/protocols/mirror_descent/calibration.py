"""Seed 001's parameter rules and privacy calibrations, with their exact constants (spec §3).

Symbols: n samples, eps, delta, dx and dy strategies, ell = ln dx + ln dy (ln dx alone when
dy = 1, spec §6 item 16), L0 / L1 / L2 the Lipschitz, smoothness and second-order smoothness
constants in the l1 / l_inf pair, T steps, K vertex draws per player per step, B = floor(n / T)
samples per step, tau the step size.

Privacy constraints use the exact constants and the realised integers (B, T, K); the constants the
paper hides in ~= are 1 (spec §6 items 7, 8). Rounding: T = floor, K = max(1, round), B = floor(n / T).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from fedray.core.terms import Calibration
from fedray.errors import ConfigError
from fedray.privacy.composition import bounded_range_budget, zcdp_budget
from fedray.protocols.mirror_descent.bias_reduction import normaliser

REGIMES = ("first_order", "second_order", "bilinear")     # Thm 3.1 (5), (6), (7)


def check_privacy_range(epsilon: float, delta: float) -> None:
    """Every theorem of seed 001 assumes 0 < delta < 1 and 0 < eps < 8 ln(1/delta) (spec §1.2)."""
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise ConfigError("privacy.delta", delta, "a number in (0, 1)")
    bound = 8 * math.log(1 / delta)
    if not (isinstance(epsilon, (int, float)) and 0 < epsilon < bound):
        raise ConfigError("privacy.epsilon", epsilon, f"a number in (0, 8 ln(1/delta)) = (0, {bound:.4g})")


def log_dimensions(dx: int, dy: int) -> float:
    """ell = ln dx + ln dy (the entropic radius of the two simplices)."""
    return math.log(dx) + (math.log(dy) if dy > 1 else 0.0)


class Schedule(NamedTuple):
    num_steps: int          # T
    draws: int              # K
    batch_size: int         # B = floor(n / T)
    step_size: float        # tau = min(tau_util, tau_priv) (the default rule), or tau_util without privacy
    utility_step: float     # tau_util = sqrt(ell / T) / L0
    private_step: float     # tau_priv(T, K, B), inf without privacy


CALIBRATIONS = (Calibration.PAPER, Calibration.TIGHT)       # privacy.calibration for the vertex-sampling step size


def private_step_size(batch_size: int, num_steps: int, draws: int, epsilon: float, delta: float,
                      lipschitz: float, calibration: Calibration = Calibration.PAPER) -> float:
    """tau_priv: the largest tau whose 2 T (K + 1) draws, each (4 tau L0 / B)-DP, compose to
    (eps, delta).

    ``paper``: Prop. 3.3's tau_priv = B eps / (16 L0 sqrt(T (K + 1) ln(1/delta))), by Cor. 3.6
    (pure-DP advanced composition, with a factor 2 to spare). ``tight``: each draw is an
    exponential mechanism whose score moves by a spread of at most 4 tau L0 / B (``draw_epsilon``),
    so it is that much bounded-range, and k draws compose as (k eps0^2 / 8)-zCDP
    (``fedray.privacy.composition.bounded_range_budget``): about 4.6x the paper's tau at
    k = 2000, eps = 1, delta = 1e-6."""
    if calibration == Calibration.PAPER:
        return batch_size * epsilon / (16 * lipschitz * math.sqrt(num_steps * (draws + 1) * math.log(1 / delta)))
    if calibration != Calibration.TIGHT:
        raise ConfigError("privacy.calibration", calibration, f"one of {CALIBRATIONS}")
    per_draw = bounded_range_budget(epsilon, num_steps * draws_per_step(draws), delta)
    tau = per_draw * batch_size / (4 * lipschitz)
    while draw_epsilon(tau, lipschitz, batch_size) > per_draw:       # rounding: stay on the private side
        tau = math.nextafter(tau, 0.0)
    return tau


def draw_epsilon(step_size: float | np.ndarray, lipschitz: float, batch_size: int) -> float | np.ndarray:
    """Each vertex draw is (4 tau L0 / B)-DP: the score moves by at most 2 tau L0 / B per coordinate
    when one sample of a disjoint batch is replaced (spec §2.2), and the exponential mechanism with
    a score of sensitivity Delta is 2 Delta-DP."""
    return 4 * step_size * lipschitz / batch_size


def draws_per_step(draws: int) -> int:
    """Vertex draws released per step of Alg. 1: K + 1 per player (K for the gradient, 1 for the output)."""
    return 2 * (draws + 1)


def steps_for(regime: str, n: int, epsilon: float, delta: float, ell: float) -> tuple[int, int]:
    """(T, K) of Thm 3.1's regime (5) first_order, (6) second_order or (7) bilinear (K = 1; T from
    our derivation, spec §3.1)."""
    log_delta = math.log(1 / delta)
    if regime == "first_order":
        steps = min(n, (n * epsilon) ** (2 / 3) / log_delta ** (1 / 3))
        draws_of = lambda t: t / ell                    # noqa: E731
    elif regime == "second_order":
        steps = min(n, (n * epsilon) ** (4 / 5) / (ell ** (1 / 5) * log_delta ** (2 / 5)))
        draws_of = lambda t: math.sqrt(t / ell)        # noqa: E731
    elif regime == "bilinear":
        steps = min(n, n * epsilon / math.sqrt(ell * log_delta))
        draws_of = lambda t: 1.0                        # noqa: E731
    else:
        raise ConfigError("algorithm.regime", regime, f"one of {REGIMES}")
    num_steps = int(math.floor(steps))
    if num_steps < 1:
        raise ConfigError("data.spec.num_samples", n, f"a size at which regime {regime} takes a step (T = {steps:.3g})")
    return num_steps, max(1, int(round(draws_of(num_steps))))


def non_private_steps(n: int) -> tuple[int, int]:
    """The non-private baseline: T = n (one sample per step), K = 1 (spec §3.6)."""
    return n, 1


def sgd_schedule(regime: str, n: int, epsilon: float | None, delta: float | None, dx: int, dy: int,
                 lipschitz: float, calibration: Calibration = Calibration.PAPER) -> Schedule:
    """Alg. 1's (T, K, B, tau) by Thm 3.1 and the default rule tau = min(tau_util, tau_priv);
    ``epsilon=None``: the non-private run (T = n, K = 1, tau = tau_util)."""
    ell = log_dimensions(dx, dy)
    if epsilon is None:
        num_steps, draws = non_private_steps(n)
    elif delta is None:
        raise ValueError(f"epsilon = {epsilon:g} needs a delta (privacy.delta)")
    else:
        num_steps, draws = steps_for(regime, n, epsilon, delta, ell)
    if num_steps < ell and dy == 1:
        raise ConfigError("data.spec.num_samples", n, f"a size with T >= ell = {ell:.3g} (T = {num_steps})")
    batch = n // num_steps
    utility = math.sqrt(ell / num_steps) / lipschitz
    private = (math.inf if epsilon is None or delta is None
               else private_step_size(batch, num_steps, draws, epsilon, delta, lipschitz, calibration))
    return Schedule(num_steps, draws, batch, min(utility, private), utility, private)


def bound_schedule(regime: str, n: int, epsilon: float, delta: float, dx: int, dy: int, lipschitz: float,
                   smoothness: float, second_order: float, calibration: Calibration = Calibration.PAPER) -> Schedule:
    """Spec §3.1's optional rule: (T, K) on a log grid minimising ``explicit_gap_bound`` with
    tau = min(sqrt(2 ell / (5 L0^2 T)), tau_priv(T, K)) (its minimiser without privacy), K = 1 in the
    bilinear regime; data-independent, so it costs no privacy."""
    ell = log_dimensions(dx, dy)
    best = None
    for steps in np.unique(np.geomspace(max(1.0, math.ceil(ell)), n, 240).astype(int)):
        steps, batch = int(steps), n // int(steps)
        draws_grid = [1] if regime == "bilinear" else sorted({1, *(2**k for k in range(int(math.log2(max(steps, 1))) + 1))})
        for draws in draws_grid:
            private = private_step_size(batch, steps, draws, epsilon, delta, lipschitz, calibration)
            utility = math.sqrt(2 * ell / (5 * lipschitz**2 * steps))
            tau = min(utility, private)
            value = explicit_gap_bound(tau, steps, draws, ell, lipschitz, smoothness, second_order, regime)
            if best is None or value < best[0]:
                best = (value, Schedule(steps, draws, batch, tau, utility, private))
    if best is None:
        raise ValueError(f"no schedule for n = {n} samples (the step grid is empty)")
    return best[1]


def sampling_bias(regime: str, draws: int, smoothness: float, second_order: float) -> float:
    """b(K) of the explicit bound: 8 L1 / sqrt(K) (first order), 8 L2 / K (second order), 0 (L2 = 0)."""
    if regime == "bilinear":
        return 0.0
    return 8 * smoothness / math.sqrt(draws) if regime == "first_order" else 8 * second_order / draws


def explicit_gap_bound(step_size: float, num_steps: int, draws: int, ell: float, lipschitz: float,
                       smoothness: float, second_order: float, regime: str) -> float:
    """Spec §3.1's explicit bound on E Gap(xtilde, ytilde) of Alg. 1 (our assembly of L3.8, L3.11
    with the product-space constants): 2 ell / (tau T) + 5 tau L0^2 + 4 b(K) + 4 L1 / T + 4 L1 sqrt(ell / T)."""
    return (2 * ell / (step_size * num_steps) + 5 * step_size * lipschitz**2
            + 4 * sampling_bias(regime, draws, smoothness, second_order)
            + 4 * smoothness / num_steps + 4 * smoothness * math.sqrt(ell / num_steps))


class BiasReducedParameters(NamedTuple):
    levels: int             # M
    moment: float           # C = L0^2 + L2^2 + ell M L1^2
    stop: float             # U
    step_size: float        # tau
    batch_factor: float     # alpha


VERTEX_CONSTANTS = {"safe": 20.0}       # c_v of Prop. 3.17 the planner accepts: sup over M of ``vertex_constant``
PAPER_VERTEX_CONSTANT = 9.0              # the paper's c_v: below ``vertex_constant(M)`` for every M, so refused


def vertex_constant(levels: int) -> float:
    """Alg. 3's per-draw constant re-derived from the estimator's range: c_v(M) = 2 (4 C_M + 2)
    = 20 - 2^(3 - M), so that each draw is (c_v tau alpha L0)-DP (spec §3.3 and §6 item 3).

    Derivation. Alg. 2's estimate on batch B_t (b_t samples) is the batch mean of one sample's
    part, per coordinate w (a - b) + e, with w = C_M 2^N and a, b, e that sample's gradient
    coordinate at (x+, y+), (x-, y-), (xhat^1, yhat^1). Each lies anywhere in [-L0, L0] (the
    l_inf bound of the gradients; nothing ties the three points together for a general smooth
    f), so the part ranges over [-(2 w + 1) L0, (2 w + 1) L0], a range of (4 w + 2) L0, reached
    at the corners a = -b = +-L0, e = +-L0. Replacing one sample therefore moves every score
    coordinate by at most Delta_t = tau (4 C_M 2^N + 2) L0 / b_t, and b_t = ceil(max(1,
    2^N / alpha)) >= 2^N / alpha gives Delta_t <= tau alpha L0 (4 C_M + 2^(1 - N)), largest at
    N = 0: tau alpha L0 (4 C_M + 2). A vertex draw from softmax(s) is the exponential mechanism
    on s, whose privacy loss is at most the spread of the score change, 2 Delta_t; so c_v(M) =
    2 (4 C_M + 2) with C_M = 2 - 2^(-M): 18 at M = 2, 19.75 at M = 5, 19.875 at M = 6, below 20
    for every M. The paper's proof of Prop. 3.17 (Proof 3.18) bounds the score sensitivity by
    tau alpha L0 (4 + 2^(-N)) <= 4.5 tau alpha L0, i.e. c_v = 9: it drops C_M (up to 2), halves
    the xhat^1 term and takes N >= 1 though P[N = 0] = 1 / C_M > 1/2, under-stating every
    draw's epsilon by a factor 2.2 at M = 6."""
    return 2.0 * (4.0 * normaliser(levels) + 2.0)


def bias_reduced_privacy_constant(epsilon: float, delta: float, calibration: Calibration = Calibration.PAPER) -> float:
    """K of Alg. 3's privacy condition (c_v tau alpha L0)^2 U <= eps^2 / K on its at most 6 U draws
    (``bias_reduced_most_draws``), each eps0 = c_v tau alpha L0 (``bias_reduced_draw_epsilon``).

    ``paper``: Prop. 3.17's K = 48 ln(1/delta) (pure-DP advanced composition). ``tight``: each
    draw is eps0-bounded-range, since eps0 bounds the spread of the score change (``vertex_constant``:
    every coordinate moves by at most Delta_t, the spread by 2 Delta_t <= eps0), so a draw is
    eps0^2/8-zCDP (Cesar & Rogers 2021, Lemma 3.2). The levels N_t and the stopping rule do not read
    the data, so given them the run is an adaptive composition of at most 6 U such draws,
    (6 U eps0^2 / 8)-zCDP (Bun & Steinke 2016), and a mixture over data-independent levels keeps
    the bound. Within eps at delta when 6 U eps0^2 / 8 <= rho* (``zcdp_budget``): K = 3 eps^2 / (4 rho*).
    """
    if calibration == Calibration.PAPER:
        return 48.0 * math.log(1 / delta)
    if calibration != Calibration.TIGHT:
        raise ConfigError("privacy.calibration", calibration, f"one of {CALIBRATIONS}")
    return 3.0 * epsilon**2 / (4.0 * zcdp_budget(float(epsilon), float(delta)))


def bias_reduced_stop_limit(epsilon: float, delta: float, per_draw, calibration: Calibration = Calibration.PAPER):
    """The largest U the draws of epsilon ``per_draw`` afford: eps^2 / (K eps0^2)
    (``bias_reduced_privacy_constant``; Prop. 3.17's bound for ``paper``)."""
    return epsilon**2 / (bias_reduced_privacy_constant(epsilon, delta, calibration) * np.asarray(per_draw) ** 2)


def bias_reduced_parameters(n: int, epsilon: float, delta: float, ell: float, lipschitz: float, smoothness: float,
                            second_order: float, constant: float = VERTEX_CONSTANTS["safe"],
                            calibration: Calibration = Calibration.PAPER) -> BiasReducedParameters:
    """Thm 3.14's (M, C, U, tau, alpha) for Alg. 3 with per-draw epsilon c_v tau alpha L0, by the
    fixed point on the integer M (C depends on M, M = floor(log2 sqrt U), U on C), from
    M = floor(log2 sqrt(n / 2)) (spec §3.3, §6 item 4). Refuses U < 4. The privacy condition's
    constant 48 ln(1/delta) is ``bias_reduced_privacy_constant`` for ``calibration`` (the same
    for ``paper``; smaller for ``tight``, so U and alpha grow)."""
    log_delta = bias_reduced_privacy_constant(epsilon, delta, calibration) / 48.0   # ln(1/delta) for paper

    def stop_for(levels: int) -> tuple[float, float]:
        moment = lipschitz**2 + second_order**2 + ell * levels * smoothness**2
        stop = min(n * epsilon * math.sqrt(moment) / (lipschitz * math.sqrt(4 * 48 * constant**2 * ell * log_delta)),
                   n / 2)
        return moment, stop

    levels, seen = max(0, int(math.floor(math.log2(math.sqrt(n / 2))))), set()
    while levels not in seen:
        seen.add(levels)
        moment, stop = stop_for(levels)
        nxt = max(0, int(math.floor(math.log2(math.sqrt(stop))))) if stop >= 1 else 0
        if nxt == levels:
            break
        levels = nxt
    else:
        levels = min(seen)                  # a 2-cycle: the smaller M (fewer draws per step)
        moment, stop = stop_for(levels)
    if stop < 4:
        raise ConfigError("data.spec.num_samples", n, f"a size with U >= 4 for Alg. 3 (U = {stop:.3g})")
    step = math.sqrt(ell / (moment * stop))
    alpha = (2 * epsilon**2 / (48 * constant**2 * log_delta * (step * lipschitz) ** 2 * n)) ** (1 / 3)
    return BiasReducedParameters(levels, moment, stop, step, alpha)


def bias_reduced_draw_epsilon(constant: float, step_size, batch_factor: float, lipschitz: float):
    """Alg. 3's per-draw epsilon c_v tau alpha L0 (Prop. 3.17; per replica for (P,) tau)."""
    return constant * step_size * batch_factor * lipschitz


def bias_reduced_most_draws(stop: float) -> int:
    """Alg. 3's bound on a run's draws: sum_t 2 (2^(N_t + 1) + 1) <= 6 U (Prop. 3.17)."""
    return int(6 * stop)


def frank_wolfe_rounds(n: int, epsilon: float) -> int:
    """DP Frank-Wolfe's T = floor((n eps)^(2/3)), at least 1."""
    return max(1, int((n * epsilon) ** (2 / 3)))


def frank_wolfe_round_epsilon(num_steps: int, epsilon: float, delta: float) -> float:
    """eps0 = eps / (2 sqrt(2 T ln(1/delta))): T draws compose within eps by Cor. 3.6."""
    return float(epsilon / (2 * np.sqrt(2 * num_steps * np.log(1 / delta))))


def boosting_counts(failure_probability: float) -> tuple[int, int]:
    """Alg. 4's (I, J) = (ceil(log2(4 / beta)), ceil(log2(8 I / beta))) (Thm 3.20, rounded up)."""
    runs = math.ceil(math.log2(4 / failure_probability))
    return runs, math.ceil(math.log2(8 * runs / failure_probability))


def boosting_split(n: int, runs: int, checks: int) -> tuple[int, int, int]:
    """Alg. 4's data-independent split: (a quarter, a part of S1 (of I), a part of S2 or S3 (of I J))."""
    quarter = n // 4
    return quarter, quarter // runs, quarter // (runs * checks)


class GaussianSchedule(NamedTuple):
    num_steps: int          # T
    batch_size: int         # B = floor(n / T)
    step_size: float        # tau
    sigma: float            # noise std per coordinate of the batch mean gradient


def gaussian_sensitivity(lipschitz: float, dx: int, dy: int, batch_size: int) -> float:
    """l2 replace-one sensitivity of a batch's mean gradient, (grad_x, grad_y) with coordinates <= L0."""
    return 2 * lipschitz * math.sqrt(dx + dy) / batch_size


def gaussian_schedule(n: int, epsilon: float | None, delta: float | None, dx: int, dy: int, lipschitz: float,
                      sigma_of) -> GaussianSchedule:
    """(T, B, tau, sigma) of the Gaussian-noise SMD baseline (not from the paper): T on a log grid
    minimising the mirror-descent bound 2 sqrt(2 ell V / T) with V = 5 L0^2 + sigma(B)^2 (2 ln(2 D) + 2)
    (the analogue of the explicit bound's 5 L0^2 with the noise's E||xi||_inf^2 added; D = dx + dy),
    and tau = sqrt(2 ell / (V T)); data-independent. ``sigma_of(sensitivity)`` is the calibration."""
    ell, dims = log_dimensions(dx, dy), dx + dy

    def plan(steps: int) -> tuple[float, GaussianSchedule]:
        batch = n // steps
        sigma = 0.0 if epsilon is None else sigma_of(gaussian_sensitivity(lipschitz, dx, dy, batch))
        variance = 5 * lipschitz**2 + sigma**2 * (2 * math.log(2 * dims) + 2)
        bound = 2 * math.sqrt(2 * ell * variance / steps)
        return bound, GaussianSchedule(steps, batch, math.sqrt(2 * ell / (variance * steps)), sigma)

    grid = np.unique(np.geomspace(1, n, 200).astype(int))
    return min((plan(int(steps)) for steps in grid), key=lambda pair: pair[0])[1]


class ScoSchedule(NamedTuple):
    num_steps: int          # T
    refresh: int            # q
    draws: int              # K
    batch_size: int         # B
    releases: int           # k = K (q + floor(T / q)) + K: every draw from P_w, the output's included
    step_size: float        # tau = min(utility, 1 / (4 L0 q), tau_priv)
    private_step: float     # tau_priv


def sco_draws(num_steps: int, refresh: int, draws: int) -> int:
    """Alg. 5's draws from P_w: K at steps t <= q and at every t = 0 mod q after, K for the output
    (the proposition omits the last K; spec §6 item 9)."""
    refreshes = min(refresh, num_steps) + len([t for t in range(refresh + 1, num_steps + 1) if t % refresh == 0])
    return draws * (refreshes + 1)


def sco_private_step(batch_size: int, releases: int, epsilon: float, delta: float, lipschitz: float) -> float:
    """Prop. 4.3: tau_priv = B eps / (8 L0 sqrt(2 k ln(1/delta))) for k draws, each (4 tau L0 / B)-DP."""
    return batch_size * epsilon / (8 * lipschitz * math.sqrt(2 * releases * math.log(1 / delta)))


def sco_schedule(order: str, n: int, epsilon: float, delta: float, dim: int, lipschitz: float, smoothness: float,
                 second_order: float) -> ScoSchedule:
    """Thm 4.2's (T, q, K) for Alg. 5 (``order``: first_order (a) or second_order (b)), B = floor(n / T),
    tau = min(the utility term, 1 / (4 L0 q), tau_priv) (spec §3.5's default rule)."""
    ell, log_delta = math.log(dim), math.log(1 / delta)
    if order == "first_order":
        steps = int(math.floor(min(n, (n * epsilon) ** 0.8 / (ell * log_delta) ** 0.4)))
        refresh = max(1, int(round(math.sqrt(steps) / ell)))
        draws = max(1, int(round(steps / ell)))
        moment = (lipschitz**2 + (lipschitz**2 + smoothness**2) * refresh * math.sqrt(ell / draws)
                  + smoothness**2 * refresh / (math.sqrt(ell) * draws**1.5))
    elif order == "second_order":
        steps = int(math.floor(min(n, n * epsilon / (ell * math.sqrt(log_delta)))))
        refresh = max(1, int(round(math.sqrt(steps / ell))))
        draws = max(1, int(round(math.sqrt(steps * ell))))
        moment = lipschitz**2 + smoothness**2 * refresh * ell / draws + second_order**2 * refresh / draws**2
    else:
        raise ConfigError("algorithm.regime", order, "first_order or second_order (Thm 4.2 (a), (b))")
    if steps < 1:
        raise ConfigError("data.spec.num_samples", n, f"a size at which Alg. 5 takes a step (T = {steps})")
    batch = n // steps
    releases = sco_draws(steps, refresh, draws)
    private = sco_private_step(batch, releases, epsilon, delta, lipschitz)
    utility = math.sqrt(ell / (moment * steps))
    return ScoSchedule(steps, refresh, draws, batch, releases, min(utility, 1 / (4 * lipschitz * refresh), private),
                       private)
