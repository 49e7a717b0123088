"""P_vec over T rounds calibrated by the binomial's moments (``fedray.privacy.vector_sum_rounds``):
the moments against an independent sum over the whole support, the composed bound against brute-force
hockey-stick sums over T-round views (one and two coordinates, pairs that change between rounds),
the Gaussian limit, the calibration's round trip, and a black-box audit that catches half the trials."""

import dataclasses
import itertools
import math

import numpy as np
import pytest
from scipy import stats

from fedray.errors import ConfigError
from fedray.privacy import audit_epsilon
from fedray.privacy.vector_sum_rounds import (
    ORDERS, BinomialRoundsComposition, pairs_delta, pairs_epsilon, rounds_delta, rounds_epsilon,
    tight_rounds_parameters, unit_pair_log_moments,
)
from fedray.privacy.vector_sum_tight import unit_shift_count
from tests.privacy.test_vector_sum_tight import noise_pmf, view_pmf, worst_pair_sampler


# --- (a) the moments: an independent sum over the whole support ---------------------------------

@pytest.mark.parametrize("pieces", [7, 300, 100_000])
def test_log_moments_bound_the_full_support_sum_and_are_tight(pieces):
    # ln P(y) - ln P(c), c = floor(M / 2), summed outward from the mode from l(j) = ln(P(j) / P(j - 1)) =
    # ln((M - j + 1) / j) (small partial sums: no drift), normalised over 0..M; no scipy, every y in 1..M.
    ys = np.arange(0, pieces + 1, dtype=np.float64)
    loss = np.zeros(pieces + 1)
    loss[1:] = np.log(pieces - ys[1:] + 1.0) - np.log(ys[1:])
    c = pieces // 2
    rel = np.zeros(pieces + 1)
    rel[c + 1:] = np.cumsum(loss[c + 1:])
    rel[:c] = -np.cumsum(loss[1:c + 1][::-1])[::-1]
    top = rel.max()
    log_pmf = (rel - top - math.log(math.fsum(np.exp(rel - top))))[1:]
    loss = loss[1:]
    ours = unit_pair_log_moments(pieces)
    for i in range(0, len(ORDERS), 7):
        lam = ORDERS[i]
        exponent = log_pmf + lam * loss
        top = exponent.max()
        exact = top + math.log(math.fsum(np.exp(exponent - top)))
        assert exact - 1e-9 * abs(exact) - 1e-13 <= ours[i]                  # sound at every order
        if pieces <= 400 or lam <= pieces / 100:      # the window holds the tilted mass: tight (else the tail bound rules)
            assert ours[i] <= exact + 1e-9 * abs(exact) + 3e-11


def test_log_moments_in_the_gaussian_limit():
    # Bin(M, 1/2) vs its shift by one is a Gaussian shift of mu = 2 / sqrt(M): ln A(lambda) ~ lambda (lambda + 1) mu^2 / 2.
    pieces = 10**6
    ours = unit_pair_log_moments(pieces)
    for lam, value in zip(ORDERS, ours):
        if 0.1 <= lam <= 100:
            assert value == pytest.approx(lam * (lam + 1) * 2.0 / pieces, rel=1e-2)


def test_many_unit_pairs_cost_about_what_a_gaussian_would():
    # K = 1e6 unit pairs of Bin(1e8, 1/2): mu-GDP with mu = 2 sqrt(K / M) = 0.2 has eps(1e-6) = 0.85
    # (the Gaussian's exact profile); the moment bound pays the conversion's ~6% on top.
    mu = 0.2

    def gaussian_delta(eps):
        return stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)

    ours = pairs_epsilon(1e-6, 10**6, 10**8)
    print(f"K = 1e6, M = 1e8: moment bound eps {ours:.4f}, Gaussian {mu}: delta at it {gaussian_delta(ours):.2e}")
    assert gaussian_delta(ours) <= 1e-6            # never below the Gaussian limit's epsilon
    assert gaussian_delta(0.95 * ours) > 1e-6 / 3   # and within a few percent of it
    assert pairs_delta(ours, 10**6, 10**8) <= 1e-6 * (1 + 1e-9)


