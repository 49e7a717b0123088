"""What a silo adds and what the ledger charges are the same mechanism: the noise step's own
event, priced by dp-accounting, is the ledger's epsilon for every (replica, silo)."""

from dataclasses import replace

import dp_accounting
import numpy as np
import pytest
from dp_accounting import rdp

from fedray.core.mechanism import Mechanism, Placement
from fedray.plan import make_plan
from fedray.privacy import event_data
from fedray.privacy.ledger import Ledger
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


def test_the_silos_step_and_the_priced_step_are_one_value():
    """The silo applies the ledger's own step at its clip's scale: the same multiplier array, so
    the same event in every cell; and the ledger's price of a cell is dp-accounting's epsilon of
    the event the accountant names for it (an independent route through dp-accounting)."""
    plan = make_plan(compose("experiment=isrl_dp_convex", "privacy.epsilon_grid=[0.75,6]"))
    accountant = plan.privacy.ledger.accountant
    applied = plan.protocol.build_algorithm(1.0).noise
    assert applied.noise_multiplier is accountant.noise.noise_multiplier
    counts = np.full(plan.privacy.ledger.shape, 5)
    charged = plan.privacy.ledger.epsilons(counts)
    for replica, silo in [(0, 0), (plan.num_replicas - 1, 24)]:
        assert applied.event(replica, silo) == accountant.noise.event(replica, silo)
        event = accountant.event(replica, silo, 5)
        assert event.event.event == applied.event(replica, silo)        # Self(Sampled(Gaussian))
        accountant_rdp = rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
        expected = accountant_rdp.compose(event).get_epsilon(float(plan.privacy.delta[silo]))
        assert charged[replica, silo] == pytest.approx(expected, rel=1e-12)


def test_the_ledger_follows_its_mechanism_and_refuses_an_event_it_cannot_price():
    from dataclasses import dataclass

    from fedray.privacy.ledger import silo_ledger

    ledger = silo_ledger(np.full((1, 2), 2.0), 10, np.array([100, 100]), 1, np.array([1e-5, 1e-5]))
    counts = np.array([[3, 3]])
    halved = Ledger(replace(ledger.accountant, noise=GaussianNoise(np.full((1, 2), 1.0)), _groups=None), (1, 2))
    assert np.all(halved.epsilons(counts) > ledger.epsilons(counts))
    assert halved.epsilons(counts)[0, 0] == silo_ledger(np.full((1, 2), 1.0), 10, np.array([100, 100]), 1,
                                                         np.array([1e-5, 1e-5])).epsilons(counts)[0, 0]

    @dataclass(frozen=True)
    class LaplaceSaying(GaussianNoise):
        def event_data(self, replica, unit):
            return {"module_name": "dp_accounting.dp_event", "class_name": "LaplaceDpEvent", "noise_multiplier": 2.0}

    mislabelled = Ledger(replace(ledger.accountant, noise=LaplaceSaying(np.full((1, 2), 2.0)), _groups=None), (1, 2))
    with pytest.raises(ValueError, match="prices a GaussianDpEvent .* got .*LaplaceDpEvent"):
        mislabelled.epsilons(counts)


@pytest.mark.parametrize("noise", [GaussianNoise(np.array([[0.5, 1.0], [2.0, 0.0]])), NoNoise()])
def test_event_data_is_dp_accountings_own_json_form(noise):
    from fedray.privacy.events import event_to_json

    for replica, unit in [(0, 0), (1, 0), (1, 1)]:
        assert noise.event_data(replica, unit) == event_to_json(noise.event(replica, unit))
    sampled = dp_accounting.SelfComposedDpEvent(dp_accounting.SampledWithoutReplacementDpEvent(
        100, 10, noise.event(1, 0)), 4)
    assert event_data.self_composed(event_data.sampled_without_replacement(100, 10, noise.event_data(1, 0)), 4) \
        == event_to_json(sampled)


def test_both_gaussian_steps_name_their_event_by_one_rule():
    """``event_data.gaussian_step``: the cell's noise std over sensitivity, non-private at std 0.
    The client's step (multipliers per cell) and the server's calibrated step (stds per replica)
    give the same data for the same multipliers; values by hand: std 0.5 on sensitivity 0.25 is a
    Gaussian of multiplier 2 (0.5 / 0.25, exact in binary), std 0 none."""
    from fedray.privacy.gaussian import analytic_sigma
    from fedray.privacy.mechanisms import CalibratedGaussianNoise

    calibrated = CalibratedGaussianNoise(np.array([0.5, 0.0]), 0.25, 1.0, 1e-5, analytic_sigma)
    assert calibrated.event_data(0, 7) == event_data.gaussian(2.0) == event_data.gaussian_step(2.0, 4, 2)
    assert calibrated.event_data(1, 0) == event_data.non_private()
    client = GaussianNoise(np.array([[2.0], [0.0]]), sensitivity=0.25)
    for replica in (0, 1):
        assert client.event_data(replica, 3) == calibrated.event_data(replica, 3)
    scalar = CalibratedGaussianNoise(0.3, 0.2, 1.0, 1e-5, analytic_sigma)
    assert scalar.event_data(5, 0) == event_data.gaussian(0.3 / 0.2)      # the std over the sensitivity, as divided
    assert event_data.gaussian_step(np.array([[1.0, 0.0]]), 9, 1) == event_data.non_private()
