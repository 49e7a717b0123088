"""What a silo adds and what the ledger charges are the same mechanism: the noise step's own
event, priced by dp-accounting, is the ledger's epsilon for every (replica, silo)."""

import dp_accounting
import numpy as np
import pytest
from dp_accounting import rdp

from fedray.core.mechanism import Mechanism, Placement
from fedray.plan import make_plan
from fedray.privacy.mechanisms import GaussianNoise, NoNoise
from tests.conftest import compose


@pytest.mark.parametrize("overrides", [[], ["privacy.epsilon_grid=[0.75,6]"], ["privacy.epsilon=[1,1,1,1,1,3,3,3,3,3,3,3,3,3,3,3,3,3,3,3,3,3,3,3,3]"]])
def test_the_ledger_prices_the_event_of_the_noise_the_silo_adds(overrides):
    plan = make_plan(compose("experiment=isrl_dp_convex", *overrides))
    protocol = plan.protocol
    noise = protocol.build_algorithm(1.0).noise
    assert isinstance(noise, Mechanism) and noise.placement is Placement.CLIENT
    k, sizes = protocol.batch_size, plan.shape.n_train
    np.testing.assert_array_equal(noise.noise_std, plan.privacy.noise_multiplier * (2 * 1.0 / k))
    counts = np.full(plan.privacy.noise_multiplier.shape, 7)
    charged = plan.privacy.ledger.epsilons(counts)
    for replica, silo in [(0, 0), (plan.num_replicas - 1, 4), (plan.num_replicas - 1, 24)]:
        accountant = rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
        release = dp_accounting.SampledWithoutReplacementDpEvent(int(sizes[silo]), k, noise.event(replica, silo))
        accountant.compose(release, 7)
        assert charged[replica, silo] == pytest.approx(accountant.get_epsilon(float(plan.privacy.delta[silo])), rel=1e-9)


def test_event_reads_the_cell_and_zero_noise_is_not_private():
    noise = GaussianNoise(np.array([[0.5, 1.0], [2.0, 0.0]]), sensitivity=0.1)
    assert noise.event(1, 0) == dp_accounting.GaussianDpEvent(2.0)
    assert isinstance(noise.event(1, 1), dp_accounting.NonPrivateDpEvent)
    assert noise.select(np.array([1])).event(0, 0) == dp_accounting.GaussianDpEvent(1.0)
    assert GaussianNoise(np.array([[0.7]])).event(3, 5) == dp_accounting.GaussianDpEvent(0.7)
    assert isinstance(NoNoise().event(0, 0), dp_accounting.NonPrivateDpEvent)
