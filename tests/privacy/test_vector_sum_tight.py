"""P_vec's tight calibration (``fedray.privacy.vector_sum_tight``): the exact profile against the
audit's numbers of issue 44, an independent brute-force route (explicit Bernoulli convolutions,
hockey-stick sums by hand), the relaxation's soundness for d > 1, the calibration's round trip,
unbiasedness, and a black-box audit that catches half the trials."""

import dataclasses
import itertools
import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution

from fedray.errors import ConfigError
from fedray.privacy import audit_epsilon
from fedray.privacy.vector_sum import aggregate_counts, analyze_counts, encode, randomize_counts, vector_sum_parameters
from fedray.privacy.vector_sum_tight import (
    axis_pair_bits, coordinate_delta, invocation_delta, invocation_epsilon, relaxed_delta, relaxed_epsilon,
    tight_vector_sum_parameters, unit_shift_count,
)


# --- brute force: no scipy, no dp-accounting -----------------------------------------------------

def noise_pmf(trials: int, p: float) -> np.ndarray:
    """Bin(trials, p) as ``trials`` explicit convolutions of Bernoulli(p)."""
    pmf = np.array([1.0])
    for _ in range(trials):
        pmf = np.convolve(pmf, [1.0 - p, p])
    return pmf


def view_pmf(x: float, scale: int, l2_bound: float, noise: np.ndarray) -> np.ndarray:
    """The pmf of one coordinate's count, over 0..g + m, for a user holding ``x`` (others fixed at 0:
    a common shift, step 2): randomized rounding of t = (x + Delta2) g / (2 Delta2), then the noise."""
    t = (x + l2_bound) * scale / (2.0 * l2_bound)
    low, frac = int(math.floor(t)), t - math.floor(t)
    rounding = np.zeros(scale + 1)
    rounding[low] += 1.0 - frac
    if frac > 0:
        rounding[low + 1] += frac
    return np.convolve(rounding, noise)


def hockey_stick(first: np.ndarray, second: np.ndarray, epsilon: float) -> float:
    """max over both orders of sum_y (P(y) - e^eps Q(y))_+, summed term by term."""
    gamma = math.exp(epsilon)
    forward = backward = 0.0
    for a, b in zip(first.ravel(), second.ravel()):
        forward += max(a - gamma * b, 0.0)
        backward += max(b - gamma * a, 0.0)
    return max(forward, backward)


# --- (a) the audit's numbers: the paper's noise is far more than its claim needs --------------------

@pytest.mark.parametrize("epsilon, delta, dim, users", [
    (1.0, 1e-3, 1, 100), pytest.param(1.0, 1e-6, 1, 1000, marks=pytest.mark.slow), (3.0, 1e-5, 1, 50)])
def test_paper_noise_spends_a_tiny_epsilon_by_the_exact_profile(epsilon, delta, dim, users):
    paper = vector_sum_parameters(epsilon, delta, dim, users, 1.0)
    exact = invocation_epsilon(delta, paper)
    print(f"(eps, delta, d, n) = {(epsilon, delta, dim, users)}: paper b = {paper.noise_bits}, exact eps {exact:.2e}")
    assert exact <= 2e-3 * epsilon          # issue 44 says <= ~1e-4 (its PLD floor); exact: 0 to 1.5e-3


@pytest.mark.slow
def test_paper_noise_at_four_coordinates_spends_a_tiny_epsilon_by_the_relaxation():
    paper = vector_sum_parameters(1.0, 1e-5, 4, 200, 1.0)
    bound = relaxed_epsilon(1e-5, 4, 200 * paper.noise_bits, paper.bit_probability, paper.scale)
    print(f"(1, 1e-5, 4, 200): unit-shift bound on eps {bound:.2e} (62 compositions x 3e-5 discretisation)")
    assert bound <= 5e-3                     # issue 44: <= 4e-4; the relaxation and its PLD floor add ~2e-3


