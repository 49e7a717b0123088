"""SphereRegression: the closed-form excess population risk against Monte Carlo on fresh draws,
its minimiser, and the dataset contract (silo subsets equal the full federation's rows)."""

from __future__ import annotations

import numpy as np
import pytest

from fedray.data.sphere_regression import SphereRegression
from fedray.errors import ConfigError


@pytest.mark.parametrize("dim", [3, *(pytest.param(d, marks=pytest.mark.slow) for d in (1, 2, 10))])  # fast tier: dim 3
@pytest.mark.parametrize("loss", ["squared", "absolute"])
def test_closed_form_excess_risk_matches_monte_carlo(dim, loss):
    spec = SphereRegression(num_silos=100_000, dim=dim, signal=0.5, noise=0.5)
    fed, w_star = spec.load(3), spec.optimum(3)
    x, y = fed.x_train[:, 0], fed.y_train[:, 0]
    value = (lambda r: 0.5 * r**2) if loss == "squared" else np.abs
    rng = np.random.default_rng(dim)
    for scale in (0.1, 0.4, 2.0):
        w = w_star + scale * rng.standard_normal(dim) / np.sqrt(dim)
        samples = value(x @ w - y) - value(x @ w_star - y)          # paired: the noise in F* cancels
        mean, se = samples.mean(), samples.std() / np.sqrt(samples.size)
        assert abs(spec.excess_risk(w, w_star, loss) - mean) < 5 * se + 1e-12


def test_the_optimum_has_zero_excess_and_every_other_model_more():
    spec = SphereRegression(dim=5, noise=0.3)
    w_star = spec.optimum(0)
    assert np.linalg.norm(w_star) == pytest.approx(0.5)
    models = w_star + np.random.default_rng(0).standard_normal((100, 5, 1)) * np.geomspace(1e-4, 3, 100)[:, None, None]
    for loss in ("squared", "absolute"):
        assert spec.excess_risk(w_star, w_star, loss) == pytest.approx(0.0, abs=1e-15)
        assert np.all(spec.excess_risk(models, w_star, loss) > 0)


def test_a_subset_of_silos_is_the_full_federations_rows():
    spec = SphereRegression(num_silos=700, dim=4, test_samples_per_silo=2)
    full, part = spec.load(1, 2), spec.load(1, 2, silo_ids=np.array([699, 3, 300]))
    np.testing.assert_array_equal(part.x_train, full.x_train[[699, 3, 300]])
    np.testing.assert_array_equal(part.y_test, full.y_test[[699, 3, 300]])
    assert np.allclose(np.linalg.norm(full.x_train, axis=2), 1.0)
    assert full.shape == spec.describe()


def test_a_shifted_minority_learns_its_own_optimum_and_the_rest_is_unchanged():
    from fedray.data.sphere_regression import SphereRegression

    plain = SphereRegression(num_silos=200, samples_per_silo=30, dim=6)
    shifted = SphereRegression(num_silos=200, samples_per_silo=30, dim=6, shifted_fraction=0.07, shift=0.8)
    a, b = plain.load(3, 1), shifted.load(3, 1)
    w_star, w_shift = shifted.optimum(3, 1), shifted.shifted_optimum(3, 1)
    assert shifted.shifted_users == 14 and abs((w_shift - w_star) @ w_star) < 1e-12
    assert np.linalg.norm(w_shift - w_star) == pytest.approx(0.8)
    np.testing.assert_array_equal(a.y_train[14:], b.y_train[14:])                      # the majority: as before
    np.testing.assert_array_equal(a.x_train, b.x_train)
    np.testing.assert_allclose(b.y_train[:14] - b.x_train[:14] @ w_shift, a.y_train[:14] - a.x_train[:14] @ w_star)
    np.testing.assert_array_equal(shifted.load(3, 1, np.arange(10, 40)).y_train, b.y_train[10:40])   # any layout
    with pytest.raises(ConfigError):
        SphereRegression(shifted_fraction=1.5, shift=0.1).validate()
