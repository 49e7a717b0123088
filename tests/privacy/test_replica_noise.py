"""Replicas are separate deployments: a driver holding every replica's messages cannot cancel their
noise, unless the run asked for common random numbers (and then its privacy statement says so)."""

import numpy as np
import pytest

from fedray.losses import Logistic
from fedray.plan import make_plan
from fedray.privacy.mechanisms import GaussianNoise
from fedray.protocols.isrl_dp import MinibatchSGD
from fedray.rng import SiloDraws
from tests.conftest import compose
from tests.protocols.isrl_dp.silos import synthetic_silos

_, SILOS = synthetic_silos(4, 60, 7)
GRID = ["data=synthetic", "data.spec.num_silos=4", "data.spec.samples_per_silo=60", "data.spec.dim=5",
        "participation.silos_per_round=4", "num_rounds=3", "algorithm.batch_size=20", "algorithm.step_size=0.3",
        "privacy.epsilon_grid=[1,2,4]", "privacy.enforce_budget=false", "progress=false"]


def _first_messages(streams, noise_std):
    """Every replica's round-0 message of every silo, from the same starting point (what the driver holds)."""
    algorithm = MinibatchSGD(Logistic(), np.full(3, 0.3), 20, 1.0, GaussianNoise(noise_std))
    params = np.zeros((3, 5, 1))
    return algorithm.silo_step(params, SILOS, SiloDraws(0, streams, 0, SILOS.silo_ids, width=SILOS.x.shape[1]))


def _cancel(messages, noise_std, a, b):
    """The driver's estimate of the un-noised statistic from replicas a and b: m = g + s xi with a shared xi."""
    sa, sb = noise_std[a, :, None, None], noise_std[b, :, None, None]
    return (sb * messages[a] - sa * messages[b]) / (sb - sa)


@pytest.mark.parametrize("common", [False, True])
def test_the_driver_cannot_cancel_noise_across_replicas_unless_they_share_it(common):
    plan = make_plan(compose(*GRID, f"replicas.common_random_numbers={str(common).lower()}"))
    noise_std = np.array([[0.5] * 4, [0.3] * 4, [0.2] * 4])      # three budgets, one std per silo
    messages = _first_messages(plan.replicas.streams, noise_std)
    one, other = _cancel(messages, noise_std, 0, 1), _cancel(messages, noise_std, 0, 2)
    disagreement = np.abs(one - other).max()
    if common:
        # Shared noise: two pairs of budgets give the same noiseless clipped minibatch mean.
        assert disagreement < 1e-10
        assert any("common random numbers" in text for text in plan.privacy.non_private_inputs)
    else:
        assert disagreement > 0.1                               # of the order of the noise, not of rounding
        assert not any("common random numbers" in text for text in plan.privacy.non_private_inputs)


def test_every_replica_has_its_own_stream_and_a_plain_run_draws_what_its_replica_draws():
    grid = make_plan(compose(*GRID, "repetitions=2", "algorithm.step_size=[0.1,0.3]"))
    streams = grid.replicas.streams
    assert len({tuple(row) for row in streams}) == grid.num_replicas == 12
    alone = make_plan(compose(*GRID, "repetitions=2", "algorithm.step_size=0.3", "privacy.epsilon_grid=null",
                              "privacy.epsilon=4"))
    rows = (grid.epsilon_levels == 4) & (grid.step_sizes == 0.3)
    np.testing.assert_array_equal(streams[rows], alone.replicas.streams)


def test_common_random_numbers_key_streams_by_repetition_alone():
    plan = make_plan(compose(*GRID, "repetitions=2", "replicas.common_random_numbers=true"))
    np.testing.assert_array_equal(plan.replicas.streams[:, 0], plan.repetitions)
    assert plan.replicas.streams.shape[1] == 1
