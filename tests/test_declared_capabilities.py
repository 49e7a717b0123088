"""What the planner and the runtime read of a loss, a data spec, an accountant, a tracker and a
shuffler's message block is declared in the types (``fedray.losses.Loss``,
``fedray.data.federation.DataSpec`` and its capabilities, ``PlansWithoutCounts``, ``Tracker``,
``MessageBlock``) and read through them, never with ``getattr`` and a default."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import numpy as np
import pytest

import fedray.losses
import fedray.smoothing
from fedray.data.federation import DataSpec, KnownPopulation, PreparedFiles
from fedray.data.mnist import MnistPairs
from fedray.data.sphere_regression import SphereRegression
from fedray.data.synthetic import SyntheticLinear
from fedray.errors import ConfigError
from fedray.losses import Loss
from fedray.plan import make_plan
from fedray.privacy.ledger import PhaseAccountant, PlansWithoutCounts, RoundsAccountant
from fedray.runtime.callbacks import Tracker
from fedray.runtime.shuffler import MessageBlock, Shuffler
from tests.conftest import compose


def test_every_loss_is_a_Loss_with_its_flags_as_declared():
    classes = [c for module in (fedray.losses, fedray.smoothing) for _, c in inspect.getmembers(module, inspect.isclass)
               if c.__module__ == module.__name__ and hasattr(c, "value") and c is not Loss]
    assert {c.__name__ for c in classes} >= {"Logistic", "Squared", "Linear", "Huber", "Softmax", "Hinge", "Absolute",
                                              "MoreauEnvelope"}
    for cls in classes:
        assert issubclass(cls, Loss), cls
    linear = {c.__name__ for c in classes if c.linear_in_record}
    by_norms = {c.__name__ for c in classes if c.needs_x_norms}
    assert linear == {"Linear"} and by_norms == {"MoreauEnvelope"}


def test_the_planner_refuses_a_loss_or_a_data_spec_that_is_not_one():
    with pytest.raises(ConfigError, match=r"data.loss must be a loss: a dataclass subclassing fedray.losses.Loss; got .SyntheticLinear"):
        make_plan(compose("experiment=isrl_dp_convex", "~data.loss", "+data.loss._target_=fedray.data.synthetic.SyntheticLinear"))
    with pytest.raises(ConfigError, match=r"data.spec must be a data spec .*fedray.data.DataSpec.; got .Logistic"):
        make_plan(compose("experiment=isrl_dp_convex", "~data.spec", "+data.spec._target_=fedray.losses.Logistic"))


def test_user_means_need_a_loss_linear_in_the_record():
    plan = make_plan(compose("experiment=sc_output_pert_means"))
    assert plan.loss is not None and plan.loss.linear_in_record
    with pytest.raises(ConfigError, match="linear in the record"):
        make_plan(compose("experiment=sc_output_pert_means", "data.loss._target_=fedray.losses.Squared"))


def test_data_specs_declare_their_capabilities():
    for spec in (SyntheticLinear(), SphereRegression(), MnistPairs()):
        assert isinstance(spec, DataSpec)
    assert isinstance(SphereRegression(), KnownPopulation) and not isinstance(SyntheticLinear(), KnownPopulation)
    assert isinstance(MnistPairs(), PreparedFiles) and not isinstance(SyntheticLinear(), PreparedFiles)


B2 = ("experiment=user_level_sphere", "data.spec.num_silos=1000", "data.spec.samples_per_silo=16", "data.spec.dim=5",
      "repetitions=2", "progress=false", "algorithm=filtered_gd", "participation=all", "num_rounds=10",
      "algorithm.profile=exploratory", "algorithm.kappa=1e-5", "privacy.epsilon=100", "privacy.delta=1e-7")


def test_a_phase_accountant_plans_without_the_samplers_counts_as_it_would_with_them():
    """The planner skips the sampler's replay only for an accountant that says it reads no counts;
    the counts it plans are what ``planned`` makes of the replayed ones (the other route)."""
    plan = make_plan(compose(*B2))
    accountant = plan.privacy.ledger.accountant
    assert isinstance(accountant, PhaseAccountant) and isinstance(accountant, PlansWithoutCounts)
    replayed = plan.sampler.counts(plan.seed, plan.repetitions, plan.num_rounds, plan.shape.num_silos)
    expected = accountant.planned(replayed, plan.num_rounds)
    assert replayed.any() and expected.dtype == np.int64
    np.testing.assert_array_equal(plan.privacy.planned_counts, expected)
    for rounds in (0, 1, 10):
        np.testing.assert_array_equal(accountant.planned_without_counts(replayed.shape, rounds),
                                      accountant.planned(replayed * 7, rounds))
    assert not isinstance(RoundsAccountant.__new__(RoundsAccountant), PlansWithoutCounts)


def test_a_tracker_and_a_message_block_are_what_the_runtime_reads():
    @dataclass
    class Logged:
        run_id: str | None = None

        def log_round(self, round_index: int, metrics: dict) -> None:
            pass

    assert isinstance(Logged(), Tracker) and not isinstance(object(), Tracker)

    @dataclass(frozen=True)
    class Block:
        messages: np.ndarray
        mask: np.ndarray

    block = Block(np.ones((1, 2, 3)), np.array([[True, False]]))
    assert isinstance(block, MessageBlock)
    out = Shuffler(3, np.array([0])).shuffle(0, block)
    np.testing.assert_array_equal(out.messages, np.ones((1, 1, 3)))
    with pytest.raises(ValueError, match="message block 0"):
        Shuffler(3, np.array([0])).shuffle(0, object())
