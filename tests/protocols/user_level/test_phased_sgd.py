"""Seed 002's Alg. 1 end to end (spec §6 T1, T2, T10, T11, parallel composition): the groups are a
partition of each phase's fresh users, every chain is the one-process SGD pass it stands for, the
counter equals sum_i C N_i m, a forced halt releases the public 0 and charges only the phases run,
runs do not depend on the actor layout (in process or over Ray actors), the server's test, filter
and noise do what the paper prints, refusals name the key."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedray.core.protocol import RoundKeys
from fedray.errors import ConfigError
from fedray.plan import make_plan
from fedray.privacy.mechanisms import PhaseLaplaceTest
from fedray.protocols.user_level.phased_parameters import Problem, phased_sgd_layout, phased_sgd_schedule
from fedray.protocols.user_level import phased_sgd
from fedray.protocols.user_level.phased_sgd import Chains, advance_chains
from fedray.protocols.user_level.phased_sgd_planning import coupling_coverage
from fedray.rng import SiloDraws
from fedray.runtime.driver import InlineGroups, run
from tests.conftest import compose

SMALL = ["experiment=user_level_sphere", "algorithm=phased_sgd", "data.spec.num_silos=1000",
         "data.spec.samples_per_silo=8", "data.spec.dim=5", "repetitions=3", "progress=false"]
# Exploratory constants at a huge nominal eps: C = 21 groups, a test that always passes, and noise
# far below the chains' progress (sigma_i / tau_i = ln^2(n / delta) / (ln(20 n m / delta) + eps)
# whatever kappa); Thm B.1's eta shrinks as 1 / sqrt(eps), so the multiplier makes eta_1 = 0.43.
QUIET = ["algorithm.profile=exploratory", "algorithm.kappa=0.2", "privacy.epsilon=1e8", "privacy.delta=1e-6",
         "algorithm.step_size=3e6"]


def _keys(plan, seed: int | None = None) -> RoundKeys:
    """The keys the driver hands the program (of another run seed if ``seed`` is given)."""
    return RoundKeys(plan.seed if seed is None else seed, plan.repetitions, 0, plan.replicas.streams)


def _plan(*overrides: str):
    return make_plan(compose(*SMALL, *overrides))


def _excess(plan, model: np.ndarray) -> np.ndarray:
    w_star = plan.dataset.optimum(plan.seed, plan.trial)
    return ((model[:, :, 0] - w_star) ** 2).sum(axis=1) / (2 * plan.shape.dim)


def test_the_rounded_layout_follows_spec_item_1():
    problem = Problem(10**6, 100, 100, 1.0, 1e-9, 1.0, 1.0, 1.0, 0.1)
    schedule, layout = phased_sgd_schedule(problem), phased_sgd_layout(problem)
    assert layout.groups == math.ceil(schedule.groups) == 4314
    assert list(layout.group_users) == [math.floor(n / 4314) for n in schedule.phase_users]
    assert layout.group_users[0] == 14 and layout.steps[0] == 1400 and layout.phase_users[0] == 14 * 4314
    # tau_i and sigma_i at the rounded T_i and C: the printed formulas scale as sqrt(T_i) and 1 / C
    ratio = math.sqrt(1400 / schedule.steps[0])
    assert layout.thresholds[0] == pytest.approx(schedule.thresholds[0] * ratio, rel=1e-12)
    assert layout.noise_std[0] == pytest.approx(schedule.noise_std[0] * ratio * schedule.groups / 4314, rel=1e-12)
    assert layout.gradients == sum(4314 * t for t in layout.steps) <= 10**8


def test_groups_partition_each_phase_into_c_groups_of_n_i_fresh_users():
    plan = _plan(*QUIET)
    program = plan.protocol.build(None)
    members = plan.sampler.members(plan.seed, 1000)
    seen = np.zeros(1000, dtype=bool)
    for phase, (groups, size) in enumerate(zip(program.group_of, program.group_users)):
        assert np.array_equal(groups >= 0, members == phase)
        assert np.bincount(groups[groups >= 0]).tolist() == [size] * program.groups
        assert not (seen & (groups >= 0)).any()
        seen |= groups >= 0


def _reference_phase(plan, program, start: np.ndarray, phase: int) -> np.ndarray:
    """(P, C, d) each group's average iterate, one replica, one group and one item at a time."""
    fed = plan.dataset.load(plan.seed, plan.trial)
    ids = np.arange(1000)
    orders = SiloDraws(plan.seed, plan.replicas.streams, phase, ids, width=fed.x_train.shape[1]).without_replacement(
        fed.n_train, 8)
    p, c = start.shape[0], program.groups
    out = np.zeros((p, c, start.shape[1]))
    for r in range(p):
        eta = program.step_sizes[r, phase]
        for g in range(c):
            y, total, steps = start[r].copy(), np.zeros_like(start[r]), 0
            for user in ids[program.group_of[phase] == g]:            # id order
                for item in orders[r, user]:
                    x, label = fed.x_train[user, item], fed.y_train[user, item]
                    y = y - eta * (x @ y - label) * x               # the half squared loss
                    y = y * min(1.0, program.radius / np.linalg.norm(y))
                    total, steps = total + y, steps + 1
            out[r, g] = total / steps
    return out


