"""Composition theorems: hand numbers, identities, budget round trips, the filter, PLD cross-checks."""

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld import PLDAccountant, common
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from hypothesis import given, settings
from hypothesis import strategies as st

from fedray.errors import ConfigError
from fedray.privacy.composition import (
    ApproxDpComposition,
    ParallelComposition,
    PureDpComposition,
    advanced_composition,
    advanced_composition_budget,
    basic_composition,
    parallel_composition,
    pure_advanced_composition,
    pure_advanced_composition_budget,
)

# --- hand numbers ------------------------------------------------------------------------------


def test_advanced_composition_hand_value():
    # eps0 = 0.1, k = 100, delta' = 1e-5, delta0 = 1e-7:
    # ln(1e5) = 11.512925465; sqrt(200 * 11.512925465) = sqrt(2302.585093) = 47.985259122; * 0.1 = 4.798525912
    # e^0.1 - 1 = 0.105170918; 100 * 0.1 * 0.105170918 = 1.051709181;  eps = 5.850235093
    # delta = 100 * 1e-7 + 1e-5 = 2e-5
    epsilon, delta = advanced_composition(0.1, 1e-7, 100, 1e-5)
    assert epsilon == pytest.approx(5.850235093, abs=1e-9)
    assert delta == pytest.approx(2e-5, rel=1e-12)


def test_pure_advanced_composition_hand_value():
    # seed-001 Cor. 3.6 quantity: 4.798525912 (as above) + 100 * 0.1^2 / 2 = 4.798525912 + 0.5 = 5.298525912
    epsilon, delta = pure_advanced_composition(0.1, 100, 1e-5)
    assert epsilon == pytest.approx(5.298525912, abs=1e-9)
    assert delta == 1e-5


def test_corollary_3_6_golden_value():
    # seed-001 §2.3: at eps' = eps / (2 sqrt(2 k ln(1/delta))) the quantity is eps/2 + eps^2 / (16 ln(1/delta)).
    # eps = 1, k = 100, delta = 1e-5: eps' = 1 / (2 * 47.985259122) = 0.0104198666;
    # value = 0.5 + 1 / (16 * 11.512925465) = 0.5 + 0.0054286810 = 0.5054286810 (below eps = 1)
    epsilon0 = 1 / (2 * math.sqrt(2 * 100 * math.log(1e5)))
    assert epsilon0 == pytest.approx(0.0104198666, abs=1e-10)
    assert pure_advanced_composition(epsilon0, 100, 1e-5)[0] == pytest.approx(0.5054286810, abs=1e-10)


def test_seed_000_pgd_regime_that_needs_the_shrink():
    # seed-000 §3.5 / test 11: eps = 15, delta = 1e-3, T = 1e4; paper eps0 = 15 / (2 sqrt(2e4 ln 1e3))
    # = 15 / (2 * 371.692219) = 0.0201779850; delta' = 1e-3 / 10001, ln(1/delta') = 16.118195646;
    # sqrt(2e4 * 16.118195646) = 567.771004; * eps0 = 11.456475; e^eps0 - 1 = 0.0203829367;
    # 1e4 * eps0 * 0.0203829367 = 4.112866;  eps_tot = 15.569341 > 15, so eps0 must shrink.
    target, rounds = 15.0, 10_000
    paper = target / (2 * math.sqrt(2 * rounds * math.log(1 / 1e-3)))
    slack, delta0 = 1e-3 / (rounds + 1), 1e-3 / (rounds + 1)
    epsilon, delta = advanced_composition(paper, delta0, rounds, slack)
    assert epsilon == pytest.approx(15.569341, abs=1e-6)
    assert delta == pytest.approx(1e-3, rel=1e-12)          # T delta0 + delta' = delta
    shrunk = min(paper, advanced_composition_budget(target, rounds, slack))
    assert shrunk < paper
    assert advanced_composition(shrunk, delta0, rounds, slack)[0] <= target


def test_seed_000_pgd_regime_that_keeps_the_paper_value():
    # eps = 1, delta = 1e-6, T = 1e3: the spec reports eps_tot ~0.62, so the paper's eps0 stays.
    target, rounds = 1.0, 1000
    paper = target / (2 * math.sqrt(2 * rounds * math.log(1e6)))
    slack = 1e-6 / (rounds + 1)
    assert advanced_composition(paper, slack, rounds, slack)[0] == pytest.approx(0.6214, abs=1e-4)
    assert min(paper, advanced_composition_budget(target, rounds, slack)) == paper


# --- identities --------------------------------------------------------------------------------


@pytest.mark.parametrize("count", [1, 7, 100])
def test_k_single_basic_compositions_equal_one_k_fold(count):
    epsilon, delta = basic_composition([0.3] * count, [1e-7] * count)
    accountant = ApproxDpComposition(0.3, 1e-7, 1e-5, route="basic")
    assert epsilon == pytest.approx(float(accountant.epsilons(count)), rel=1e-12)
    assert delta == pytest.approx(float(accountant.deltas(count)), rel=1e-12)
    assert PureDpComposition(0.3, 1e-5, route="basic").epsilons(count) == pytest.approx(0.3 * count, rel=1e-12)


