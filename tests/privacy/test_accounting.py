"""The ledger's epsilons against dp-accounting called directly in the test."""

import dp_accounting
import numpy as np
import pytest
from dp_accounting import rdp

from fedray.privacy.accounting import SiloLedger, epsilon_of
from fedray.privacy.mechanisms import subsampled_gaussian_event


def _direct_epsilon(z, k, n, steps, delta):
    acc = rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    event = dp_accounting.SampledWithoutReplacementDpEvent(n, k, dp_accounting.GaussianDpEvent(z))
    acc.compose(event, steps)
    return acc.get_epsilon(delta)


@pytest.mark.parametrize("z,k,n,steps", [(3.0946, 182, 1238, 35), (1.0, 10, 100, 5), (0.8, 1, 500, 200)])
def test_ledger_matches_dp_accounting(z, k, n, steps):
    delta = 1 / n**2
    ledger = SiloLedger(np.array([[z, z]]), k, np.array([n, n]), 1, np.array([delta, delta]))
    for _ in range(steps):
        ledger.record(np.array([[True, False]]))
    eps = ledger.epsilons()
    assert eps[0, 0] == pytest.approx(_direct_epsilon(z, k, n, steps, delta), rel=1e-9)
    assert eps[0, 1] == 0.0  # a silo that never took part has spent nothing


def test_r_single_compositions_equal_one_r_fold_composition():
    z, k, n, delta = 2.0, 50, 1000, 1e-6
    acc = rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    for _ in range(20):
        acc.compose(subsampled_gaussian_event(z, k, n))
    assert epsilon_of(subsampled_gaussian_event(z, k, n, count=20), delta) == pytest.approx(acc.get_epsilon(delta))


def test_local_sgd_participation_is_k_single_record_releases():
    z, k, n, delta = 1.5, 30, 400, 1 / 400**2
    ledger = SiloLedger(np.array([[z]]), 1, np.array([n]), k, np.array([delta]))
    ledger.record(np.array([[True]]))
    ledger.record(np.array([[True]]))
    assert ledger.epsilons()[0, 0] == pytest.approx(_direct_epsilon(z, 1, n, 2 * k, delta), rel=1e-9)


def test_identical_silos_have_identical_ledgers_and_more_rounds_cost_more():
    ledger = SiloLedger(np.full((1, 3), 2.0), 20, np.full(3, 200), 1, np.full(3, 1e-5))
    ledger.record(np.array([[True, True, False]]))
    eps = ledger.epsilons()
    assert eps[0, 0] == eps[0, 1] > 0 == eps[0, 2]
    ledger.record(np.array([[True, False, False]]))
    assert ledger.epsilons()[0, 0] > ledger.epsilons()[0, 1]


def test_full_batch_is_the_plain_gaussian():
    event = subsampled_gaussian_event(2.0, 100, 100)
    assert isinstance(event, dp_accounting.GaussianDpEvent)


def test_no_noise_means_infinite_epsilon():
    ledger = SiloLedger(np.zeros((1, 1)), 10, np.array([100]), 1, np.array([1e-4]))
    ledger.record(np.array([[True]]))
    assert np.isinf(ledger.epsilons()[0, 0])