def test_every_chain_is_the_one_process_sgd_pass_it_stands_for():
    plan = _plan(*QUIET)
    program = plan.protocol.build(None)
    start = np.random.default_rng(0).normal(size=(3, 5)) * 0.1
    groups = InlineGroups(plan, 3)
    running = np.ones(3, dtype=bool)
    x = start[:, :, None]
    iterates, evaluations = program.phase(groups, x, running, 1, _keys(plan))
    assert evaluations == program.groups * program.group_users[1] * 8
    np.testing.assert_allclose(iterates[..., 0], _reference_phase(plan, program, start, 1), rtol=1e-12, atol=1e-14)


def test_a_run_counts_sum_c_n_i_m_gradients_and_spends_eps_once_per_phase_user():
    plan = _plan(*QUIET)
    result = run(plan, inline=True)
    resolved = plan.protocol.resolved
    assert not result.history[-1]["halted"].any()
    expected = sum(resolved["groups"] * t for t in resolved["phase_steps"])
    assert np.all(result.history[-1]["gradient_evaluations"] == expected) == (resolved["gradients_no_halt"] == expected)
    assert np.all(result.history[-1]["phases_run"] == resolved["phases"])
    members = plan.sampler.members(plan.seed, 1000)
    assert np.all(result.epsilon_spent[:, members >= 0] == 1e8) and np.all(result.epsilon_spent[:, members < 0] == 0.0)
    assert np.array_equal(result.epsilon_spent, plan.privacy.planned_epsilon)
    assert {"kept_fraction", "concentration_score"} <= set(result.diagnostics)
    assert "gradient_evaluations" not in result.diagnostics and "halted" not in result.diagnostics
    assert np.all(_excess(plan, result.model) < 0.006)       # 0.025 at the public start 0; measured 0.003


def test_a_forced_halt_releases_the_public_zero_and_charges_only_the_first_phase(monkeypatch):
    # every group alone (s = 1 < 4C/5; the Laplace noise is 2e-7 at this eps): the first test fails
    monkeypatch.setattr(phased_sgd, "concentration_score", lambda points, tau: np.ones(points.shape[0]))
    plan = _plan(*QUIET)
    result = run(plan, inline=True)
    resolved = plan.protocol.resolved
    assert np.all(result.history[-1]["halted"] == 1.0) and np.all(result.history[-1]["phases_run"] == 1.0)
    assert np.array_equal(result.model, np.zeros_like(result.model))
    assert np.all(result.history[-1]["gradient_evaluations"] == resolved["groups"] * resolved["phase_steps"][0])
    first = plan.sampler.members(plan.seed, 1000) == 0
    assert np.all(result.epsilon_spent[:, first] == 1e8) and np.all(result.epsilon_spent[:, ~first] == 0.0)


def test_one_and_three_groups_give_bit_identical_private_runs():
    plan = _plan(*QUIET)
    one, three = (run(plan, inline=True, groups=InlineGroups(plan, k)) for k in (1, 3))
    assert np.array_equal(one.model, three.model)
    assert one.history[-1]["gradient_evaluations"].tolist() == three.history[-1]["gradient_evaluations"].tolist()


@pytest.mark.slow
def test_the_chains_pass_between_ray_actors_as_in_one_process(ray_local):
    plan = _plan(*QUIET)
    inline = run(plan, inline=True)
    actors = run(_plan(*QUIET, "runtime.num_actors=3"))
    assert np.array_equal(inline.model, actors.model)


