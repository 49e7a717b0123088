"""Synthetic linear federations: shapes, determinism, the norm bound, heterogeneity, speed."""

from __future__ import annotations

import time

import numpy as np
import pytest

from fedray.data import SyntheticLinear
from fedray.errors import ConfigError


def test_shape_matches_describe():
    spec = SyntheticLinear(num_silos=7, samples_per_silo=30, test_samples_per_silo=5, dim=4)
    spec.validate()

    data = spec.load(seed=0)

    assert data.shape == spec.describe()
    assert data.x_train.shape == (7, 30, 4) and data.y_train.shape == (7, 30)
    assert data.x_test.shape == (7, 5, 4) and list(data.n_test) == [5] * 7


def test_deterministic_in_seed_and_trial():
    spec = SyntheticLinear(heterogeneity=0.5)

    first, again = spec.load(seed=1, trial=2), spec.load(seed=1, trial=2)

    np.testing.assert_array_equal(first.x_train, again.x_train)
    np.testing.assert_array_equal(first.y_test, again.y_test)
    assert not np.array_equal(spec.load(seed=1, trial=3).x_train, first.x_train)
    assert not np.array_equal(spec.load(seed=2, trial=2).x_train, first.x_train)


@pytest.mark.parametrize("bound", [0.05, 1.0, 3.0])
def test_rows_respect_the_feature_norm(bound):
    data = SyntheticLinear(dim=20, heterogeneity=2.0, feature_norm=bound).load(seed=0)

    norms = np.linalg.norm(np.concatenate([data.x_train, data.x_test], axis=1), axis=2)

    assert norms.max() <= bound * (1 + 1e-12)


def test_binary_labels_are_zero_one():
    data = SyntheticLinear(task="binary", num_silos=20).load(seed=0)
    assert set(np.unique(data.y_train)) == {0.0, 1.0}


def _residual(x, y):
    w, *_ = np.linalg.lstsq(x, y, rcond=None)
    return float(np.abs(x @ w - y).max())


def test_iid_silos_share_one_model_and_weight_shift_breaks_it():
    common = dict(task="regression", noise=0.0, num_silos=5, samples_per_silo=40, dim=6, feature_norm=10.0)
    iid = SyntheticLinear(heterogeneity=0.0, **common).load(seed=0)
    shifted = SyntheticLinear(heterogeneity=1.0, shift="weights", **common).load(seed=0)

    assert _residual(iid.x_train.reshape(-1, 6), iid.y_train.ravel()) < 1e-10
    assert all(_residual(shifted.x_train[i], shifted.y_train[i]) < 1e-10 for i in range(5))
    assert _residual(shifted.x_train.reshape(-1, 6), shifted.y_train.ravel()) > 1e-3


def test_feature_shift_moves_silo_means():
    common = dict(num_silos=4, samples_per_silo=2000, dim=5, feature_norm=100.0)
    iid = SyntheticLinear(heterogeneity=0.0, **common).load(seed=0)
    shifted = SyntheticLinear(heterogeneity=3.0, shift="features", **common).load(seed=0)

    assert np.abs(iid.x_train.mean(axis=1)).max() < 0.05
    assert np.abs(shifted.x_train.mean(axis=1)).max() > 0.5


def test_many_silos_are_generated_without_a_python_loop():
    spec = SyntheticLinear(num_silos=100_000, samples_per_silo=20, test_samples_per_silo=0, dim=10)

    start = time.process_time()            # this process's CPU time: other processes' load does not count
    data = spec.load(seed=0)
    elapsed = time.process_time() - start

    assert data.x_train.shape == (100_000, 20, 10)
    assert elapsed < 5.0  # about 0.3 s here; 100,000 x 50 x 50 takes about 4 s


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("num_silos", True, "data.num_silos must be an integer in [1, 10000000]; got True"),
        ("dim", 0, "data.dim must be an integer >= 1; got 0"),
        ("task", "multiclass", "data.task must be one of 'binary', 'regression'; got 'multiclass'"),
        ("heterogeneity", -1.0, "data.heterogeneity must be a number in [0.0, inf); got -1.0"),
        ("feature_norm", 0.0, "data.feature_norm must be a number in (0.0, inf); got 0.0"),
        ("shift", "labels", "data.shift must be one of 'both', 'features', 'weights'; got 'labels'"),
    ],
)
def test_bad_fields_are_named(field, value, message):
    with pytest.raises(ConfigError) as err:
        SyntheticLinear(**{field: value}).validate()
    assert str(err.value) == message


def test_loading_some_silos_equals_selecting_them_from_the_whole_federation():
    spec = SyntheticLinear(num_silos=150, samples_per_silo=7, test_samples_per_silo=3, dim=4, heterogeneity=1.0)
    ids = np.array([149, 3, 64, 127, 128])                 # three blocks, out of order
    part, whole = spec.load(5, 2, silo_ids=ids), spec.load(5, 2).select(ids)
    for name in ("x_train", "y_train", "x_test", "y_test", "n_train", "n_test"):
        np.testing.assert_array_equal(getattr(part, name), getattr(whole, name))


def test_population_draws_come_from_the_silos_distribution():
    """Fresh records from D: the logistic MLE on them and on the federation's records both recover
    w0 / noise (the model's true weight); parts are independent, draws reproducible."""
    from scipy.special import expit

    from fedray.rng import data_generator

    spec = SyntheticLinear(num_silos=400, samples_per_silo=500, test_samples_per_silo=0, dim=3, noise=1.0,
                           feature_norm=10.0)
    w0 = data_generator(5, 1).standard_normal(3)

    def mle(x, y):
        w = np.zeros(3)
        for _ in range(30):
            p = expit(x @ w)
            w -= np.linalg.solve((x * (p * (1 - p))[:, None]).T @ x, x.T @ (p - y))
        return w

    x, y = spec.population_sample(5, 1, 200_000)
    fed = spec.load(5, 1)
    for records, labels in ((x, y), (fed.x_train.reshape(-1, 3), fed.y_train.reshape(-1))):
        assert np.linalg.norm(mle(records, labels) - w0) < 0.05 * np.linalg.norm(w0) + 0.05
    again, _ = spec.population_sample(5, 1, 1000)
    other, _ = spec.population_sample(5, 1, 1000, part=1)
    assert np.array_equal(again, x[:1000]) and not np.allclose(other, again)
    with pytest.raises(ValueError, match="heterogeneity"):
        SyntheticLinear(heterogeneity=0.5).population_sample(0, 0, 10)
