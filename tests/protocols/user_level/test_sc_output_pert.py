"""SCOutputPert in certificate mode (seed-003 spec §2.1-2.3b, §7 T1, T2, T9, T15): the deletion
budget's law, the worked constants, the certificate's deletion bound on real solves, releases
and refusals."""

import math

import numpy as np
import pytest
from scipy import stats

from fedray.core.objective import DataObjective
from fedray.errors import ConfigError
from fedray.plan import make_plan
from fedray.protocols.user_level.deletion import (
    CertifiedPerturbation,
    TruncatedDiscreteLaplace,
    kappa,
    mean_deletion_sensitivity,
)
from fedray.protocols.user_level.solver import minimize_ridge
from fedray.runtime.driver import InlineGroups, run
from tests.conftest import compose

USERS = ["experiment=sc_output_pert_synthetic", "data.spec.num_silos=300", "data.spec.samples_per_silo=40",
         "data.spec.dim=4", "progress=false"]


@pytest.mark.parametrize("epsilon, delta", [(0.5, 2.1e-6), (0.25, 1e-3), (1.0, 0.05)])
def test_deletion_budget_law(epsilon, delta):
    law = TruncatedDiscreteLaplace(epsilon, delta)
    pmf, k = law.pmf(), law.kappa
    assert pmf.size == 2 * k + 1 and math.isclose(pmf.sum(), 1.0)
    assert pmf[0] == pmf[-1] <= math.exp(-epsilon) * delta                        # (P1)
    assert np.all(pmf[1:] / pmf[:-1] <= math.exp(epsilon) * (1 + 1e-12))           # (P2)
    assert np.all(pmf[:-1] / pmf[1:] <= math.exp(epsilon) * (1 + 1e-12))
    rng = np.random.default_rng(0)
    draws = np.array([law.sample(rng) for _ in range(20_000)])
    observed = np.bincount(draws, minlength=pmf.size)
    keep = pmf * draws.size >= 5
    expected = pmf[keep] * draws.size
    statistic = ((observed[keep] - expected) ** 2 / expected).sum()
    assert stats.chi2.sf(statistic, keep.sum() - 1) > 1e-3


def test_worked_constants():
    # spec §2.9 / T2: eps = 1, delta = 1e-5 -> delta2 = 2.1194e-6, kappa = 28, N0 = 226, c_cert ~ 1.15e7 at n = 1e3
    mech = CertifiedPerturbation(1.0, 1e-5, 1e-3, 2.0, 1.0, 1000, 100)
    assert mech.delta2 == pytest.approx(2.1194e-6, rel=1e-4) and mech.kappa == 28 and mech.min_users == 226
    assert math.sqrt(2 * math.log(2 / mech.delta2)) == pytest.approx(5.25, abs=5e-3)
    assert mech.noise_std * 1.0 * 1000 * math.sqrt(100) / 2.0 == pytest.approx(1.15e7, rel=0.01)
    assert kappa(0.5, 1e-6 / (math.e + 2)) == 32 and CertifiedPerturbation(0.5, 1e-5, 1e-3, 2, 1, 1000, 1).kappa == 53
    delta0 = mech.certificate(mech.gamma0, 0.0) - 2 * mech.tolerance       # (2r + 1) gamma0 / (mu (n - r - 1))
    assert delta0 == pytest.approx(225 * 5 * 2.0 * math.sqrt(math.log(1e6) / 100) / 887, rel=1e-12)
    assert mech.tolerance == pytest.approx(delta0 / 100) and mech.sensitivity == pytest.approx(1.04 * delta0)


