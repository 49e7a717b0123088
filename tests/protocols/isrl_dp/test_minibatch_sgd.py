"""MB-SGD's silo half: the clipped mean over K records sampled without replacement plus Gaussian
noise, and the same numbers for a replica whatever other replicas share the call."""

import numpy as np
import pytest

from fedray.protocols.isrl_dp import MinibatchSGD
from fedray.data import SiloArrays
from fedray.losses import Logistic, Softmax
from tests.loss_reference import clip_per_example, per_example_gradients
from fedray.privacy.mechanisms import GaussianNoise, NoNoise
from fedray.rng import SiloDraws
from tests.protocols.isrl_dp.silos import synthetic_silos

FED, SILOS = synthetic_silos(4, 50, 1)
WIDTH = SILOS.x.shape[1]


def test_message_is_the_clipped_mean_of_k_distinct_records_plus_noise():
    """seed-004 Alg. 2 lines 6-7 on the round's draws, written out."""
    algorithm = MinibatchSGD(Logistic(), np.array([0.3]), 12, 0.5, GaussianNoise(np.full((1, 4), 0.2)))
    params = np.random.default_rng(0).normal(size=(1, 5, 1))
    draws = SiloDraws(9, np.array([0]), 3, SILOS.silo_ids, width=WIDTH)
    idx, normals = draws.without_replacement(SILOS.sizes, 12), draws.standard_normal((5, 1))

    message = algorithm.silo_step(params, SILOS, SiloDraws(9, np.array([0]), 3, SILOS.silo_ids, width=WIDTH))

    for s in range(4):
        assert len(set(idx[0, s])) == 12
        records, labels = SILOS.x[s, idx[0, s]], SILOS.y[s, idx[0, s]]
        grads = clip_per_example(per_example_gradients(Logistic(), params[0], records, labels), 0.5)
        np.testing.assert_allclose(message[0, s], grads.mean(axis=0) + 0.2 * normals[0, s], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("loss,outputs", [(Logistic(), 1), (Softmax(num_outputs=3), 3)])
def test_a_replica_gets_what_a_run_of_its_own_gets(loss, outputs):
    rng = np.random.default_rng(2)
    y = SILOS.y if outputs == 1 else rng.integers(0, 3, size=SILOS.y.shape).astype(float)
    silos = SiloArrays(SILOS.silo_ids, SILOS.x, y, SILOS.sizes, SILOS.x_norms)
    reps = np.array([0, 1, 0, 2, 1, 0])                       # unequal groups, unsorted
    noise_std = rng.uniform(0.05, 0.3, size=(6, 4))
    params = rng.normal(size=(6, 5, outputs)) * 0.2
    steps = np.linspace(0.1, 0.6, 6)
    together = MinibatchSGD(loss, steps, 9, 0.8, GaussianNoise(noise_std)).silo_step(
        params, silos, SiloDraws(4, reps, 1, silos.silo_ids, width=WIDTH))
    for p in range(6):
        alone = MinibatchSGD(loss, steps[p:p + 1], 9, 0.8, GaussianNoise(noise_std[p:p + 1])).silo_step(
            params[p:p + 1], silos, SiloDraws(4, reps[p:p + 1], 1, silos.silo_ids, width=WIDTH))
        assert np.array_equal(together[p], alone[0])


def test_the_non_private_step_reads_no_noise_stream(monkeypatch):
    """A baseline draws no normals it would throw away; zero noise gives the same messages."""
    params = np.random.default_rng(4).normal(size=(2, 5, 1))
    draws = lambda: SiloDraws(4, np.array([0, 1]), 1, SILOS.silo_ids, width=WIDTH)
    zero = MinibatchSGD(Logistic(), np.array([0.1, 0.2]), 12, 0.5, GaussianNoise(np.zeros((2, 4)))).silo_step(
        params, SILOS, draws())
    monkeypatch.setattr(SiloDraws, "standard_normal", lambda *args, **kwargs: pytest.fail("a NoNoise step drew normals"))
    plain = MinibatchSGD(Logistic(), np.array([0.1, 0.2]), 12, 0.5, NoNoise()).silo_step(params, SILOS, draws())
    assert np.array_equal(zero, plain)
