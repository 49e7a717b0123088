"""Phased-ERM / Phased-SCO (seed-003 Alg. 3 and 4, spec §6 T2, T11, T12, T15): the phase counts
and per-phase constants, lambda_i = lambda 4^i and the balanced lambda's closed form, the ledger
(basic composition over ERM's phases, disjoint batches for SCO), the diagnostic's statement, the
float64 settling rule, refusals."""

import math

import numpy as np
import pytest

from fedray.errors import ConfigError
from fedray.plan import make_plan
from fedray.protocols.user_level.phased_output_pert import settled
from fedray.protocols.user_level.phased_output_pert_planning import certificate_constant
from fedray.runtime.driver import InlineGroups, run
from tests.conftest import compose

# 2,000 users of one record: T = 11 phases at eps / 11, each needing 4 kappa + 2 = 1,346 users (N0 2,690)
SMALL = ["experiment=phased_erm_synthetic", "data.spec.num_silos=2000", "data.spec.samples_per_silo=1",
         "data.spec.dim=3", "algorithm.allow_few_users=true", "progress=false"]


def dp_plan(*overrides):
    """The DP plan (on_unstable=search) at a size whose search the planner refuses, with that
    refusal lifted: for its ledger and statement only (its search could never finish)."""
    from fedray.protocols.user_level import phased_output_pert_planning

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(phased_output_pert_planning, "check_fallback", lambda *args: None)
        return make_plan(compose(*overrides, "algorithm.on_unstable=search"))


def dp_priced(*overrides):
    """The presets' run (aborting on a failed check: not DP, epsilon inf) and the same run priced
    by the DP plan's ledger: the charges are the program's, the pricing Alg. 1's composition."""
    from dataclasses import replace

    aborting = make_plan(compose(*overrides))
    return aborting, replace(aborting, protocol=replace(aborting.protocol, privacy=dp_plan(*overrides).privacy))


def test_worked_phase_constants():
    # T2: eps = 1, delta = 1e-5, n = 1e4, m = 100 -> T = 20 phases, per-phase kappa = 626, N0 = 5010
    plan = make_plan(compose("experiment=phased_erm_synthetic", "data.spec.samples_per_silo=100"))
    program = plan.protocol.build(None)
    assert len(program.phases) == 20 and plan.protocol.resolved["min_users"] == 5010
    assert {phase.mechanisms[0].kappa for phase in program.phases} == {626}
    lam = plan.protocol.resolved["regularization"]
    assert [p.regularization for p in program.phases] == pytest.approx([lam * 4.0**i for i in range(1, 21)])


def test_balanced_regularization_has_the_closed_form_for_erm():
    # B(lambda) = 2 lambda R^2 + Q / lambda, Q = (8/3)(1 - 4^{1-T}) c'^2 G^2 d / (n^2 m) + 2 c' G^2 sqrt(d) / (4^T n sqrt(m))
    plan = make_plan(compose(*SMALL, "algorithm.regularization=balanced"))
    resolved = plan.protocol.resolved
    n, m, d, big_t, g, r = 2000, 1, 3, resolved["phases"], 1.0, 10.0
    c = certificate_constant(1.0 / big_t, 1e-5 / big_t, resolved["beta"] / big_t, 2 * g, n, m)
    q = 8 / 3 * (1 - 4.0 ** (1 - big_t)) * c**2 * g**2 * d / (n**2 * m) + 2 * c * g**2 * math.sqrt(d) / (4**big_t * n * math.sqrt(m))
    assert big_t == math.ceil(math.log2(n * m))
    assert resolved["regularization"] == pytest.approx(math.sqrt(q / (2 * r**2)), rel=1e-6)
    assert resolved["oracle_bound"] == pytest.approx(2 * math.sqrt(2) * r * math.sqrt(q), rel=1e-6)
    paper = make_plan(compose(*SMALL, "algorithm.regularization=paper")).protocol.resolved["regularization"]
    assert paper == pytest.approx(g * math.sqrt(d) / (r * n * math.sqrt(m)))


