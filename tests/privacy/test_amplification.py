"""Amplification by shuffling (FMT21) pinned to hand numbers, brute force and randomized response."""

import math

import numpy as np
import pytest
from scipy import stats

from fedray.errors import ConfigError
from fedray.privacy.amplification import (
    closed_form_shuffled_epsilon,
    clones_hockey_stick_delta,
    numerical_shuffled_epsilon,
    shuffled_epsilon_delta,
)

GRID_EPS0 = [0.5, 1.0, 2.0, 4.0]
GRID_N = [1_000, 10_000, 100_000, 1_000_000]
DELTA = 1e-6


def _brute_force_pair(eps0: float, n: int, p: float) -> tuple[np.ndarray, np.ndarray]:
    """P and Q of FMT21 Theorem 3.2 on the (first, second) count grid, by enumerating C, A, Delta."""
    a = math.exp(eps0) / (math.exp(eps0) + 1.0)
    big_p = np.zeros((n + 1, n + 1))
    big_q = np.zeros((n + 1, n + 1))
    for c in range(n):
        w_c = stats.binom.pmf(c, n - 1, p)
        for k in range(c + 1):
            w = w_c * stats.binom.pmf(k, c, 0.5)
            for first_is_x0, w_delta in ((1, a), (0, 1.0 - a)):
                # P = (A + Delta, C - A + 1 - Delta); Q = (A + 1 - Delta, C - A + Delta)
                big_p[k + first_is_x0, c - k + 1 - first_is_x0] += w * w_delta
                big_q[k + 1 - first_is_x0, c - k + first_is_x0] += w * w_delta
    return big_p, big_q


def _hockey_stick(p: np.ndarray, q: np.ndarray, eps: float) -> float:
    return float(np.maximum(p - math.exp(eps) * q, 0.0).sum())


def test_closed_form_hand_number():
    # eps0 = 1, n = 10_000, delta = 1e-6; condition ln(1e4 / (16 ln 2e6)) = ln(1e4 / 232.14) = 3.763 >= 1.
    # (e - 1)/(e + 1) = 0.4621172;  ln(4/delta) = ln(4e6) = 15.2018049;  e * 15.2018049 = 41.3227901
    # 8 sqrt(41.3227901) / sqrt(1e4) = 8 * 6.4282805 / 100 = 0.5142624;  8 e / 1e4 = 0.0021746
    # eps = ln(1 + 0.4621172 * (0.5142624 + 0.0021746)) = ln(1 + 0.2386544) = ln(1.2386544) = 0.2140257
    assert closed_form_shuffled_epsilon(1.0, 10_000, 1e-6) == pytest.approx(0.2140257, abs=1e-7)


@pytest.mark.parametrize(
    "eps0,n,delta", [(3.0, 1_000, 1e-6), (1.0, 200, 1e-6), (8.0, 100_000, 1e-8), (0.3, 50, 1e-3)]
)
def test_closed_form_is_eps0_where_its_condition_fails(eps0, n, delta):
    assert eps0 > math.log(n / (16 * math.log(2 / delta)))
    assert closed_form_shuffled_epsilon(eps0, n, delta) == eps0


@pytest.mark.parametrize("eps0", GRID_EPS0)
@pytest.mark.parametrize("n", GRID_N)
def test_numerical_is_at_most_closed_form_and_eps0(eps0, n):
    numerical = numerical_shuffled_epsilon(eps0, n, DELTA)
    assert numerical <= closed_form_shuffled_epsilon(eps0, n, DELTA)
    assert numerical <= eps0


@pytest.mark.parametrize("bound", [closed_form_shuffled_epsilon, numerical_shuffled_epsilon])
def test_bounds_decrease_in_n_and_increase_in_eps0(bound):
    table = np.array([[bound(eps0, n, DELTA) for n in GRID_N] for eps0 in GRID_EPS0])
    assert np.all(np.diff(table, axis=1) <= 0), table  # more users, more privacy
    assert np.all(np.diff(table, axis=0) >= 0), table  # weaker local privacy, weaker shuffled privacy
    assert table[-1, -1] < table[-1, 0]  # and the effect is real, not flat


def test_numerical_returns_the_smallest_eps_meeting_delta():
    eps0, n, tolerance = 2.0, 50_000, 1e-6
    mass = 1e-3 * DELTA  # the truncation the search uses by default
    eps = numerical_shuffled_epsilon(eps0, n, DELTA, tolerance=tolerance)
    assert clones_hockey_stick_delta(eps, eps0, n, truncation_mass=mass) <= DELTA
    assert clones_hockey_stick_delta(eps - 2 * tolerance, eps0, n, truncation_mass=mass) > DELTA
    # the exact (untruncated) delta is below the truncated upper bound
    assert clones_hockey_stick_delta(eps, eps0, n) <= DELTA


@pytest.mark.parametrize("eps0", [0.5, 1.0, 3.0])
def test_one_user_is_randomized_response(eps0):
    # n = 1: no clones, P = (Delta, 1 - Delta) vs Q = (1 - Delta, Delta) is eps0-randomized response,
    # whose hockey-stick divergence is (e^eps0 - e^eps)/(e^eps0 + 1) for eps < eps0.
    for eps in [0.0, 0.25 * eps0, 0.9 * eps0]:
        expected = (math.exp(eps0) - math.exp(eps)) / (math.exp(eps0) + 1)
        assert clones_hockey_stick_delta(eps, eps0, 1) == pytest.approx(expected, rel=1e-12)
    assert clones_hockey_stick_delta(eps0, eps0, 1) == 0.0
    # hence the smallest eps at delta solves e^eps = e^eps0 - delta (e^eps0 + 1)
    exact = math.log(math.exp(eps0) - DELTA * (math.exp(eps0) + 1))
    assert numerical_shuffled_epsilon(eps0, 1, DELTA, tolerance=1e-9) == pytest.approx(exact, abs=1e-8)


