"""A trusted server's Gaussian rounds, planned once for any protocol (``fedray.privacy.central_rounds``)
and the clip of a unit's whole message (``UnitClip``): sensitivities by hand, the calibration
against dp-accounting directly, the ledger pricing the very step the server applies, refusals."""

from __future__ import annotations

import dp_accounting
import numpy as np
import pytest

from fedray.core.planning import PrivacySettings
from fedray.core.sampling import AllUnits, PoissonParticipation, UniformParticipation
from fedray.core.terms import Accountant, Calibration, Relation, TrustModel
from fedray.errors import ConfigError
from fedray.privacy.accounting import calibrate_noise_multiplier
from fedray.privacy.central_rounds import poisson_noise_multiplier, server_gaussian_rounds
from fedray.privacy.mechanisms import UnitClip

CENTRAL = PrivacySettings(TrustModel.CENTRAL, Calibration.ACCOUNTANT, epsilon=1.0, delta=1e-5)


def test_unit_clip_scales_each_message_and_states_the_sums_sensitivity():
    clip = UnitClip(0.5)
    assert clip.sum_sensitivity(Relation.REPLACE_ONE) == 1.0 and clip.sum_sensitivity(Relation.ADD_REMOVE) == 0.5
    x = np.zeros((2, 3, 2, 1))
    x[0, 0, :, 0] = [3.0, 4.0]          # norm 5: scaled by 0.1 to norm 0.5
    x[0, 1, :, 0] = [0.3, 0.0]          # inside the ball: kept
    x[1, 2, :, 0] = [1.0, 0.0]          # not taking part: zeroed
    taking = np.array([[True, True, True], [True, True, False]])    # row (0, 2) and (1, 0) are zero vectors
    out, metrics = clip.apply(x, taking)
    np.testing.assert_allclose(out[0, 0, :, 0], [0.3, 0.4])
    np.testing.assert_array_equal(out[0, 1], x[0, 1])
    assert not out[1].any() and np.isfinite(out).all()
    np.testing.assert_allclose(metrics["fraction_clipped"], [1 / 3, 0.0])
    with pytest.raises(ValueError, match="relation must be one of"):
        clip.sum_sensitivity("replace_all")


@pytest.mark.same_worker("dp_fedavg_small")     # the DP-FedAvg example's SMALL plans this calibration too
def test_uniform_rounds_calibrate_by_rdp_and_the_ledger_prices_the_applied_step():
    """z is the RDP accountant's for 30 releases of 3 of 6; sigma = z 2C; the ledger's epsilon of
    30 rounds is dp-accounting's own for that event (the independent route), and the target."""
    planned = server_gaussian_rounds(CENTRAL, UniformParticipation(3), UnitClip(0.5), 6, 30, 2, "client", "p")
    z = calibrate_noise_multiplier(1.0, 1e-5, 3, 6, 1, 30, Accountant.RDP)
    np.testing.assert_array_equal(planned.noise.noise_multiplier, [z, z])
    assert planned.noise.sensitivity == 1.0 and planned.resolved == {"noise_multiplier": z, "noise_std": z * 1.0}
    assert planned.expected_units == 3 and planned.privacy.relation == Relation.REPLACE_ONE
    ledger = planned.privacy.ledger
    assert ledger.accountant.noise is planned.noise          # the step the server applies is the one priced
    accountant = dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    accountant.compose(dp_accounting.SampledWithoutReplacementDpEvent(6, 3, dp_accounting.GaussianDpEvent(z)), 30)
    spent = ledger.epsilons(np.full((2, 6), 30))
    assert spent.max() == pytest.approx(accountant.get_epsilon(1e-5), rel=1e-9) and spent.max() <= 1.0 + 1e-9
    halved = server_gaussian_rounds(CENTRAL, UniformParticipation(3), UnitClip(0.25), 6, 30, 1, "client", "p")
    assert halved.noise.noise_std[0] == pytest.approx(planned.noise.noise_std[0] / 2)


def test_poisson_rounds_are_add_remove_and_half_the_noise_prices_more():
    planned = server_gaussian_rounds(CENTRAL, PoissonParticipation(0.3), UnitClip(0.5), 10, 20, 1, "client", "p")
    z = poisson_noise_multiplier(1.0, 1e-5, 0.3, 20)
    assert planned.privacy.relation == Relation.ADD_REMOVE and planned.noise.sensitivity == 0.5
    assert planned.expected_units == pytest.approx(3.0) and planned.noise.noise_multiplier[0] == z
    accountant = dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    accountant.compose(dp_accounting.PoissonSampledDpEvent(0.3, dp_accounting.GaussianDpEvent(z)), 20)
    assert accountant.get_epsilon(1e-5) == pytest.approx(1.0, abs=1e-3)
    spent = planned.privacy.ledger.epsilons(np.full((1, 10), 20))
    assert spent.max() == pytest.approx(1.0, abs=1e-3)
    weak = accountant.__class__(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    weak.compose(dp_accounting.PoissonSampledDpEvent(0.3, dp_accounting.GaussianDpEvent(z / 2)), 20)
    assert weak.get_epsilon(1e-5) > 2.0


def test_no_privacy_plans_zero_noise_and_refusals_name_the_setting():
    none = PrivacySettings(TrustModel.NONE)
    planned = server_gaussian_rounds(none, UniformParticipation(3), UnitClip(0.5), 10, 20, 2, "client", "p")
    assert not planned.privacy.private and not planned.noise.noise_std.any() and planned.privacy.ledger is None
    with pytest.raises(ConfigError, match="participation must be uniform or poisson for p; got 'AllUnits'"):
        server_gaussian_rounds(CENTRAL, AllUnits(), UnitClip(0.5), 10, 20, 1, "client", "p")
    with pytest.raises(ConfigError, match="privacy.calibration must be accountant for p"):
        server_gaussian_rounds(PrivacySettings(TrustModel.CENTRAL, Calibration.THEORY, epsilon=1.0, delta=1e-5),
                               UniformParticipation(3), UnitClip(0.5), 10, 20, 1, "client", "p")
    with pytest.raises(ConfigError, match="privacy.delta"):
        server_gaussian_rounds(PrivacySettings(TrustModel.CENTRAL, Calibration.ACCOUNTANT, epsilon=1.0, delta=2.0),
                               UniformParticipation(3), UnitClip(0.5), 10, 20, 1, "client", "p")
