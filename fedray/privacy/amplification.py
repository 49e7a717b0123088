"""Privacy amplification by shuffling: "hiding among the clones" (Feldman, McMillan, Talwar, FOCS 2021).

Trust model: no trusted server; silos (users) do not trust each other; the shuffler is trusted only
to permute the n reports uniformly at random and to drop sender identity. Each report is produced
by a local randomizer that is eps0-DP (or (eps0, delta0)-DP) on its own, and the analyst sees the
shuffled multiset (or any post-processing of it).

Unit and neighbouring relation: one user's input (one report); neighbours replace one user's
input by another (REPLACE_ONE). Every other user's input is arbitrary but fixed.

Guarantee: the shuffled output is (eps, delta)-DP with eps given by one of the bounds below. The
bounds are pure functions of (eps0, n, delta); they describe one shuffled round. Compose rounds
through a PLD built from the per-round privacy parameters (``dp_accounting.pld.
privacy_loss_distribution.from_privacy_parameters``), never by reusing eps0.

Assumptions: every user applies the same local randomizer (the paper allows the randomizer of the
i-th report to depend on the previous reports, sequential interactivity, FMT21 §3), each user sends
exactly one report, all n users take part, and the permutation is uniform and secret. Drop-outs
reduce n: account with the number of reports actually shuffled.

Randomness: none; everything here is deterministic numerics.

Symbols (FMT21):

=========  ====================================================================================
n          number of reports shuffled together (users, or silos sending one report each)
eps0       pure local DP parameter of each report's randomizer
delta0     approximate local DP parameter (Theorem 3.8 only)
eps, delta privacy of the shuffled output
p          clone probability; C ~ Bin(n - 1, p) other users are "clones" of user 1
A, Delta   A ~ Bin(C, 1/2) clones look like user 1's first input, Delta ~ Bern(e^eps0/(e^eps0 + 1))
=========  ====================================================================================

Three functions give eps:

* ``closed_form_shuffled_epsilon``: Theorem 3.1, a closed-form upper bound.
* ``numerical_shuffled_epsilon``: the exact hockey-stick divergence of the pair (P, Q) of
  Theorem 3.2, to which the shuffled output reduces; the tighter bound the paper computes
  numerically (its Section 4 and Appendix E). ``clones_hockey_stick_delta`` exposes delta(eps).
* ``shuffled_epsilon_delta``: Theorem 3.8, (eps0, delta0)-DP local randomizers.

References
----------
.. [FMT21] V. Feldman, A. McMillan, K. Talwar. Hiding among the clones: a simple and nearly optimal
   analysis of privacy amplification by shuffling. FOCS 2021, arXiv:2012.12803.
.. [FMT23] V. Feldman, A. McMillan, K. Talwar. Stronger privacy amplification by shuffling for
   Renyi and approximate differential privacy. SODA 2023, arXiv:2208.04591 (see its errata).
"""

from __future__ import annotations

import math

import numpy as np

from fedray.errors import ConfigError

__all__ = [
    "closed_form_shuffled_epsilon",
    "clones_hockey_stick_delta",
    "numerical_shuffled_epsilon",
    "shuffled_epsilon_delta",
]


def _check_common(eps0: float, n: int, delta: float | None = None) -> None:
    if not (math.isfinite(eps0) and eps0 >= 0):
        raise ConfigError("eps0", eps0, "a finite number >= 0")
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise ConfigError("n", n, "an integer >= 1 (the number of shuffled reports)")
    if delta is not None and not 0 < delta < 1:
        raise ConfigError("delta", delta, "in (0, 1)")


def _closed_form_applies(eps0: float, n: int, delta: float) -> bool:
    """FMT21 Theorem 3.1's condition eps0 <= ln(n / (16 ln(2/delta)))."""
    return eps0 <= math.log(n / (16.0 * math.log(2.0 / delta)))


def _closed_form_value(eps0: float, n: int, delta: float) -> float:
    """The right-hand side of FMT21 Theorem 3.1 (no range check)."""
    e0 = math.exp(eps0)
    # ln(1 + (e^eps0 - 1)/(e^eps0 + 1) * (8 sqrt(e^eps0 ln(4/delta)) / sqrt(n) + 8 e^eps0 / n))
    inner = 8.0 * math.sqrt(e0 * math.log(4.0 / delta) / n) + 8.0 * e0 / n
    return math.log1p(math.tanh(eps0 / 2.0) * inner)  # tanh(eps0/2) = (e^eps0 - 1)/(e^eps0 + 1)