def test_erm_charges_every_user_each_phase_at_eps_over_t():
    aborting, plan = dp_priced(*SMALL, "repetitions=2")
    phases = plan.protocol.resolved["phases"]
    assert np.all(np.isinf(aborting.privacy.planned_epsilon))
    result = run(plan, inline=True, groups=InlineGroups(plan, 3))
    assert np.allclose(result.epsilon_spent, 1.0)          # T charges of eps / T each (basic composition)
    assert plan.privacy.planned_epsilon.max() == pytest.approx(1.0)
    history = result.history[-1]
    assert np.all(history["phases_without_release"] + history["phases_settled"] <= phases)
    assert "phases_without_release" in result.diagnostics          # the abort's outcomes: not DP outputs
    assert np.all(np.linalg.norm(result.model[:, :, 0], axis=1) <= 5.0 + 1e-12)


def test_sco_uses_disjoint_halving_batches_and_charges_each_user_at_most_once():
    plan = make_plan(compose(*SMALL, "algorithm.variant=sco", "data.spec.num_silos=1000", "data.spec.samples_per_silo=4",
                             "algorithm.allow_few_users=false"))
    program = plan.protocol.build(None)
    assert len(program.phases) == math.floor(math.log2(1000 / 226)) == 2
    assert [list(p.users[[0, -1]]) for p in program.phases] == [[500, 999], [250, 499]]
    result = run(dp_priced(*SMALL, "algorithm.variant=sco", "data.spec.num_silos=1000", "data.spec.samples_per_silo=4",
                           "algorithm.allow_few_users=false")[1], inline=True)
    assert np.allclose(result.epsilon_spent[0, 250:], 1.0) and np.all(result.epsilon_spent[0, :250] == 0.0)
    aborted = run(plan, inline=True).epsilon_spent[0]
    assert np.all(np.isinf(aborted[250:])) and np.all(aborted[:250] == 0.0)


def test_a_diagnostic_noise_scale_is_planned_as_not_private():
    plan = make_plan(compose(*SMALL, "algorithm.noise_scale=1e-6"))
    statement = plan.privacy.statement()
    assert statement["trust_model"] == "none" and "guarantee" in statement
    assert "not DP" in plan.privacy.details["diagnostic"]
    private = make_plan(compose(*SMALL)).protocol.resolved["regularization"]
    assert plan.protocol.resolved["regularization"] == pytest.approx(1e-6 * private, rel=1e-6)   # balanced for s sigma
    assert any(t.startswith("NOT DP") for t in make_plan(compose(*SMALL)).privacy.non_private_inputs)


def test_dp_mode_is_refused_where_the_search_could_not_run():
    """The plan (public sizes only) finds Alg. 1's enumerated search out of reach for a phase of
    2,000 users, so a DP run (on_unstable=search) is refused in one line; without that refusal
    the DP plan claims (eps, delta) and names nothing outside its guarantee."""
    with pytest.raises(ConfigError) as err:
        make_plan(compose(*SMALL, "algorithm.on_unstable=search"))
    assert err.value.key == "algorithm.on_unstable" and "more than 1e18" in str(err.value)
    plan = dp_plan(*SMALL)
    assert plan.privacy.non_private_inputs == () and plan.privacy.planned_epsilon.max() == pytest.approx(1.0)


def test_float64_settles_a_phase_only_when_the_regularizer_outruns_its_resolution():
    assert settled(np.array([1.0, -0.5]), 1e18, 0.08) and not settled(np.array([1.0, -0.5]), 1e10, 0.08)
    assert not settled(np.zeros(3), 1e30, 1e-12)              # at 0 the spacing is the smallest subnormal


@pytest.mark.parametrize("override, key", [
    ("algorithm.allow_few_users=false", "data.spec.num_silos"),     # each phase needs N0 = 2,690 users
    ("data.spec.num_silos=1300", "data.spec.num_silos"),            # below 4 kappa + 2 = 1,346: refused whatever
    ("algorithm.variant=sgd", "algorithm.variant"),
    ("privacy.epsilon=2", "privacy.epsilon"),
    ("algorithm.regularization=tuned", "algorithm.regularization"),
    ("algorithm.noise_scale=1.5", "algorithm.noise_scale"),
])
def test_bad_settings_are_refused_at_planning(override, key):
    with pytest.raises(ConfigError) as err:
        make_plan(compose(*SMALL, override))
    assert err.value.key == key


def test_a_noise_scale_without_a_budget_is_refused():
    with pytest.raises(ConfigError) as err:
        make_plan(compose(*SMALL, "privacy=none", "algorithm.noise_scale=0.5"))
    assert err.value.key == "algorithm.noise_scale"


