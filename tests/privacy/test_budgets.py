"""Per-silo budgets, calibration modes and the budget guard, through the planning step."""

import numpy as np
import pytest

from fedray.errors import BudgetError, ConfigError
from fedray.plan import make_plan
from fedray.privacy.accounting import participation_epsilon
from fedray.privacy.budgets import per_silo
from tests.conftest import compose

E1 = ("experiment=isrl_dp_convex",)


def test_paper_mode_reproduces_the_formula_and_reports_both_epsilons():
    plan = make_plan(compose(*E1))
    priv = plan.privacy
    # K = ceil(1238 sqrt(3/140)) = 182; multiplier = K sqrt(8 R ln(1/delta)) / (n eps)
    assert plan.protocol.batch_size == 182
    expected = 182 * np.sqrt(8 * 35 * np.log(1238**2)) / (1238 * 3)
    np.testing.assert_allclose(priv.noise_multiplier, expected)
    np.testing.assert_allclose(priv.nominal_epsilon, 3.0)
    counts = plan.sampler.counts(plan.seed, plan.repetitions, plan.num_rounds, plan.shape.num_silos)[0]
    assert priv.planned_epsilon[0].max() == pytest.approx(
        participation_epsilon(expected, 182, 1238, 1, int(counts.max()), 1 / 1238**2, "rdp"))
    assert priv.planned_epsilon.max() <= 3.0


@pytest.mark.slow
def test_budget_guard_refuses_an_overspending_schedule_and_says_what_fits():
    # With every silo in all 35 rounds, the paper's noise costs 3.003 > 3 under the RDP accountant.
    with pytest.raises(BudgetError) as err:
        make_plan(compose(*E1, "participation.silos_per_round=25"))
    message = str(err.value)
    assert "planned epsilon 3.003" in message and "privacy.epsilon = 3" in message
    assert "noise multiplier >= 3.09" in message and "at most 34 participations would fit" in message


def test_the_pld_accountant_accepts_the_same_schedule():
    plan = make_plan(compose(*E1, "participation.silos_per_round=25", "privacy.accountant=pld"))
    assert 1.3 < plan.privacy.planned_epsilon.max() < 1.5


def test_enforce_budget_false_runs_and_reports_the_overspend():
    plan = make_plan(compose(*E1, "participation.silos_per_round=25", "privacy.enforce_budget=false"))
    assert plan.privacy.planned_epsilon.max() == pytest.approx(3.003, abs=1e-3)


@pytest.mark.parametrize("accountant", [pytest.param("rdp", marks=pytest.mark.slow), "pld"])
def test_accountant_mode_meets_the_target_with_less_noise_than_the_paper(accountant):
    paper = make_plan(compose(*E1, "privacy.epsilon=0.75", f"privacy.accountant={accountant}",
                              "participation.silos_per_round=25", "privacy.enforce_budget=false"))
    tuned = make_plan(compose(*E1, "privacy=accountant", "privacy.epsilon=0.75", f"privacy.accountant={accountant}",
                              "participation.silos_per_round=25"))
    assert tuned.privacy.planned_epsilon.max() <= 0.75
    assert tuned.privacy.planned_epsilon.max() == pytest.approx(0.75, rel=0.02)
    assert tuned.privacy.noise_multiplier[0, 0] < paper.privacy.noise_multiplier[0, 0]
    # the paper's formula would claim more than 0.75 for the smaller noise
    assert tuned.privacy.nominal_epsilon[0, 0] > 0.75


def test_heterogeneous_budgets_calibrate_each_silo_on_its_own():
    plan = make_plan(compose(*E1, "privacy.epsilon={values: [0.75, 3.0], fractions: [0.4, 0.6]}",
                             "algorithm.batch_size=182"))
    z = plan.privacy.noise_multiplier[0]
    assert np.all(z[:10] == z[0]) and np.all(z[10:] == z[10])
    assert z[0] == pytest.approx(4 * z[10])  # the paper's multiplier is proportional to 1/eps
    np.testing.assert_array_equal(plan.privacy.target_epsilon[:, :10], 0.75)
    assert np.all(plan.privacy.planned_epsilon <= plan.privacy.target_epsilon)


def test_per_silo_lists_and_errors():
    np.testing.assert_array_equal(per_silo("privacy.epsilon", [1, 2, 3], 3, 0, np.inf, "positive"), [1, 2, 3])
    with pytest.raises(ConfigError, match=r"privacy.epsilon must be a number or a list of 25 numbers"):
        make_plan(compose(*E1, "privacy.epsilon=[1.0,2.0]"))
    with pytest.raises(ConfigError, match="privacy.delta"):
        make_plan(compose(*E1, "privacy.delta=[0.5,2.0]"))


def test_trust_model_must_be_one_the_algorithm_supports():
    with pytest.raises(ConfigError, match=r"privacy.trust_model must be one of \('isrl_dp', 'none'\)"):
        make_plan(compose(*E1, "privacy.trust_model=central"))


def test_logged_noise_is_what_some_silo_added_under_per_silo_budgets():
    """Silos at eps 0.75 and 3 add different noise: the run reports the smallest and the largest,
    never their mean (a value no silo used)."""
    from fedray.runtime.driver import run

    plan = make_plan(compose("data=synthetic", "data.spec.num_silos=5", "data.spec.samples_per_silo=100",
                             "data.spec.dim=3", "participation.silos_per_round=5", "num_rounds=3",
                             "privacy.l2_clip=1.0", "privacy.enforce_budget=false", "progress=false",
                             "privacy.epsilon={values: [0.75, 3.0], fractions: [0.4, 0.6]}"))
    result = run(plan, inline=True)
    multipliers = plan.privacy.noise_multiplier[0]
    stds = multipliers * 2.0 * 1.0 / plan.protocol.batch_size          # multiplier x replace-one sensitivity 2 L / K
    assert stds.min() < stds.max()
    for metrics in result.history:
        assert metrics["noise_std_min"][0] == pytest.approx(stds.min()) and metrics["noise_std_max"][0] == pytest.approx(stds.max())
    assert result.constants["final_noise_std_min"] == pytest.approx(stds.min())
    assert result.constants["final_noise_std_max"] == pytest.approx(stds.max())
    resolved = plan.protocol.resolved
    assert (resolved["noise_multiplier_min"], resolved["noise_multiplier_max"]) == (multipliers.min(), multipliers.max())
