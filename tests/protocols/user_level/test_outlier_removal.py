"""Seed 002's server step (spec §6 T4, T11): the phase's pass level, halting on a spread batch
with nothing released, unbiased isotropic noise at sigma on a concentrated batch, and the removal
of one adversarial user (E7's mechanism at the step level)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fedray.privacy.mechanisms import ServerGaussianNoise
from fedray.protocols.user_level.outlier_removal import OutlierRemovalStep


def _generators(count: int, seed: int = 0) -> list:
    return [np.random.default_rng([seed, r]) for r in range(count)]


def _noise(std: float, replicas: int) -> ServerGaussianNoise:
    """The phase's Gaussian step at std ``std`` for ``replicas`` replicas (a unit sensitivity)."""
    return ServerGaussianNoise(np.full(replicas, std), 1.0)


def test_the_pass_level_is_four_fifths_of_the_batch_plus_laplace_8_over_eps():
    step = OutlierRemovalStep(epsilon=2.0, threshold=1.0, noise=_noise(0.1, 1))
    levels = np.concatenate([step.pass_level(100, _generators(1, seed)) for seed in range(20_000)])
    assert stats.kstest(levels - 80.0, stats.laplace(scale=4.0).cdf).pvalue > 1e-3     # 8 / eps


def test_a_spread_batch_halts_and_releases_nothing():
    step = OutlierRemovalStep(epsilon=1.0, threshold=1e-3, noise=_noise(0.1, 5))          # a tau far too small
    vectors = np.random.default_rng(1).normal(size=(5, 200, 3))
    generators = _generators(5)
    result = step(vectors, step.pass_level(200, generators), generators)
    assert result.halted.all() and np.isnan(result.gradient).all()
    assert np.all(result.score == 1.0)                                             # every user alone


def test_a_concentrated_batch_passes_with_the_mean_plus_isotropic_noise_at_sigma():
    sigma, k, d, replicas = 0.3, 100, 4, 2000
    # eps = 20: the test's noise (Lap(0.4), Lap(0.8)) is far below K / 20, the good event of spec §2.3
    step = OutlierRemovalStep(epsilon=20.0, threshold=1.0, noise=_noise(sigma, replicas))
    rng = np.random.default_rng(2)
    vectors = np.broadcast_to(rng.uniform(-0.1, 0.1, size=(1, k, d)), (replicas, k, d))
    generators = _generators(replicas, seed=3)
    result = step(vectors, step.pass_level(k, generators), generators)
    assert not result.halted.any() and np.all(result.kept == k)
    noise = (result.gradient - vectors[0].mean(axis=0)) / sigma
    assert stats.kstest(noise.ravel(), "norm").pvalue > 1e-3
    assert np.abs(np.corrcoef(noise.T) - np.eye(d)).max() < 0.1


def test_one_far_user_is_removed_and_barely_moves_the_release():
    k, d = 100, 3
    step = OutlierRemovalStep(epsilon=20.0, threshold=0.5, noise=_noise(0.0, 50))
    vectors = np.random.default_rng(4).uniform(-0.1, 0.1, size=(50, k, d))
    honest = vectors.mean(axis=1)
    vectors = vectors.copy()
    vectors[:, 0] = 1e3                                                             # an adversarial user
    generators = _generators(50, seed=5)
    result = step(vectors, step.pass_level(k, generators), generators)
    assert not result.halted.any() and np.all(result.kept == k - 1)
    others = vectors[:, 1:].mean(axis=1)
    np.testing.assert_allclose(result.gradient, others)                            # the other 99's mean
    assert np.abs(result.gradient - honest).max() < 0.2 / k * 2                    # moved by < 2 tau / K
    assert result.score == pytest.approx(np.full(50, (99 * 99 + 1) / k))


def test_a_replica_that_halted_earlier_releases_nothing_more():
    step = OutlierRemovalStep(epsilon=20.0, threshold=1.0, noise=_noise(0.1, 3))
    vectors = np.zeros((3, 50, 2))
    generators = _generators(3)
    result = step(vectors, step.pass_level(50, generators), generators, halted=np.array([False, True, False]))
    assert result.halted.tolist() == [False, True, False]
    assert np.isnan(result.gradient[1]).all() and not np.isnan(result.gradient[[0, 2]]).any()
