"""Contract every algorithm passes: the loss falls, non-private runs reach the direct solver's
optimum, runs are deterministic in the seed, and zero noise with no clipping is non-private."""

import numpy as np
import pytest
from scipy.optimize import minimize

from fedray.protocols.isrl_dp import LocalSGD, MinibatchSGD
from fedray.data import SiloArrays
from fedray.losses import Logistic, margins
from fedray.privacy.mechanisms import GaussianNoise, NoNoise
from fedray.rng import SiloDraws
from tests.conftest import round_keys
from tests.protocols.isrl_dp.silos import synthetic_silos

LOSS = Logistic()
FED, SILOS = synthetic_silos(6, 120, 3)


def objective(params):
    """F^(w) = (1/N) sum_i mean loss of silo i, per replica."""
    return LOSS.value(margins(params, FED.x_train), FED.y_train[None]).mean(axis=(1, 2))


def optimum():
    def f(w):
        z = FED.x_train @ w
        p = 1 / (1 + np.exp(-z))
        val = -(FED.y_train * np.log(p) + (1 - FED.y_train) * np.log(1 - p)).mean()
        grad = np.einsum("sn,snd->d", p - FED.y_train, FED.x_train) / FED.y_train.size
        return val, grad

    res = minimize(f, np.zeros(5), jac=True, method="L-BFGS-B", options={"gtol": 1e-10})
    return res.fun


def simulate(algorithm, rounds, seed=0, silos_per_round=6, replicas=1):
    state = algorithm.init(np.zeros((replicas, 5, 1)), round_keys(replicas))
    reps = np.zeros(replicas, dtype=int)
    for r in range(rounds):
        rng = np.random.default_rng([seed, r])
        mask = np.zeros((replicas, 6), dtype=bool)
        mask[:, rng.choice(6, silos_per_round, replace=False)] = True
        msgs = algorithm.silo_step(algorithm.broadcast(state), SILOS, SiloDraws(seed, reps, r, SILOS.silo_ids))
        state = algorithm.server_step(state, msgs, mask, round_keys(replicas))
    return state


def make(kind, noise_std=0.0, l2_clip=np.inf, step=1.0, batch=40):
    noise = GaussianNoise(np.full((1, 6), noise_std)) if noise_std > 0 else NoNoise()
    if kind == "mb_sgd":
        return MinibatchSGD(LOSS, np.array([step]), batch, l2_clip, noise)
    return LocalSGD(LOSS, np.array([step / 10]), batch // 4, l2_clip, noise)


@pytest.mark.parametrize("kind", ["mb_sgd", "local_sgd"])
def test_non_private_reaches_the_direct_optimum(kind):
    f_star = optimum()
    algorithm = make(kind, batch=120) if kind == "mb_sgd" else LocalSGD(LOSS, np.array([0.05]), 20, np.inf, NoNoise())
    state = simulate(algorithm, 300)
    gap = objective(state.params)[0] - f_star
    assert 0 <= gap < 2e-3


@pytest.mark.parametrize("kind", ["mb_sgd", "local_sgd"])
def test_private_runs_decrease_the_loss(kind):
    algorithm = make(kind, noise_std=0.05, l2_clip=1.0)
    start = objective(np.zeros((1, 5, 1)))[0]
    end = objective(simulate(algorithm, 40, silos_per_round=3).params)[0]
    assert end < start - 0.05


@pytest.mark.parametrize("kind", ["mb_sgd", "local_sgd"])
def test_deterministic_given_seed_and_sensitive_to_it(kind):
    algorithm = make(kind, noise_std=0.1, l2_clip=1.0)
    a = simulate(algorithm, 5, seed=1).params
    assert np.array_equal(a, simulate(algorithm, 5, seed=1).params)
    assert not np.array_equal(a, simulate(algorithm, 5, seed=2).params)


def test_minibatch_messages_carry_noise_of_the_stated_std():
    algorithm = make("mb_sgd", noise_std=0.7, l2_clip=1.0)
    clean = make("mb_sgd", l2_clip=1.0)
    params = np.zeros((1, 5, 1))
    diffs = [
        algorithm.silo_step(params, SILOS, SiloDraws(0, np.array([0]), r, SILOS.silo_ids))
        - clean.silo_step(params, SILOS, SiloDraws(0, np.array([0]), r, SILOS.silo_ids))
        for r in range(200)
    ]
    assert np.std(np.stack(diffs)) == pytest.approx(0.7, rel=0.05)


@pytest.mark.parametrize("kind", ["mb_sgd", "local_sgd"])
def test_replicas_equal_separate_runs(kind):
    """A run carrying step sizes as replicas equals separate runs with each step size, bit for bit:
    the silo math uses products of one (replica, silo) pair whose shapes do not depend on P."""
    cls, steps, batch = (MinibatchSGD, [0.5, 2.0], 30) if kind == "mb_sgd" else (LocalSGD, [0.05, 0.2], 10)
    both = cls(LOSS, np.array(steps), batch, 1.0, GaussianNoise(np.full((2, 6), 0.1)))
    together = simulate(both, 6, replicas=2).params
    for p, step in enumerate(steps):
        alone = cls(LOSS, np.array([step]), batch, 1.0, GaussianNoise(np.full((1, 6), 0.1)))
        assert np.array_equal(together[p], simulate(alone, 6).params[0])


@pytest.mark.parametrize("kind", ["mb_sgd", "local_sgd"])
def test_a_silos_message_does_not_depend_on_which_silos_share_the_call(kind):
    algorithm = make(kind, noise_std=0.1, l2_clip=1.0)
    params = np.random.default_rng(5).normal(size=(1, 5, 1))
    width = SILOS.x.shape[1]
    everyone = algorithm.silo_step(params, SILOS, SiloDraws(3, np.array([0]), 2, SILOS.silo_ids, width=width))
    for part in (np.array([0]), np.array([1, 4]), np.array([2, 3, 5])):
        silos = SiloArrays(part, SILOS.x[part], SILOS.y[part], SILOS.sizes[part], SILOS.x_norms[part])
        some = algorithm.silo_step(params, silos, SiloDraws(3, np.array([0]), 2, part, width=width))
        assert np.array_equal(everyone[:, part], some)


def test_minibatch_samples_distinct_records():
    draws = SiloDraws(0, np.array([0, 1]), 3, np.arange(6))
    idx = draws.without_replacement(FED.n_train, 100)
    assert idx.shape == (2, 6, 100)
    assert all(len(set(cell)) == 100 for cell in idx.reshape(-1, 100))
