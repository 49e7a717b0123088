"""privacy.epsilon_grid: budgets carried as replicas of one run (no Ray)."""

from __future__ import annotations

import numpy as np
import pytest

from fedray.errors import ConfigError
from fedray.plan import make_plan
from experiments.report import split_by_setting
from fedray.runtime.driver import run
from tests.conftest import compose

SMALL = ["data=synthetic", "data.spec.num_silos=5", "data.spec.samples_per_silo=80", "data.spec.dim=4",
         "participation.silos_per_round=3", "num_rounds=4", "algorithm.batch_size=20",
         "algorithm.step_size=[0.2,0.8]", "repetitions=2", "progress=false", "privacy.enforce_budget=false"]


def test_grid_replicas_are_budget_blocks_of_repetitions_of_steps():
    plan = make_plan(compose(*SMALL, "privacy.epsilon_grid=[0.5,4]"))
    np.testing.assert_array_equal(plan.epsilon_levels, [0.5] * 4 + [4.0] * 4)
    np.testing.assert_array_equal(plan.step_sizes, [0.2, 0.8] * 4)
    np.testing.assert_array_equal(plan.repetitions, [0, 0, 1, 1] * 2)
    np.testing.assert_array_equal(plan.privacy.target_epsilon[:, 0], plan.epsilon_levels)


def _participants(plan, r):
    return plan.sampler.sample(plan.seed, plan.repetitions, r, plan.shape.num_silos)


@pytest.mark.parametrize("calibration", ["paper", pytest.param("accountant", marks=pytest.mark.slow)])
def test_each_budget_block_gets_the_noise_and_spend_of_a_plan_with_that_epsilon(calibration):
    grid = make_plan(compose(*SMALL, f"privacy.calibration={calibration}", "privacy.epsilon_grid=[0.5,4]"))
    for level in (0.5, 4.0):
        alone = make_plan(compose(*SMALL, f"privacy.calibration={calibration}", f"privacy.epsilon={level}"))
        rows = grid.epsilon_levels == level
        np.testing.assert_array_equal(grid.privacy.noise_multiplier[rows], alone.privacy.noise_multiplier)
        np.testing.assert_array_equal(grid.privacy.planned_epsilon[rows], alone.privacy.planned_epsilon)
        for r in range(grid.num_rounds):
            np.testing.assert_array_equal(_participants(grid, r)[rows], _participants(alone, r))


def test_a_budget_block_of_a_run_equals_a_run_with_that_epsilon():
    grid = run(make_plan(compose(*SMALL, "privacy.epsilon_grid=[0.5,4]")), inline=True)
    alone = run(make_plan(compose(*SMALL, "privacy.epsilon=4")), inline=True)
    # Equal up to BLAS summation order, which may differ with the replica count.
    np.testing.assert_allclose(grid.last_iterate[4:], alone.last_iterate, rtol=1e-10, atol=1e-13)
    np.testing.assert_array_equal(grid.epsilon_spent[4:], alone.epsilon_spent)


def test_the_batch_size_formula_uses_the_largest_budget_of_the_grid():
    grid = make_plan(compose(*SMALL, "algorithm.batch_size=null", "privacy.epsilon_grid=[0.5,4]"))
    top = make_plan(compose(*SMALL, "algorithm.batch_size=null", "privacy.epsilon=4"))
    assert grid.protocol.batch_size == top.protocol.batch_size


@pytest.mark.slow  # the refusal's advice is an accountant search (10-25 s); tests/privacy/test_ledger.py
# covers the guard in the fast tier
def test_the_budget_guard_names_the_replica_budget_that_overspends():
    with pytest.raises(Exception, match=r"exceeds privacy.epsilon = 4"):
        make_plan(compose(*SMALL[:-1], "privacy.calibration=paper", "privacy.accountant=rdp",
                          "privacy.epsilon_grid=[0.5,4]", "num_rounds=40", "participation.silos_per_round=5"))


@pytest.mark.parametrize("value, override", [
    ("[]", ()), ("[1,1]", ()), ("[0,2]", ()), ("[1,inf]", ()),
    ("[1]", ("algorithm=sdp_mb_sgd", "privacy=shuffle", "algorithm.batch_size=1")),
])
def test_bad_grids_are_refused_before_anything_runs(value, override):
    with pytest.raises(ConfigError, match="privacy.epsilon_grid"):
        make_plan(compose(*SMALL, *override, f"privacy.epsilon_grid={value}"))


def test_without_privacy_the_grid_is_ignored_like_epsilon():
    plan = make_plan(compose(*SMALL, "privacy=none", "privacy.epsilon_grid=[1,2]"))
    assert plan.num_replicas == 4 and plan.epsilon_levels is None


def test_the_report_reads_one_job_per_budget_of_a_grid_run():
    job = {"algorithm": "isrl_dp_mb_sgd", "private": True, "epsilon": float("nan"),
           "step_sizes": np.array([0.1, 1.0, 0.1, 1.0]), "repetitions": np.array([0, 0, 0, 0]),
           "train_loss": np.array([1.0, 2.0, 3.0, 4.0]), "test_error": np.array([0.1, 0.2, 0.3, 0.4]),
           "epsilon_spent": np.array([0.4, 0.5, 3.0, 3.5]), "l2_clip": np.full(4, 1.0, dtype=object)}
    parts = split_by_setting(job, [0.5, 0.5, 4.0, 4.0])
    assert [p["epsilon"] for p in parts] == [0.5, 4.0]
    np.testing.assert_array_equal(parts[1]["train_loss"], [3.0, 4.0])
    assert [p["epsilon_accountant"] for p in parts] == [0.5, 3.5]