@pytest.mark.parametrize("inner", [PureDpComposition(0.2, 1e-6), ApproxDpComposition(0.5, 1e-8, 1e-6, "advanced")])
def test_parallel_composition_of_k_disjoint_parts_equals_one_part(inner):
    counts = np.array([[0, 1, 5], [100, 2, 0]])
    parallel = ParallelComposition(inner)
    np.testing.assert_array_equal(parallel.epsilons(counts), inner.epsilons(np.minimum(counts, 1)))
    np.testing.assert_array_equal(parallel.deltas(counts), inner.deltas(np.minimum(counts, 1)))
    assert parallel_composition([0.2] * 5, [1e-6] * 5) == (0.2, 1e-6)
    assert parallel_composition([0.1, 0.4, 0.2], [0.0, 1e-7, 1e-6]) == (0.4, 1e-6)


def test_best_route_is_the_smaller_valid_pair_cell_by_cell():
    counts = np.arange(0, 400).reshape(20, 20)
    basic = PureDpComposition(0.1, 1e-5, "basic")
    advanced = PureDpComposition(0.1, 1e-5, "advanced")
    best = PureDpComposition(0.1, 1e-5, "best")
    np.testing.assert_array_equal(best.epsilons(counts), np.minimum(basic.epsilons(counts), advanced.epsilons(counts)))
    # basic wins for few releases (delta 0 there), advanced for many (delta = delta')
    assert best.deltas(3) == 0.0 and best.deltas(399) == 1e-5
    assert np.all(np.diff(best.epsilons(counts).ravel()) >= 0)          # more releases never cost less


def test_pure_dp_form_is_below_the_general_form():
    # eps0 (e^eps0 - 1) > eps0^2 / 2 for eps0 > 0: Cor. 3.6 is the sharper statement for pure releases.
    for epsilon0 in (1e-3, 0.1, 1.0, 3.0):
        assert pure_advanced_composition(epsilon0, 50, 1e-6)[0] < advanced_composition(epsilon0, 0.0, 50, 1e-6)[0]


def test_count_accountants_are_vectorised_and_zero_counts_cost_nothing():
    counts = np.array([[0, 3, 10], [0, 1, 250]])
    epsilon0 = np.array([[0.1], [0.2]])                                  # one per replica, broadcast over units
    accountant = ApproxDpComposition(epsilon0, 1e-7, 1e-6, "advanced")
    epsilons, deltas = accountant.epsilons(counts), accountant.deltas(counts)
    assert epsilons.shape == deltas.shape == counts.shape
    assert np.all(epsilons[:, 0] == 0) and np.all(deltas[:, 0] == 0)
    for (p, n), count in np.ndenumerate(counts):
        if count:
            expected = advanced_composition(epsilon0[p, 0], 1e-7, count, 1e-6)
            assert epsilons[p, n] == pytest.approx(float(expected[0]), rel=1e-12)
            assert deltas[p, n] == pytest.approx(float(expected[1]), rel=1e-12)
    assert accountant.describe() == {"name": "approx_dp", "epsilon0": [[0.1], [0.2]], "delta0": 1e-7,
                                     "delta_slack": 1e-6, "route": "advanced"}
    assert ParallelComposition(PureDpComposition(0.1, 1e-6)).describe()["inner"]["name"] == "pure_dp"



@pytest.mark.parametrize("rule", [
    PureDpComposition(0.1, 1e-5), ApproxDpComposition(0.3, 1e-8, 1e-6, "advanced"),
    ApproxDpComposition(0.3, 1e-8, 1e-6), ParallelComposition(ApproxDpComposition(0.5, 1e-7, 0.0, "basic")),
    ApproxDpComposition(np.array([[0.1], [0.2], [0.3]]), 1e-8, 1e-6),        # per replica: priced cell by cell
])
def test_a_large_count_table_is_priced_as_each_cell_alone(rule):
    """A plan's (P, N) table of counts (past 4096 cells) is priced once per distinct count and
    gathered; catches a gather that puts a count's price on another count's cells, or per-replica
    parameters priced as if they were one."""
    counts = np.random.default_rng(0).integers(0, 40, size=(3, 2000))
    counts[1, :7] = 977                                    # a count far from the others
    epsilons, deltas = rule.epsilons(counts), rule.deltas(counts)
    assert epsilons.shape == deltas.shape == counts.shape
    for (p, n), count in np.ndenumerate(counts[:, :60]):
        one = np.zeros((3, 1), dtype=np.int64)
        one[p, 0] = count
        assert epsilons[p, n] == rule.epsilons(one)[p, 0] and deltas[p, n] == rule.deltas(one)[p, 0]
    assert np.all(epsilons[counts == 0] == 0)

