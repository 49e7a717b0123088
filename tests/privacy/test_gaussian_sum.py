"""The local and central Gaussian sums (seed 000's baselines): calibration, where the noise is
added and how much of it a sum carries, and the central draw keyed by the step."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fedray.core.protocol import RoundKeys
from fedray.privacy.gaussian import analytic_sigma, gaussian_delta
from fedray.privacy.gaussian_sum import CentralGaussianSum, LocalGaussianSum, release_sigma
from fedray.rng import SiloDraws


def test_one_release_is_calibrated_to_replace_one_sensitivity():
    sigma = release_sigma(2.0, 1e-6, 1.5)
    assert sigma == analytic_sigma(2.0, 1e-6, 3.0)
    assert gaussian_delta(sigma, 3.0, 2.0) <= 1e-6 < gaussian_delta(sigma * 0.999, 3.0, 2.0)


def _vectors(replicas: int, users: int, dim: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((replicas, users, 1, dim))
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_local_noise_is_each_users_own_and_a_sum_carries_b_sigma_squared():
    users, dim, sigma = 300, 4, 0.7
    x = _vectors(1, users, dim)
    local = LocalGaussianSum(sigma)
    draws = [local.randomize(x, SiloDraws(3, np.array([[0]]), r, np.arange(users))) for r in range(400)]
    errors = np.stack(draws)[:, 0].sum(axis=1) - x[0].sum(axis=(0, 1))      # (rounds, dim): the step's sum
    assert np.all(local.estimate(draws[0], users) == draws[0])             # the server adds nothing
    # (rounds x dim) errors, each N(0, B sigma^2): the variance's chi-square interval holds it.
    scaled = (errors**2).sum() / (users * sigma**2)
    low, high = stats.chi2.ppf([1e-4, 1 - 1e-4], errors.size)
    assert low < scaled < high
    # A user's noise depends on its id and the round, not on who shares its call.
    alone = local.randomize(x[:, 7:8], SiloDraws(3, np.array([[0]]), 0, np.array([7])))
    both = LocalGaussianSum(sigma).randomize(x[:, 7:9], SiloDraws(3, np.array([[0]]), 0, np.array([7, 8])))
    other = LocalGaussianSum(sigma).randomize(x[:, 8:9], SiloDraws(3, np.array([[0]]), 0, np.array([8])))
    np.testing.assert_array_equal(both, np.concatenate([alone, other], axis=1))


def test_central_noise_is_one_draw_per_release_keyed_by_step_and_replica():
    users, dim, sigma = 50, 3, 2.0
    x = _vectors(2, users, dim)
    central = CentralGaussianSum(sigma)
    keys = RoundKeys(11, np.zeros(2), 4, np.array([[0, 1], [0, 2]]))
    np.testing.assert_array_equal(central.randomize(x, None), x[:, :, 0])  # what reaches the trusted server: exact
    total = x.sum(axis=(1, 2))
    first, again = central.estimate(total, users, keys), central.estimate(total, users, keys)
    np.testing.assert_array_equal(first, again)                             # a replayed step draws the same
    assert not np.allclose(first[0] - total[0], first[1] - total[1])        # replicas do not share noise
    errors = np.stack([central.estimate(total, users, keys.at(step)) - total for step in range(2000)])
    scaled = (errors**2).sum() / sigma**2
    low, high = stats.chi2.ppf([1e-4, 1 - 1e-4], errors.size)
    assert low < scaled < high
    assert central.sum_mse(users, dim) == dim * sigma**2
    assert LocalGaussianSum(sigma).sum_mse(users, dim) == users * dim * sigma**2


def test_pan_private_draws_keep_the_state_private_after_the_first_draw_alone():
    """Lemma C.4's structure: an intruder who sees the accumulator after the first draw only sees the
    batch's sum plus N(0, (B zeta)^2 I): that alone must be (eps, delta)-DP at sensitivity 2 L (exact
    Gaussian profile), and the release with both draws more so."""
    from fedray.privacy.gaussian_sum import pan_private_sigma

    for eps, delta, batch in ((0.5, 1e-6, 7), (0.9, 1e-3, 1000), (0.1, 1e-8, 50)):
        one = pan_private_sigma(eps, delta, 1.0)
        zeta2 = 8 * np.log(2 / delta) / (batch**2 * eps**2)                       # spec §7 test 15
        step = CentralGaussianSum(one, draws=2)
        assert step.sum_mse(batch, 3) / batch**2 == pytest.approx(2 * 3 * zeta2, rel=1e-12)
        assert gaussian_delta(one, 2.0, eps) <= delta
        assert gaussian_delta(np.sqrt(2) * one, 2.0, eps) <= gaussian_delta(one, 2.0, eps)