def test_without_noise_the_phases_reach_the_erm():
    """T12: with every sigma_i scaled towards 0 (the non-private diagnostic) the localization ends
    at theta*(x); each phase's minimiser stays within G / lambda_i of its centre."""
    from scipy.special import expit

    plan = make_plan(compose(*SMALL, "algorithm.noise_scale=1e-12", "data.spec.noise=1.0"))
    result = run(plan, inline=True)
    fed = plan.dataset.load(plan.seed, plan.trial)
    x, y = fed.x_train.reshape(-1, 3), fed.y_train.reshape(-1)
    theta = np.zeros(3)
    for _ in range(50):
        p = expit(x @ theta)
        theta -= np.linalg.solve((x * (p * (1 - p))[:, None]).T @ x / len(y), x.T @ (p - y) / len(y))
    def risk(w):
        z = x @ w
        return np.mean(np.logaddexp(0.0, z) - y * z)

    assert np.linalg.norm(result.model[0, :, 0] - theta) < 1e-2 * np.linalg.norm(theta)
    assert risk(result.model[0, :, 0]) - risk(theta) < 1e-5 < risk(np.zeros(3)) - risk(theta)


# Alg. 5 / 6 (spec §2.6-2.7): ridge logistic with mu = 0.1 on K = B(0, 1 / mu), G = 1 + mu / mu = 2
STRONG = ["experiment=phased_erm_synthetic", "data.spec.num_silos=4000", "data.spec.samples_per_silo=5",
          "data.spec.dim=3", "data.spec.noise=1.0", "algorithm.strong_convexity=0.1", "algorithm.radius=10",
          "progress=false"]


def test_strongly_convex_erm_halves_the_budget_between_the_localization_and_the_phases():
    """T11 for Alg. 5: theta0 at (eps/2, delta/2, beta, G, mu), the T phases at (eps/2T, delta/2T,
    beta/T, 2G, lambda_i), beta = 1/(2 n^2 m), R' = sigma0 (sqrt(d) + sqrt(2 ln(1/beta))); the
    ledger sums to (eps, delta) for every user."""
    plan = dp_priced(*STRONG, "algorithm.allow_few_users=true", "repetitions=2")[1]
    program, resolved = plan.protocol.build(None), plan.protocol.resolved
    n, m, big_t = 4000, 5, resolved["phases"]
    local = program.localization.mechanisms[0]
    assert (local.epsilon, local.delta, local.lipschitz, local.strong_convexity) == pytest.approx((0.5, 5e-6, 2.0, 0.1))
    assert local.beta == pytest.approx(1 / (2 * n**2 * m)) and program.localization.users.size == n
    for phase in program.phases:
        mechanism = phase.mechanisms[0]
        assert (mechanism.epsilon, mechanism.delta, mechanism.lipschitz) == pytest.approx((0.5 / big_t, 5e-6 / big_t, 4.0))
    assert resolved["localization_radius"] == pytest.approx(
        local.noise_std * (math.sqrt(3) + math.sqrt(2 * math.log(2 * n**2 * m))))
    # R' exceeds K's radius at this size: K' = K, planned with K's diameter like the fallback
    assert resolved["localization_radius"] > 10.0 and len(program.fallback) == big_t
    assert [p.regularization for p in program.fallback] == [p.regularization for p in program.phases]
    result = run(plan, inline=True, groups=InlineGroups(plan, 2))
    assert np.allclose(result.epsilon_spent, 1.0) and plan.privacy.planned_epsilon.max() == pytest.approx(1.0)
    assert np.all(np.linalg.norm(result.model[:, :, 0], axis=1) <= 10.0 + 1e-12)


def test_split_localization_keeps_the_localizing_users_out_of_the_phases():
    plan = dp_priced(*STRONG, "algorithm.variant=sco", "algorithm.split_localization=true")[1]
    program = plan.protocol.build(None)
    assert list(program.localization.users[[0, -1]]) == [0, 999]
    phase_users = np.concatenate([p.users for p in program.phases])
    assert phase_users.min() >= 1000 and np.unique(phase_users).size == phase_users.size
    result = run(plan, inline=True)
    # disjoint parts, each at (eps/2, delta/2): no user spends more than half
    assert np.allclose(result.epsilon_spent[0, :1000], 0.5) and result.epsilon_spent.max() == pytest.approx(0.5)
    together = run(dp_priced(*STRONG, "algorithm.variant=sco")[1], inline=True)
    assert together.epsilon_spent.max() == pytest.approx(1.0) and together.epsilon_spent.min() == pytest.approx(0.5)


