"""Local SGD's silo half: K sequential clipped, noised single-record steps, and the same numbers
for a replica whatever other replicas (step sizes, noise levels, repetitions) share the call."""

import numpy as np
import pytest

from fedray.protocols.isrl_dp import LocalSGD, local_sgd
from fedray.data import SiloArrays
from fedray.losses import Logistic, Softmax
from tests.loss_reference import clip_per_example, per_example_gradients
from fedray.privacy.mechanisms import GaussianNoise, NoNoise
from fedray.rng import SiloDraws
from tests.protocols.isrl_dp.silos import synthetic_silos

FED, SILOS = synthetic_silos(4, 50, 1)
WIDTH = SILOS.x.shape[1]


def test_each_step_uses_one_record_drawn_with_replacement_clipped_and_noised():
    """The message is the paper's K-step loop (seed-004 §3.9) on the round's draws, written out."""
    algorithm = LocalSGD(Logistic(), np.array([0.3]), 12, 0.5, GaussianNoise(np.full((1, 4), 0.2)))
    params = np.random.default_rng(0).normal(size=(1, 5, 1))
    draws = SiloDraws(9, np.array([0]), 3, SILOS.silo_ids, width=WIDTH)
    idx, normals = draws.with_replacement(SILOS.sizes, 12), draws.standard_normal((12, 5, 1))

    message = algorithm.silo_step(params, SILOS, SiloDraws(9, np.array([0]), 3, SILOS.silo_ids, width=WIDTH))

    for s in range(4):
        w = params[0].copy()
        for t in range(12):
            record = idx[0, s, t]
            grad = clip_per_example(per_example_gradients(Logistic(), w, SILOS.x[s, record:record + 1],
                                                          SILOS.y[s, record:record + 1]), 0.5)[0]
            w = w - 0.3 * (grad + 0.2 * normals[0, s, t])
        np.testing.assert_allclose(message[0, s], w, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("loss,outputs", [(Logistic(), 1), (Softmax(num_outputs=3), 3)])
def test_a_replica_gets_what_a_run_of_its_own_gets(loss, outputs):
    rng = np.random.default_rng(2)
    y = SILOS.y if outputs == 1 else rng.integers(0, 3, size=SILOS.y.shape).astype(float)
    silos = SiloArrays(SILOS.silo_ids, SILOS.x, y, SILOS.sizes, SILOS.x_norms)
    reps = np.array([0, 1, 0, 2, 1, 0])                       # unequal groups, unsorted
    steps = np.array([0.1, 0.1, 0.02, 0.3, 0.05, 0.2])
    noise_std = rng.uniform(0.05, 0.3, size=(6, 4))
    params = rng.normal(size=(6, 5, outputs)) * 0.2
    together = LocalSGD(loss, steps, 9, 0.8, GaussianNoise(noise_std)).silo_step(
        params, silos, SiloDraws(4, reps, 1, silos.silo_ids, width=WIDTH))
    for p in range(6):
        alone = LocalSGD(loss, steps[p:p + 1], 9, 0.8, GaussianNoise(noise_std[p:p + 1])).silo_step(
            params[p:p + 1], silos, SiloDraws(4, reps[p:p + 1], 1, silos.silo_ids, width=WIDTH))
        assert np.array_equal(together[p], alone[0])


@pytest.mark.parametrize("reps", [np.array([0, 1]), np.array([0, 0])])     # own streams, or shared
def test_zero_noise_is_the_non_private_step_which_reads_no_noise_stream(reps, monkeypatch):
    params = np.random.default_rng(3).normal(size=(2, 5, 1))
    draws = lambda: SiloDraws(4, reps, 1, SILOS.silo_ids, width=WIDTH)
    private = LocalSGD(Logistic(), np.array([0.1, 0.2]), 9, np.inf, GaussianNoise(np.zeros((2, 4))))
    plain = LocalSGD(Logistic(), np.array([0.1, 0.2]), 9, np.inf, NoNoise())
    zero = private.silo_step(params, SILOS, draws())
    monkeypatch.setattr(SiloDraws, "standard_normal", lambda *args, **kwargs: pytest.fail("a NoNoise step drew normals"))
    assert np.array_equal(zero, plain.silo_step(params, SILOS, draws()))


def test_gathering_records_in_chunks_of_steps_changes_nothing(monkeypatch):
    algorithm = LocalSGD(Logistic(), np.array([0.1, 0.3]), 9, 0.8, GaussianNoise(np.full((2, 4), 0.1)))
    params = np.random.default_rng(6).normal(size=(2, 5, 1))
    draws = lambda: SiloDraws(4, np.array([0, 1]), 1, SILOS.silo_ids, width=WIDTH)
    whole = algorithm.silo_step(params, SILOS, draws())
    monkeypatch.setattr(local_sgd, "_CHUNK_VALUES", 1)                   # one step per gather
    assert np.array_equal(algorithm.silo_step(params, SILOS, draws()), whole)
