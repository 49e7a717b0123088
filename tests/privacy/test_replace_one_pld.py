"""The pld accountant composes the symmetrised replace-one release, never one direction at a time."""

import dp_accounting
import numpy as np
import pytest
from dp_accounting import pld
from dp_accounting.pld import privacy_loss_mechanism

from fedray.privacy.accounting import participation_epsilon
from fedray.privacy.replace_one_pld import one_direction_pld, release_pld, sampled_gaussian_deltas

N, ROUNDS = 1238, 35
DELTA = 1 / N**2


@pytest.mark.parametrize("z,q", [(1.753, 182 / 1238), (0.6, 0.01), (3.0, 0.5), (0.9675, 444 / 1238)])
def test_closed_form_curves_are_dp_accountings_per_direction_curves(z, q):
    eps = np.linspace(-4, 8, 97)
    ours = sampled_gaussian_deltas(z, q, eps)
    for row, direction in enumerate((privacy_loss_mechanism.AdjacencyType.REMOVE, privacy_loss_mechanism.AdjacencyType.ADD)):
        theirs = privacy_loss_mechanism.GaussianPrivacyLoss(z, 1.0, sampling_prob=q, adjacency_type=direction)
        np.testing.assert_allclose(ours[row], theirs.get_delta_for_epsilon(eps), atol=1e-12)


def _one_direction_at_a_time(z, k):
    """What the previous accountant reported: dp-accounting's add/remove Poisson PLD, each direction composed on its own."""
    accountant = pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    accountant.compose(dp_accounting.PoissonSampledDpEvent(k / N, dp_accounting.GaussianDpEvent(z)), ROUNDS)
    return accountant.get_epsilon(DELTA)


# E1's shape: K = ceil(n sqrt(eps / 4R)) of n = 1238 records, R = 35 rounds, delta = 1/n^2; z is what
# the previous accountant calibrated for the target.
@pytest.mark.parametrize("target,k,z,audited", [(3.0, 182, 1.7529, 3.14), pytest.param(18.0, 444, 0.9675, 18.83, marks=pytest.mark.slow),
                                                (0.75, 91, 2.8414, 0.782)])
def test_noise_the_old_accountant_called_enough_spends_the_audited_epsilon(target, k, z, audited):
    assert _one_direction_at_a_time(z, k) == pytest.approx(target, abs=2e-3)
    spent = participation_epsilon(z, k, N, 1, ROUNDS, DELTA, "pld")
    assert spent == pytest.approx(audited, rel=5e-3)
    assert spent > 1.03 * target


@pytest.mark.parametrize("z,q", [pytest.param(1.753, 182 / 1238, marks=pytest.mark.slow), (2.8414, 91 / 1238)])
def test_symmetrised_composition_dominates_every_fixed_mix_of_directions(z, q):
    rounds = 12
    symmetric = release_pld(z, q).self_compose(rounds).get_epsilon_for_delta(DELTA)
    forward, backward = one_direction_pld(z, q, True), one_direction_pld(z, q, False)
    for k in range(rounds + 1):
        mix = forward.self_compose(k) if k else None
        if k < rounds:
            rest = backward.self_compose(rounds - k)
            mix = rest if mix is None else mix.compose(rest)
        assert mix.get_epsilon_for_delta(DELTA) <= symmetric + 1e-9


def test_one_release_is_the_worse_direction():
    # Symmetrising changes nothing for a single release: its epsilon is the max of the directions.
    z, q, delta = 1.2, 0.05, 1e-5
    worse = max(one_direction_pld(z, q, r).get_epsilon_for_delta(delta) for r in (True, False))
    assert release_pld(z, q).get_epsilon_for_delta(delta) == pytest.approx(worse, abs=1e-3)


def test_full_batch_release_is_the_analytic_gaussian():
    z, delta = 2.0, 1e-5
    analytic = pld.privacy_loss_distribution.from_gaussian_mechanism(z).get_epsilon_for_delta(delta)
    assert participation_epsilon(z, 100, 100, 1, 1, delta, "pld") == pytest.approx(analytic, rel=1e-9)
