"""P_SGD (seed 000) on the sequential-steps protocol: blocks of steps per call change nothing,
any actor layout gives the same bits (steps straddling two actors run as ordinary rounds), the
plan refuses what P_vec or the protocol cannot run, and the ledger spends P_vec's (eps, delta)."""

from __future__ import annotations

import numpy as np
import pytest

from fedray.core.protocol import SequentialSteps
from fedray.errors import ConfigError
from fedray.plan import make_plan
from fedray.runtime.driver import InlineGroups, run
from tests.conftest import compose, round_keys

USERS = ["experiment=p_sgd_synthetic", "data.spec.num_silos=600", "data.spec.dim=3", "participation.batch_size=7",
         "num_rounds=80", "progress=false", "evaluate_every=25"]


def _run(*overrides, groups=1):
    plan = make_plan(compose(*USERS, *overrides))
    return plan, run(plan, inline=True, groups=InlineGroups(plan, groups))


@pytest.mark.parametrize("privacy", ["privacy=none", "privacy=shuffle_vector_sum", "privacy=local_gaussian",
                                     "privacy=central_gaussian"])
def test_block_size_and_actor_layout_change_no_bit(privacy):
    _, reference = _run(privacy, "algorithm.block_steps=1")
    # 600 users in 1, 3 or 4 groups: with B = 7, steps straddle the group boundaries at 200 and 400.
    for block, groups in ((1000, 1), (16, 3), (5, 4)):
        _, other = _run(privacy, f"algorithm.block_steps={block}", groups=groups)
        np.testing.assert_array_equal(other.outputs["avg"], reference.outputs["avg"])
        np.testing.assert_array_equal(other.outputs["last"], reference.outputs["last"])


def test_blocks_are_cut_where_the_users_change_actor():
    from fedray.runtime.strategies import _fit_block

    plan = make_plan(compose(*USERS, "privacy=none"))
    groups = InlineGroups(plan, 3)                          # users [0, 200), [200, 400), [400, 600)
    protocol = plan.protocol.build(groups)
    assert isinstance(protocol, SequentialSteps)
    state = protocol.init(round_keys())
    spec, owner = _fit_block(protocol, protocol.configure(state, None), groups.ranges)
    assert (owner, spec.steps, spec.participation[0].nonzero()[0].max()) == (0, 28, 195)   # 28 * 7 = 196 <= 200
    straddling = state._replace(round=28)                   # users 196..202 live in two groups
    spec, owner = _fit_block(protocol, protocol.configure(straddling, None), groups.ranges)
    assert owner is None and spec.operation == "client_step" and spec.participation[0].nonzero()[0].tolist() == list(range(196, 203))


def test_non_private_p_sgd_reaches_the_optimum_region_and_private_spends_its_budget():
    plan, free = _run("privacy=none", "algorithm.step_size=1.0")
    assert free.final["train_loss_avg"][0] < 0.65           # from log 2 = 0.693 at theta = 0
    plan, private = _run("privacy=shuffle_vector_sum", "privacy.epsilon=8")
    assert private.epsilon_spent.max() == 8.0 and plan.privacy.accountant == "parallel"
    assert plan.privacy.details["users_per_invocation"] == 7


@pytest.mark.parametrize(
    "override,key",
    [("participation=uniform", "participation"),
     ("data.spec.samples_per_silo=2", "data"),
     ("num_rounds=90", "num_rounds"),                       # 90 * 7 > 600 users
     ("privacy.epsilon=16", "privacy.epsilon"),
     ("privacy.calibration=accountant", "privacy.calibration"),
     ("+algorithm.stepsize=1", "algorithm.stepsize")],
)
def test_what_p_sgd_cannot_run_is_refused_at_planning(override, key):
    with pytest.raises(ConfigError) as err:
        make_plan(compose(*USERS, override))
    assert err.value.key == key


def _replay(plan, result):
    """P_SGD re-run in plain numpy from the plan's own sum step: the users' messages, their sum,
    the server's estimate keyed by the step, the projected step; returns the average iterate."""
    from fedray.data.federation import SiloArrays
    from fedray.rng import SiloDraws

    from fedray.core.protocol import RoundKeys

    alg, fed = plan.protocol.algorithm, plan.dataset.load(plan.seed)
    keys = RoundKeys(plan.seed, plan.repetitions, 0, plan.replicas.streams)
    state, everyone = alg.init(np.zeros((1, 3, 1)), keys), SiloArrays.of(fed, np.arange(plan.shape.num_silos))
    for step in range(plan.num_rounds):
        lo, hi = plan.protocol.sampler.step_units(step)
        users = everyone.select(slice(lo, hi))
        messages = alg.silo_step(state.params, users, SiloDraws(plan.seed, plan.replicas.streams, step, np.arange(lo, hi)))
        state = alg.server_step(state, messages.sum(axis=1), keys.at(step))
    return alg.output(state)["avg"]