# --- (b) brute force: T-round views summed term by term --------------------------------------------

def product_pmf(pmfs):
    out = np.array([1.0])
    for pmf in pmfs:
        out = np.multiply.outer(out, pmf).ravel()
    return out


def hockey(first: np.ndarray, second: np.ndarray, epsilon: float) -> float:
    """max over both orders of sum_y (P(y) - e^eps Q(y))_+ over every outcome of the product space."""
    gamma = math.exp(epsilon)
    return float(max(np.maximum(first - gamma * second, 0.0).sum(), np.maximum(second - gamma * first, 0.0).sum()))


@pytest.mark.slow
def test_bound_covers_the_exact_t_round_view_at_one_coordinate():
    users, bits, l2, rounds = 4, 25, 1.0, 3                    # M = 100 / 4 = 25 trials a piece, K = 12
    scale = 4                                                  # ceil(max(2 sqrt(4), 1, 4))
    noise = noise_pmf(users * bits, 0.5)
    for x, y in [(l2, -l2), (-l2, l2), (0.3, -0.9)]:
        first = product_pmf([view_pmf(x, scale, l2, noise)] * rounds)
        second = product_pmf([view_pmf(y, scale, l2, noise)] * rounds)
        for epsilon in (0.5, 2.0, 4.0):
            exact = hockey(first, second, epsilon)
            bound = rounds_delta(epsilon, 1, users * bits, scale, rounds)
            assert exact <= bound
            assert (x, y) != (l2, -l2) or bound < 10 * exact + 1e-6        # not vacuous on the worst pair
    # the worst pair's exact epsilon and the bound's, at a delta both resolve
    first = product_pmf([view_pmf(l2, scale, l2, noise)] * rounds)
    second = product_pmf([view_pmf(-l2, scale, l2, noise)] * rounds)
    bound_eps = rounds_epsilon(1e-3, 1, users * bits, scale, rounds)
    exact_eps = next(e for e in np.arange(0.0, 10.0, 0.01) if hockey(first, second, e) <= 1e-3)
    print(f"T = 3, n b = 100, g = 4: exact eps(1e-3) = {exact_eps:.2f}, bound {bound_eps:.2f}")
    assert exact_eps - 0.01 <= bound_eps <= 1.5 * exact_eps


def test_bound_covers_pairs_that_change_between_rounds_in_two_dimensions():
    users, bits, l2, rounds = 4, 10, 1.0, 2                    # M = 10, L = 7 unit shifts a round, K = 14
    scale = 4
    noise = noise_pmf(users * bits, 0.5)
    rng = np.random.default_rng(5)
    unit = [np.array(v) / np.linalg.norm(v) for v in rng.normal(size=(4, 2))]
    axis, diagonal = np.array([l2, 0.0]), np.full(2, l2 / math.sqrt(2))
    choices = [(axis, -axis), (diagonal, -diagonal), (l2 * unit[0], l2 * unit[1]), (l2 * unit[2], -l2 * unit[3])]

    def view(x):
        return np.multiply.outer(view_pmf(x[0], scale, l2, noise), view_pmf(x[1], scale, l2, noise)).ravel()

    for plan in itertools.product(range(len(choices)), repeat=rounds):    # a different pair each round
        first = product_pmf([view(choices[i][0]) for i in plan])
        second = product_pmf([view(choices[i][1]) for i in plan])
        for epsilon in (2.0, 6.0):
            bound = rounds_delta(epsilon, 2, users * bits, scale, rounds)
            assert hockey(first, second, epsilon) <= bound < 0.8            # 0.77 and 0.16: not vacuous


