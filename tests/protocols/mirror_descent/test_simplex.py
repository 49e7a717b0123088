"""Vertex sampling on the simplex (seed-001 §7 tests 1-4): the sampler draws exactly P_x, the score
form equals the multiplicative update, and Maurey estimators behave as the lemmas say."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from fedray.protocols.mirror_descent.simplex import draw_vertices, gumbel_vertices, maurey, softmax


@pytest.mark.slow
def test_vertex_draws_are_unbiased_maurey_estimators():
    rng = np.random.default_rng(1)
    x = rng.dirichlet(np.ones(50))
    draws = 200_000
    vertices = draw_vertices(x[None], rng.random((1, draws)))[0]
    mean = np.bincount(vertices, minlength=50) / draws
    assert np.max(np.abs(mean - x)) <= 5 * np.max(np.sqrt(x * (1 - x) / draws))
    # K-draw averages: the mean of 20,000 Maurey estimators with K = 10 is x, within the same band.
    k_draws = draw_vertices(x[None], rng.random((1, 200_000)))[0].reshape(20_000, 10)
    estimators = maurey(k_draws, 50)
    assert np.max(np.abs(estimators.mean(axis=0) - x)) <= 5 * np.max(np.sqrt(x * (1 - x) / 200_000))


def test_inverse_cdf_and_gumbel_max_draw_the_same_law():
    rng = np.random.default_rng(2)
    scores = rng.normal(scale=2.0, size=70)                     # d not a multiple of the 64-wide blocks
    weights = np.exp(scores - scores.max())
    ours = np.bincount(draw_vertices(weights[None], rng.random((1, 60_000)))[0], minlength=70)
    gumbel = np.bincount(gumbel_vertices(scores, 60_000, rng), minlength=70)
    keep = (ours + gumbel) > 0
    _, p_value, _, _ = stats.chi2_contingency(np.stack([ours[keep], gumbel[keep]]))
    assert p_value > 1e-3
    expected = softmax(scores) * 60_000
    assert stats.chisquare(ours, expected).pvalue > 1e-3


def test_draws_never_land_on_zero_weights():
    weights = np.zeros((3, 130))
    weights[0, 129] = 1.0                                   # the last coordinate of a padded block
    weights[1, [0, 64]] = [1e-300, 1.0]
    weights[2, 5] = 2.0
    vertices = draw_vertices(weights, np.array([[0.0, 0.5, 1 - 2**-53]] * 3))
    assert np.all(vertices[0] == 129) and set(vertices[1]) <= {0, 64} and np.all(vertices[2] == 5)


def test_score_form_equals_the_multiplicative_update_over_10_000_steps():
    rng = np.random.default_rng(3)
    d, tau = 40, 0.05
    x, score = np.full(d, 1.0 / d), np.zeros(d)
    for _ in range(10_000):
        g = rng.uniform(-1, 1, d)
        x = x * np.exp(-tau * g)
        x /= x.sum()
        score -= tau * g
    np.testing.assert_allclose(np.log(x), np.log(softmax(score)), atol=1e-10)


def test_quadratic_sparsification_identity_by_enumeration():
    # F(u) = u^T H u / 2 + c^T u: E F(abar) - F(x) = (sum_i H_ii x_i - x^T H x) / (2T), d = 4, T = 2.
    rng = np.random.default_rng(4)
    d, t = 4, 2
    a = rng.normal(size=(d, d))
    h, c, x = (a + a.T) / 2, rng.normal(size=d), rng.dirichlet(np.ones(d))
    f = lambda u: u @ h @ u / 2 + c @ u                       # noqa: E731
    expected = 0.0
    for combo in itertools.product(range(d), repeat=t):
        expected += np.prod(x[list(combo)]) * f(np.bincount(combo, minlength=d) / t)
    gap = expected - f(x)
    assert gap == np.float64(gap) and abs(gap - (np.diag(h) @ x - x @ h @ x) / (2 * t)) < 1e-12
    assert abs(gap) <= 2 * np.abs(h).max() / t