def closed_form_shuffled_epsilon(eps0: float, n: int, delta: float) -> float:
    """eps of n shuffled eps0-DP reports at ``delta``, closed form of FMT21 Theorem 3.1.

    Trust model: the shuffler only permutes and drops sender identity; nobody else is trusted.
    Neighbouring relation: replace one user's input (REPLACE_ONE).
    Guarantee: the shuffled reports are (eps, delta)-DP with

        eps = ln(1 + (e^eps0 - 1)/(e^eps0 + 1) * (8 sqrt(e^eps0 ln(4/delta)) / sqrt(n) + 8 e^eps0 / n)),

    valid when eps0 <= ln(n / (16 ln(2/delta))) (FMT21 Theorem 3.1).
    Outside that range, and wherever the formula exceeds eps0, this returns eps0: shuffling is a
    post-processing of the unshuffled reports, which are already eps0-DP under REPLACE_ONE, so
    shuffling never hurts. The result is therefore ``min(eps0, formula)`` inside the range.
    Assumptions: the same eps0-DP local randomizer for every report (it may depend on earlier
    reports); all n reports are shuffled together by a uniform secret permutation.

    Parameters
    ----------
    eps0 : float
        Pure local DP parameter of each report, >= 0.
    n : int
        Number of reports shuffled together, >= 1.
    delta : float
        Target delta of the shuffled output, in (0, 1).

    Returns
    -------
    float
        eps, at most eps0.

    Raises
    ------
    ConfigError
        If a parameter is outside its range; the message names it.
    """
    _check_common(eps0, n, delta)
    if not _closed_form_applies(eps0, n, delta):
        return float(eps0)
    return float(min(eps0, _closed_form_value(eps0, n, delta)))


def _default_clone_probability(eps0: float, clone_probability: float | None) -> float:
    if clone_probability is None:
        return math.exp(-eps0)
    largest = 2.0 / (math.exp(eps0) + 1.0)
    if not 0 < clone_probability <= largest * (1 + 1e-12):
        raise ConfigError(
            "clone_probability", clone_probability, f"in (0, 2/(e^eps0 + 1)] = (0, {largest:.6g}]"
        )
    return float(clone_probability)


