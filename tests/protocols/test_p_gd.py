"""P_GD (seed 000 Alg. 5): the per-round budget and its composition (spec §3.5, §7 tests 10-11),
the run against plain projected gradient descent, and the privacy plan."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedray.errors import ConfigError
from fedray.plan import make_plan
from fedray.privacy.composition import advanced_composition
from fedray.protocols.shuffle_sco.hyperparameters import gd_num_rounds
from fedray.protocols.shuffle_sco.planning import per_round_budget
from fedray.runtime.driver import InlineGroups, run
from tests.conftest import compose

USERS = ["experiment=p_gd_synthetic", "data.spec.num_silos=400", "data.spec.dim=3", "progress=false"]


def test_reference_values():
    assert gd_num_rounds(100_000, 10, 1.0, 1e-6) == 100_000
    eps0, delta0, slack, shrunk = per_round_budget(1.0, 1e-6, 1000)
    assert eps0 == pytest.approx(1.0 / (2 * math.sqrt(2 * 1000 * math.log(1e6))), rel=1e-15) and not shrunk
    assert delta0 == slack == pytest.approx(1e-6 / 1001, rel=1e-15)
    epsilon, delta = advanced_composition(eps0, delta0, 1000, slack)
    assert 0.6 < epsilon < 0.7 and delta == pytest.approx(1e-6, rel=1e-12)      # spec: ~0.62-0.69


def test_the_papers_eps0_is_shrunk_when_it_would_overspend():
    """eps = 15, delta = 1e-3, T = 1e4: the paper's eps_0 composes to ~15.57 > 15 (spec §3.5)."""
    paper = 15 / (2 * math.sqrt(2 * 1e4 * math.log(1e3)))
    assert advanced_composition(paper, 1e-3 / 10001, 10_000, 1e-3 / 10001)[0] > 15.5
    eps0, _, slack, shrunk = per_round_budget(15.0, 1e-3, 10_000)
    assert shrunk and eps0 < paper
    assert 14.99 < advanced_composition(eps0, 1e-3 / 10001, 10_000, slack)[0] <= 15.0
    plan = make_plan(compose(*USERS, "algorithm.parameters=manual", "num_rounds=10000", "privacy.epsilon=15",
                             "privacy.delta=1e-3", "data.spec.num_silos=20000"))
    assert plan.protocol.resolved["eps0_shrunk"] is True
    assert plan.privacy.planned_epsilon.max() <= 15.0


def test_ledger_spends_what_advanced_composition_gives_and_delta_exactly():
    plan = make_plan(compose(*USERS, "algorithm.parameters=paper"))
    eps0, delta0, slack = (plan.protocol.resolved[k] for k in ("eps0", "delta0", "delta_slack"))
    rounds = plan.num_rounds
    assert rounds == gd_num_rounds(400, 3, 4.0, 1e-6)
    result = run(plan, inline=True)
    expected = advanced_composition(eps0, delta0, rounds, slack)
    np.testing.assert_allclose(result.epsilon_spent, expected[0], rtol=1e-12)
    assert plan.privacy.ledger.deltas(np.full((1, 400), rounds)).max() == pytest.approx(1e-6, rel=1e-12)


