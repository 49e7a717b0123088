"""Nesterov smoothing (seed-004 §3.6, T13): hinge/absolute losses and their Moreau envelopes over R^d."""

import numpy as np
import pytest
from scipy.optimize import minimize

from fedray.protocols.isrl_dp import MinibatchSGD
from fedray.data import SiloArrays
from fedray.data import SyntheticLinear
from fedray.losses import clipped_weighted_gradients, margins
from tests.loss_reference import per_example_gradients
from fedray.privacy.mechanisms import NoNoise
from fedray.rng import SiloDraws
from fedray.smoothing import Absolute, Hinge, MoreauEnvelope
from tests.conftest import round_keys

BASES = [(Hinge(), "binary"), (Absolute(), "regression")]
BETAS = [0.5, 4.0]


def _records(rng, n, d, kind):
    x = rng.normal(size=(n, d)) * 1.5
    x[0] = 0.0  # a zero record: width 0, the envelope is f itself and nothing divides by zero
    y = (rng.random(n) < 0.5).astype(float) if kind == "binary" else rng.normal(size=n)
    return x, y


def _envelope_and_gradient(loss, w, x, y):
    """f_beta and grad_w f_beta per example for one model w (d,)."""
    z = (x @ w)[:, None]
    norms = np.linalg.norm(x, axis=1)
    return loss.envelope(z, y, norms), x * loss.residual(z, y, norms)


@pytest.mark.parametrize("base,kind", BASES)
@pytest.mark.parametrize("beta", BETAS)
def test_envelope_sandwich(base, kind, beta):
    # f_beta <= f <= f_beta + G^2 ||x||^2 / (2 beta), per example (G = 1, so L = ||x||).
    rng = np.random.default_rng(0)
    x, y = _records(rng, 200, 3, kind)
    loss = MoreauEnvelope(base, beta)
    for _ in range(5):
        w = rng.normal(size=3)
        z = (x @ w)[:, None]
        norms = np.linalg.norm(x, axis=1)
        smooth, f = loss.envelope(z, y, norms), loss.value(z, y)
        assert np.all(smooth <= f + 1e-12)
        assert np.all(f <= smooth + norms**2 / (2 * beta) + 1e-12)
    assert smooth[0] == f[0]


@pytest.mark.parametrize("base,kind", BASES)
@pytest.mark.parametrize("beta", BETAS)
def test_envelope_is_the_minimum_over_r_d(base, kind, beta):
    # min_v f(v, x) + beta/2 ||w - v||^2 by a direct numerical search in R^d (d = 2).
    rng = np.random.default_rng(1)
    x, y = _records(rng, 6, 2, kind)
    loss = MoreauEnvelope(base, beta)
    w = rng.normal(size=2)
    smooth, _ = _envelope_and_gradient(loss, w, x, y)
    for i in range(1, 6):
        def objective(v):
            return float(base.value(np.array([[v @ x[i]]]), y[i:i + 1])[0] + beta / 2 * np.sum((w - v) ** 2))

        best = min(minimize(objective, w + rng.normal(size=2) * s, method="Nelder-Mead",
                            options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 4000}).fun for s in (0.0, 0.5, 1.0))
        assert smooth[i] == pytest.approx(best, abs=1e-7)


@pytest.mark.parametrize("base,kind", BASES)
@pytest.mark.parametrize("beta", BETAS)
def test_gradient_matches_finite_differences_and_is_bounded_by_the_feature_norm(base, kind, beta):
    rng = np.random.default_rng(2)
    x, y = _records(rng, 50, 3, kind)
    loss = MoreauEnvelope(base, beta)
    w = rng.normal(size=3)
    _, grad = _envelope_and_gradient(loss, w, x, y)
    h = 1e-6
    numeric = np.stack([
        (_envelope_and_gradient(loss, w + h * e, x, y)[0] - _envelope_and_gradient(loss, w - h * e, x, y)[0]) / (2 * h)
        for e in np.eye(3)
    ], axis=1)
    np.testing.assert_allclose(grad, numeric, atol=1e-5)
    assert np.all(np.linalg.norm(grad, axis=1) <= np.linalg.norm(x, axis=1) * (1 + 1e-12))
    assert np.all(grad[0] == 0.0)


@pytest.mark.parametrize("base,kind", BASES)
@pytest.mark.parametrize("beta", BETAS)
def test_gradient_is_beta_lipschitz(base, kind, beta):
    rng = np.random.default_rng(3)
    x, y = _records(rng, 100, 3, kind)
    loss = MoreauEnvelope(base, beta)
    for scale in (1e-3, 0.1, 2.0):
        w1 = rng.normal(size=3)
        w2 = w1 + scale * rng.normal(size=3)
        _, g1 = _envelope_and_gradient(loss, w1, x, y)
        _, g2 = _envelope_and_gradient(loss, w2, x, y)
        assert np.all(np.linalg.norm(g1 - g2, axis=1) <= beta * np.linalg.norm(w1 - w2) * (1 + 1e-9))


