"""Paper formulas pinned to independently computed numbers (seed-004 spec §7 T1)."""

import math

import numpy as np
import pytest

from fedray.protocols.isrl_dp import calibration as cal

N_MNIST, R_MNIST = 1238, 35


@pytest.mark.parametrize(
    "eps,var_over_l2",
    [(0.75, 4.62573e-3), (1.5, 1.15643e-3), (3, 2.89108e-4), (6, 7.22771e-5), (12, 1.80693e-5), (18, 8.03079e-6)],
)
def test_mnist_minibatch_noise_matches_spec_table(eps, var_over_l2):
    # sigma^2/L^2 = 8 ln(1/delta) R / (n^2 eps^2) with delta = 1/n^2; sigma = multiplier * L / K.
    k = 100
    z = cal.paper_minibatch_noise_multiplier(N_MNIST, eps, 1 / N_MNIST**2, R_MNIST, k)
    assert (z / k) ** 2 == pytest.approx(var_over_l2, rel=1e-5)


@pytest.mark.parametrize(
    "eps,var_over_l2",
    [(0.75, 2.04920), (1.5, 0.512300), (3, 0.128075), (6, 0.0320187), (12, 0.00800469), (18, 0.00355764)],
)
def test_mnist_local_sgd_noise_matches_spec_table(eps, var_over_l2):
    z = cal.paper_local_sgd_noise_multiplier(N_MNIST, eps, 1 / N_MNIST**2, R_MNIST, 443)
    assert z**2 == pytest.approx(var_over_l2, rel=1e-5)


@pytest.mark.parametrize("eps,k_exact", [(0.75, 90.61), (1.5, 128.15), (3, 181.22), (6, 256.29), (12, 362.45), (18, 443.91)])
def test_paper_batch_size_rounds_the_formula_up(eps, k_exact):
    assert N_MNIST * math.sqrt(eps / 140) == pytest.approx(k_exact, abs=0.01)
    assert cal.paper_batch_size(N_MNIST, eps, R_MNIST) == math.ceil(k_exact)


def test_batch_size_is_clamped_to_the_silo():
    assert cal.paper_batch_size(10, 1e6, 1) == 10
    assert cal.paper_batch_size(10, 1e-9, 100) == 1


def test_theory_calibration_hand_values():
    # Thm 2.1: sigma^2 = 256 R ln(2.5R/delta) ln(2/delta) / (n eps)^2 = 7.18217 (L=1, R=100, eps=1, delta=1e-6, n=1000)
    # sigma = multiplier * sensitivity, the theorem's sensitivity being 2 L / K (L = 1, K = 1).
    z = cal.theory_minibatch_noise_multiplier(1000, 1.0, 1e-6, 100, 1)
    assert (2 * z) ** 2 == pytest.approx(7.18217, rel=1e-5)
    z = cal.theory_minibatch_noise_multiplier(500, 0.5, 1e-5, 50, 1)
    assert (2 * z) ** 2 == pytest.approx(40.8499, rel=1e-5)
    assert cal.theory_min_batch_size(1000, 1.0, 1e-6, 100) == pytest.approx(4.6410, rel=1e-4)
    assert cal.theory_min_batch_size(500, 0.5, 1e-5, 50) == pytest.approx(1.7889, rel=1e-4)


def test_default_delta_is_one_over_n_squared():
    np.testing.assert_allclose(cal.default_delta(np.array([1238, 10])), [1 / 1238**2, 0.01])
    assert 2 * math.log(1 / cal.default_delta(1238)) == pytest.approx(28.485, abs=1e-3)