# --- budget round trips ------------------------------------------------------------------------


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(target=st.floats(0.05, 20.0), count=st.integers(1, 100_000), log_slack=st.floats(-12, -1))
def test_advanced_budget_round_trip(target, count, log_slack):
    slack = 10.0**log_slack
    epsilon0 = advanced_composition_budget(target, count, slack)
    assert advanced_composition(epsilon0, 0.0, count, slack)[0] <= target
    assert advanced_composition(epsilon0 * (1 + 1e-6), 0.0, count, slack)[0] > target


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(target=st.floats(0.05, 20.0), count=st.integers(1, 100_000), log_slack=st.floats(-12, -1))
def test_pure_budget_round_trip(target, count, log_slack):
    slack = 10.0**log_slack
    epsilon0 = pure_advanced_composition_budget(target, count, slack)
    assert pure_advanced_composition(epsilon0, count, slack)[0] <= target
    assert pure_advanced_composition(epsilon0 * (1 + 1e-6), count, slack)[0] > target
    assert epsilon0 >= advanced_composition_budget(target, count, slack)     # sharper form, larger step


def test_best_budget_takes_basic_composition_for_few_releases():
    # k = 5 <= 2 ln(1e5) = 23.03: advanced at eps/k = 0.2 gives sqrt(2*5*11.513)*0.2 + 1*(e^0.2-1) > 1, so basic wins.
    assert advanced_composition(1.0 / 5, 0.0, 5, 1e-5)[0] > 1.0
    assert advanced_composition_budget(1.0, 5, 1e-5, route="best") == pytest.approx(0.2, rel=1e-15)
    assert advanced_composition_budget(1.0, 5, 1e-5) < 0.2
    many = advanced_composition_budget(1.0, 10_000, 1e-5)
    assert advanced_composition_budget(1.0, 10_000, 1e-5, route="best") == many > 1.0 / 10_000


# --- validation --------------------------------------------------------------------------------


@pytest.mark.parametrize("build, message", [
    (lambda: PureDpComposition(-1, 1e-5), "epsilon0 must be > 0; got -1.0"),
    (lambda: PureDpComposition(0.1, 1.5), r"delta_slack must be in \(0, 1\); got 1.5"),
    (lambda: PureDpComposition(0.1, 1e-5, route="fancy"), "route must be one of .*; got 'fancy'"),
    (lambda: ApproxDpComposition(0.1, -1e-3, 1e-5), r"delta0 must be in \[0, 1\); got -0.001"),
    (lambda: ApproxDpComposition(np.array([0.1, np.nan]), 0.0, 1e-5), "epsilon0 must be > 0; got nan"),
    (lambda: PureDpComposition(0.1, 1e-5).epsilons(np.array([1, -2])), "counts must be integers >= 0; got -2.0"),
    (lambda: PureDpComposition(0.1, 1e-5).epsilons(np.array([1.5])), "counts must be integers >= 0; got 1.5"),
    (lambda: advanced_composition_budget(1.0, 0, 1e-5), "count must be an integer >= 1; got 0.0"),
    (lambda: pure_advanced_composition_budget(-2.0, 10, 1e-5), "target_epsilon must be > 0; got -2.0"),
])
def test_bad_parameters_name_the_value_and_the_range(build, message):
    with pytest.raises(ConfigError, match=message):
        build()


# --- cross-check against dp-accounting's PLD (tight; advanced composition must not be below it) ----


@pytest.mark.parametrize("count", [1, 10, 100, 1000])
def test_advanced_composition_upper_bounds_the_pld_of_laplace_releases(count):
    # Laplace with noise multiplier 10 is 0.1-DP (ADD_OR_REMOVE_ONE, the only relation dp-accounting
    # supports for it). PLD's epsilon is tight up to discretisation; both advanced forms are upper bounds.
    accountant = PLDAccountant(value_discretization_interval=1e-4)
    accountant.compose(dp_accounting.LaplaceDpEvent(10.0), count)
    tight = accountant.get_epsilon(1e-5)
    assert pure_advanced_composition(0.1, count, 1e-5)[0] >= tight
    assert advanced_composition(0.1, 0.0, count, 1e-5)[0] >= tight
    assert PureDpComposition(0.1, 1e-5).epsilons(count) >= tight


@pytest.mark.parametrize("epsilon0, delta0, count", [(0.1, 0.0, 100), (0.5, 0.0, 30), (0.1, 1e-7, 300)])
def test_advanced_composition_upper_bounds_the_worst_case_pld(epsilon0, delta0, count):
    # The PLD built from (eps0, delta0) is the worst case over all (eps0, delta0)-DP mechanisms, so its k-fold
    # epsilon at delta = k delta0 + delta' is the optimal composition; no valid theorem may claim less.
    worst = pld_lib.from_privacy_parameters(common.DifferentialPrivacyParameters(epsilon0, delta0))
    epsilon, delta = advanced_composition(epsilon0, delta0, count, 1e-5)
    assert epsilon >= worst.self_compose(count).get_epsilon_for_delta(float(delta))
    if delta0 == 0:
        tight = worst.self_compose(count).get_epsilon_for_delta(1e-5)
        assert pure_advanced_composition(epsilon0, count, 1e-5)[0] >= tight