def test_hinge_maps_labels_to_signs_and_absolute_is_the_deviation():
    z = np.array([[-2.0], [-2.0], [0.5], [3.0]])
    y = np.array([0.0, 1.0, 1.0, 1.0])
    np.testing.assert_allclose(Hinge().value(z, y), [0.0, 3.0, 0.5, 0.0])
    np.testing.assert_allclose(Hinge().residual(z, y)[:, 0], [0.0, -1.0, -1.0, 0.0])
    np.testing.assert_allclose(Hinge().error(z, y), [0.0, 1.0, 0.0, 0.0])
    np.testing.assert_allclose(Absolute().value(z, np.array([1.0, -2.0, 0.0, 4.0])), [3.0, 0.0, 0.5, 1.0])
    # The envelope of |.| is the Huber function with threshold t = ||x||^2 / beta (here t = 1).
    env = MoreauEnvelope(Absolute(), 4.0)
    np.testing.assert_allclose(env.envelope(np.array([[0.5], [3.0]]), np.zeros(2), np.full(2, 2.0)), [0.125, 2.5])


def test_batched_clipped_gradients_use_the_envelope():
    rng = np.random.default_rng(4)
    x, y = _records(rng, 30, 4, "binary")
    loss = MoreauEnvelope(Hinge(), 2.0)
    w = rng.normal(size=(4, 1))
    weights = np.full((1, 1, 30), 1 / 30)
    norms = np.linalg.norm(x, axis=1)[None]
    batched = clipped_weighted_gradients(loss, w[None], x[None], y[None], weights, np.inf, norms)
    explicit = per_example_gradients(loss, w, x, y).mean(axis=0)
    _, grad = _envelope_and_gradient(loss, w[:, 0], x, y)
    np.testing.assert_allclose(batched[0, 0], explicit, atol=1e-12)
    np.testing.assert_allclose(explicit[:, 0], grad.mean(axis=0), atol=1e-12)
    # Without the cached norms, the batched path computes them.
    unnormed = clipped_weighted_gradients(loss, w[None], x[None], y[None], weights, np.inf)
    np.testing.assert_allclose(unnormed, batched, atol=1e-12)


def test_residual_without_norms_is_an_error():
    with pytest.raises(TypeError, match="x_norms"):
        MoreauEnvelope(Hinge(), 1.0).residual(np.zeros((2, 1)), np.zeros(2))


def test_smoothed_hinge_training_lowers_the_hinge_loss():
    fed = SyntheticLinear(num_silos=4, samples_per_silo=100, dim=5, noise=0.3, feature_norm=2.0).load(0)
    silos = SiloArrays(np.arange(4), fed.x_train, fed.y_train, fed.n_train, np.linalg.norm(fed.x_train, axis=2))
    loss = MoreauEnvelope(Hinge(), 8.0)              # 8-smooth, so step 1/8 is safe
    algorithm = MinibatchSGD(loss, np.array([1.0 / 8.0]), 100, 2.0, NoNoise())
    state = algorithm.init(np.zeros((1, 5, 1)), round_keys())
    for r in range(60):
        msgs = algorithm.silo_step(state.params, silos, SiloDraws(0, np.array([0]), r, silos.silo_ids))
        state = algorithm.server_step(state, msgs, np.ones((1, 4), dtype=bool), round_keys())
    hinge = loss.value(margins(state.params, silos.x), silos.y[None]).mean()
    assert hinge < 0.6 * loss.value(margins(np.zeros((1, 5, 1)), silos.x), silos.y[None]).mean()


def test_local_sgd_runs_on_a_smoothed_loss():
    from fedray.protocols.isrl_dp import LocalSGD
    from fedray.data import SiloArrays
    from fedray.privacy import NoNoise
    from fedray.rng import SiloDraws
    from fedray.smoothing import Hinge, MoreauEnvelope

    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 30, 3))
    y = (rng.random((2, 30)) < 0.5).astype(float)
    silos = SiloArrays(np.arange(2), x, y, np.full(2, 30), np.linalg.norm(x, axis=2))
    algorithm = LocalSGD(MoreauEnvelope(Hinge(), 2.0), np.array([0.1]), 5, np.inf, NoNoise())
    local = algorithm.silo_step(np.zeros((1, 3, 1)), silos, SiloDraws(0, np.zeros(1), 0, np.arange(2)))
    assert local.shape == (1, 2, 3, 1) and np.all(np.isfinite(local)) and np.any(local != 0)
