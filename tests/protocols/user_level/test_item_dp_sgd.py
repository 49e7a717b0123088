"""Seed 003's B3 (item-level DP-SGD with group privacy): the item budget, the ledger's group
privacy, the calibration against the RDP accountant, the round's arithmetic against a numpy
step on any actor layout, refusals."""

import math

import numpy as np
import pytest

from fedray.core.protocol import RoundKeys
from fedray.errors import ConfigError
from fedray.plan import make_plan
from fedray.privacy.accounting import participation_epsilon
from fedray.protocols.user_level.item_dp_sgd import item_level_budget
from fedray.runtime.driver import InlineGroups, run
from tests.conftest import compose

B3 = ["experiment=phased_erm_synthetic", "data.spec.num_silos=300", "data.spec.samples_per_silo=4", "data.spec.dim=3",
      "data.spec.noise=1.0", "algorithm=item_dp_sgd", "algorithm.batch_size=100", "algorithm.l2_clip=0.5",
      "num_rounds=20", "privacy.calibration=accountant", "progress=false", f"evaluate_every={10**9}"]


def test_group_privacy_over_m_items_meets_the_user_budget():
    """(eps/m, delta/(m e^eps)) per item gives (eps, m e^{(m-1) eps/m} delta/(m e^eps)) <= (eps,
    delta) per user; the ledger prices a user as m times the item-level PLD epsilon."""
    eps0, delta0 = item_level_budget(1.0, 1e-5, 4)
    assert (eps0, delta0) == pytest.approx((0.25, 1e-5 / (4 * math.e)))
    assert 4 * math.exp(3 * eps0) * delta0 <= 1e-5
    plan = make_plan(compose(*B3))
    z = plan.protocol.resolved["noise_multiplier"]
    item = participation_epsilon(z, 100, 1200, 1, 20, delta0, "pld")
    assert item == pytest.approx(0.25, rel=1e-3) and item <= 0.25
    # the RDP bound at the same noise is an upper bound on the PLD's (PLD is the tighter accountant)
    assert participation_epsilon(z, 100, 1200, 1, 20, delta0, "rdp") >= item
    result = run(plan, inline=True)
    assert np.allclose(result.epsilon_spent, 4 * item) and result.epsilon_spent.max() <= 1.0
    assert plan.privacy.statement()["accountant"] == "pld"


def test_a_round_is_the_clipped_mean_of_the_sampled_items_on_any_layout():
    """Without noise, one round from 0 moves to Pi_W(-eta mean_{sampled} clip(g_i)), computed here
    from the records and the server's sample."""
    plan = make_plan(compose(*B3, "privacy=none", "num_rounds=1", "algorithm.step_size=[0.5,2.0]",
                             "algorithm.radius=0.3"))
    algorithm = plan.protocol.algorithm
    picked = algorithm.sample(_keys(plan))
    assert picked.shape == (2, 100) and all(np.unique(row).size == 100 for row in picked)
    fed = plan.dataset.load(plan.seed, plan.trial)
    x, y = fed.x_train.reshape(-1, 3), fed.y_train.reshape(-1)
    expected = []
    for row, eta in zip(picked, (0.5, 2.0)):
        grads = (0.5 - y[row])[:, None] * x[row]              # the logistic loss's gradient at 0
        grads *= np.minimum(1.0, 0.5 / np.linalg.norm(grads, axis=1))[:, None]
        step = -eta * grads.mean(axis=0)
        expected.append(step * min(1.0, 0.3 / np.linalg.norm(step)))
    one = run(plan, inline=True).model[:, :, 0]
    three = run(plan, inline=True, groups=InlineGroups(plan, 3)).model[:, :, 0]
    assert np.allclose(one, expected, atol=1e-12) and np.array_equal(one, three)


@pytest.mark.parametrize("override, key", [
    ("algorithm.batch_size=1201", "algorithm.batch_size"),             # more than N m = 1,200 items
    ("participation=uniform", "participation"),
    ("privacy.calibration=paper", "privacy.calibration"),
    ("algorithm.l2_clip=0", "algorithm.l2_clip"),
])
def test_bad_settings_are_refused_at_planning(override, key):
    with pytest.raises(ConfigError) as err:
        make_plan(compose(*B3, override))
    assert err.value.key == key


def _keys(plan) -> RoundKeys:
    """Round 0's keys of ``plan``'s run (what the driver hands the server)."""
    return RoundKeys(plan.seed, plan.repetitions, 0, plan.replicas.streams)


def _round_noise(plan) -> tuple[np.ndarray, np.ndarray]:
    """Each replica's server noise of round 0 (a step from 0 on all-zero user sums, over -eta) and
    its item sample."""
    algorithm = plan.protocol.algorithm
    replicas, users = plan.replicas.count, plan.shape.num_silos
    state = algorithm.init(np.zeros((replicas, plan.shape.dim, 1)), _keys(plan))
    zeros = np.zeros((replicas, users, plan.shape.dim, 1))
    stepped = algorithm.server_step(state, zeros, np.ones((replicas, users), dtype=bool), _keys(plan))
    return -stepped.solver.iterate / algorithm.solver.step_size[:, None, None], state.picked


def test_plans_of_other_seeds_and_replicas_draw_their_own_noise_and_items():
    """The noise and the item sample are keyed by (run seed, replica key, round), fixed at planning:
    a plan of another seed, and each replica (repetition) of one plan, draws its own; the same plan
    made twice draws the same (a simulation repeats). Faithful runs are refused (the statement's
    caveat: a simulation keys the items by the run seed), so no B3 run claims secret draws."""
    first, again = make_plan(compose(*B3)), make_plan(compose(*B3))
    other = make_plan(compose(*B3, "seed=1"))
    two = make_plan(compose(*B3, "repetitions=2"))
    (noise, items), (noise_again, items_again) = _round_noise(first), _round_noise(again)
    other_noise, other_items = _round_noise(other)
    two_noise, two_items = _round_noise(two)
    assert np.abs(noise).min() > 0 and np.array_equal(noise, noise_again) and np.array_equal(items, items_again)
    assert not np.isin(noise, other_noise).any() and not np.array_equal(items, other_items)
    assert not np.isin(two_noise[0], two_noise[1]).any() and not np.array_equal(two_items[0], two_items[1])
    assert np.array_equal(two_noise[0], noise[0])        # repetition 0 draws what the plain run draws
    with pytest.raises(ConfigError, match="items to stay secret") as err:
        make_plan(compose(*B3, "runtime.faithful=true"))
    assert err.value.key == "runtime.faithful"