# --- (b) an independent route -----------------------------------------------------------------------

@pytest.mark.parametrize("p", [0.5, 0.3])
def test_exact_profile_equals_the_brute_force_worst_pair_over_a_grid(p):
    users, bits, l2 = 4, 10, 1.0
    scale = math.ceil(2.0 * l2 * math.sqrt(users))            # g = 4
    noise = noise_pmf(users * bits, p)
    grid = np.linspace(-l2, l2, 13)                           # fractional and integer t
    views = {x: view_pmf(x, scale, l2, noise) for x in grid}
    for epsilon in (0.5, 1.0, 2.0):
        brute = {(a, b): hockey_stick(views[a], views[b], epsilon) for a in grid for b in grid}
        worst_pair = max(brute, key=brute.get)
        exact = coordinate_delta(epsilon, users * bits, p, scale)
        assert brute[worst_pair] == pytest.approx(exact, rel=1e-9, abs=1e-15)
        assert set(worst_pair) == {-l2, l2}                  # the endpoints: the shift g (step 4)
        assert max(brute.values()) <= exact * (1 + 1e-9)
        # every shift below g is no worse (monotone in k)
        assert all(coordinate_delta(epsilon, users * bits, p, k) <= exact for k in range(scale))


def test_pld_route_on_the_worst_pair_matches_the_exact_profile_within_its_discretisation():
    users, bits, l2, p, step = 4, 10, 1.0, 0.5, 1e-4
    scale = 4
    noise = noise_pmf(users * bits, p)
    low, high = view_pmf(-l2, scale, l2, noise), view_pmf(l2, scale, l2, noise)
    as_log = [{y: math.log(v) for y, v in enumerate(pmf) if v > 0} for pmf in (low, high)]
    pld = privacy_loss_distribution.from_two_probability_mass_functions(
        *as_log, pessimistic_estimate=True, value_discretization_interval=step, symmetric=False)
    for epsilon in (0.3, 1.0, 2.0):
        exact = coordinate_delta(epsilon, users * bits, p, scale)
        assert exact - 1e-12 <= pld.get_delta_for_epsilon(epsilon) <= coordinate_delta(
            epsilon - step, users * bits, p, scale) + 1e-12


@pytest.mark.parametrize("p", [0.5, 0.3])
def test_relaxation_pld_equals_its_own_pair_summed_by_hand(p):
    # dim = 1, g = 3: L = 3 unit pairs of Bin(4, p) (12 trials / 3 pieces); enumerate 6^3 outcomes.
    pieces, count = 4, unit_shift_count(1, 3)
    base = noise_pmf(pieces, p)
    plain, shifted = np.append(base, 0.0), np.insert(base, 0, 0.0)       # Bin and Bin + 1 on 0..5
    for epsilon in (0.2, 1.0):
        by_hand = 0.0
        for ups in range(count + 1):                         # every split into shifts up and down
            first = [shifted if i < ups else plain for i in range(count)]
            second = [plain if i < ups else shifted for i in range(count)]
            joint = [np.array([math.prod(f[y] for f, y in zip(side, ys)) for ys in itertools.product(range(6), repeat=count)])
                     for side in (first, second)]
            by_hand = max(by_hand, hockey_stick(*joint, epsilon))
        bound = relaxed_delta(epsilon, 1, 12, p, 3)
        looser = relaxed_delta(epsilon - count * 3e-5, 1, 12, p, 3, discretization=1e-7)
        assert by_hand - 1e-12 <= bound
        assert bound <= max(looser, by_hand) + 1e-3 * by_hand + 1e-12