def clones_hockey_stick_delta(
    eps: float,
    eps0: float,
    n: int,
    *,
    clone_probability: float | None = None,
    truncation_mass: float = 0.0,
) -> float:
    """delta(eps) = D_{e^eps}(P || Q) of FMT21 Theorem 3.2's pair, computed exactly.

    The derivation (FMT21 §3, Theorem 3.2, and the numerical method of §4 / Appendix E).

    1. Decomposition. Let R be eps0-DP and x^0, x^1 the two candidate inputs of user 1. By
       the lemma of Kairouz et al. (2015) / Murtagh-Vadhan (2016, Lemma 3.2) used in FMT21 §3, there
       are distributions Q^0, Q^1 with
       R(x^0) = a Q^0 + (1 - a) Q^1 and R(x^1) = (1 - a) Q^0 + a Q^1, a = e^eps0 / (e^eps0 + 1);
       explicitly Q^0 = (e^eps0 R(x^0) - R(x^1)) / (e^eps0 - 1) and symmetrically, and
       Q^0 + Q^1 = R(x^0) + R(x^1). Every other user's R(x) is a mixture
       R(x) = (p/2) Q^0 + (p/2) Q^1 + (1 - p) LO(x) ("clones" of user 1) whenever
       R(x) >= (p/2) (R(x^0) + R(x^1)) pointwise. eps0-DP gives R(x) >= e^-eps0 max(R(x^0), R(x^1)),
       so p = e^-eps0 always works (the default).
    2. Reduction (Theorem 3.2). Given how many reports were drawn from Q^0 and from Q^1, the
       shuffled output can be simulated without knowing user 1's input (the other reports are LO
       draws of a uniformly random subset of users 2..n of the right size), so the shuffled output
       on X^0 and X^1 is a post-processing of

           P = (A + Delta, C - A + 1 - Delta),   Q = (A + 1 - Delta, C - A + Delta),

       with C ~ Bin(n - 1, p), A ~ Bin(C, 1/2), Delta ~ Bern(a). Hence
       D_{e^eps}(shuffled(X^0) || shuffled(X^1)) <= D_{e^eps}(P || Q).
    3. Exact sum. The sum of the coordinates, C + 1, is visible, so D splits over c:
       D = sum_c Pr[C = c] D_c. Given c, with U = first coordinate and b(k) = Bin(c, 1/2) pmf,
       P(u) = a b(u - 1) + (1 - a) b(u) and Q(u) = (1 - a) b(u - 1) + a b(u). The likelihood ratio
       P(u)/Q(u) increases in r = b(u-1)/b(u) = u/(c + 1 - u), so P(u) > e^eps Q(u) exactly when
       u > beta (c + 1) with beta = (e^(eps + eps0) - 1) / ((e^eps + 1)(e^eps0 - 1)). Summing the
       positive part over u >= u* = floor(beta (c + 1)) + 1 gives, in closed form,

           D_c = (e^eps0 - e^eps)/(e^eps0 + 1) * b(u* - 1) - (e^eps - 1) * Pr[A >= u*],

       evaluated in log space (binomial logpmf and logsf) so deep tails do not cancel.
    4. Symmetry. P(u) = Q(c + 1 - u), so D(Q || P) = D(P || Q): one direction suffices.

    For eps >= eps0 the ratio P/Q <= a/(1 - a) = e^eps0 gives delta = 0. For n = 1 the pair is
    randomized response: delta(eps) = (e^eps0 - e^eps)/(e^eps0 + 1).

    Parameters
    ----------
    eps : float
        The eps at which delta is evaluated, >= 0.
    eps0 : float
        Pure local DP parameter, >= 0.
    n : int
        Number of shuffled reports, >= 1.
    clone_probability : float, optional
        p. Default e^-eps0, valid for every eps0-DP randomizer. A larger p is valid only for a
        randomizer with R(x) >= (p/2)(R(x^0) + R(x^1)) for all x, x^0, x^1: binary and k-ary
        randomized response admit p = 2/(e^eps0 + 1), the largest allowed value (the "stronger
        clone" of FMT23, whose errata restrict it to such randomizers).
    truncation_mass : float
        If > 0, sum only over the central c that carry all but at most this much Bin(n - 1, p)
        mass, and add the omitted mass (each D_c <= 1): still an upper bound, much faster for
        large n. 0 sums over every c.

    Returns
    -------
    float
        delta(eps), an upper bound on the shuffled output's delta at eps.

    Raises
    ------
    ConfigError
        If a parameter is outside its range; the message names it.
    """
    _check_common(eps0, n)
    if not (math.isfinite(eps) and eps >= 0):
        raise ConfigError("eps", eps, "a finite number >= 0")
    if not 0 <= truncation_mass < 1:
        raise ConfigError("truncation_mass", truncation_mass, "in [0, 1)")
    p = _default_clone_probability(eps0, clone_probability)
    if eps >= eps0:
        return 0.0

    from scipy import special, stats     # a second of imports, for the shuffle protocols' planning only

    trials = int(n) - 1
    if truncation_mass > 0 and trials > 0:
        c_lo = int(stats.binom.ppf(truncation_mass / 2, trials, p))
        c_hi = int(stats.binom.isf(truncation_mass / 2, trials, p))
        omitted = float(stats.binom.cdf(c_lo - 1, trials, p) + stats.binom.sf(c_hi, trials, p))
    else:
        c_lo, c_hi, omitted = 0, trials, 0.0
    c = np.arange(c_lo, c_hi + 1, dtype=np.float64)
    log_weight = stats.binom.logpmf(c, trials, p)

    # beta = (e^(eps+eps0) - 1) / ((e^eps + 1)(e^eps0 - 1)); u* = floor(beta (c+1)) + 1.
    beta = math.expm1(eps + eps0) / ((math.exp(eps) + 1.0) * math.expm1(eps0))
    u_star = np.floor(beta * (c + 1.0)) + 1.0
    # log of (e^eps0 - e^eps)/(e^eps0 + 1) * b(u* - 1), with e^eps0 - e^eps = e^eps expm1(eps0 - eps)
    log_a = eps + math.log(math.expm1(eps0 - eps)) - math.log1p(math.exp(eps0))
    log_a = log_a + stats.binom.logpmf(u_star - 1.0, c, 0.5)
    # log of (e^eps - 1) * Pr[A >= u*]; Pr[A >= u*] = sf(u* - 1)
    with np.errstate(divide="ignore"):
        log_b = np.log(math.expm1(eps)) + stats.binom.logsf(u_star - 1.0, c, 0.5)
        gap = np.minimum(log_b - log_a, 0.0)  # log_b <= log_a up to rounding: D_c >= 0
        log_dc = np.where(np.isfinite(log_a), log_a + np.log(-np.expm1(gap)), -np.inf)
    terms = log_weight + log_dc
    kept = float(np.exp(special.logsumexp(terms))) if np.any(np.isfinite(terms)) else 0.0
    return float(min(1.0, kept + omitted))


