"""Ledger and calibration epsilons against dp-accounting called directly in the test."""

import dp_accounting
import numpy as np
import pytest
from dp_accounting import rdp

from fedray.privacy.ledger import silo_ledger
from fedray.privacy.replace_one_pld import release_pld
from fedray.privacy.accounting import (
    calibrate_noise_multiplier,
    epsilon_of,
    participation_epsilon,
    participation_event,
)

REPLACE_ONE = dp_accounting.NeighboringRelation.REPLACE_ONE


def _direct_rdp(z, k, n, steps, delta):
    acc = rdp.RdpAccountant(neighboring_relation=REPLACE_ONE)
    acc.compose(dp_accounting.SampledWithoutReplacementDpEvent(n, k, dp_accounting.GaussianDpEvent(z)), steps)
    return acc.get_epsilon(delta)


@pytest.mark.parametrize("z,k,n,steps", [(3.0946, 182, 1238, 35), (1.0, 10, 100, 5), (0.8, 1, 500, 200)])
def test_rdp_ledger_matches_dp_accounting(z, k, n, steps):
    delta = 1 / n**2
    ledger = silo_ledger(np.array([[z, z]]), k, np.array([n, n]), 1, np.array([delta, delta]))
    for _ in range(steps):
        ledger.record(np.array([[True, False]]))
    eps = ledger.epsilons()
    assert eps[0, 0] == pytest.approx(_direct_rdp(z, k, n, steps, delta), rel=1e-9)
    assert eps[0, 1] == 0.0  # a silo that never took part has spent nothing


def test_pld_ledger_composes_the_symmetrised_release():
    z, k, n, steps, delta = 3.0946, 182, 1238, 35, 1 / 1238**2
    ledger = silo_ledger(np.array([[z]]), k, np.array([n]), 1, np.array([delta]), accountant="pld")
    ledger.counts[:] = steps
    direct = release_pld(z, k / n).self_compose(steps).get_epsilon_for_delta(delta)
    assert ledger.epsilons()[0, 0] == pytest.approx(direct, rel=1e-9)


@pytest.mark.parametrize("z,k,n,steps", [(3.0946, 182, 1238, 35), (1.2, 20, 200, 10), (2.0, 50, 50, 3)])
def test_pld_is_at_most_rdp_for_the_same_release(z, k, n, steps):
    # Both are upper bounds on the same mechanism; PLD is the tighter one.
    delta = 1e-5
    assert participation_epsilon(z, k, n, 1, steps, delta, "pld") <= participation_epsilon(z, k, n, 1, steps, delta, "rdp")


def test_r_single_compositions_equal_one_r_fold_composition():
    z, k, n, delta = 2.0, 50, 1000, 1e-6
    acc = rdp.RdpAccountant(neighboring_relation=REPLACE_ONE)
    one = participation_event(z, k, n, 1, 1)
    for _ in range(5):
        acc.compose(one)
    twenty = participation_event(z, k, n, 1, 5)
    assert epsilon_of(twenty, delta, "rdp") == pytest.approx(acc.get_epsilon(delta))


def test_local_sgd_participation_is_k_single_record_releases():
    z, k, n, delta = 1.5, 30, 400, 1 / 400**2
    ledger = silo_ledger(np.array([[z]]), 1, np.array([n]), k, np.array([delta]))
    ledger.record(np.array([[True]]))
    ledger.record(np.array([[True]]))
    assert ledger.epsilons()[0, 0] == pytest.approx(_direct_rdp(z, 1, n, 2 * k, delta), rel=1e-9)


def test_identical_silos_have_identical_ledgers_and_more_rounds_cost_more():
    ledger = silo_ledger(np.full((1, 3), 2.0), 20, np.full(3, 200), 1, np.full(3, 1e-5))
    ledger.record(np.array([[True, True, False]]))
    eps = ledger.epsilons()
    assert eps[0, 0] == eps[0, 1] > 0 == eps[0, 2]
    ledger.record(np.array([[True, False, False]]))
    assert ledger.epsilons()[0, 0] > ledger.epsilons()[0, 1]


def test_parallel_composition_charges_one_unsampled_release():
    ledger = silo_ledger(np.full((1, 1), 2.0), 20, np.array([200]), 1, np.array([1e-5]), parallel_composition=True)
    ledger.counts[:] = 9
    assert ledger.epsilons()[0, 0] == pytest.approx(participation_epsilon(2.0, 200, 200, 1, 1, 1e-5, "rdp"))


def test_full_batch_is_the_plain_gaussian_in_both_accountants():
    event = participation_event(2.0, 100, 100, 1, 1)
    assert isinstance(event, dp_accounting.GaussianDpEvent)
    # Gaussian with replace-one distance 1 and std z: the analytic Gaussian mechanism's epsilon.
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    exact = pld_lib.from_gaussian_mechanism(2.0, sensitivity=1.0).get_epsilon_for_delta(1e-5)
    assert participation_epsilon(2.0, 100, 100, 1, 1, 1e-5, "pld") == pytest.approx(exact, rel=1e-3)
    # The ledger prices the same event (catches its event data writing a full batch as sampled at rate 1).
    ledger = silo_ledger(np.full((1, 1), 2.0), 100, np.array([100]), 1, np.array([1e-5]), accountant="pld")
    assert ledger.accountant.event(0, 0, 1) == event
    ledger.record(np.array([[True]]))
    assert ledger.epsilons()[0, 0] == pytest.approx(exact, rel=1e-3)


def test_no_noise_means_infinite_epsilon():
    ledger = silo_ledger(np.zeros((1, 1)), 10, np.array([100]), 1, np.array([1e-4]))
    ledger.record(np.array([[True]]))
    assert np.isinf(ledger.epsilons()[0, 0])


@pytest.mark.parametrize("accountant", [pytest.param("rdp", marks=pytest.mark.slow), "pld"])
@pytest.mark.parametrize("target", [0.75, pytest.param(3.0, marks=pytest.mark.slow)])
def test_calibration_round_trip_lands_on_the_private_side(accountant, target):
    n, k, rounds, delta = 1238, 182, 35, 1 / 1238**2
    z = calibrate_noise_multiplier(target, delta, k, n, 1, rounds, accountant)
    spent = participation_epsilon(z, k, n, 1, rounds, delta, accountant)
    assert spent <= target
    assert spent == pytest.approx(target, rel=2e-2)
    assert participation_epsilon(0.97 * z, k, n, 1, rounds, delta, accountant) > target
