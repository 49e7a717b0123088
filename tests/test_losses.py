import numpy as np
import pytest

from fedray import losses
from fedray.losses import Huber, Logistic, Softmax, Squared, clipped_minibatch_means, clipped_weighted_gradients
from tests.loss_reference import clip_per_example, per_example_gradients

LOSSES = [(Logistic(), 1, "binary"), (Squared(), 1, "regression"), (Softmax(num_outputs=3), 3, "multiclass"),
          (Huber(), 1, "regression")]


def _records(rng, n, d, kind):
    x = rng.normal(size=(n, d)) * 3.0
    x[0] = 0.0  # a zero record: its gradient is zero and clipping must not divide by zero
    if kind == "binary":
        y = (rng.random(n) < 0.5).astype(float)
    elif kind == "regression":
        y = rng.normal(size=n) * 10
    else:
        y = rng.integers(0, 3, size=n).astype(float)
    return x, y


def _silos(rng, num_silos, n, d, kind):
    """Stacked (x (S, n, d), y (S, n), ||x|| (S, n)) of ``num_silos`` silos of ``_records``."""
    parts = [_records(rng, n, d, kind) for _ in range(num_silos)]
    x, y = np.stack([p[0] for p in parts]), np.stack([p[1] for p in parts])
    return x, y, np.linalg.norm(x, axis=2)