def test_certificate_bounds_the_deletion_of_any_small_set():
    """||theta(x) - theta*(x_{-S})|| <= (res + s gamma / (n - s)) / mu for solves on real shards
    (users deleted by weight 0), and the bound is not vacuous."""
    plan = make_plan(compose(*USERS, "privacy=none", "data.spec.num_silos=60", "data.spec.samples_per_silo=5",
                             "algorithm.strong_convexity=0.5"))
    program = plan.protocol.build(None)
    data = DataObjective(InlineGroups(plan, 2), program.objective, 60)
    shape, mu = program.model_shape, program.strong_convexity
    full = minimize_ridge(data, shape, mu, program.objective.smoothness, 1e-6)
    per_user = data.unit_gradients(full.params)[:, 0].reshape(60, -1)
    gamma = np.linalg.norm(per_user - per_user.mean(axis=0), axis=1).max()
    rng = np.random.default_rng(1)
    ratios = []
    for size in (1, 2, 3) * 5:
        deleted = rng.choice(60, size=size, replace=False)
        weights = np.ones(60)
        weights[deleted] = 0.0
        reduced = minimize_ridge(data, shape, mu, program.objective.smoothness, 1e-12, weights).params
        bound = (full.gradient_norm + size * gamma / (60 - size)) / mu
        ratios.append(np.linalg.norm(full.params - reduced) / bound)
    assert max(ratios) <= 1.0 and max(ratios) > 0.2


def test_release_is_the_certified_solution_plus_independent_noise():
    plan = make_plan(compose(*USERS, "repetitions=40"))
    result = run(plan, inline=True, groups=InlineGroups(plan, 3))
    history = result.history[0]
    assert np.all(history["released"] == 1) and np.all(history["certificate"] <= plan.protocol.resolved["sensitivity_max"])
    sigma = history["noise_std"][0]
    exact = run(make_plan(compose(*USERS, "privacy=none")), inline=True).outputs["released"][0]
    noise = (result.outputs["released"] - exact[None]) / sigma                   # 40 x 4 draws
    assert abs(noise.std() - 1) < 0.15 and abs(noise.mean()) < 0.15
    assert np.unique(noise[:, 0, 0]).size == 40
    assert np.all(np.isinf(result.epsilon_spent))       # the preset aborts on a failed check: not DP


def test_a_failed_certificate_aborts_only_in_the_non_private_mode():
    """Heterogeneous users (gradient spread above gamma0) fail the certificate: with
    on_unstable=abort_not_private the output is no release (NaN, released = 0), never the
    unprotected solution; the ledger reports epsilon = inf and `released` is a diagnostic."""
    plan = make_plan(compose(*USERS, "data.spec.samples_per_silo=2000", "data.spec.heterogeneity=3.0",
                             "algorithm.beta=0.5"))
    result = run(plan, inline=True)
    assert result.history[0]["released"][0] == 0
    assert result.history[0]["certificate"][0] > plan.protocol.resolved["sensitivity_max"]
    assert np.all(np.isnan(result.outputs["released"])) and np.all(np.isinf(result.epsilon_spent))
    assert "released" in result.diagnostics and "noise_std" not in result.diagnostics


@pytest.mark.parametrize("override, key", [
    ("data.spec.num_silos=200", "data.spec.num_silos"),            # below N0 = 226
    ("privacy.epsilon=2", "privacy.epsilon"),
    ("privacy.calibration=accountant", "privacy.calibration"),
    ("algorithm.beta=1.5", "algorithm.beta"),
    ("algorithm.strong_convexity=0", "algorithm.strong_convexity"),
])
def test_bad_settings_are_refused_at_planning(override, key):
    with pytest.raises(ConfigError) as err:
        make_plan(compose(*USERS, override))
    assert err.value.key == key
    if key == "data.spec.num_silos":
        assert "N0 = 226" in str(err.value)


def test_few_users_run_when_asked():
    plan = make_plan(compose(*USERS, "data.spec.num_silos=200", "algorithm.allow_few_users=true"))
    assert plan.protocol.resolved["min_users"] == 226


MEANS = ["experiment=sc_output_pert_means", "data.spec.num_silos=400", "data.spec.items_per_user=1000000",
         "progress=false"]


