"""Seed 001's parameter rules against the spec's golden values (§3.1, §3.3, §7 tests 7, 16, 17)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedray.errors import ConfigError
from fedray.privacy.composition import pure_advanced_composition
from fedray.protocols.mirror_descent.calibration import (
    PAPER_VERTEX_CONSTANT, VERTEX_CONSTANTS, bias_reduced_parameters, check_privacy_range, draw_epsilon, draws_per_step,
    explicit_gap_bound, log_dimensions, private_step_size, sgd_schedule, vertex_constant,
)

N, EPS, DELTA = 100_000, 1.0, 1e-6


@pytest.mark.parametrize("regime, steps, draws, batch, tau_priv", [
    ("first_order", 897, 65, 111, 7.6710e-3),
    ("second_order", 2069, 12, 48, 4.9214e-3),
    ("bilinear", 7238, 1, 13, 1.8168e-3),
])
def test_alg1_schedules_reproduce_the_golden_values(regime, steps, draws, batch, tau_priv):
    schedule = sgd_schedule(regime, N, EPS, DELTA, 1000, 1000, 1.0)
    assert (schedule.num_steps, schedule.draws, schedule.batch_size) == (steps, draws, batch)
    assert schedule.private_step == pytest.approx(tau_priv, rel=5e-5)
    assert schedule.step_size == min(schedule.private_step, schedule.utility_step)
    # Every regime composes its 2 T (K + 1) draws at tau_priv to eps/2 + eps^2/(16 ln(1/delta)).
    per_draw = draw_epsilon(schedule.private_step, 1.0, batch)
    composed, _ = pure_advanced_composition(per_draw, steps * draws_per_step(draws), DELTA)
    assert float(composed) == pytest.approx(0.5045239, abs=5e-7)
    assert EPS / 2 + EPS**2 / (16 * math.log(1 / DELTA)) == pytest.approx(0.5045239, abs=5e-8)


def test_first_order_utility_step_and_bilinear_draw_budget():
    assert sgd_schedule("first_order", N, EPS, DELTA, 1000, 1000, 1.0).utility_step == pytest.approx(0.12410, rel=5e-5)
    bilinear = sgd_schedule("bilinear", N, EPS, DELTA, 1000, 1000, 1.0)
    assert draw_epsilon(bilinear.private_step, 1.0, 13) == pytest.approx(5.5903e-4, rel=5e-5)
    assert bilinear.num_steps * draws_per_step(1) == 28952


def test_private_step_is_linear_in_eps_and_batch():
    base = private_step_size(13, 7238, 1, 1.0, DELTA, 1.0)
    assert private_step_size(13, 7238, 1, 3.0, DELTA, 1.0) == pytest.approx(3 * base, rel=1e-12)
    assert private_step_size(39, 7238, 1, 1.0, DELTA, 1.0) == pytest.approx(3 * base, rel=1e-12)


def test_non_private_schedule_takes_one_sample_per_step_at_the_utility_step():
    schedule = sgd_schedule("bilinear", 5000, None, None, 8, 8, 1.0)
    assert (schedule.num_steps, schedule.draws, schedule.batch_size) == (5000, 1, 1)
    assert schedule.step_size == pytest.approx(math.sqrt(log_dimensions(8, 8) / 5000))


@pytest.mark.parametrize("constant, levels, moment, stop, tau, alpha", [
    (PAPER_VERTEX_CONSTANT, 6, 56.272, 5332.5, 5.5402e-3, 1.06650e-2),
    (VERTEX_CONSTANTS["safe"], 5, 47.062, 2194.5, 9.4436e-3, 4.3890e-3),
])
def test_alg3_fixed_point_reproduces_the_golden_values(constant, levels, moment, stop, tau, alpha):
    ell = log_dimensions(100, 100)
    got = bias_reduced_parameters(1_000_000, 1.0, DELTA, ell, 1.0, 1.0, 0.1, constant)
    assert got.levels == levels
    assert got.moment == pytest.approx(moment, rel=2e-5)
    assert got.stop == pytest.approx(stop, rel=5e-5)
    assert got.step_size == pytest.approx(tau, rel=5e-5)
    assert got.batch_factor == pytest.approx(alpha, rel=5e-5)
    # First branch: U = n alpha / 2 = the privacy bound eps^2 / (48 ln(1/delta) (c_v tau alpha L0)^2).
    assert got.stop == pytest.approx(1_000_000 * got.batch_factor / 2, rel=1e-9)
    privacy_bound = 1.0 / (48 * math.log(1 / DELTA) * (constant * got.step_size * got.batch_factor) ** 2)
    assert got.stop == pytest.approx(privacy_bound, rel=1e-9)
    assert got.levels == math.floor(math.log2(math.sqrt(got.stop)))


def test_alg3s_vertex_constant_is_the_estimators_range_and_the_safe_constant_covers_it():
    # C_6 = 2 - 1/64 = 1.984375: 2 (4 C_6 + 2) = 2 (7.9375 + 2) = 19.875; C_5 = 1.96875: 19.75; C_0 = 1: 12
    assert (vertex_constant(6), vertex_constant(5), vertex_constant(0)) == (19.875, 19.75, 12.0)
    for levels in range(40):
        weight = sum(2.0**-k for k in range(levels + 1))            # w = C_M 2^N at N = 0 (the largest per-draw loss)
        parts = [weight * (a - b) + e for a in (-1, 1) for b in (-1, 1) for e in (-1, 1)]
        assert vertex_constant(levels) == pytest.approx(2 * (max(parts) - min(parts)), rel=1e-15)
        assert PAPER_VERTEX_CONSTANT < vertex_constant(levels) <= VERTEX_CONSTANTS["safe"]


def test_alg3_refuses_a_dataset_too_small_for_four_levels_of_budget():
    with pytest.raises(ConfigError, match="U >= 4"):
        bias_reduced_parameters(50, 0.1, DELTA, log_dimensions(100, 100), 1.0, 1.0, 0.1)


@pytest.mark.parametrize("epsilon, delta, key", [
    (8 * math.log(1e6), 1e-6, "privacy.epsilon"), (0.0, 1e-6, "privacy.epsilon"), (1.0, 1.0, "privacy.delta"),
    (1.0, 0.0, "privacy.delta"),
])
def test_the_theorems_range_of_eps_and_delta_is_enforced(epsilon, delta, key):
    with pytest.raises(ConfigError, match=key):
        check_privacy_range(epsilon, delta)


def _bound_optimal(n_eps: float, d: int) -> float:
    """The explicit bound of the bilinear regime minimised over T (n = n_eps, eps = 1) with the
    optional rule tau = min(sqrt(2 ell / (5 L0^2 T)), tau_priv)."""
    ell, best = log_dimensions(d, d), math.inf
    for steps in np.unique(np.geomspace(10, n_eps, 400).astype(int)):
        batch = int(n_eps) // steps
        tau = min(math.sqrt(2 * ell / (5 * steps)), private_step_size(batch, steps, 1, 1.0, DELTA, 1.0))
        best = min(best, explicit_gap_bound(tau, steps, 1, ell, 1.0, 1.0, 0.0, "bilinear"))
    return best


@pytest.mark.parametrize("n_eps, values", [
    (1e7, (0.070, 0.138, 0.197)), (1e8, (0.022, 0.044, 0.062)),
])
def test_explicit_bound_at_its_optimal_T_reproduces_the_spec(n_eps, values):
    # Spec §3.1: L0 = L1 = 1, delta = 1e-6, d = 16, 1024, 65536 (the ratio across d ~ (ell ratio)^{3/4}).
    got = [_bound_optimal(n_eps, d) for d in (16, 1024, 65536)]
    np.testing.assert_allclose(got, values, atol=1.5e-3)


def test_explicit_bound_is_vacuous_at_n_eps_1e5_and_loose_at_1e6():
    assert _bound_optimal(1e5, 1024) > 1 and 0.4 < _bound_optimal(1e6, 1024) < 0.5