def test_without_privacy_the_run_is_projected_gradient_descent():
    plan = make_plan(compose(*USERS, "privacy=none", "algorithm.parameters=manual", "algorithm.step_size=3.0",
                             "num_rounds=40", "algorithm.radius=0.5"))
    result = run(plan, inline=True, groups=InlineGroups(plan, 3))
    fed = plan.dataset.load(plan.seed, plan.trial)
    x, y = fed.x_train[:, 0], fed.y_train[:, 0]
    theta, iterates = np.zeros(3), []
    for _ in range(40):
        iterates.append(theta)
        g = x.T @ (1 / (1 + np.exp(-np.clip(x @ theta, -15, 15))) - y) / 400
        theta = theta - 3.0 * g
        theta *= min(1.0, 0.5 / np.linalg.norm(theta))
    np.testing.assert_allclose(result.outputs["last"][0, :, 0], theta, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(result.outputs["avg"][0, :, 0], np.mean(iterates, axis=0), rtol=1e-12, atol=1e-15)


def test_central_baseline_is_gradient_descent_plus_one_keyed_server_draw_per_round():
    """privacy=central_gaussian: the trusted server adds N(0, sigma^2 I), sigma for (eps_0, delta_0)
    at sensitivity 2 L, to the exact sum each round; the ledger composes the rounds as P_vec's."""
    from fedray.privacy.gaussian_sum import release_sigma
    from fedray.rng import Stream, generator

    plan = make_plan(compose(*USERS, "privacy=central_gaussian", "algorithm.parameters=manual",
                             "algorithm.step_size=3.0", "num_rounds=30", "algorithm.radius=0.5"))
    eps0, delta0 = plan.protocol.resolved["eps0"], plan.protocol.resolved["delta0"]
    sigma = plan.protocol.resolved["noise_std"]
    assert sigma == release_sigma(eps0, delta0, 1.0)
    result = run(plan, inline=True, groups=InlineGroups(plan, 2))
    fed = plan.dataset.load(plan.seed, plan.trial)
    x, y = fed.x_train[:, 0], fed.y_train[:, 0]
    theta = np.zeros(3)
    for t in range(30):
        residual = 1 / (1 + np.exp(-np.clip(x @ theta, -15, 15))) - y
        noise = generator(plan.seed, Stream.OUTPUT_NOISE, *plan.replicas.streams[0], t).standard_normal(3)
        theta = theta - 3.0 * ((x * residual[:, None]).sum(axis=0) + sigma * noise) / 400
        theta *= min(1.0, 0.5 / np.linalg.norm(theta))
    np.testing.assert_allclose(result.outputs["last"][0, :, 0], theta, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(result.epsilon_spent, advanced_composition(eps0, delta0, 30, delta0)[0], rtol=1e-12)


def test_smoothed_p_gd_takes_the_envelope_smoothness_from_theorem_4_9():
    """A Moreau-envelope loss of null smoothing: beta = (L/D) min(sqrt n, eps n / (sqrt d ln^1.5(nd/delta)))
    and eta with L_eff = 2 L (exact mode: D / sqrt(T ((2L)^2 + MSE_vec(n) / n^2)))."""
    from fedray.protocols.shuffle_sco.hyperparameters import gd_smoothing_parameter, oracle_second_moment

    assert gd_smoothing_parameter(10_000, 10, 1.0, 1e-6, 1.0, 2.0) == pytest.approx(12.4039, abs=5e-4)
    assert gd_smoothing_parameter(100_000, 10, 1.0, 1e-6, 1.0, 2.0) == pytest.approx(108.86, abs=5e-3)   # spec §7 test 10
    envelope = ["data.loss._target_=fedray.smoothing.MoreauEnvelope", "+data.loss.base._target_=fedray.smoothing.Hinge",
                "+data.loss.smoothing=null", "~data.loss.margin_clip", "algorithm.parameters=exact"]
    plan = make_plan(compose(*USERS, *envelope))
    assert plan.loss.smoothing == pytest.approx(gd_smoothing_parameter(400, 3, 4.0, 1e-6, 1.0, 10.0), rel=1e-12)
    eps0, delta0 = plan.protocol.resolved["eps0"], plan.protocol.resolved["delta0"]
    eta = 10.0 / np.sqrt(oracle_second_moment(eps0, delta0, 3, 400, 2.0) * plan.num_rounds)
    assert plan.protocol.algorithm.step_size[0] == pytest.approx(eta, rel=1e-12)
    result = run(plan, inline=True)
    assert np.isfinite(result.final["train_loss"]).all()


def test_an_unset_envelope_smoothness_is_refused_where_no_theorem_sets_it():
    from fedray.errors import ConfigError

    envelope = ["data.loss._target_=fedray.smoothing.MoreauEnvelope", "+data.loss.base._target_=fedray.smoothing.Hinge",
                "+data.loss.smoothing=null", "~data.loss.margin_clip", "algorithm.parameters=manual"]
    with pytest.raises(ConfigError) as err:
        make_plan(compose(*USERS, *envelope))
    assert err.value.key == "data.loss.smoothing"


PHASED = ["algorithm.parameters=exact", "algorithm.radius=1.0", "+algorithm.strong_convexity=0.05",
          "data.spec.num_silos=600", "privacy.epsilon=8"]


def test_strongly_convex_phases_are_p_gd_on_fresh_groups_from_the_last_average():
    """Thm 4.9b: k phases of the same T rounds on disjoint groups; without privacy the run equals
    projected GD phase by phase (phase j's own eta), each from the previous phase's average."""
    from fedray.protocols.shuffle_sco.hyperparameters import gd_phase_schedule, num_phases

    plan = make_plan(compose(*USERS, *PHASED, "privacy=none", "privacy.epsilon=8", "privacy.delta=1e-6",
                             "privacy.l2_clip=1.0"))
    phases = plan.protocol.resolved["phases"]
    k = num_phases(600)
    expected = gd_phase_schedule("exact", 600, 3, 8.0, 1e-6, 1.0, 2.0, 0.05, per_round_budget, lambda *a: 0.0)
    assert phases["group_size"] == 600 // k and phases["step_sizes"] == list(expected.step_sizes)
    assert plan.num_rounds == k * phases["rounds"]
    result = run(plan, inline=True, groups=InlineGroups(plan, 3))
    fed = plan.dataset.load(plan.seed, plan.trial)
    x, y = fed.x_train[:, 0], fed.y_train[:, 0]
    theta, g = np.zeros(3), phases["group_size"]
    for j, eta in enumerate(phases["step_sizes"]):
        xs, ys, iterates = x[j * g:(j + 1) * g], y[j * g:(j + 1) * g], []
        for _ in range(phases["rounds"]):
            iterates.append(theta)
            grad = xs.T @ (1 / (1 + np.exp(-np.clip(xs @ theta, -15, 15))) - ys) / g
            theta = theta - eta * grad
            theta *= min(1.0, 1.0 / np.linalg.norm(theta))
        theta = np.mean(iterates, axis=0)
    np.testing.assert_allclose(result.outputs["avg"][0, :, 0], theta, rtol=1e-11, atol=1e-14)


def test_private_phases_charge_each_user_its_phases_rounds_only():
    plan = make_plan(compose(*USERS, *PHASED))
    phases, eps0 = plan.protocol.resolved["phases"], plan.protocol.resolved["eps0"]
    g, rounds = phases["group_size"], phases["rounds"]
    assert plan.protocol.algorithm.vector_sum.params.num_users == g
    result = run(plan, inline=True)
    used = g * len(phases["step_sizes"])
    expected = advanced_composition(eps0, plan.protocol.resolved["delta0"], rounds, plan.protocol.resolved["delta_slack"])[0]
    np.testing.assert_allclose(result.epsilon_spent[:, :used], expected, rtol=1e-12)
    assert expected <= 8.0 and np.all(result.epsilon_spent[:, used:] == 0)


@pytest.mark.slow
def test_pld_composition_affords_a_larger_eps0_and_spends_at_most_the_target():
    """privacy.composition=pld: the T rounds' (eps_0, delta_0) composed by their privacy loss
    distribution (dp-accounting) instead of advanced composition: never above it for the same eps_0,
    so the planner's eps_0 is larger, and the ledger's spend is the PLD's, within the target."""
    from fedray.privacy.composition import pld_composition_epsilon

    for eps0, rounds in ((0.01, 1000), (0.2, 50), (1.0, 3)):
        delta0 = 1e-6 / (rounds + 1)
        assert pld_composition_epsilon(eps0, delta0, rounds, 1e-6) <= advanced_composition(eps0, delta0, rounds, delta0)[0]
        assert pld_composition_epsilon(eps0, delta0, rounds, 1e-6) <= rounds * eps0 + 1e-3         # basic, up to the grid
    assert pld_composition_epsilon(0.5, 1e-7, 1, 1e-7) == pytest.approx(0.5, abs=2e-4)             # one release: itself
    # 100 users, so T = 100 rounds: the run's ledger prices every round's count by its own PLD
    # composition (400 of them took 9 s at T = 400); PLD's eps_0 is still 1.9x advanced composition's
    few = [*USERS, "data.spec.num_silos=100", "algorithm.parameters=paper"]
    advanced = make_plan(compose(*few))
    pld = make_plan(compose(*few, "+privacy.composition=pld"))
    assert pld.num_rounds == advanced.num_rounds and pld.privacy.accountant == "pld"
    assert pld.protocol.resolved["eps0"] > 1.1 * advanced.protocol.resolved["eps0"]
    result = run(pld, inline=True)
    spent = result.epsilon_spent.max()
    expected = pld_composition_epsilon(pld.protocol.resolved["eps0"], pld.protocol.resolved["delta0"], pld.num_rounds, 1e-6)
    assert spent == pytest.approx(expected, rel=1e-12) and spent <= 4.0
    with pytest.raises(ConfigError) as err:
        make_plan(compose(*USERS, "+privacy.composition=rdp"))
    assert err.value.key == "privacy.composition"


def test_tight_calibration_composes_the_rounds_together_within_the_budget():
    from fedray.privacy.vector_sum_rounds import rounds_delta, rounds_epsilon

    paper, tight = (make_plan(compose(*USERS, "algorithm.parameters=paper", f"privacy.calibration={c}"))
                    for c in ("paper", "tight"))
    assert "eps0" not in tight.protocol.resolved                      # no per-round budget
    assert tight.protocol.resolved["tight_route"] == "binomial_moments"
    params = tight.protocol.algorithm.vector_sum.params
    rounds = tight.num_rounds
    assert rounds == paper.num_rounds
    assert (params.epsilon, params.delta, params.num_users, params.num_rounds) == (4.0, 1e-6, 400, rounds)
    assert rounds_delta(4.0, 3, 400 * params.noise_bits, params.scale, rounds) <= 1e-6
    assert params.noise_bits < paper.protocol.algorithm.vector_sum.params.noise_bits / 1000
    planned = tight.privacy.planned_epsilon
    assert planned.shape == paper.privacy.planned_epsilon.shape
    assert np.all(planned == pytest.approx(rounds_epsilon(1e-6, 3, 400 * params.noise_bits, params.scale, rounds)))
    assert np.all(planned <= 4.0)
    assert tight.privacy.statement()["calibration"] == "tight"


def test_tight_calibration_refuses_a_composition_in_one_line():
    with pytest.raises(ConfigError) as err:
        make_plan(compose(*USERS, "algorithm.parameters=paper", "privacy.calibration=tight", "+privacy.composition=pld"))
    assert err.value.key == "privacy.composition" and "\n" not in str(err.value)
    print(err.value)


def test_tight_calibration_is_priced_by_the_rounds_a_plan_runs():
    # A manual plan that runs more rounds than it was calibrated for cannot exist: the calibration
    # reads the plan's own T, so doubling num_rounds doubles the unit pairs and raises b.
    base = [*USERS, "privacy.calibration=tight", "algorithm.parameters=manual", "algorithm.step_size=0.1"]
    short, long = (make_plan(compose(*base, f"num_rounds={t}")) for t in (20, 40))
    short_b, long_b = (p.protocol.algorithm.vector_sum.params.noise_bits for p in (short, long))
    assert long_b == pytest.approx(2 * short_b, rel=0.05)
    assert np.max(short.privacy.planned_epsilon) <= 4.0 and np.max(long.privacy.planned_epsilon) <= 4.0
