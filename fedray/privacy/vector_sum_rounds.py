"""P_vec invoked every round (P_GD) calibrated by the binomial's moments (``privacy.calibration=tight``).

P_GD runs one P_vec invocation over all of its users in each of T rounds, so a user's view is the
T-fold adaptive composition of P_vec. ``vector_sum_tight`` bounds one invocation; composing T
per-round (eps_0, delta_0) by advanced composition or a PLD grid wastes most of the budget: at
eps_0 ~ 1e-3 the pessimistic PLD's rounding (3e-5 per unit pair, hundreds of pairs a round) is
larger than the privacy loss itself. This module composes the rounds' dominating pairs directly
and bounds the result by their moments, with no discretisation.

Trust model, unit and neighbouring relation: as P_vec (no trusted server; the shuffler only
permutes and drops sender identity; one user's vector replaced by another in the l2 ball of
radius Delta2, REPLACE_ONE), for the user's whole transcript over the T rounds it joins.
Guarantee: (epsilon, delta)-DP for the T rounds together, certified numerically at the returned
parameters (``certified_delta`` <= delta). Calibration: p = 1/2, the paper's g, and the fewest
trials b (to a relative 1e-3, on the private side) meeting the bound below.

Derivation (what is proved here, what is cited)
-----------------------------------------------
Notation: m = n b trials per coordinate and round, M = floor(m / g) (``pieces``), L =
``unit_shift_count(d, g)``, K = L T, U = (P, Q) with P = Bin(M, 1/2) and Q = P + 1 (the unit pair).

1. One round (proved in ``vector_sum_tight``, steps 1-5): every neighbouring pair's view of one
   invocation is, for every gamma, no further apart in hockey-stick divergence than U^L, the L-fold
   product of unit pairs; at p = 1/2 U is symmetric (y -> M + 1 - y maps (P, Q) to (Q, P)), so U^L
   covers both orders of the pair: it is a dominating pair of the invocation under REPLACE_ONE.
2. T rounds (cited): the rounds are chosen adaptively (round t's gradients depend on the released
   sums before it), each with the same dominating pair whatever came before; the product of the
   rounds' dominating pairs dominates their adaptive composition (Zhu, Dong & Wang 2022, Thm. 10).
   So the T rounds are dominated by U^K, K = L T.
3. The moment bound (proved here). H_gamma(A || B) = E_A[(1 - e^(eps - Z))_+], Z = ln(A / B) the
   privacy loss (+inf where B = 0). For x real and lambda > 0, (1 - e^-x)_+ <= c(lambda) e^(lambda x)
   with c(lambda) = lambda^lambda / (1 + lambda)^(1 + lambda) (the maximum of (1 - e^-x) e^(-lambda x)
   over x >= 0, at e^-x = lambda / (1 + lambda)). Under U the loss of y is l(y) = ln((M - y + 1) / y)
   for 1 <= y <= M and +inf at y = 0 (mass 2^-M). Over U^K: the event that some coordinate sits at 0
   has probability <= K 2^-M and contributes at most that; elsewhere Z = sum_i l(y_i), so
       delta(eps) <= K 2^-M + min_lambda c(lambda) e^(-lambda eps) A(lambda)^K,
       A(lambda) = sum_{y=1}^{M} P(y) e^(lambda l(y)),
   the factors of A^K coming from the product form. This is the Renyi-to-(eps, delta) conversion of
   Canonne, Kamath & Steinke 2020 (Prop. 12) applied to the loss with its infinite part split off;
   every lambda gives a valid bound, so the minimum over a grid (``ORDERS``) is one too.
4. Computing A (proved here). A is summed from scipy's binomial pmf over the window where the pmf is
   positive and within 20 standard deviations (plus 2 lambda_max) of M / 2; the rest is bounded
   from above: for y > the window, l(y) <= 0 (y > (M + 1) / 2) and P(Y > hi) <= exp(-2 (hi + 1 -
   M / 2)^2 / M) (Hoeffding); below the window the range is cut into pieces [z', z) whose distance
   from M / 2 doubles, each bounded by P(Y <= z - 1) e^(lambda l(z')) (l decreases; Hoeffding
   again). The window's sum is inflated by a relative 1e-11 for the floating-point error of the pmf,
   the logs and the sum (all terms positive: their relative errors, ~1e-13, add up to the sum's).
   With M <= 20^2 the window is the whole support and the sum is exact up to that rounding.

Against the single-invocation bound composed by advanced composition this keeps the Gaussian-like
scaling of the loss over rounds: the noise variance needed grows like T, not like T log(T / delta).
The route is also sound for one round (T = 1), where the PLD of ``vector_sum_tight`` is tighter.

Symbols: n users per invocation (``num_users``), d (``dim``), Delta2 (``l2_bound``), g (``scale``),
b (``noise_bits``), T (``num_rounds``), L (``unit_shift_count``), K = L T (``unit_pairs``), M
(``pieces``), lambda = alpha - 1 (``ORDERS``).

References
----------
.. [CJMP22] A. Cheu, M. Joseph, J. Mao, B. Peng. Shuffle private stochastic convex optimization. ICLR 2022.
.. [ZDW22] Y. Zhu, J. Dong, Y.-X. Wang. Optimal accounting of differential privacy via characteristic
   function. AISTATS 2022 (Thm. 10: dominating pairs compose adaptively).
.. [CKS20] C. Canonne, G. Kamath, T. Steinke. The discrete Gaussian for differential privacy. NeurIPS
   2020 (Prop. 12: the conversion of step 3).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

from fedray.errors import ConfigError
from fedray.privacy.vector_sum import checked_sizes
from fedray.privacy.vector_sum_tight import TIGHT_PROBABILITY, TightVectorSumParameters, bisect_bits, unit_shift_count

__all__ = ["ORDERS", "BinomialRoundsComposition", "TightRoundsParameters", "rounds_delta", "rounds_epsilon",
           "tight_rounds_parameters", "unit_pair_log_moments"]

ORDERS = np.geomspace(1e-2, 1e4, 96)     # lambda = alpha - 1 of the conversion (step 3)
WINDOW_STDS = 20.0                        # the window summed from the pmf (step 4)
SAFETY = 1e-11                            # relative inflation of the window's floating-point sum
MAX_TRIALS = 2**50
BITS_TOLERANCE = 1e-3                     # b is the fewest to this relative precision (private side)


@functools.lru_cache(maxsize=256)
def _log_moments(pieces: int) -> np.ndarray:
    m = int(pieces)
    center, std = m / 2.0, math.sqrt(m) / 2.0
    half = WINDOW_STDS * std + 2.0 * float(ORDERS[-1])
    ys = np.arange(max(1, math.floor(center - half)), min(m, math.ceil(center + half)) + 1)
    pmf = stats.binom.pmf(ys, m, 0.5)
    positive = np.flatnonzero(pmf > 0)                 # log-concave: one interval, the mode inside
    ys, pmf = ys[positive[0]:positive[-1] + 1], pmf[positive[0]:positive[-1] + 1]
    lo, hi = int(ys[0]), int(ys[-1])
    loss = np.log(m - ys + 1.0) - np.log(ys.astype(np.float64))
    log_pmf = np.log(pmf)
    # ln sum_y exp(ln P(y) + lambda l(y)) one order at a time, in place in one buffer: the same
    # operations as scipy's logsumexp (shift by the largest term, sum, log), 13x faster at M = 1e9
    # (no per-call array-API dispatch, no temporaries of 16 windows).
    window = np.empty(len(ORDERS))
    exponent = np.empty_like(loss)
    for i, lam in enumerate(ORDERS):
        np.multiply(loss, lam, out=exponent)
        exponent += log_pmf
        top = exponent.max()
        exponent -= top
        window[i] = top + math.log(np.exp(exponent, out=exponent).sum())
    terms = [window + math.log1p(SAFETY)]
    if hi < m:                                         # y > hi: l(y) <= 0, Hoeffding on P(Y >= hi + 1)
        terms.append(np.full(len(ORDERS), -2.0 * (hi + 1 - center) ** 2 / m))
    z = lo
    while z > 1:                                       # [z_next, z - 1]: P(Y <= z - 1) e^(lambda l(z_next))
        z_next = max(1, min(z - 1, math.floor(center - 2.0 * (center - z))))
        log_tail = -2.0 * (center - (z - 1)) ** 2 / m if z - 1 <= center else 0.0
        terms.append(log_tail + ORDERS * (math.log(m - z_next + 1.0) - math.log(z_next)))
        z = z_next
    return special.logsumexp(np.stack(terms), axis=0)


def unit_pair_log_moments(pieces: int) -> np.ndarray:
    """Upper bounds on ln A(lambda) (step 3) of the unit pair of Bin(``pieces``, 1/2), one per lambda
    in ``ORDERS`` (step 4)."""
    if isinstance(pieces, bool) or int(pieces) != pieces or pieces < 1:
        raise ConfigError("pieces", pieces, "an integer >= 1")
    return _log_moments(int(pieces))


_LOG_C = ORDERS * np.log(ORDERS) - (1.0 + ORDERS) * np.log1p(ORDERS)       # ln c(lambda)


def _unit_pairs(dim: int, trials: int, scale: int, num_rounds: int) -> tuple[int, int]:
    """(K, M): unit pairs over the rounds and the trials per piece."""
    return unit_shift_count(dim, scale) * int(num_rounds), int(trials) // int(scale)


def pairs_delta(epsilon: float, unit_pairs: int, pieces: int) -> float:
    """The step-3 bound on delta(``epsilon``) of K = ``unit_pairs`` unit pairs of Bin(``pieces``, 1/2)."""
    if pieces < 1:
        return 1.0
    exponent = _LOG_C - ORDERS * float(epsilon) + unit_pairs * unit_pair_log_moments(pieces)
    return min(1.0, unit_pairs * 2.0 ** -pieces + math.exp(min(0.0, float(np.min(exponent)))))


def pairs_epsilon(delta: float, unit_pairs: int, pieces: int) -> float:
    """The smallest epsilon the step-3 bound certifies at ``delta`` (inf when none)."""
    if pieces < 1:
        return math.inf
    rest = float(delta) - unit_pairs * 2.0 ** -pieces
    if rest <= 0:
        return math.inf
    values = (unit_pairs * unit_pair_log_moments(pieces) + _LOG_C - math.log(rest)) / ORDERS
    return max(0.0, float(np.min(values)))


def rounds_delta(epsilon: float, dim: int, trials: int, scale: int, num_rounds: int) -> float:
    """delta(``epsilon``) of ``num_rounds`` P_vec invocations at p = 1/2 with ``trials`` = n b noise
    trials per coordinate and fixed-point scale g (steps 1-4)."""
    return pairs_delta(epsilon, *_unit_pairs(dim, trials, scale, num_rounds))


def rounds_epsilon(delta: float, dim: int, trials: int, scale: int, num_rounds: int) -> float:
    """epsilon at ``delta`` of ``num_rounds`` P_vec invocations (``rounds_delta``'s bound)."""
    return pairs_epsilon(delta, *_unit_pairs(dim, trials, scale, num_rounds))


@dataclass(frozen=True)
class TightRoundsParameters(TightVectorSumParameters):
    """P_vec's parameters for T invocations per user calibrated together: ``epsilon`` and ``delta``
    are the T rounds' target, ``certified_delta`` the bound on the T rounds' delta(epsilon). One
    invocation is a marginal of the T rounds, so a per-invocation event read from ``epsilon`` and
    ``delta`` (``VectorSumRandomizer.event``) stays sound, only loose; the ledger prices rounds by
    ``BinomialRoundsComposition``, never by composing such events."""

    num_rounds: int = 1

    def rounds_epsilon(self, rounds: int) -> float:
        """The certified epsilon at ``delta`` after ``rounds`` of the invocations."""
        return rounds_epsilon(self.delta, self.dim, self.num_users * self.noise_bits, self.scale, rounds)


@functools.lru_cache(maxsize=256)
def _fewest_bits(epsilon: float, delta: float, dim: int, num_users: int, scale: int, num_rounds: int):
    target = delta * (1.0 - 1e-9)

    def bound(bits: int) -> float:
        return rounds_delta(epsilon, dim, num_users * bits, scale, num_rounds)

    high = 1
    while (value := bound(high)) > target:
        high *= 2
        if num_users * high > MAX_TRIALS:
            raise ConfigError("privacy.epsilon", epsilon, f"a budget P_vec can meet over {num_rounds} rounds with "
                              f"n b <= {MAX_TRIALS} noise trials (d = {dim}, n = {num_users}, delta = {delta})")
    return bisect_bits(bound, target, high // 2, high, value, BITS_TOLERANCE)   # bound(high // 2) > target


def tight_rounds_parameters(epsilon: float, delta: float, dim: int, num_users: int, l2_bound: float,
                            num_rounds: int) -> TightRoundsParameters:
    """P_vec's parameters for ``num_rounds`` invocations over the same ``num_users`` users, the T
    rounds together (epsilon, delta)-DP for each user by steps 1-4: the paper's g, p = 1/2 and the
    fewest trials b (to a relative 1e-3) the bound certifies.

    Raises
    ------
    ConfigError
        If an argument is out of range (epsilon > 0 finite, delta in (0, 1), integers d, n, T >= 1,
        Delta2 > 0), or no b up to n b = 2^50 meets the target.
    """
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ConfigError("epsilon", epsilon, "a finite number > 0")
    if not 0 < delta < 1:
        raise ConfigError("delta", delta, "in (0, 1)")
    if isinstance(num_rounds, bool) or int(num_rounds) != num_rounds or num_rounds < 1:
        raise ConfigError("num_rounds", num_rounds, "an integer >= 1")
    d, n, scale = checked_sizes(dim, num_users, l2_bound)
    bits, certified = _fewest_bits(float(epsilon), float(delta), d, n, scale, int(num_rounds))
    return TightRoundsParameters(
        epsilon=float(epsilon), delta=float(delta), dim=d, num_users=n, l2_bound=float(l2_bound),
        eps_hat=math.nan, delta_hat=math.nan, scale=int(scale), noise_bits=int(bits),
        bit_probability=TIGHT_PROBABILITY, certified_delta=float(certified), route="binomial_moments",
        num_rounds=int(num_rounds))


@dataclass(frozen=True)
class BinomialRoundsComposition:
    """A user's P_vec rounds at ``params`` composed per cell of a count array by the moment bound
    (``rounds_epsilon``; the count is the rounds the user joined), at the plan's total delta: the
    ledger's rule for P_GD under ``privacy.calibration=tight``. The relation is P_vec's (REPLACE_ONE)."""

    params: TightRoundsParameters
    NAME = "binomial_moments"

    def epsilons(self, counts) -> np.ndarray:
        counts = np.asarray(counts)
        values = {int(k): (self.params.rounds_epsilon(int(k)) if k > 0 else 0.0) for k in np.unique(counts)}
        return np.vectorize(lambda k: values[int(k)], otypes=[np.float64])(counts)

    def deltas(self, counts) -> np.ndarray:
        return np.where(np.asarray(counts) > 0, self.params.delta, 0.0)

    def describe(self) -> dict:
        p = self.params
        return {"name": self.NAME, "delta": p.delta, "noise_bits": p.noise_bits, "scale": p.scale,
                "unit_shifts_per_round": unit_shift_count(p.dim, p.scale), "num_users": p.num_users}