def test_the_pipelines_plan_from_public_values_only():
    """T11: lambda, T, Delta, sigma and R' do not move with the data (another draw, another seed)."""
    first = make_plan(compose(*STRONG, "algorithm.variant=sco")).protocol.resolved
    other = make_plan(compose(*STRONG, "algorithm.variant=sco", "seed=7", "data.spec.noise=0.3")).protocol.resolved
    assert first == other


def test_without_noise_strongly_convex_erm_reaches_the_ridge_minimiser():
    from scipy.special import expit

    plan = make_plan(compose(*STRONG, "algorithm.allow_few_users=true", "algorithm.noise_scale=1e-12"))
    result = run(plan, inline=True)
    assert result.history[-1]["localized"][0] == 1.0
    fed = plan.dataset.load(plan.seed, plan.trial)
    x, y = fed.x_train.reshape(-1, 3), fed.y_train.reshape(-1)
    theta = np.zeros(3)
    for _ in range(50):
        p = expit(x @ theta)
        theta -= np.linalg.solve((x * (p * (1 - p))[:, None]).T @ x / len(y) + 0.1 * np.eye(3),
                                 x.T @ (p - y) / len(y) + 0.1 * theta)
    # within R' (about 2e-6 here: s sigma0 ~ 3e-7) of theta*(x), as the localization promises
    assert np.linalg.norm(result.model[0, :, 0] - theta) < plan.protocol.resolved["localization_radius"] < 1e-5


def test_a_localization_that_releases_nothing_falls_back_to_k():
    """theta0's certificate failing (here a localizing release whose gamma0 no data can meet: m
    taken as 1e12) releases nothing; the phases then run from 0, planned for K (spec A7), and
    every release is charged all the same."""
    from dataclasses import replace

    from fedray.protocols.user_level.deletion import CertifiedPerturbation

    plan = make_plan(compose(*STRONG, "algorithm.allow_few_users=true", "algorithm.noise_scale=1e-6"))
    mechanisms = plan.protocol.localization.mechanisms
    strict = CertifiedPerturbation(0.5, 5e-6, plan.protocol.resolved["beta"], 2.0, 0.1, 4000, 10**12)
    assert mechanisms[0].certifies(0.0, 0.0) and not strict.certifies(1e-3, 0.0)
    failing = replace(plan, protocol=replace(plan.protocol, localization=replace(plan.protocol.localization,
                                                                                 mechanisms=(strict,))))
    assert failing.protocol.fallback[0].regularization < failing.protocol.phases[0].regularization
    result = run(failing, inline=True)
    assert result.history[-1]["localized"][0] == 0.0
    # the fallback phases' Gaussian step is the noise's second block of columns (phases, fallback, localization)
    count, noise = len(plan.protocol.phases), plan.protocol.noise
    fallback_noise = replace(noise, noise_std=noise.noise_std[:, count:2 * count],
                             required_std=noise.required_std[:, count:2 * count])
    unlocalized = replace(plan.protocol, localization=None, fallback=(), phases=plan.protocol.fallback,
                          noise=fallback_noise)
    assert np.array_equal(result.model, run(replace(plan, protocol=unlocalized), inline=True).model)  # K's phases from 0


@pytest.mark.parametrize("override", ["algorithm.split_localization=true",
                                      "algorithm.strong_convexity=null algorithm.split_localization=true"])
def test_split_localization_is_refused_outside_alg_6(override):
    with pytest.raises(ConfigError) as err:
        make_plan(compose(*STRONG, *override.split()))
    assert err.value.key == "algorithm.split_localization"


