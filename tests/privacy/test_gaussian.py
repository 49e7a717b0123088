"""One Gaussian release: the analytic calibration is exact (Balle & Wang's profile, checked
against dp-accounting's PLD of the same mechanism) and the classic formula keeps its range."""

import dp_accounting
import numpy as np
import pytest

from fedray.privacy.gaussian import analytic_sigma, classic_sigma, gaussian_delta


def test_known_value():
    # Balle & Wang 2018: sigma = 3.73 for (eps, delta) = (1, 1e-5) and sensitivity 1 (classic: 4.84).
    assert analytic_sigma(1.0, 1e-5, 1.0) == pytest.approx(3.7306, abs=1e-4)
    assert classic_sigma(0.999999, 1e-5, 1.0) == pytest.approx(np.sqrt(2 * np.log(1.25e5)), rel=1e-5)


@pytest.mark.parametrize("epsilon, delta", [(0.1, 1e-6), (1.0, 1e-5), (4.0, 1e-5), (12.0, 1e-9)])
def test_analytic_sigma_is_the_smallest_private_sigma(epsilon, delta):
    sigma = analytic_sigma(epsilon, delta, 2.5)
    assert gaussian_delta(sigma, 2.5, epsilon) <= delta
    assert gaussian_delta(sigma * (1 - 1e-6), 2.5, epsilon) > delta
    assert sigma == pytest.approx(2.5 * analytic_sigma(epsilon, delta, 1.0), rel=1e-10)   # scales with Delta
    accountant = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    accountant.compose(dp_accounting.GaussianDpEvent(sigma / 2.5))
    assert accountant.get_epsilon(delta) == pytest.approx(epsilon, rel=1e-6)
    if epsilon < 1:
        assert sigma < classic_sigma(epsilon, delta, 2.5)


def test_classic_refuses_epsilon_from_one():
    with pytest.raises(ValueError, match="epsilon < 1"):
        classic_sigma(1.0, 1e-5, 1.0)