@pytest.mark.parametrize("eps0,n", [(1.0, 2), (1.5, 25), (3.0, 40)])
def test_closed_form_divergence_matches_brute_force_in_both_directions(eps0, n):
    p = math.exp(-eps0)
    big_p, big_q = _brute_force_pair(eps0, n, p)
    for eps in [0.0, 0.1, 0.4, 0.8 * eps0]:
        fast = clones_hockey_stick_delta(eps, eps0, n)
        assert fast == pytest.approx(_hockey_stick(big_p, big_q, eps), rel=1e-9, abs=1e-15)
        assert fast == pytest.approx(_hockey_stick(big_q, big_p, eps), rel=1e-9, abs=1e-15)


def test_truncation_is_an_upper_bound_close_to_the_exact_sum():
    exact = clones_hockey_stick_delta(0.3, 2.0, 20_000)
    truncated = clones_hockey_stick_delta(0.3, 2.0, 20_000, truncation_mass=1e-9)
    assert exact <= truncated <= exact + 1e-9


@pytest.mark.parametrize("eps0,n", [(1.0, 100), (2.0, 400), (3.0, 1_000)])
def test_bound_covers_exactly_shuffled_binary_randomized_response(eps0, n):
    # Real mechanism: n users run eps0 binary randomized response; users 2..n hold 0, user 1 holds
    # 0 or 1.
    # The shuffled output is the number of 1s: Bin(n - 1, 1/(e^eps0 + 1)) plus user 1's report.
    flip = 1 / (math.exp(eps0) + 1)
    others = stats.binom.pmf(np.arange(n), n - 1, flip)
    ones_x0 = np.convolve(others, [1 - flip, flip])
    ones_x1 = np.convolve(others, [flip, 1 - flip])
    stronger = 2 / (math.exp(eps0) + 1)  # randomized response admits the larger clone probability
    for eps in [0.1, 0.3, 0.6]:
        exact = max(_hockey_stick(ones_x0, ones_x1, eps), _hockey_stick(ones_x1, ones_x0, eps))
        assert exact <= clones_hockey_stick_delta(eps, eps0, n, clone_probability=stronger) * (1 + 1e-9)
        assert exact <= clones_hockey_stick_delta(eps, eps0, n) * (1 + 1e-9)
    with_stronger_clones = numerical_shuffled_epsilon(eps0, n, DELTA, clone_probability=stronger)
    assert with_stronger_clones <= numerical_shuffled_epsilon(eps0, n, DELTA)


def test_numerical_lies_in_the_range_published_with_the_paper():
    # The paper's companion code (apple/ml-shuffling-amplification, README) brackets the numerical
    # eps for n = 100_000, eps0 = 4, delta = 1e-6 between 0.1675 (lower) and 0.1728 (upper).
    assert 0.1675 <= numerical_shuffled_epsilon(4.0, 100_000, 1e-6) <= 0.1728


def test_approximate_dp_adds_the_theorem_3_8_delta():
    eps0, delta0, n, delta = 1.0, 1e-10, 10_000, 1e-6
    eps, delta_total = shuffled_epsilon_delta(eps0, delta0, n, delta)
    assert eps == closed_form_shuffled_epsilon(eps0, n, delta)
    # delta + (e^eps + 1)(1 + e^-1 / 2) n delta0 = 1e-6 + (1.2386544 + 1)(1.1839397)(1e4)(1e-10)
    #                                             = 1e-6 + 2.6506 * 1e-6 = 3.6506e-6
    assert delta_total == pytest.approx(3.6506e-6, rel=1e-4)


def test_approximate_dp_outside_the_range_keeps_the_local_guarantee():
    assert shuffled_epsilon_delta(3.0, 1e-8, 1_000, 1e-6) == (3.0, 1e-8)


def test_pure_dp_is_approximate_dp_with_delta0_zero():
    expected = (closed_form_shuffled_epsilon(1.0, 10_000, 1e-6), 1e-6)
    assert shuffled_epsilon_delta(1.0, 0.0, 10_000, 1e-6) == expected


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: closed_form_shuffled_epsilon(-1.0, 10, 1e-6), "eps0"),
        (lambda: closed_form_shuffled_epsilon(1.0, 0, 1e-6), "n"),
        (lambda: closed_form_shuffled_epsilon(1.0, 10, 1.5), "delta"),
        (lambda: numerical_shuffled_epsilon(1.0, 10, 1e-6, clone_probability=0.9), "clone_probability"),
        (lambda: numerical_shuffled_epsilon(1.0, 10, 1e-6, tolerance=0.0), "tolerance"),
        (lambda: shuffled_epsilon_delta(1.0, 1.0, 10, 1e-6), "delta0"),
        (lambda: clones_hockey_stick_delta(-0.1, 1.0, 10), "eps"),
    ],
)
def test_errors_name_the_value(call, name):
    with pytest.raises(ConfigError, match=f"^{name} must be"):
        call()


def test_no_local_privacy_loss_means_no_shuffled_loss():
    assert numerical_shuffled_epsilon(0.0, 100, DELTA) == 0.0
    assert closed_form_shuffled_epsilon(0.0, 100_000, DELTA) == 0.0