@pytest.mark.parametrize("loss,c,kind", LOSSES)
def test_per_example_gradients_match_finite_differences(loss, c, kind):
    rng = np.random.default_rng(0)
    x, y = _records(rng, 5, 4, kind)
    w = rng.normal(size=(4, c)) * 0.1
    grads = per_example_gradients(loss, w, x, y)
    eps = 1e-6
    for i in range(1, 5):
        num = np.zeros_like(w)
        for j in np.ndindex(*w.shape):
            e = np.zeros_like(w)
            e[j] = eps
            num[j] = (loss.value(x[i:i + 1] @ (w + e), y[i:i + 1]) - loss.value(x[i:i + 1] @ (w - e), y[i:i + 1]))[0] / (2 * eps)
        np.testing.assert_allclose(grads[i], num, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("loss,c,kind", LOSSES)
@pytest.mark.parametrize("l2_clip", [0.1, 1.0, 5.0])
def test_clipped_norms_are_bounded_and_batched_path_agrees(loss, c, kind, l2_clip):
    rng = np.random.default_rng(1)
    n, d = 20, 6
    x, y = _records(rng, n, d, kind)
    w = rng.normal(size=(d, c))
    clipped = clip_per_example(per_example_gradients(loss, w, x, y), l2_clip)
    norms = np.linalg.norm(clipped.reshape(n, -1), axis=1)
    assert np.all(norms <= l2_clip * (1 + 1e-12))
    assert np.all(np.isfinite(clipped))
    # The batched path (scaled residuals, one einsum) equals the explicit clipped mean.
    weights = np.zeros((1, 1, n))
    batch = rng.choice(n, size=7, replace=False)
    weights[0, 0, batch] = 1 / 7
    batched = clipped_weighted_gradients(loss, w[None], x[None], y[None], weights, l2_clip)
    np.testing.assert_allclose(batched[0, 0], clipped[batch].mean(axis=0), rtol=1e-10, atol=1e-12)


def test_infinite_clip_is_the_plain_gradient():
    rng = np.random.default_rng(2)
    x, y = _records(rng, 10, 3, "binary")
    w = rng.normal(size=(3, 1))
    weights = np.full((1, 1, 10), 0.1)
    g = clipped_weighted_gradients(Logistic(), w[None], x[None], y[None], weights, np.inf)
    np.testing.assert_allclose(g[0, 0], per_example_gradients(Logistic(), w, x, y).mean(axis=0))


def test_clipping_needs_an_example_axis():
    with pytest.raises(ValueError, match="leading example axis"):
        clip_per_example(np.ones(3), 1.0)


def test_logistic_margin_clip_keeps_loss_finite():
    z = np.array([[1e4], [-1e4]])
    v = Logistic().value(z, np.array([0.0, 1.0]))
    assert np.all(np.isfinite(v)) and np.all(v > 14)


@pytest.mark.parametrize("loss,c,kind", LOSSES)
def test_minibatch_means_equal_the_dense_path_and_ignore_the_layout(loss, c, kind):
    rng = np.random.default_rng(3)
    num_silos, n, d, k = 7, 15, 4, 5
    x, y, norms = _silos(rng, num_silos, n, d, kind)
    params = rng.normal(size=(3, d, c))
    idx = np.stack([[rng.choice(n, k, replace=False) for _ in range(num_silos)] for _ in range(3)])
    means = clipped_minibatch_means(loss, params, x, y, norms, idx, 0.7)
    weights = np.zeros((3, num_silos, n))
    np.put_along_axis(weights, idx, 1.0 / k, axis=2)
    np.testing.assert_allclose(means, clipped_weighted_gradients(loss, params, x, y, weights, 0.7), rtol=1e-10, atol=1e-13)
    split = np.concatenate([
        clipped_minibatch_means(loss, params, x[a:b], y[a:b], norms[a:b], idx[:, a:b], 0.7) for a, b in [(0, 1), (1, 4), (4, 7)]
    ], axis=1)
    assert np.array_equal(means, split)  # bit-identical whatever silos share a call


@pytest.mark.parametrize("loss,c,kind", LOSSES)
@pytest.mark.parametrize("chunk_values", [1, 1 << 16])
def test_minibatch_means_are_bit_identical_whatever_replicas_share_the_call(loss, c, kind, chunk_values, monkeypatch):
    # chunk_values = 1 puts every replica in its own chunk; the default puts them all in one.
    monkeypatch.setattr(losses, "_CHUNK_VALUES", chunk_values)
    rng = np.random.default_rng(4)
    num_silos, n, d, k = 5, 15, 4, 6
    x, y, norms = _silos(rng, num_silos, n, d, kind)
    params = rng.normal(size=(7, d, c))
    batch_of = np.array([0, 2, 1, 0, 2, 2, 0])     # three minibatches shared by seven replicas
    idx = np.stack([[rng.choice(n, k, replace=False) for _ in range(num_silos)] for _ in range(3)])

    shared = clipped_minibatch_means(loss, params, x, y, norms, idx, 0.7, batch_of)

    # the same numbers as each replica with its own copy of its minibatch, and as each replica alone
    assert np.array_equal(shared, clipped_minibatch_means(loss, params, x, y, norms, idx[batch_of], 0.7))
    for p, b in enumerate(batch_of):
        alone = clipped_minibatch_means(loss, params[p:p + 1], x, y, norms, idx[b:b + 1], 0.7)
        assert np.array_equal(shared[p], alone[0])
    weights = np.zeros((7, num_silos, n))
    np.put_along_axis(weights, idx[batch_of], 1.0 / k, axis=2)
    dense = clipped_weighted_gradients(loss, params, x, y, weights, 0.7)
    np.testing.assert_allclose(shared, dense, rtol=1e-10, atol=1e-13)


def test_huber_is_the_squared_loss_within_its_threshold_and_bounded_beyond():
    z = np.linspace(-6, 6, 121)[:, None]
    y = np.zeros(121)
    huber, squared = Huber(threshold=2.0), Squared()
    inside = np.abs(z[:, 0]) <= 2.0
    np.testing.assert_array_equal(huber.value(z, y)[inside], squared.value(z, y)[inside])
    np.testing.assert_array_equal(huber.residual(z, y)[inside], squared.residual(z, y)[inside])
    assert np.abs(huber.residual(z, y)).max() == huber.residual_bound == 2.0
    np.testing.assert_allclose(huber.value(z, y)[~inside], 2.0 * np.abs(z[~inside, 0]) - 2.0)     # continuous at 2
    # any label, however large, moves a gradient by at most the bound: what output perturbation needs
    assert np.all(np.isfinite(huber.residual(np.zeros((2, 1)), np.array([1e308, -np.inf]))))
    u = np.ones((121, 1))
    np.testing.assert_array_equal(huber.curvature(z, y, u)[:, 0], (np.abs(z[:, 0]) < 2.0).astype(float))
