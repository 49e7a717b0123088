"""The ledger counts charges per (replica, unit); its accountant prices them."""

import numpy as np
import pytest

from fedray.errors import BudgetError
from fedray.privacy.accounting import participation_epsilon
from fedray.privacy.ledger import Ledger, RoundsAccountant, check_budget, silo_ledger


def test_rounds_accountant_charges_every_unit_of_a_replica_once_per_round_with_anyone():
    ledger = Ledger(RoundsAccountant(lambda rounds: 0.5 * rounds, "rounds"), (2, 3), "federation")
    ledger.record(np.array([[True, False, False], [False, False, False]]))   # replica 1: nobody took part
    ledger.record(np.array([[False, True, True], [True, False, False]]))
    np.testing.assert_array_equal(ledger.counts, [[2, 2, 2], [1, 1, 1]])
    np.testing.assert_array_equal(ledger.epsilons(), [[1.0, 1.0, 1.0], [0.5, 0.5, 0.5]])
    # Planning charges every round (an upper bound: a round with nobody costs nothing).
    assert np.all(ledger.accountant.planned(np.zeros((2, 3), dtype=int), 7) == 7)


def test_silo_ledger_prices_each_silo_by_its_own_participations():
    ledger = silo_ledger(np.full((1, 2), 2.0), 10, np.array([100, 100]), 1, np.array([1e-5, 1e-5]))
    for mask in ([True, False], [True, True], [True, False]):
        ledger.record(np.array([mask]))
    # Hand check against the accountant called directly: silo 0 took part 3 times, silo 1 once.
    expected = [participation_epsilon(2.0, 10, 100, 1, c, 1e-5, "rdp") for c in (3, 1)]
    np.testing.assert_allclose(ledger.epsilons()[0], expected)
    restored = ledger.fresh()
    restored.restore(ledger.state())
    np.testing.assert_array_equal(restored.epsilons(), ledger.epsilons())


def test_budget_guard_names_the_unit_and_has_no_advice_for_a_federation_guarantee():
    ledger = Ledger(RoundsAccountant(lambda rounds: 0.5 * rounds, "advanced"), (1, 2), "federation")
    with pytest.raises(BudgetError) as err:
        check_budget(ledger, np.full((1, 2), 5), np.full((1, 2), 2.0))
    assert str(err.value) == ("planned epsilon 2.5 for federation 0 (5 participations, advanced accountant) exceeds "
                              "privacy.epsilon = 2; (or privacy.calibration=accountant; privacy.enforce_budget=false "
                              "runs it anyway)")


def test_per_unit_rounds_charge_only_the_silos_that_took_part():
    """Shuffle DP without silo-sampling credit: a record's exposure is the rounds its silo joined."""
    ledger = Ledger(RoundsAccountant(lambda rounds: 0.5 * rounds, "advanced", per_unit=True), (1, 3), "silo")
    ledger.record(np.array([[True, False, True]]))
    ledger.record(np.array([[True, False, False]]))
    np.testing.assert_array_equal(ledger.epsilons(), [[1.0, 0.0, 0.5]])
    counts = np.array([[4, 0, 2]])
    np.testing.assert_array_equal(ledger.accountant.planned(counts, 7), counts)
