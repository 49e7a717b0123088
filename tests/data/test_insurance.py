"""Seed-004 E2 insurance federation: T14 silo sizes, sorting, scaling, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedray.data import InsuranceSorted
from fedray.errors import ConfigError


def _silo_targets(data, silo):
    """All charges of one silo, train and test together."""
    return np.concatenate(
        [data.y_train[silo, : data.n_train[silo]], data.y_test[silo, : data.n_test[silo]]]
    )


@pytest.mark.parametrize(("num_silos", "last"), [(3, 446), (5, 266), (10, 132), (15, 78)])
def test_silo_sizes_are_ceil_of_n_over_N(shared_data, num_silos, last):
    spec = InsuranceSorted(num_silos=num_silos)
    spec.validate()

    data = spec.load(seed=0)

    sizes = data.n_train + data.n_test
    assert list(sizes[:-1]) == [math.ceil(1338 / num_silos)] * (num_silos - 1)
    assert sizes[-1] == last  # seed-004 T1 "last-silo sizes"
    assert data.shape == spec.describe()
    assert list(data.n_train) == [math.floor(0.8 * n + 1e-9) for n in sizes]


def test_silos_are_consecutive_blocks_of_sorted_charges(shared_data):
    spec = InsuranceSorted(num_silos=10)
    data = spec.load(seed=1)

    blocks = [np.sort(_silo_targets(data, silo)) for silo in range(10)]

    np.testing.assert_array_equal(np.concatenate(blocks), spec.sorted_targets())
    assert all(blocks[i].max() <= blocks[i + 1].min() for i in range(9))
    assert 1121 < spec.sorted_targets()[0] < 1122  # dollars, unscaled


def test_features_and_per_silo_standardization(shared_data):
    data = InsuranceSorted(num_silos=5).load(seed=2)

    assert data.dim == 7 and data.task == "regression" and data.num_outputs == 1
    for silo in range(5):
        x = data.x_train[silo, : data.n_train[silo]]
        np.testing.assert_allclose(x[:, [0, 2]].mean(axis=0), 0.0, atol=1e-12)  # age, bmi
        np.testing.assert_allclose(x[:, [0, 2]].std(axis=0), 1.0)
        assert set(np.unique(x[:, 1])) <= {0.0, 1.0} and set(np.unique(x[:, 5])) <= {0.0, 1.0, 2.0, 3.0}
        assert np.all(x[:, 3] == np.round(x[:, 3]))  # children, unscaled
        np.testing.assert_array_equal(x[:, 6], 1.0)  # intercept


def test_pooled_standardization_uses_all_training_records(shared_data):
    data = InsuranceSorted(num_silos=5, standardize="pooled").load(seed=2)

    pooled = data.x_train[data.train_mask()]

    np.testing.assert_allclose(pooled[:, [0, 2]].mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(pooled[:, [0, 2]].std(axis=0), 1.0)


def test_split_is_deterministic_and_fresh_per_trial(shared_data):
    spec = InsuranceSorted()

    first, again, other = spec.load(0, 0), spec.load(0, 0), spec.load(0, 1)

    np.testing.assert_array_equal(first.y_train, again.y_train)
    np.testing.assert_array_equal(first.x_test, again.x_test)
    assert not np.array_equal(first.y_train, other.y_train)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("num_silos", 0, "data.num_silos must be an integer in [1, 10000000]; got 0"),
        ("standardize", "global", "data.standardize must be one of 'per_silo', 'pooled'; got 'global'"),
        ("train_fraction", 0, "data.train_fraction must be a number in (0.0, 1.0); got 0"),
    ],
)
def test_bad_fields_are_named(shared_data, field, value, message):
    with pytest.raises(ConfigError) as err:
        InsuranceSorted(**{field: value}).validate()
    assert str(err.value) == message


def test_too_many_silos_is_a_config_error(shared_data):
    with pytest.raises(ConfigError, match="data.num_silos must be small enough"):
        InsuranceSorted(num_silos=700).validate()


def test_missing_file_names_the_folder(tmp_path):
    with pytest.raises(ConfigError, match="FEDRAY_DATA_DIR") as err:
        InsuranceSorted(directory=str(tmp_path)).validate()
    assert str(tmp_path) in str(err.value) and "insurance.csv" in str(err.value)