def test_composition_identities():
    # K unit pairs is all the bound reads: T rounds of L pairs equal one round of L T pairs.
    dim, trials, scale = 10, 10**7, 127
    pairs = unit_shift_count(dim, scale)
    assert rounds_delta(1.0, dim, trials, scale, 20) == pairs_delta(1.0, 20 * pairs, trials // scale)
    assert rounds_epsilon(1e-6, dim, trials, scale, 20) > rounds_epsilon(1e-6, dim, trials, scale, 10)
    assert rounds_epsilon(1e-6, dim, 2 * trials, scale, 20) < rounds_epsilon(1e-6, dim, trials, scale, 20)


# --- (c) the calibration -----------------------------------------------------------------------------

X2_SETTINGS = [pytest.param(1.0, 1e-6, 10, 1000, 188, marks=pytest.mark.slow), (4.0, 1e-6, 10, 1000, 1000)]


@pytest.mark.parametrize("epsilon, delta, dim, users, rounds", X2_SETTINGS)
def test_calibration_round_trip_and_fewest_bits(epsilon, delta, dim, users, rounds):
    tight = tight_rounds_parameters(epsilon, delta, dim, users, 2.0, rounds)
    assert tight.route == "binomial_moments" and tight.bit_probability == 0.5
    assert tight.certified_delta <= delta
    assert rounds_delta(epsilon, dim, users * tight.noise_bits, tight.scale, rounds) <= delta
    assert tight.rounds_epsilon(rounds) <= epsilon
    fewer = math.floor(tight.noise_bits * (1 - 2e-3))        # b is the fewest to a relative 1e-3
    assert rounds_delta(epsilon, dim, users * fewer, tight.scale, rounds) > delta
    rule = BinomialRoundsComposition(tight)
    spent = rule.epsilons(np.array([[0, rounds // 2, rounds]]))
    assert spent[0, 0] == 0.0 and spent[0, 1] < spent[0, 2] <= epsilon
    assert rule.deltas(np.array([0, rounds])).tolist() == [0.0, delta]


@pytest.mark.slow
def test_hand_number_x2_cell():
    # X2's P_GD cell n = 1e3, eps = 1, delta = 1e-6, d = 10, L = 2: T = 188 rounds, g = ceil(2 * 2 sqrt(1000))
    # = 127, L = floor(sqrt(10) 127) + 10 = 411 unit shifts a round, K = 77,268 pairs. The Gaussian
    # limit needs mu = 2 sqrt(K / M) <= ~0.2 (eps = 1 at 1e-6), M >= 4 K / 0.04 ~ 7.7e6 trials a piece,
    # b >= M g / n ~ 9.8e5; the moment bound certifies b = 808,448 (M = 6.37e6, mu = 0.22).
    tight = tight_rounds_parameters(1.0, 1e-6, 10, 1000, 2.0, 188)
    assert tight.scale == 127 and unit_shift_count(10, 127) == 411
    assert tight.noise_bits == 808_448


def test_tight_rounds_refuse_bad_values():
    with pytest.raises(ConfigError, match="num_rounds"):
        tight_rounds_parameters(1.0, 1e-6, 1, 10, 1.0, 0)
    with pytest.raises(ConfigError, match="delta"):
        tight_rounds_parameters(1.0, 1.5, 1, 10, 1.0, 3)
    with pytest.raises(ConfigError, match="pieces"):
        unit_pair_log_moments(0)


# --- (d) a black-box audit of the T-round view --------------------------------------------------------

def test_audit_of_the_rounds_stays_below_the_claim_and_half_the_trials_is_caught():
    epsilon, delta, users, rounds = 2.0, 1e-3, 4, 4
    tight = tight_rounds_parameters(epsilon, delta, 1, users, 1.0, rounds)
    half = dataclasses.replace(tight, noise_bits=tight.noise_bits // 2)

    # the worst pair in every round, the rounds' estimates summed (the shift's sufficient statistic)
    honest = audit_epsilon(worst_pair_sampler(tight, users, rounds), 200_000, np.random.default_rng(0), delta=delta)
    broken = audit_epsilon(worst_pair_sampler(half, users, rounds), 200_000, np.random.default_rng(1), delta=delta)
    print(f"T = {rounds}, tight b = {tight.noise_bits}: audit {honest.eps_lower:.3f} <= {epsilon}; "
          f"b = {half.noise_bits}: audit {broken.eps_lower:.3f}")
    assert honest.eps_lower <= epsilon
    assert broken.eps_lower > epsilon
