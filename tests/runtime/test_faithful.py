"""runtime.faithful: everything the driver receives is the protocol's messages, their noise does not
follow from anything the driver holds, and per-unit statistics come only after the run."""

import numpy as np
import pytest

from fedray.errors import ConfigError
from fedray.plan import make_plan
from fedray.runtime.driver import InlineGroups, run
from tests.conftest import compose

SMALL = ["data=synthetic", "data.spec.num_silos=6", "data.spec.samples_per_silo=60", "data.spec.dim=4",
         "participation.silos_per_round=4", "num_rounds=4", "algorithm.batch_size=10", "algorithm.step_size=0.5",
         "privacy.l2_clip=1.0", "privacy.enforce_budget=false", "progress=false"]
SHUFFLED = ["data=synthetic", "data.spec.num_silos=400", "data.spec.samples_per_silo=4", "data.spec.dim=3",
            "algorithm=sdp_mb_sgd", "privacy=shuffle", "privacy.l2_clip=1.0", "privacy.enforce_budget=false",
            "participation.silos_per_round=400", "num_rounds=3", "algorithm.step_size=0.5", "progress=false"]


class RecordingGroups(InlineGroups):
    """Inline silo groups that keep a copy of everything handed to the driver, in order."""

    def __init__(self, plan):
        super().__init__(plan, num_groups=2)
        self.received = []

    def exchange(self, payload):
        messages, evaluation = super().exchange(payload)
        self.received.append(("round", payload.spec.round, messages, evaluation))
        return messages, evaluation

    def call(self, method, *args):
        out = super().call(method, *args)
        self.received.append(("call", method, out))
        return out


def _run(*overrides):
    plan = make_plan(compose(*overrides))
    groups = RecordingGroups(plan)
    return plan, groups, run(plan, inline=True, groups=groups)


def test_no_unit_statistic_reaches_the_driver_while_the_protocol_runs():
    plan, groups, result = _run(*SMALL, "runtime.faithful=true")
    rounds = [i for i, item in enumerate(groups.received) if item[0] == "round"]
    evaluations = [i for i, item in enumerate(groups.received) if item[:2] == ("call", "evaluate")]
    assert len(rounds) == plan.num_rounds
    assert all(not any(part is not None for part in groups.received[i][3]) for i in rounds)
    assert evaluations and min(evaluations) > max(rounds)          # evaluated after the last round only
    assert {"train_loss", "test_error"} <= result.diagnostics
    assert all("train_loss" in h for h in result.history)          # the curves are still there, after the run
    assert plan.privacy.statement()["driver_view"].startswith("faithful")


def test_a_simulation_hands_the_driver_unit_statistics_every_round():
    # The test above could fail: without faithful, per-unit evaluation parts arrive with the messages.
    _, groups, _ = _run(*SMALL)
    assert all(any(part is not None for part in item[3]) for item in groups.received if item[0] == "round")


def _first_messages(*overrides):
    _, groups, _ = _run(*overrides)
    return next(item[2].values for item in groups.received if item[0] == "round")


@pytest.mark.parametrize("setting", [SMALL, SHUFFLED])
def test_the_run_seed_does_not_determine_the_noise_in_a_faithful_run(setting):
    # Same seed, same data, same model: a simulation repeats its messages bit for bit (the driver
    # could subtract the noise), a faithful run does not (the noise comes from the actors' entropy).
    assert np.array_equal(_first_messages(*setting), _first_messages(*setting))
    assert not np.array_equal(_first_messages(*setting, "runtime.faithful=true"),
                              _first_messages(*setting, "runtime.faithful=true"))


def test_shuffled_messages_reach_the_driver_without_sender_positions():
    _, groups, _ = _run(*SHUFFLED, "runtime.faithful=true")
    for kind, _, messages, evaluation in (item for item in groups.received if item[0] == "round"):
        counts = messages.mask.sum(axis=1)
        # Only how many arrived: the mask is a prefix, not which silos' slots are filled.
        np.testing.assert_array_equal(messages.mask, np.arange(messages.mask.shape[1])[None] < counts[:, None])
        assert evaluation == []


def test_a_faithful_run_does_not_resume():
    with pytest.raises(ConfigError) as err:
        make_plan(compose(*SMALL, "runtime.faithful=true", "runtime.resume=true"))
    assert str(err.value).startswith("runtime.resume must be false with runtime.faithful=true")


@pytest.mark.parametrize("overrides,named", [
    (["privacy.l2_clip=null"], "privacy.l2_clip = null"),
    (["privacy.epsilon_grid=[1,3]", "replicas.common_random_numbers=true"], "common random numbers"),
])
def test_a_faithful_run_refuses_inputs_outside_the_guarantee(overrides, named):
    with pytest.raises(ConfigError) as err:
        make_plan(compose(*SMALL, "runtime.faithful=true", *overrides))
    assert str(err.value).startswith("runtime.faithful must be false for a plan that uses inputs outside")
    assert named in str(err.value)


def test_blocks_of_sequential_steps_get_their_deferred_evaluations_in_place():
    # P_SGD runs blocks of steps whose server steps settle one round late (pipelined): the
    # evaluations made after the run must land on the rounds that asked for them.
    users = ["data=synthetic", "data.spec.num_silos=480", "data.spec.samples_per_silo=1", "data.spec.dim=3",
             "data.spec.test_samples_per_silo=1", "participation=sequential", "participation.batch_size=8",
             "algorithm=p_sgd", "privacy=none", "algorithm.step_size=1.0", "num_rounds=60", "evaluate_every=2",
             "progress=false"]
    evaluated = []
    for faithful in ("false", "true"):
        plan = make_plan(compose(*users, f"runtime.faithful={faithful}"))
        result = run(plan, inline=True, groups=InlineGroups(plan, 6))      # six actors of 10 steps each
        evaluated.append([i for i, h in enumerate(result.history) if "train_loss" in h])
    # Blocks are cut at the evaluated steps (every 2nd, and the last), each evaluated step a block
    # of its own: 60 history entries, one per step here, evaluated at the steps evaluate_every names.
    assert evaluated[0] == evaluated[1] == [*range(0, 60, 2), 59]