def test_the_unit_shift_count_covers_encodings_that_differ_by_more_than_sqrt_d_g():
    """Catches an l1 bound on the shift that forgets the rounding's +d (step 3): neighbours
    x = (1/2, 1/2, 1/2, 1/2), x' = -x at Delta2 = 1 and g = 10 have t = 7.5 and t' = 2.5 per
    coordinate, so the encodings can be 8 and 2: an l1 shift of 24 = floor(sqrt(4) 10) + 4 > 20."""
    params = vector_sum_parameters(1.0, 1e-5, 4, 25, 1.0)          # g = ceil(2 sqrt(25)) = 10
    assert params.scale == 10
    x = np.full((4000, 4), 0.5)
    rng = np.random.default_rng(0)
    shifts = np.abs(encode(x, params, rng) - encode(-x, params, rng)).sum(axis=1)   # 24 with chance 1/256
    assert shifts.max() == 24
    assert unit_shift_count(4, 10) == 24


def test_relaxation_bounds_brute_force_pairs_in_two_dimensions():
    users, bits, l2, p = 4, 6, 1.0, 0.5
    scale = math.ceil(max(2.0 * l2 * math.sqrt(users), math.sqrt(2), 4))   # g = 4
    noise = noise_pmf(users * bits, p)
    rng = np.random.default_rng(0)
    pairs = [((l2, 0.0), (-l2, 0.0)), ((l2 / math.sqrt(2),) * 2, (-l2 / math.sqrt(2),) * 2),
             ((0.3, -0.5), (-0.6, 0.7))]
    for _ in range(6):
        u, v = rng.normal(size=2), rng.normal(size=2)
        pairs.append((tuple(l2 * u / np.linalg.norm(u)), tuple(l2 * v / np.linalg.norm(v))))
    for epsilon in (0.5, 1.5):
        bound = relaxed_delta(epsilon, 2, users * bits, p, scale)
        for x, y in pairs:
            views = [np.outer(view_pmf(a[0], scale, l2, noise), view_pmf(a[1], scale, l2, noise)) for a in (x, y)]
            assert hockey_stick(*views, epsilon) <= bound


@pytest.mark.slow
def test_relaxation_at_one_coordinate_is_never_below_the_exact_profile():
    for trials, scale in [(2000, 10), (20000, 20)]:
        for epsilon in (0.5, 1.0):
            exact = coordinate_delta(epsilon, trials, 0.5, scale)
            relaxed = relaxed_delta(epsilon, 1, trials, 0.5, scale)
            assert exact <= relaxed <= 1.1 * exact + 1e-9      # nearly tight in the Gaussian limit


# --- the calibration ---------------------------------------------------------------------------------

@pytest.mark.parametrize("epsilon, delta, users", [(1.0, 1e-3, 100), (3.0, 1e-5, 50), (0.5, 1e-6, 400)])
def test_one_coordinate_calibration_is_the_fewest_trials_meeting_the_target(epsilon, delta, users):
    tight = tight_vector_sum_parameters(epsilon, delta, 1, users, 1.0)
    fewer = dataclasses.replace(tight, noise_bits=tight.noise_bits - 1)
    assert tight.bit_probability == 0.5 and tight.route == "exact"
    assert invocation_delta(epsilon, tight) == tight.certified_delta <= delta
    assert invocation_delta(epsilon, fewer) > delta
    assert invocation_epsilon(delta, tight) <= epsilon
    assert axis_pair_bits(epsilon, delta, users, tight.scale) == tight.noise_bits      # d = 1: the worst pair


def test_hand_number_one_coordinate():
    # (1, 1e-3, d = 1, n = 100): g = ceil(2 sqrt(100)) = 20; b = 107 trials per user, so the
    # summed noise Bin(10700, 1/2) has std sqrt(10700) / 2 = 51.7 and the shift g = 20 is
    # mu = 0.387 noise stds: the Gaussian with mu = 0.387 has delta(1) = 1.03e-3 (close to the target).
    tight = tight_vector_sum_parameters(1.0, 1e-3, 1, 100, 1.0)
    assert (tight.scale, tight.noise_bits) == (20, 107)