@pytest.mark.parametrize("privacy,placement,trust", [("privacy=local_gaussian", "each user", "local"),
                                                     ("privacy=central_gaussian", "trusted server", "central")])
def test_gaussian_baselines_calibrate_one_release_per_step_and_spend_it_once(privacy, placement, trust):
    from fedray.core.protocol import Routing
    from fedray.privacy.gaussian import analytic_sigma

    plan, result = _run(privacy, "privacy.epsilon=2", "privacy.l2_clip=0.5")
    assert plan.privacy.trust_model == trust and plan.protocol.routing is Routing.DIRECT
    assert plan.protocol.resolved["noise_std"] == analytic_sigma(2.0, 1e-6, 1.0)
    assert plan.protocol.resolved["noise_placement"].startswith(placement)
    assert result.epsilon_spent.max() == 2.0 and plan.privacy.accountant == "parallel"
    np.testing.assert_array_equal(result.outputs["avg"], _replay(plan, result))


def test_exact_mode_gives_each_arm_the_step_its_own_noise_calls_for():
    """Same B and T for every trust model; eta = D / sqrt(T (L^2 + MSE(B) / B^2)), MSE the arm's own."""
    from fedray.privacy.gaussian_sum import release_sigma

    base = [*USERS, "algorithm.parameters=exact", "algorithm.radius=1", "privacy.epsilon=4", "data.spec.num_silos=6000"]
    plans = {p: make_plan(compose(*base, f"privacy={p}")) for p in ("shuffle_vector_sum", "local_gaussian",
                                                                     "central_gaussian", "none")}
    batch = {p.protocol.algorithm.batch_size for p in plans.values()}
    steps = {p.num_rounds for p in plans.values()}
    assert len(batch) == 1 and len(steps) == 1
    b, t, d, sigma = batch.pop(), steps.pop(), 3, release_sigma(4.0, 1e-6, 1.0)
    for name, mse in (("local_gaussian", b * d * sigma**2), ("central_gaussian", d * sigma**2), ("none", 0.0)):
        eta = 2.0 / np.sqrt(t * (1.0 + mse / b**2))
        assert plans[name].protocol.algorithm.step_size[0] == pytest.approx(eta, rel=1e-12)
    etas = [plans[p].protocol.algorithm.step_size[0] for p in ("shuffle_vector_sum", "local_gaussian",
                                                                "central_gaussian", "none")]
    assert etas == sorted(etas)                 # here P_vec's bound is the largest error, then local, central


@pytest.mark.parametrize("override,key", [("algorithm.parameters=paper", "algorithm.parameters"),
                                          ("privacy.calibration=paper", "privacy.calibration")])
def test_gaussian_baselines_refuse_p_vecs_settings(override, key):
    with pytest.raises(ConfigError) as err:
        make_plan(compose(*USERS, "privacy=local_gaussian", "algorithm.radius=1", override))
    assert err.value.key == key


def test_tight_calibration_plans_p_vec_by_its_exact_loss_runs_and_names_itself():
    from fedray.privacy.vector_sum import vector_sum_parameters
    from fedray.privacy.vector_sum_tight import invocation_delta

    plan, result = _run("privacy.calibration=tight")
    params = plan.protocol.algorithm.vector_sum.params
    paper = vector_sum_parameters(4.0, 1e-6, 3, 7, 1.0)
    assert plan.privacy.statement()["calibration"] == "tight" and plan.privacy.accountant == "parallel"
    assert (params.dim, params.num_users, params.scale, params.bit_probability) == (3, 7, paper.scale, 0.5)
    assert plan.protocol.resolved["invocation_delta_bound"] <= 1e-6 and invocation_delta(4.0, params) <= 1e-6
    assert params.noise_bits < paper.noise_bits / 1e4            # 65 against 4,529,564 trials per user
    assert result.epsilon_spent.max() == 4.0                     # one invocation per user, as the paper's
    assert result.final["train_loss_avg"][0] < 1.0               # the paper's noise: ~12.7


def test_exact_mode_takes_the_tight_sums_error():
    base = [*USERS, "algorithm.parameters=exact", "algorithm.radius=1", "privacy.epsilon=4", "data.spec.num_silos=6000"]
    paper, tight = (make_plan(compose(*base, f"privacy.calibration={c}")) for c in ("paper", "tight"))
    params = tight.protocol.algorithm.vector_sum.params
    b, t = tight.protocol.algorithm.batch_size, tight.num_rounds
    eta = 2.0 / np.sqrt(t * (1.0 + params.mse_bound() / b**2))
    assert tight.protocol.algorithm.step_size[0] == pytest.approx(eta, rel=1e-12)
    assert tight.protocol.algorithm.step_size[0] > 10 * paper.protocol.algorithm.step_size[0]