def test_exact_mode_releases_the_users_mean_checked_by_the_sorted_formula():
    """Exact mode (spec §2.3, E1): Delta_{4 kappa} of the 1-D mean by its exact formula, compared
    with Delta_exact; the release is the users' mean plus sigma N(0, 1) per replica."""
    plan = make_plan(compose(*MEANS, "repetitions=30"))
    result = run(plan, inline=True, groups=InlineGroups(plan, 2))
    mechanism = plan.protocol.build(None).mechanisms[0]
    points = plan.dataset.load(plan.seed, plan.trial).x_train[:, 0, 0]
    history = result.history[0]
    assert history["certificate"][0] == pytest.approx(mean_deletion_sensitivity(points, 4 * mechanism.kappa), rel=1e-12)
    assert np.all(history["released"] == 1) and history["certificate"][0] <= mechanism.sensitivity
    noise = (result.outputs["released"][:, 0, 0] - points.mean()) / mechanism.noise_std
    assert abs(noise.std() - 1) < 0.3 and abs(noise.mean()) < 0.4 and np.unique(noise).size == 30
    # Delta_exact = 5 G sqrt((4 kappa + 1) ln n + ln(2 / beta)) / (mu (n - 4 kappa - 1) sqrt(m)), G = 2, mu = 1
    assert mechanism.sensitivity == pytest.approx(
        10 * np.sqrt(113 * np.log(400) + np.log(2e3)) / (287 * 1e3), rel=1e-12)


def test_exact_mode_releases_nothing_for_heterogeneous_users():
    plan = make_plan(compose(*MEANS, "data.spec.concentration=2.0"))
    result = run(plan, inline=True)
    assert result.history[0]["released"][0] == 0 and np.isnan(result.outputs["released"]).all()
    assert result.history[0]["certificate"][0] > plan.protocol.build(None).mechanisms[0].sensitivity
    assert np.all(result.epsilon_spent == 1.0)


@pytest.mark.parametrize("overrides", [[*MEANS, "data.spec.dim=3"], USERS])
def test_exact_mode_needs_a_linear_loss_in_one_dimension(overrides):
    with pytest.raises(ConfigError) as err:
        make_plan(compose(*overrides, "algorithm.mode=exact"))
    assert err.value.key == "algorithm.mode"


@pytest.mark.parametrize("overrides", [USERS, [*MEANS, "algorithm.on_unstable=abort_not_private"]])
def test_the_abort_mode_says_it_is_not_dp(overrides):
    # spec A16: releasing nothing on a failed check instead of Alg. 1's search leaks that bit
    plan = make_plan(compose(*overrides))
    statement = plan.privacy.statement()
    assert any(text.startswith("NOT DP") for text in statement["non_private_inputs"])
    assert statement["epsilon_per_unit_max"] == np.inf and np.all(plan.privacy.nominal_epsilon == 1.0)
    assert "NOT DP" in plan.privacy.summary()


def test_exact_mode_searches_and_claims_its_budget():
    plan = make_plan(compose(*MEANS))
    statement = plan.privacy.statement()
    assert statement["non_private_inputs"] == [] and statement["epsilon_per_unit_max"] == 1.0
    assert plan.protocol.resolved["on_unstable"] == "search" and plan.protocol.resolved["fallback_solves"] == 0


def test_certificate_mode_without_an_affordable_search_is_refused():
    """The plan decides from public sizes alone whether Alg. 1's enumerated search could run: at
    n = 300, (eps, delta) = (1, 1e-5) it could evaluate more than 1e18 sub-datasets, so a DP run is refused."""
    with pytest.raises(ConfigError) as err:
        make_plan(compose(*USERS, "algorithm.on_unstable=search"))
    assert err.value.key == "algorithm.on_unstable" and "abort_not_private" in str(err.value)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError) as err:
        make_plan(compose(*USERS, "algorithm.on_unstable=abort"))
    assert err.value.key == "algorithm.on_unstable"


def test_a_linear_loss_is_solved_in_closed_form_with_its_residual_computed():
    plan = make_plan(compose(*MEANS, "algorithm.mode=certificate", "data.spec.dim=3", "privacy=none"))
    result = run(plan, inline=True, groups=InlineGroups(plan, 2))
    points = plan.dataset.load(plan.seed, plan.trial).x_train[:, 0, :]
    np.testing.assert_allclose(result.outputs["released"][0, :, 0], points.mean(axis=0), rtol=1e-12)
    assert result.history[0]["solver_calls"][0] == 2 and result.history[0]["residual"][0] < 1e-15