@pytest.mark.slow
def test_several_coordinates_calibration_meets_the_target_by_the_relaxation():
    tight = tight_vector_sum_parameters(1.0, 1e-5, 4, 200, 1.0)
    assert tight.route == "unit_shifts" and tight.certified_delta <= 1e-5
    assert relaxed_delta(1.0, 4, 200 * tight.noise_bits, 0.5, tight.scale) <= 1e-5
    assert relaxed_delta(1.0, 4, 200 * (tight.noise_bits - 1), 0.5, tight.scale) > 1e-5
    # The pair +-Delta2 e_1 alone needs 235 trials: the relaxation costs sqrt(502 / 235) = 1.46 in noise std.
    floor = axis_pair_bits(1.0, 1e-5, 200, tight.scale)
    assert floor < tight.noise_bits < 2.5 * floor


def test_tight_estimate_is_unbiased():
    # The analyzer subtracts p b n of the new b (the paper's noise_mean formula would be off by ~1e7).
    users, dim = 8, 3
    tight = tight_vector_sum_parameters(2.0, 1e-4, 1, users, 1.0)
    tight = dataclasses.replace(tight, dim=dim)          # the noise mean does not depend on d
    assert tight.noise_mean == 0.5 * tight.noise_bits * users
    x = np.random.default_rng(3).uniform(-0.5, 0.5, size=(users, dim))
    draws = 40_000
    estimates = analyze_counts(aggregate_counts(np.broadcast_to(x, (draws, users, dim)), tight,
                                                np.random.default_rng(4)), tight)
    error = estimates.mean(axis=0) - x.sum(axis=0)
    standard_error = math.sqrt(tight.exact_mse(x) / dim / draws)
    assert np.all(np.abs(error) < 4.5 * standard_error)
    assert tight.exact_mse(x) <= tight.mse_bound()


def test_tight_parameters_refuse_bad_values_and_the_paper_lemma():
    with pytest.raises(ConfigError, match="delta"):
        tight_vector_sum_parameters(1.0, 1.0, 1, 10, 1.0)
    with pytest.raises(ConfigError, match="dim"):
        tight_vector_sum_parameters(1.0, 1e-3, 0, 10, 1.0)
    tight = tight_vector_sum_parameters(1.0, 1e-3, 1, 10, 1.0)
    with pytest.raises(ConfigError, match="composed_epsilon"):
        tight.composed_epsilon(np.zeros(1))


# --- (c) a black-box audit -------------------------------------------------------------------------

def worst_pair_sampler(params, users: int, rounds: int = 1):
    """The audit's sampler: the analyzer's estimates on D (user 0 at +Delta2, the rest at 0) or D'
    (user 0 at -Delta2), the worst pair (encodings g and 0), summed over ``rounds`` invocations."""
    def sample(flag, num_draws, rng):
        x = np.zeros((num_draws, users, 1))
        x[:, 0, 0] = 1.0 if flag == 0 else -1.0
        return sum(analyze_counts(randomize_counts(x, params, rng).sum(axis=1), params) for _ in range(rounds))
    return sample


def test_audit_of_the_worst_pair_stays_below_the_claim_and_half_the_trials_is_caught():
    epsilon, delta, users = 2.0, 1e-3, 4
    tight = tight_vector_sum_parameters(epsilon, delta, 1, users, 1.0)
    half = dataclasses.replace(tight, noise_bits=tight.noise_bits // 2)

    honest = audit_epsilon(worst_pair_sampler(tight, users), 200_000, np.random.default_rng(0), delta=delta)
    broken = audit_epsilon(worst_pair_sampler(half, users), 200_000, np.random.default_rng(1), delta=delta)
    print(f"tight b = {tight.noise_bits}: audit {honest.eps_lower:.3f} <= {epsilon}; "
          f"b = {half.noise_bits}: audit {broken.eps_lower:.3f} (its exact eps {invocation_epsilon(delta, half):.2f})")
    assert honest.eps_lower <= epsilon
    assert broken.eps_lower > epsilon
