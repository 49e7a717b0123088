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
from tests.conftest import compose

USERS = ["experiment=p_sgd_synthetic", "data.spec.num_silos=600", "data.spec.dim=3", "participation.batch_size=7",
         "num_rounds=80", "progress=false", "evaluate_every=25"]


def _run(*overrides, groups=1):
    plan = make_plan(compose(*USERS, *overrides))
    return plan, run(plan, inline=True, groups=InlineGroups(plan, groups))


@pytest.mark.parametrize("privacy", ["privacy=none", "privacy=shuffle_vector_sum"])
def test_block_size_and_actor_layout_change_no_bit(privacy):
    _, reference = _run(privacy, "algorithm.block_steps=1")
    # 600 users in 1, 3 or 4 groups: with B = 7, steps straddle the group boundaries at 200 and 400.
    for block, groups in ((1000, 1), (16, 3), (5, 4)):
        _, other = _run(privacy, f"algorithm.block_steps={block}", groups=groups)
        np.testing.assert_array_equal(other.outputs["avg"], reference.outputs["avg"])
        np.testing.assert_array_equal(other.outputs["last"], reference.outputs["last"])


def test_blocks_are_cut_where_the_users_change_actor():
    from fedray.runtime.driver import _fit_block

    plan = make_plan(compose(*USERS, "privacy=none"))
    groups = InlineGroups(plan, 3)                          # users [0, 200), [200, 400), [400, 600)
    protocol = plan.protocol.build(groups)
    assert isinstance(protocol, SequentialSteps)
    state = protocol.init()
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