def test_replicas_sharing_a_solve_get_the_strictest_of_their_tolerances(monkeypatch):
    """Two budgets (0.7, 1) start phase 1 at the same centre 0 and share its solve: it runs to the smaller
    of their residual tolerances (eps = 1's), so neither replica's certificate rests on a looser
    solve than its own slack assumes."""
    from fedray.protocols.user_level import phased_output_pert

    asked = []
    solve = phased_output_pert.minimize_ridge

    def recording(data, shape, regularization, smoothness, tolerance, *args, **kwargs):
        asked.append(tolerance)
        return solve(data, shape, regularization, smoothness, tolerance, *args, **kwargs)

    monkeypatch.setattr(phased_output_pert, "minimize_ridge", recording)
    plan = make_plan(compose(*SMALL, "privacy.epsilon_grid=[0.7,1.0]"))
    first = plan.protocol.build(None).phases[0].mechanisms
    own = [mechanism.strong_convexity * mechanism.tolerance for mechanism in first]
    assert own[0] > own[1]
    run(plan, inline=True)
    assert asked[0] == min(own)



@pytest.mark.slow
def test_a_phase_whose_certificate_fails_runs_alg_1s_search_from_its_centre():
    """The DP fallback in a phase (about 25 s): 10 users of 5 records, one phase at lambda_1 = 4
    with a kappa = 2 mechanism (eps2 = 0.9, delta2 = 0.41) whose gamma0 is half the users' actual
    gradient spread, so the certificate fails while S = {} is still stable; the program searches
    the phase's sub-datasets (solves centred as the phase's) and moves the centre to
    f(x_{-S*}) + sigma z (then projected onto K), S* = {}, exactly as an independent Alg. 1 over
    the same solver map says."""
    from dataclasses import replace

    from fedray.core.objective import DataObjective
    from fedray.privacy.mechanisms import PhaseGaussianNoise
    from fedray.protocols.user_level.deletion import CertifiedPerturbation, DelOutputPert, TruncatedDiscreteLaplace
    from fedray.protocols.user_level.solver import minimize_ridge
    from fedray.rng import Stream, generator

    plan = make_plan(compose(*SMALL, "privacy=none", "data.spec.num_silos=10", "data.spec.samples_per_silo=5",
                             "data.spec.dim=2", "algorithm.regularization=1.0"))
    first = plan.protocol.phases[0]
    program = plan.protocol.build(None)
    data = DataObjective(InlineGroups(plan, 1), program.objective, 10)
    solves: dict = {}

    def f(deleted, tolerance=1e-9):
        if deleted not in solves:
            weights = np.ones(10)
            weights[list(deleted)] = 0.0
            solves[deleted] = np.zeros(program.model_shape) if not weights.any() else minimize_ridge(
                data, program.model_shape, first.regularization, program.objective.smoothness, tolerance, weights,
                centre=np.zeros(program.model_shape)).params[0]
        return solves[deleted]

    per_user = data.unit_gradients(f(())[None])[:, 0].reshape(10, -1)
    spread = float(np.linalg.norm(per_user - per_user.mean(axis=0), axis=1).max())
    items = int((5 * 2.0 * math.sqrt(math.log(10 / 0.5)) / (spread / 2)) ** 2)      # gamma0 = spread / 2
    mechanism = CertifiedPerturbation(1.8, 0.41 * (math.exp(1.8) + 2), 0.5, 2.0, first.regularization, 10, items)
    assert mechanism.kappa == 2 and not mechanism.certifies(spread, 0.0)
    solves.clear()
    tolerance = mechanism.strong_convexity * mechanism.tolerance
    sigma = np.array([[mechanism.noise_std]])          # the mechanism's Gaussian step, as the planner builds it
    step = PhaseGaussianNoise(sigma, sigma.copy(), 1.8, 0.41 * (math.exp(1.8) + 2))
    searching = replace(plan, protocol=replace(plan.protocol, phases=(replace(first, mechanisms=(mechanism,)),),
                                               noise=step, resolved={**plan.protocol.resolved, "on_unstable": "search"}))
    result = run(searching, inline=True)
    assert result.history[-1]["phases_searched"][0] == 1
    phase_key = (*searching.replicas.streams[0], 0, 0)
    budget = TruncatedDiscreteLaplace(0.9, 0.41).sample(generator(searching.seed, Stream.SERVER, *phase_key))
    expected = DelOutputPert(0.9, 0.41, mechanism.sensitivity).search(lambda s: f(s, tolerance), 10, budget)
    assert expected is not None and expected[0] == ()
    z = generator(searching.seed, Stream.OUTPUT_NOISE, *phase_key).standard_normal(program.model_shape)
    centre = expected[1] + mechanism.noise_std * z
    np.testing.assert_allclose(result.model[0], centre * min(1.0, 5.0 / np.linalg.norm(centre)), rtol=1e-9)