def test_the_server_keeps_concentrated_iterates_and_noises_their_mean():
    plan = _plan(*QUIET)
    program = plan.protocol.build(None)
    c = program.groups
    same = np.zeros((3, c, 5, 1)) + 0.1
    halted, released, kept, score = program.curator(same, np.zeros((3, 5, 1)), np.arange(3), 0, _keys(plan))
    assert not halted.any() and np.all(kept == c) and np.all(score == c)
    assert np.all(np.abs(released - 0.1) < 10 * program.noise.noise_std[:, :1, None].max() + 1e-12)
    # two far clusters of 60% and 40%: the minority is never kept, the mean is the majority's
    split = same.copy()
    far = 10 * program.thresholds[:, 0].max()                  # beyond the filter's 2 tau_1
    split[:, int(0.6 * c):] += far
    halted, released, kept, score = program.curator(split, np.zeros((3, 5, 1)), np.arange(3), 0, _keys(plan))
    assert np.all(kept <= int(0.6 * c)) and np.all(score < c)
    assert np.all(np.abs(released - 0.1) < 10 * program.noise.noise_std[:, :1, None].max() + 1e-12)
    # an even split: every point is close to half of them, s = C / 2 < 4C/5: the test fails
    split[:, c // 2:int(0.6 * c)] += far
    assert program.curator(split, np.zeros((3, 5, 1)), np.arange(3), 0, _keys(plan))[0].all()


def test_the_noise_is_the_printed_sigma():
    plan = _plan("algorithm.profile=exploratory", "algorithm.kappa=0.01", "privacy.epsilon=1", "repetitions=1")
    program = plan.protocol.build(None)
    same = np.zeros((1, program.groups, 5, 1))
    draws = np.concatenate([program.curator(same, np.zeros((1, 5, 1)), np.arange(1), phase, _keys(plan))[1].reshape(-1)
                            for phase in range(program.step_sizes.shape[1]) for _ in range(1)])
    # phase i's noise is sigma_i; normalised by it, 5 l coordinates of a standard normal
    sigma = np.repeat(program.noise.noise_std[0], 5)
    normalised = draws / sigma
    assert abs(normalised.mean()) < 4 / math.sqrt(normalised.size) and 0.5 < normalised.std() < 1.5


def test_the_fold_leaves_chains_without_users_here_untouched():
    plan = _plan(*QUIET)
    program = plan.protocol.build(None)
    fed = plan.dataset.load(plan.seed, plan.trial, silo_ids=np.arange(10))
    outside = np.full(1000, -1)
    chains = Chains(np.ones((1, 2, 5, 1)), np.zeros((1, 2, 5, 1)), 7)
    assert advance_chains(fed, np.arange(10), chains, program.loss, outside, np.ones(1), 1.0, 0,
                          plan.replicas.streams[:1], 0) is chains


def test_the_plan_names_the_failed_conditions_and_a_nominal_profile():
    plan = _plan("algorithm.profile=exploratory", "algorithm.kappa=0.01", "privacy.epsilon=8")
    statement = " ".join(plan.privacy.non_private_inputs)
    assert "nominal" in statement and "eps / 4 = 2 > 1" in statement and "Lap(20 / eps)" in statement
    assert plan.privacy.nominal_epsilon is not None
    assert any("pure noise" in note or "R" in note for note in plan.protocol.resolved["notes"])


FEASIBLE = ["algorithm.profile=exploratory", "algorithm.kappa=0.01"]


@pytest.mark.parametrize("override, key", [
    (["algorithm.profile=paper"], "data.spec.num_silos"),              # C = 2,975 groups for 1,000 users
    ([*FEASIBLE, "privacy.calibration=accountant"], "privacy.calibration"),
    ([*FEASIBLE, "privacy=none", "privacy.epsilon=null"], "privacy.epsilon"),
    ([*FEASIBLE, "participation=all"], "participation"),
    ([*FEASIBLE, "algorithm.step_size=-1"], "algorithm.step_size"),
    ([*FEASIBLE, "algorithm.decay=2"], "algorithm.decay"),
    ([*FEASIBLE, "+algorithm.kapa=2"], "algorithm.kapa"),
])
def test_bad_settings_are_refused_before_any_actor(override, key):
    with pytest.raises(ConfigError) as err:
        _plan(*override)
    assert err.value.key == key


def test_without_privacy_the_same_schedule_runs_without_test_filter_or_noise():
    plan = _plan(*QUIET, "privacy=none", "privacy.epsilon=1e8", "privacy.delta=1e-6")
    private = _plan(*QUIET)
    assert plan.protocol.resolved["phase_users"] == private.protocol.resolved["phase_users"]
    result = run(plan, inline=True)
    assert result.epsilon_spent is None and not result.history[-1]["halted"].any()
    assert np.all(_excess(plan, result.model) < 0.006)


def test_the_statement_names_the_unspecified_coupling_constant_and_its_coverage():
    problem = Problem(10**6, 100, 100, 1.0, 1e-9, 1.0, 1.0, 1.0, 0.1)
    # the spec's T1 point: no condition fails, yet the printed sigma_1 = 68.0 covers only 0.37 of
    # what the classic Gaussian needs for c_Delta = 120 (spec §5 item 12) at (eps / 4, delta / n)
    assert coupling_coverage(problem, phased_sgd_layout(problem)) == pytest.approx(0.3744, abs=1e-4)
    plan = _plan(*QUIET)
    assert plan.privacy.nominal_epsilon is not None
    assert any("Lemma B.2" in caveat for caveat in plan.privacy.non_private_inputs)


def test_an_overflowing_user_leaves_a_finite_release_and_no_warning(recwarn):
    plan = _plan(*QUIET)
    program = plan.protocol.build(None)
    fed = plan.dataset.load(plan.seed, plan.trial, silo_ids=np.arange(1000))
    first, second = np.flatnonzero(program.group_of[0] >= 0)[:2]
    fed.y_train[first] = 1e300                         # one user's labels overflow the chain's arithmetic,
    fed.y_train[second] = np.inf                       # another's make its group's chain NaN
    start = Chains(np.zeros((3, program.groups, 5, 1)), np.zeros((3, program.groups, 5, 1)), 0)
    chains = advance_chains(fed, np.arange(1000), start, program.loss, program.group_of[0], program.step_sizes[:, 0],
                            program.radius, plan.seed, plan.replicas.streams, 0)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
    iterates = chains.total / chains.total.shape[1]
    halted, released, kept, _ = program.curator(iterates, np.zeros((3, 5, 1)), np.arange(3), 0, _keys(plan))
    assert np.all(np.isfinite(released))
    # a huge finite point is projected onto the sphere, not to 0
    huge = np.full((1, 1, 5, 1), 1e300)
    assert np.linalg.norm(phased_sgd._project(huge, 1.0)) == pytest.approx(1.0)


# Profile D at a size where it is feasible: C = ceil(80 ln(10 e^eps / delta) / eps) = 81 groups at
# the huge nominal eps, and the last of 12 phases still has 1 user per group.
DERIVED = ["data.spec.num_silos=5000", "data.spec.samples_per_silo=2", "algorithm.profile=derived",
           "privacy.calibration=accountant", "privacy.epsilon=1e8", "privacy.delta=1e-6", "algorithm.step_size=3e6"]


def test_profile_d_recomputes_the_test_groups_and_noise_from_the_proof():
    """Profile D at the T1 point: C = ceil(80 ln(10 e / 1e-9)) = 1923, the test's bad event
    P(|Lap(8 / eps)| >= C / 10) = exp(-C eps / 80) is at most zeta = delta / (10 e^eps) (and would
    not be at C - 1), and sigma_i makes the Gaussian (3 eps / 4, delta / 2)-DP for Delta_i = 120
    tau_i (7 + 3 ln(1 / zeta)) / C by dp-accounting's own privacy loss distribution, tightly."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    from fedray.protocols.user_level.phased_parameters import laplace_test_failure

    problem = Problem(10**6, 100, 100, 1.0, 1e-9, 1.0, 1.0, 1.0, 0.1)
    layout = phased_sgd_layout(problem, profile="derived")
    paper = phased_sgd_layout(problem)
    assert layout.groups == 1923 and (layout.test_scale, layout.test_margin) == (8.0, 0.1)
    zeta = 1e-9 / (10 * math.e)
    assert laplace_test_failure(1923, 1.0, 8.0, 0.1) <= zeta < laplace_test_failure(1922, 1.0, 8.0, 0.1)
    assert layout.group_users[0] == math.floor(problem.phase_users()[0] / 1923) > paper.group_users[0]
    sensitivity = 120 * layout.thresholds[0] * (7 + 3 * math.log(1 / zeta)) / 1923
    loss = pld.from_gaussian_mechanism(layout.noise_std[0], sensitivity=sensitivity,
                                       value_discretization_interval=1e-4)
    delta = loss.get_delta_for_epsilon(0.75)
    assert 0.25e-9 < delta <= 0.5e-9 * (1 + 1e-3)
    # the same tau_i formula at the derived sizes: sigma_i / tau_i is one number across phases
    assert np.allclose(layout.noise_std / layout.thresholds, layout.noise_std[0] / layout.thresholds[0])


def test_profile_d_runs_its_test_at_lap_8_over_eps_and_spends_the_target():
    import dataclasses

    plan = _plan(*DERIVED)
    program = plan.protocol.build(None)
    assert program.groups == 81 and program.noise.test.scale == 8.0 / program.noise.epsilon
    assert plan.privacy.calibration == "accountant"
    assert any("c_Delta = 120" in caveat and "nominal" not in caveat for caveat in plan.privacy.non_private_inputs)
    # identical iterates score s = C; the test halts when Lap(8 / eps) < -C / 5: at eps = 1 that is
    # 0.5 exp(-C / 40) = 0.066 (Lap(20 / eps) would halt 0.222 of the time)
    c, phases = program.groups, program.step_sizes.shape[1]
    same = np.zeros((3, c, 5, 1))
    halts = [program.curator(same, np.zeros((3, 5, 1)), np.arange(3), phase, _keys(plan, seed))[0]
             for seed in range(60) for phase in range(phases)
             for built in [plan.protocol.build(None)]       # the priced test's Lap(8 / eps) at eps = 1
             for program in [dataclasses.replace(built, noise=dataclasses.replace(built.noise, test=PhaseLaplaceTest(8.0, 8.0)))]]
    rate, expected = np.mean(halts), 0.5 * math.exp(-c / 40)
    assert abs(rate - expected) < 4 * math.sqrt(expected * (1 - expected) / np.size(halts))
    result = run(plan, inline=True)          # T6 (d): each user charged one phase's eps, at most the target
    assert not result.history[-1]["halted"].any()
    assert 0 < result.epsilon_spent.max() <= 1e8


@pytest.mark.parametrize("override, key", [
    (["privacy.calibration=paper"], "privacy.calibration"),
    (["algorithm.kappa=0.5"], "algorithm.kappa"),
    (["data.spec.num_silos=1000"], "data.spec.num_silos"),            # the last phase: 35 users for 81 groups
])
def test_profile_d_refusals_name_the_key(override, key):
    with pytest.raises(ConfigError) as err:
        _plan(*DERIVED, *override)
    assert err.value.key == key


def test_the_tests_laplace_is_a_step_the_ledger_prices():
    """The score's Lap(b) is drawn by the priced value (``PhaseGaussianNoise.test``): the program
    draws exactly Lap(b) from each replica's SERVER generator of the phase, first; a variant with
    half the scale certifies nothing (epsilon inf), as one with half the Gaussian does."""
    import dataclasses

    from fedray.rng import Stream

    plan = _plan(*QUIET)
    program, accountant = plan.protocol.build(None), plan.privacy.ledger.accountant
    test = program.noise.test
    assert accountant.priced_noise() is program.noise and test.scale == test.required_scale == 20.0 / 1e8
    scores = np.zeros(3)
    keys = _keys(plan).at(1)
    drawn, _ = test.apply(scores, [keys.generator(Stream.SERVER, p) for p in range(3)])
    by_hand = [keys.generator(Stream.SERVER, p).laplace(0.0, 20.0 / 1e8) for p in range(3)]
    np.testing.assert_array_equal(drawn, by_hand)
    counts = np.ones((3, 1000), dtype=np.int64)
    assert np.isfinite(accountant.epsilons(counts)).all()
    for weak in (dataclasses.replace(program.noise, test=dataclasses.replace(test, scale=test.scale / 2)),
                 dataclasses.replace(program.noise, noise_std=program.noise.noise_std / 2)):
        priced = dataclasses.replace(accountant, rule=dataclasses.replace(accountant.rule, noise=weak))
        assert np.isinf(priced.epsilons(counts)).all()
