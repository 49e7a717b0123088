"""Seed-004 E3 obesity federation: one balanced silo per class, 17 features."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest

from fedray.data import ObesityByClass
from fedray.data import obesity
from fedray.errors import ConfigError


def _rows(data, silo):
    return Counter(map(tuple, data.x_train[silo, : data.n_train[silo]].round(12)))


def test_class_table_matches_the_file(shared_data):
    counts = pd.read_csv(shared_data / "obesity.csv")["NObeyesdad"].value_counts()
    assert dict(counts) == obesity.CLASS_COUNTS
    assert list(obesity.CLASSES) == sorted(counts.index)


def test_balanced_single_class_silos(shared_data):
    spec = ObesityByClass()
    spec.validate()

    data = spec.load(seed=0)

    assert data.shape == spec.describe()
    assert data.num_silos == 7 and data.dim == 17 and data.num_outputs == 7 and data.task == "multiclass"
    assert list(data.n_train) == [217] * 7  # floor(0.8 * 272), the smallest class
    assert list(data.n_test) == [55, 58, 71, 60, 65, 58, 58]  # each class's 20 %
    for silo in range(7):
        assert set(data.y_train[silo, : data.n_train[silo]]) == {float(silo)}
        assert set(data.y_test[silo, : data.n_test[silo]]) == {float(silo)}
    np.testing.assert_array_equal(data.x_train[data.train_mask()][:, 16], 1.0)


def test_balancing_discards_without_replacement(shared_data):
    full = ObesityByClass(balance="none").load(seed=5)
    kept = ObesityByClass().load(seed=5)
    resampled = ObesityByClass(balance="with_replacement").load(seed=5)

    assert list(full.n_train) == [217, 229, 280, 237, 259, 232, 232]
    for silo in range(7):
        assert not _rows(kept, silo) - _rows(full, silo)  # a sub-multiset of the class's records
    assert any(_rows(resampled, silo) - _rows(full, silo) for silo in range(7))  # duplicates


def test_scaled_columns_use_the_global_training_split(shared_data):
    data = ObesityByClass(balance="none").load(seed=1)
    train = data.x_train[data.train_mask()]
    scaled = [obesity.FEATURES.index(name) for name in obesity.SCALED]

    np.testing.assert_allclose(train[:, scaled].mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(train[:, scaled].std(axis=0), 1.0)
    assert 9.0 < data.max_feature_norm() < 9.5  # paper: max ||x|| = 9.214


def test_deterministic_and_fresh_per_trial(shared_data):
    spec = ObesityByClass()

    first, again, other = spec.load(2, 0), spec.load(2, 0), spec.load(2, 1)

    np.testing.assert_array_equal(first.x_train, again.x_train)
    assert not np.array_equal(first.x_train, other.x_train)


def test_uci_file_name_is_accepted(tmp_path, shared_data_dir):
    (tmp_path / "ObesityDataSet_raw_and_data_sinthetic.csv").write_bytes(
        (shared_data_dir / "obesity.csv").read_bytes()
    )
    spec = ObesityByClass(directory=str(tmp_path))
    spec.validate()
    assert spec.load(seed=0).shape == spec.describe()


def test_bad_balance_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="data.balance must be one of"):
        ObesityByClass(directory=str(tmp_path), balance="oversample").validate()
    with pytest.raises(ConfigError, match="FEDRAY_DATA_DIR") as err:
        ObesityByClass(directory=str(tmp_path)).validate()
    assert str(tmp_path) in str(err.value)
