"""BinomialUserMeans: exact mean items of m binary items per user (m up to 10^15), any layout,
the population mean, heterogeneous users, and the planner's refusal of a loss that is not linear
in the record."""

import numpy as np
import pytest

from fedray.data import BinomialUserMeans
from fedray.errors import ConfigError
from fedray.plan import make_plan
from tests.conftest import compose


def test_user_means_have_the_binomial_law_and_any_layout():
    spec = BinomialUserMeans(num_silos=3000, items_per_user=400, dim=3)
    full = spec.load(2, 1)
    assert full.shape == spec.describe() and full.shape.items == (400,) * 3000
    means = full.x_train[:, 0, :]
    heads = (means * np.sqrt(3) * 400 + 400) / 2                  # back to the Binomial counts
    np.testing.assert_allclose(heads, np.round(heads), atol=1e-9)
    p = spec.biases(2, 1)
    np.testing.assert_allclose(heads.mean(axis=0) / 400, p, atol=4 * np.sqrt(0.25 / (400 * 3000)))
    np.testing.assert_allclose(heads.var(axis=0), 400 * p * (1 - p), rtol=0.1)
    np.testing.assert_allclose(means.mean(axis=0), spec.population_mean(2, 1), atol=4 / np.sqrt(400 * 3000 * 3))
    assert np.all(np.linalg.norm(means, axis=1) <= 1 + 1e-12)
    np.testing.assert_array_equal(spec.load(2, 1, silo_ids=np.array([2999, 0, 1500])).x_train, full.x_train[[2999, 0, 1500]])


def test_huge_item_counts_stay_exact():
    spec = BinomialUserMeans(num_silos=500, items_per_user=10**13, dim=1)
    means = spec.load(0).x_train[:, 0, 0]
    spread = means.std() * np.sqrt(10**13)                       # 2 sqrt(p (1 - p)) for the drawn p
    p = spec.biases(0)[0]
    assert spread == pytest.approx(2 * np.sqrt(p * (1 - p)), rel=0.1)


def test_heterogeneous_users_spread_wider():
    iid = BinomialUserMeans(num_silos=2000, items_per_user=10**6, dim=2).load(0).x_train[:, 0]
    mixed = BinomialUserMeans(num_silos=2000, items_per_user=10**6, dim=2, concentration=4.0).load(0).x_train[:, 0]
    assert mixed.std(axis=0).min() > 50 * iid.std(axis=0).max()
    with pytest.raises(ConfigError) as err:
        BinomialUserMeans(concentration=0.0).validate()
    assert err.value.key == "data.concentration"


def test_a_loss_not_linear_in_the_record_is_refused():
    with pytest.raises(ConfigError) as err:
        make_plan(compose("experiment=sc_output_pert_means", "data.loss._target_=fedray.losses.Logistic"))
    assert err.value.key == "data.loss" and "mean of 10000000000 items" in str(err.value)
