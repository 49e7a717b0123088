"""Seed 002's parameter calculator: the spec's golden values (§6 T1, profile P, rel 1e-4) and the
complexity exponents of the log-free order calculator (§6 T3)."""

from __future__ import annotations

import numpy as np
import pytest

from fedray.protocols.user_level.phased_parameters import (
    Problem,
    accelerated_schedule,
    feasibility,
    order_gradients,
    phased_sgd_schedule,
    smoothed,
)

GOLDEN = Problem(users=1_000_000, items=100, dim=100, epsilon=1.0, delta=1e-9)
REL = 1e-4


def test_alg1_reproduces_the_golden_values():
    s = phased_sgd_schedule(GOLDEN)
    assert (s.exponent, s.step_size, s.groups) == pytest.approx((1.833333, 1.0e-5, 4313.968), rel=REL)
    assert len(s.phase_users) == 19
    assert s.users_condition == pytest.approx((251188.6, 51575.8), rel=REL)
    assert (s.phase_users[0], s.step_sizes[0], s.group_users[0], s.steps[0], s.thresholds[0], s.noise_std[0]) == \
        pytest.approx((62482.43, 2.8062e-6, 14.4837, 1448.37, 2.4591, 67.999), rel=REL)
    assert (s.phase_users[1], s.step_sizes[1], s.thresholds[1], s.noise_std[1]) == \
        pytest.approx((58298.17, 7.8745e-7, 0.66654, 18.432), rel=REL)
    assert (s.phase_users[18], s.step_sizes[18]) == pytest.approx((17943.37, 3.2668e-16), rel=REL)
    assert s.gradients == pytest.approx(6.8303e7, rel=REL) and s.gradients <= 1e8
    assert s.feasible


def test_alg3_reproduces_the_golden_values_and_caps_the_batch():
    s = accelerated_schedule(GOLDEN)
    assert (s.regularization, s.exponent, s.threshold) == pytest.approx((1.01e-4, 2.966667, 2.302585), rel=REL)
    assert s.users_condition[1] == pytest.approx(71296.1, rel=REL) and s.users_condition[0] > s.users_condition[1]
    assert (s.regularizations[0], s.steps[0], s.batch_printed[0], s.noise_std[0]) == \
        pytest.approx((7.8955e-4, 842.485, 1.25622e7, 42.940), rel=REL)
    assert s.batch_printed[0] / s.phase_users[0] == pytest.approx(201.05, rel=REL)
    assert s.batch[0] == s.phase_users[0]                        # the cap is active
    assert (s.regularizations[1], s.steps[1], s.noise_std[1]) == pytest.approx((6.1721e-3, 316.115, 28.191), rel=REL)
    assert s.gradients == pytest.approx(float((s.steps * s.batch).sum() * 100))


def test_the_smoothed_problem_has_thm_d3s_radius_and_smoothness():
    problem, lam = smoothed(GOLDEN)
    radius = np.sqrt(GOLDEN.dim) * GOLDEN.diameter / (GOLDEN.epsilon * GOLDEN.users * np.sqrt(GOLDEN.items))
    assert radius == pytest.approx(1.0e-6) and problem.smoothness == pytest.approx(1.0e7)
    assert problem.smoothness == pytest.approx(GOLDEN.lipschitz * np.sqrt(GOLDEN.dim) / radius)
    assert lam == pytest.approx(1e-4)


def _slopes(xs, ys) -> np.ndarray:
    return np.diff(np.log(ys)) / np.diff(np.log(xs))


def test_the_smooth_count_grows_like_nm_to_the_9_8():
    sizes = np.logspace(8, 12, 5)                                # n = m = d, so n m from 1e16 to 1e24
    counts = [order_gradients(Problem(int(n), int(n), int(n), 1.0, float(n) ** -3)) for n in sizes]
    slopes = _slopes(sizes**2, counts)
    assert np.all((1.10 <= slopes) & (slopes <= 1.13)), slopes


def test_the_smoothed_count_grows_like_n_to_the_11_8_and_m_to_the_5_4():
    def count(n: float, m: float) -> float:
        problem, lam = smoothed(Problem(int(n), int(m), 10, 1.0, 1e-9))
        return order_gradients(problem, regularization=lam)

    ns = np.logspace(6, 12, 4)
    in_n = _slopes(ns, [count(n, 100) for n in ns])
    assert np.all((1.35 <= in_n) & (in_n <= 1.40)), in_n
    ms = np.logspace(2, 6, 5)
    in_m = _slopes(ms, [count(1e6, m) for m in ms])
    assert np.all((1.22 <= in_m) & (in_m <= 1.26)), in_m


def test_the_feasibility_report_says_profile_p_is_noise_at_the_golden_size():
    notes = feasibility(GOLDEN)
    assert "~ 680 R (pure noise)" in notes[0]
    assert any("K_i > n_i in 19 of 19 phases" in note for note in notes)
    assert not any("infeasible" in note for note in notes)
    small = feasibility(Problem(users=10_000, items=10, dim=10, epsilon=1.0, delta=1e-6))
    assert any(note.startswith("Alg. 1 is infeasible") for note in small)


def test_e1_script_writes_its_tables_with_the_readmes_slopes(tmp_path, monkeypatch):
    import importlib.util

    from tests.conftest import REPO

    spec = importlib.util.spec_from_file_location("e1_complexity", REPO / "experiments/user_level_fast/e1_complexity/run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "HERE", tmp_path)
    module.main()
    import csv

    slopes = list(csv.DictReader(open(tmp_path / "slopes.csv")))
    last = {(r["case"], r["count"]): float(r["local_slope"]) for r in slopes}
    assert last[("smooth", "alg3_order")] == pytest.approx(1.124, abs=5e-4)
    assert last[("nonsmooth_in_n", "alg3_order")] == pytest.approx(1.376, abs=5e-4)
    assert (tmp_path / "figure.png").exists()