@pytest.mark.parametrize("override, key, named", [
    ("data.spec.num_silos=100", "data.spec.num_silos", "4 kappa + 2 = 114"),     # below the floor allow_few_users keeps
    ("algorithm.feature_bound=0.5", "algorithm.feature_bound", "means of items"),
])
def test_refusals_allow_few_users_cannot_lift(override, key, named):
    with pytest.raises(ConfigError) as err:
        make_plan(compose(*MEANS, "algorithm.allow_few_users=true", override))
    assert err.value.key == key and named in str(err.value)


def test_the_statement_says_replicas_compose():
    statement = make_plan(compose(*MEANS, "repetitions=3")).privacy.statement()
    assert "per replica" in statement["replicas"] and "sum of their epsilons" in statement["replicas"]



def test_a_failed_certificate_runs_alg_1s_search_over_the_solver_map():
    """The DP fallback end to end in certificate mode on a federation small enough to enumerate:
    10 users of m = 10^10 items (d = 1, closed-form solves), user 0's items all +1, fail the
    certificate; with a mechanism of kappa = 2 (eps2 = 0.9, delta2 = 0.41: at most 1,023 solves)
    each replica draws R1 and releases f(x_{-S*}) + sigma z with S* Alg. 1's enumerated choice
    ({0}: deleting the extreme user), or BOT when R1 = 0 leaves Stable(R1) empty."""
    from dataclasses import replace

    from fedray.privacy.mechanisms import PhaseGaussianNoise
    from fedray.protocols.user_level.deletion import DelOutputPert
    from tests.protocols.user_level.test_sc_output_pert_audit import ExtremeUser

    plan = make_plan(compose(*MEANS, "algorithm.mode=certificate", "privacy=none", "data.spec.num_silos=10",
                             "repetitions=4"))
    mechanism = CertifiedPerturbation(1.8, 0.41 * (math.exp(1.8) + 2), 1e-3, 2.0, 1.0, 10, 10**10)
    assert mechanism.kappa == 2 and mechanism.delta2 == pytest.approx(0.41)
    sigma = np.full((4, 1), mechanism.noise_std)          # the mechanism's Gaussian step, as the planner builds it
    step = PhaseGaussianNoise(sigma, sigma.copy(), 1.8, 0.41 * (math.exp(1.8) + 2))
    searching = replace(plan, dataset=ExtremeUser(**vars(plan.dataset)),
                        protocol=replace(plan.protocol, mechanisms=(mechanism,) * 4, noise=step,
                                         resolved={**plan.protocol.resolved, "on_unstable": "search"}))
    result = run(searching, inline=True)
    history = result.history[0]
    assert np.all(history["certificate"] > mechanism.sensitivity)                   # the fast path fails
    points = searching.dataset.load(plan.seed, plan.trial).x_train[:, 0, 0]
    assert points[0] == 1.0

    def f(deleted):
        return np.array([np.delete(points, list(deleted)).mean()])

    budgets = history["deletion_budget"].astype(int)
    for replica, budget in enumerate(budgets):
        expected = DelOutputPert(0.9, 0.41, mechanism.sensitivity).search(f, 10, int(budget))
        output = result.outputs["released"][replica, 0, 0]
        assert (expected is None) == (budget == 0)
        if expected is None:
            assert history["released"][replica] == 0 and np.isnan(output)
        else:
            assert expected[0] == (0,) and history["deleted_users"][replica] == 1
            z = (output - expected[1][0]) / mechanism.noise_std
            assert 0 < abs(z) < 6
    assert np.unique(result.outputs["released"][budgets > 0]).size == (budgets > 0).sum()


def test_where_s_empty_passes_the_search_releases_the_fast_path_bit_for_bit():
    """E1's preset passes S = {} on every replica: the DP search's outputs equal, bit for bit, those
    of the abort mode (the code path every committed number came from)."""
    searched = run(make_plan(compose(*MEANS, "repetitions=5")), inline=True)
    aborted = run(make_plan(compose(*MEANS, "repetitions=5", "algorithm.on_unstable=abort_not_private")), inline=True)
    assert np.all(searched.history[0]["deleted_users"] == 0)
    assert np.array_equal(searched.outputs["released"], aborted.outputs["released"])
