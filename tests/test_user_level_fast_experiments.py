"""Seed 002's experiment and benchmark scripts cannot rot: E2 on one reduced cell (every count
equals the formula, 1 and 3 groups agree), and the benchmark's numpy reference of Alg. 3 against
fedray's inline run (the same gradient count; the same law: mean excess risks within noise, at a
noise level that dominates them)."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from fedray.compose import compose_plan
from fedray.runtime.driver import run
from tests.conftest import REPO, load_script

pytestmark = pytest.mark.slow




def test_e2_counts_equal_the_formula_on_a_reduced_grid(tmp_path, monkeypatch):
    e2 = load_script(REPO / "experiments/user_level_fast/e2_counts/run.py")
    monkeypatch.setattr(e2, "HERE", tmp_path)
    monkeypatch.setattr(e2, "USERS", (1000,))
    monkeypatch.setattr(e2, "ITEMS", (4, 16))
    e2.main()
    rows = list(csv.DictReader(open(tmp_path / "results.csv")))
    assert len(rows) == 8 and all(r["equal"] == "True" and r["same_with_3_groups"] == "True" for r in rows)
    assert any(int(r["halted"]) > 0 for r in rows)          # the halting count is exercised


def test_the_benchmarks_numpy_reference_has_fedrays_law():
    bench = load_script(REPO / "experiments/benchmark/user_level_fast.py")
    n, m, d, reps = 1000, 16, 5, 24
    plan = compose_plan(["experiment=user_level_sphere", f"data.spec.num_silos={n}", f"data.spec.samples_per_silo={m}",
                         f"data.spec.dim={d}", f"repetitions={reps}", "privacy.epsilon=40", "privacy.delta=1e-6",
                         "algorithm.profile=exploratory", "algorithm.kappa=1e-2", "progress=false",
                         "evaluate_every=1000000"])
    result = run(plan, inline=True)
    fed = plan.dataset.load(plan.seed, plan.trial)
    output, halted, count, _ = bench.numpy_alg3(fed.x_train, fed.y_train, plan.protocol.resolved, 40.0, 1.0, 1.0, reps, 3)
    assert not halted.any() and not result.history[-1]["halted"].any()
    assert count == result.history[-1]["gradient_evaluations"][0] == plan.protocol.resolved["gradients_no_halt"]
    w_star = plan.dataset.optimum(plan.seed, plan.trial)
    ours = ((result.model[:, :, 0] - w_star) ** 2).sum(axis=1)
    theirs = ((output - w_star) ** 2).sum(axis=1)
    spread = np.sqrt(ours.var(ddof=1) / reps + theirs.var(ddof=1) / reps)
    assert abs(ours.mean() - theirs.mean()) < 4 * spread


def test_e8_lemma_checks_on_a_reduced_grid(monkeypatch):
    e8 = load_script(REPO / "experiments/user_level_fast/e8_lemmas/run.py")
    monkeypatch.setattr(e8, "USERS", (16, 64))
    monkeypatch.setattr(e8, "ITEMS", (4, 16, 64))
    monkeypatch.setattr(e8, "STEPS", (100, 1000))
    monkeypatch.setattr(e8, "STEP_SIZES", (0.1, 1.0))
    variance, stability = e8.variance_rows(), e8.stability_rows()
    for k in (16, 64):
        assert -1.1 <= e8.slope(variance, "items_m", "users_K", k) <= -0.9          # spec T8
    for m in (4, 16, 64):
        assert -1.1 <= e8.slope(variance, "users_K", "items_m", m) <= -0.9
    assert all(r["kept_fraction"] == 1.0 and r["halted"] == 0 for r in variance)
    assert max(r["ratio_q99"] for r in stability) < 5.0                                # spec T7


def test_e6_checks_lemma_d1_in_the_order_a_convex_loss_obeys(monkeypatch):
    e6 = load_script(REPO / "experiments/user_level_fast/e6_non_smooth/run.py")
    monkeypatch.setattr(e6, "POINTS", 3)
    monkeypatch.setattr(e6, "DRAWS", 500)
    rows = e6.smoothing_check()
    assert len(rows) == 9 and all(r["holds"] for r in rows)
    # antithetic pairs make the lower side exact; the upper side has room L r minus the smoothing gap
    assert all(r["lower_gap"] >= -1e-12 and 0 < r["upper_gap"] <= r["radius"] for r in rows)


def test_e5_reports_the_cheapest_setting_that_reaches_each_target(monkeypatch):
    e5 = load_script(REPO / "experiments/user_level_fast/e5_matched_accuracy/run.py")
    monkeypatch.setattr(e5, "CELLS", ((10, 2),))
    rows = [{"arm": "b2", "n": 10, "m": 2, "rounds": t, "threshold_constant": 1.0, "excess_mean": risk,
             "gradients_mean": 20.0 * t, "seconds": 0.1} for t, risk in ((5, 0.02), (10, 0.004), (20, 0.003))]
    table = {(r["arm"], r["target"]): r for r in e5.matched(rows)}
    assert table[("b2", 0.005)]["gradients"] == 200.0 and table[("b2", 0.005)]["setting"] == "rounds=10 threshold_constant=1.0"
    assert table[("b2", 0.002)]["setting"] == "not reached" and np.isnan(table[("alg3", 0.01)]["gradients"])
