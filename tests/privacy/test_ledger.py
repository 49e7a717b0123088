"""The ledger counts charges per (replica, unit); its accountant prices them."""

import math

import numpy as np
import pytest

from fedray.errors import BudgetError
from fedray.privacy.accounting import participation_epsilon
from fedray.privacy.composition import ApproxDpComposition, PureDpComposition
from fedray.privacy.ledger import ComposedAccountant, Ledger, RoundsAccountant, check_budget, one_pass_ledger, silo_ledger


def test_rounds_accountant_charges_every_unit_of_a_replica_once_per_round_with_anyone():
    ledger = Ledger(RoundsAccountant(lambda rounds: 0.5 * rounds, "rounds", 1e-5), (2, 3), "federation")
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
    ledger = Ledger(RoundsAccountant(lambda rounds: 0.5 * rounds, "advanced", 1e-5), (1, 2), "federation")
    with pytest.raises(BudgetError) as err:
        check_budget(ledger, np.full((1, 2), 5), np.full((1, 2), 2.0))
    assert str(err.value) == ("planned epsilon 2.5 for federation 0 (5 participations, advanced accountant) exceeds "
                              "privacy.epsilon = 2; (or privacy.calibration=accountant; privacy.enforce_budget=false "
                              "runs it anyway)")


def test_the_guard_refuses_an_overspend_of_a_thousandth_and_admits_the_target_itself():
    """Catches a guard with slack: a plan 0.001 over its budget must be refused (the main job's
    preset with every silo in every round plans 3.003 against 3), a plan exactly at it admitted."""
    ledger = Ledger(RoundsAccountant(lambda rounds: 0.001 * rounds, "rounds", 1e-5), (1, 2), "federation")
    np.testing.assert_array_equal(check_budget(ledger, np.full((1, 2), 3000), np.full(2, 3.0)), np.full((1, 2), 3.0))
    with pytest.raises(BudgetError, match=r"planned epsilon 3\.001 for federation 0"):
        check_budget(ledger, np.full((1, 2), 3001), np.full(2, 3.0))


def test_per_unit_rounds_charge_only_the_silos_that_took_part():
    """Shuffle DP without silo-sampling credit: a record's exposure is the rounds its silo joined."""
    ledger = Ledger(RoundsAccountant(lambda rounds: 0.5 * rounds, "advanced", 1e-5, per_unit=True), (1, 3), "silo")
    ledger.record(np.array([[True, False, True]]))
    ledger.record(np.array([[True, False, False]]))
    np.testing.assert_array_equal(ledger.epsilons(), [[1.0, 0.0, 0.5]])
    counts = np.array([[4, 0, 2]])
    np.testing.assert_array_equal(ledger.accountant.planned(counts, 7), counts)


def test_composed_accountant_prices_pure_dp_draws_by_hand_computed_composition():
    # eps0 = 0.1 per draw, delta' = 1e-6: basic k eps0 against advanced
    # sqrt(2 k ln(1/delta')) eps0 + k eps0^2 / 2, the smaller per cell ("best").
    rule = PureDpComposition(0.1, 1e-6)
    ledger = Ledger(ComposedAccountant(rule, "pure_dp"), (1, 3), "user")
    ledger.counts[:] = [[0, 10, 1000]]
    advanced = math.sqrt(2 * 1000 * math.log(1e6)) * 0.1 + 1000 * 0.01 / 2
    np.testing.assert_allclose(ledger.epsilons(), [[0.0, 1.0, advanced]])
    np.testing.assert_allclose(ledger.deltas(), [[0.0, 0.0, 1e-6]])


def test_a_delta_that_grows_with_the_count_is_checked_by_the_guard():
    # (eps0, delta0) = (0.5, 1e-4) per round, basic composition: k rounds spend (k eps0, k delta0).
    ledger = Ledger(ComposedAccountant(ApproxDpComposition(0.5, 1e-4, 0.0, route="basic"), "approx_dp"), (1, 1), "unit")
    planned = check_budget(ledger, np.array([[4]]), np.array([[10.0]]), np.array([1e-3]))
    assert planned[0, 0] == pytest.approx(2.0)
    with pytest.raises(BudgetError) as err:
        check_budget(ledger, np.array([[11]]), np.array([[10.0]]), np.array([1e-3]))
    assert str(err.value).startswith("planned delta 0.0011 for unit 0 (11 releases, approx_dp accountant) exceeds "
                                     "privacy.delta = 0.001")
    with pytest.raises(BudgetError) as err:
        check_budget(ledger, np.array([[9]]), np.array([[4.0]]), np.array([1e-3]))
    assert "at most 8 releases would fit" in str(err.value)


def test_one_pass_ledger_charges_one_release_however_many():
    ledger = Ledger(one_pass_ledger(1.5, 1e-6), (1, 3), "federation")
    for mask in ([True, True, False], [True, False, False]):
        ledger.record(np.array([mask]))
    np.testing.assert_array_equal(ledger.epsilons(), [[1.5, 1.5, 0.0]])
    np.testing.assert_array_equal(ledger.deltas(), [[1e-6, 1e-6, 0.0]])


def test_an_unbounded_accountant_reports_inf_and_an_infinite_target_admits_it():
    """A mode with no finite guarantee (seed 003's abort_not_private): every charged unit has spent
    epsilon = inf (delta 1), an uncharged one 0; an infinite target passes the budget guard, a
    finite one refuses it."""
    from fedray.privacy.ledger import UnboundedAccountant

    ledger = Ledger(UnboundedAccountant(), (2, 3), "user")
    counts = np.array([[1, 0, 2], [0, 0, 1]])
    assert np.array_equal(ledger.epsilons(counts), [[np.inf, 0, np.inf], [0, 0, np.inf]])
    assert np.array_equal(ledger.deltas(counts), [[1, 0, 1], [0, 0, 1]])
    planned = check_budget(ledger, counts, np.full((2, 3), np.inf), np.full(3, 1e-5))
    assert np.isinf(planned).sum() == 3
    with pytest.raises(BudgetError):
        check_budget(ledger, counts, np.ones((2, 3)), np.full(3, 1e-5))