def numerical_shuffled_epsilon(
    eps0: float,
    n: int,
    delta: float,
    *,
    clone_probability: float | None = None,
    tolerance: float = 1e-6,
    truncation_mass: float | None = None,
) -> float:
    """Smallest eps with delta(eps) <= ``delta`` for FMT21 Theorem 3.2's pair, by bisection.

    Trust model: the shuffler only permutes and drops sender identity; nobody else is trusted.
    Neighbouring relation: replace one user's input (REPLACE_ONE).
    Guarantee: the n shuffled reports are (eps, delta)-DP, where eps is the returned value: the
    smallest eps (to within ``tolerance``, rounded up) with D_{e^eps}(P || Q) <= delta for the pair
    (P, Q) of Theorem 3.2. The divergence is computed exactly by ``clones_hockey_stick_delta``
    (derivation there); this is the tighter numerical bound of FMT21 §4 / Appendix E, and it is
    never above ``closed_form_shuffled_epsilon`` (Theorem 3.1 bounds the same divergence) nor eps0.
    Assumptions: as for Theorem 3.1; with a non-default ``clone_probability`` the randomizer must
    admit that decomposition (see ``clones_hockey_stick_delta``).

    Parameters
    ----------
    eps0 : float
        Pure local DP parameter of each report, >= 0.
    n : int
        Number of reports shuffled together, >= 1.
    delta : float
        Target delta, in (0, 1).
    clone_probability : float, optional
        p; default e^-eps0 (valid for every eps0-DP randomizer).
    tolerance : float
        Bisection stops when the bracket is narrower than this; the upper end is returned, so
        delta(eps) <= delta holds at the returned eps and fails at eps - tolerance.
    truncation_mass : float, optional
        Passed to ``clones_hockey_stick_delta``; default ``1e-3 * delta`` (an upper bound still).

    Returns
    -------
    float
        eps in [0, eps0].

    Raises
    ------
    ConfigError
        If a parameter is outside its range; the message names it.
    """
    _check_common(eps0, n, delta)
    if not tolerance > 0:
        raise ConfigError("tolerance", tolerance, "> 0")
    mass = 1e-3 * delta if truncation_mass is None else truncation_mass

    def delta_at(eps: float) -> float:
        return clones_hockey_stick_delta(
            eps, eps0, n, clone_probability=clone_probability, truncation_mass=mass
        )

    if delta_at(0.0) <= delta:
        return 0.0
    lo, hi = 0.0, float(eps0)  # delta_at(lo) > delta >= delta_at(hi) = 0; delta(eps) is nonincreasing
    while hi - lo > tolerance:
        mid = 0.5 * (lo + hi)
        if delta_at(mid) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


def shuffled_epsilon_delta(eps0: float, delta0: float, n: int, delta: float) -> tuple[float, float]:
    """(eps, delta_total) of n shuffled (eps0, delta0)-DP reports, FMT21 Theorem 3.8.

    Trust model: the shuffler only permutes and drops sender identity; nobody else is trusted.
    Neighbouring relation: replace one user's input (REPLACE_ONE).
    Guarantee: with eps0 <= ln(n / (16 ln(2/delta))), the shuffled reports are (eps, delta_total)-DP
    with eps the closed form of Theorem 3.1 and

        delta_total = delta + (e^eps + 1)(1 + e^-eps0 / 2) n delta0.

    The proof replaces each randomizer by an eps0-DP one within total variation (1 + e^-eps0/2) delta0
    of it (FMT21 Lemma 3.7), applies Theorem 3.1, and pays (e^eps + 1) times the total variation of
    the n reports (Dwork-Roth Lemma 3.17). Outside the range, or when Theorem 3.8 would give
    eps >= eps0, this returns (eps0, delta0): the unshuffled reports are already (eps0, delta0)-DP
    under REPLACE_ONE and shuffling is post-processing.
    Assumptions: as for Theorem 3.1. Only the closed form is supported here: the numerical bound of
    Theorem 3.2 is stated for pure eps0-DP randomizers.

    Parameters
    ----------
    eps0, delta0 : float
        Local (eps0, delta0)-DP parameters; eps0 >= 0, delta0 in [0, 1).
    n : int
        Number of reports shuffled together, >= 1.
    delta : float
        The delta of Theorem 3.1's part, in (0, 1).

    Returns
    -------
    tuple of float
        (eps, delta_total).

    Raises
    ------
    ConfigError
        If a parameter is outside its range; the message names it.
    """
    _check_common(eps0, n, delta)
    if not 0 <= delta0 < 1:
        raise ConfigError("delta0", delta0, "in [0, 1)")
    if not _closed_form_applies(eps0, n, delta):
        return float(eps0), float(delta0)
    eps = _closed_form_value(eps0, n, delta)
    if eps >= eps0:
        return float(eps0), float(delta0)
    delta_total = delta + (math.exp(eps) + 1.0) * (1.0 + math.exp(-eps0) / 2.0) * n * delta0
    return float(eps), float(delta_total)
