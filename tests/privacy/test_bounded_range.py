"""Bounded-range composition (the ``tight`` calibration of seed 001's vertex sampling): the zCDP
route's values, its soundness against the worst-case bounded-range pairs computed exactly, and
its budget's inverse."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fedray.privacy.composition import (
    BoundedRangeComposition,
    bounded_range_budget,
    bounded_range_composition,
    pure_advanced_composition,
    pure_advanced_composition_budget,
    zcdp_epsilon,
)

SETTINGS = [(1, 1.0, 1e-6), (40, 0.1, 1e-5), (400, 0.05, 1e-6), (4000, 0.01, 1e-6)]


def _exact_delta(epsilon0: float, t: float, count: int, epsilon: float) -> float:
    """delta(epsilon) of ``count`` independent copies of the generalised randomised response with
    bounded range epsilon0 and offset t (Dong, Durfee & Rogers 2020, Sec. 4): two outcomes whose
    privacy losses are t and t - epsilon0 (every eps0-BR mechanism is a post-processing of one).
    Under P the first has probability q, with q e^-t + (1 - q) e^(eps0 - t) = 1 (Q sums to 1);
    the composed loss is j t + (count - j)(t - eps0) with j ~ Bin(count, q) and
    delta(eps) = E_P[(1 - e^(eps - loss))_+], summed exactly."""
    q = math.expm1(epsilon0 - t) / (math.exp(epsilon0 - t) - math.exp(-t))
    j = np.arange(count + 1)
    loss = j * t + (count - j) * (t - epsilon0)
    above = loss > epsilon
    return float(np.sum(stats.binom.pmf(j[above], count, q) * -np.expm1(epsilon - loss[above])))


def _worst_exact_delta(epsilon0: float, count: int, epsilon: float) -> float:
    return max(_exact_delta(epsilon0, t, count, epsilon) for t in np.linspace(0.02, 0.98, 49) * epsilon0)


def test_zcdp_conversion_matches_dp_accounting_and_beats_bun_steinke():
    """Catches a wrong conversion (a sign, a missing order range): the value must equal
    dp-accounting's own ZCDpEvent answer to within its coarser order grid, and stay below
    Bun & Steinke's rho + 2 sqrt(rho ln(1/delta))."""
    from dp_accounting import dp_event
    from dp_accounting.rdp import rdp_privacy_accountant

    for rho, delta in [(1e-3, 1e-6), (0.02, 1e-5), (0.3, 1e-6), (2.0, 1e-3)]:
        accountant = rdp_privacy_accountant.RdpAccountant()
        accountant.compose(dp_event.ZCDpEvent(rho))
        library = accountant.get_epsilon(delta)
        ours = zcdp_epsilon(rho, delta)
        assert ours <= library * (1 + 1e-9) and ours >= 0.95 * library, (rho, ours, library)
        assert ours <= rho + 2 * math.sqrt(rho * math.log(1 / delta))


@pytest.mark.parametrize("count, epsilon0, delta", SETTINGS)
def test_the_claim_holds_on_the_worst_bounded_range_pairs(count, epsilon0, delta):
    """Soundness, by an independent exact route: at the epsilon the zCDP route claims, no
    generalised randomised response (the extreme eps0-BR mechanisms) composed ``count`` times
    has a delta above the claim's."""
    epsilon, claimed_delta = bounded_range_composition(epsilon0, count, delta)
    assert _worst_exact_delta(epsilon0, count, float(epsilon)) <= claimed_delta


@pytest.mark.parametrize("count, epsilon0, delta", SETTINGS[1:])
def test_a_route_with_half_the_zcdp_parameter_is_caught(count, epsilon0, delta):
    """The weakened variant eps0^2/16 per draw (a halved KL bound) claims an epsilon at which an
    exact worst-case pair's delta exceeds the claim: the exact route has teeth."""
    weakened = zcdp_epsilon(count * epsilon0**2 / 16, delta)
    assert _worst_exact_delta(epsilon0, count, weakened) > delta


def test_bounded_range_halves_pure_dp_advanced_composition_at_scale():
    """What the route buys: at thousands of draws the composed epsilon is below half of Cor. 3.6's
    quantity for the same per-draw epsilon, and the per-draw budget more than doubles."""
    epsilon, _ = bounded_range_composition(0.01, 2000, 1e-6)
    advanced, _ = pure_advanced_composition(0.01, 2000, 1e-6)
    assert float(epsilon) < 0.45 * float(advanced)
    assert bounded_range_budget(1.0, 2000, 1e-6) > 2.3 * pure_advanced_composition_budget(1.0, 2000, 1e-6)


@pytest.mark.parametrize("count", [1, 3, 2000, 123_457])
def test_budget_is_the_largest_per_draw_epsilon_that_fits(count):
    """Catches an inverse on the wrong side of the target (over-spending) or far inside it."""
    budget = bounded_range_budget(1.0, count, 1e-6)
    rule = BoundedRangeComposition(budget, 1e-6)
    assert float(rule.epsilons(count)) <= 1.0
    assert float(BoundedRangeComposition(budget * (1 + 1e-6), 1e-6).epsilons(count)) > 1.0


def test_count_arrays_price_zero_as_zero_and_take_basic_where_it_is_smaller():
    rule = BoundedRangeComposition(np.array([[1.0], [0.01]]), 1e-6)
    spent = rule.epsilons(np.array([[1, 0, 2], [2000, 0, 1]]))
    assert spent.shape == (2, 3) and spent[0, 1] == 0 and spent[1, 1] == 0
    assert spent[0, 0] == 1.0 and spent[0, 2] == 2.0                 # basic: k eps0 below the zCDP route
    assert spent[1, 0] == pytest.approx(float(bounded_range_composition(0.01, 2000, 1e-6)[0]))
    assert np.all(rule.deltas(np.array([[1, 0, 2], [2000, 0, 1]])) == 1e-6)
