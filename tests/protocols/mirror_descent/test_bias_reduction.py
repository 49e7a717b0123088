"""Alg. 2's truncated geometric levels and MLMC estimator (seed-001 §7 test 6)."""

from __future__ import annotations

import numpy as np
import pytest

from fedray.protocols.mirror_descent.bias_reduction import (
    combine, draw_levels, expected_cost, level_points, level_probabilities, normaliser,
)


def test_levels_are_a_distribution_with_the_golden_moments():
    assert level_probabilities(6).sum() == pytest.approx(1.0, abs=1e-15)
    assert normaliser(6) == 1.984375 and expected_cost(6) == pytest.approx(3.5276, abs=5e-5)
    rng = np.random.default_rng(0)
    levels = draw_levels(rng.random(400_000), 6)
    assert abs(np.mean(2.0**levels) / expected_cost(6) - 1) < 0.01
    counts = np.bincount(levels, minlength=7) / levels.size
    np.testing.assert_allclose(counts, level_probabilities(6), atol=5 * np.sqrt(0.5 / levels.size))


def _mlmc(x: np.ndarray, gradient, levels: int, reps: int, rng) -> np.ndarray:
    """reps MLMC estimates of the gradient of F at vertex-sampled points of x."""
    out = []
    for level in draw_levels(rng.random(reps), levels):
        vertices = rng.choice(x.size, size=2 ** (level + 1), p=x)
        points = level_points(vertices, int(level), x.size)
        out.append(combine(np.stack([gradient(p) for p in points]), int(level), levels))
    return np.array(out)


@pytest.mark.slow
def test_mlmc_matches_the_bias_of_2_to_the_m_plus_1_draws_on_a_cubic():
    # F(u) = sum_i c_i u_i^3: the gradient at the mean of m draws has mean 3 c (x^2 + x (1 - x) / m).
    rng = np.random.default_rng(1)
    x, c, levels = rng.dirichlet(np.ones(5)), rng.normal(size=5), 4
    estimates = _mlmc(x, lambda u: 3 * c * u**2, levels, 60_000, rng)
    target = 3 * c * (x**2 + x * (1 - x) / 2 ** (levels + 1))
    se = estimates.std(axis=0) / np.sqrt(len(estimates))
    assert np.all(np.abs(estimates.mean(axis=0) - target) <= 5 * se)
    plain = 3 * c * (x**2 + x * (1 - x))                 # one draw: 16x the bias of 2^{M+1} = 32 draws
    assert np.all(np.abs(plain - 3 * c * x**2) > 8 * np.abs(target - 3 * c * x**2))


def test_mlmc_is_unbiased_for_a_quadratic():
    rng = np.random.default_rng(2)
    a = rng.normal(size=(4, 4))
    h, x = a + a.T, rng.dirichlet(np.ones(4))
    estimates = _mlmc(x, lambda u: h @ u, 5, 20_000, rng)
    se = estimates.std(axis=0) / np.sqrt(len(estimates))
    assert np.all(np.abs(estimates.mean(axis=0) - h @ x) <= 5 * se)


def test_level_points_are_nested_means():
    vertices = np.array([2, 0, 2, 1])
    points = level_points(vertices, 1, 3)
    np.testing.assert_allclose(points, [[0.25, 0.25, 0.5], [0.5, 0.0, 0.5], [0.0, 0.0, 1.0]])
    with pytest.raises(ValueError, match="takes 8 draws"):
        level_points(vertices, 2, 3)
