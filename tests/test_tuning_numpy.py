"""The tuning protocols' numpy limit (experiments/benchmark/tuning_numpy.py) computes what fedray's
silo steps compute: checked without noise, where both are deterministic given the records."""

import importlib.util
import sys

import numpy as np
import pytest

from fedray.losses import Logistic, Squared, clipped_minibatch_means
from tests.conftest import REPO


@pytest.fixture(scope="module")
def limit():
    path = REPO / "experiments" / "benchmark" / "tuning_numpy.py"
    sys.path.insert(0, str(path.parent))          # it imports the per-round loop's loss functions
    spec = importlib.util.spec_from_file_location("tuning_numpy", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["tuning_numpy"] = module
    spec.loader.exec_module(module)
    return module


def _federation(seed=0, silos=4, width=9, dim=3):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(silos, width, dim))
    n = np.array([9, 7, 9, 5])[:silos]
    x[np.arange(width)[None, :] >= n[:, None]] = 0.0
    y = (rng.random((silos, width)) < 0.5).astype(float)
    return x, y, n


@pytest.mark.parametrize("kind,fedray_loss,l2_clip", [("logistic", Logistic(), 0.7), ("squared", Squared(), 1.3),
                                                      ("logistic", Logistic(), np.inf)])
def test_full_batch_message_is_fedrays_clipped_mean(limit, kind, fedray_loss, l2_clip):
    x, y, n = _federation()
    x, y = x[:, :5], y[:, :5]
    n = np.full(4, 5)
    norms = np.linalg.norm(x, axis=2)
    w = np.random.default_rng(1).normal(size=(3, x.shape[2]))                     # P = 3 replicas
    silos = np.array([[0, 2], [1, 3], [0, 3]])                                      # M = 2 per replica
    got = limit.minibatch_sgd_messages(np.random.default_rng(2), limit.Loss(kind), w, (x, y, n), norms, silos,
                                       k=5, l2_clip=l2_clip, noise_std=np.zeros(silos.shape))
    # K = n: every record, in whatever order, so the mean is fedray's over all records
    idx = np.broadcast_to(np.arange(5), (3, 4, 5))
    want = clipped_minibatch_means(fedray_loss, w[..., None], x, y, norms, idx, l2_clip)[..., 0]   # (P, S, d)
    np.testing.assert_allclose(got, want[np.arange(3)[:, None], silos], rtol=1e-12, atol=1e-14)


def test_one_local_step_is_a_clipped_gradient_step(limit):
    x, y, n = _federation(dim=4)
    norms = np.linalg.norm(x, axis=2)
    w = np.random.default_rng(3).normal(size=(2, 4))
    silos = np.array([[1, 2], [0, 3]])
    steps = np.array([0.5, 0.1])
    rng = np.random.default_rng(4)
    got = limit.local_sgd_models(rng, limit.Loss("logistic"), w, (x, y, n), norms, silos, 1, 0.4,
                                 np.zeros(silos.shape), steps)
    # the record each pair drew: the same generator, the same first draw
    rows = (np.random.default_rng(4).random((1, 2, 2)) * n[silos]).astype(np.int64)[0]
    for p in range(2):
        for j, s in enumerate(silos[p]):
            xr, yr = x[s, rows[p, j]], y[s, rows[p, j]]
            grad = Logistic().residual(np.array([[xr @ w[p]]]), np.array([yr]))[0, 0] * xr
            grad *= min(1.0, 0.4 / np.linalg.norm(grad))
            np.testing.assert_allclose(got[p, j], w[p] - steps[p] * grad, rtol=1e-12)
    assert rows.max() < n.max()


def test_participants_are_shared_by_a_repetition(limit):
    silos = limit.participants(np.random.default_rng(5), np.array([0, 1, 0, 1, 2]), 10, 4)
    assert silos.shape == (5, 4)
    np.testing.assert_array_equal(silos[0], silos[2])
    np.testing.assert_array_equal(silos[1], silos[3])
    assert all(len(set(row)) == 4 for row in silos)
