"""AC-SA (seed-004 Alg. 1) and its one-pass variant: T7 correctness, one-pass sampling, determinism."""

import numpy as np
import pytest
from scipy.optimize import NonlinearConstraint, minimize

from fedray.protocols.isrl_dp import AcceleratedMinibatchSGD, MinibatchSGD, OnePassAcceleratedSGD
from fedray.data import SiloArrays
from fedray.acsa import prox_step, query_point
from fedray.protocols.isrl_dp.theory import lan_prox_scale, regularized_prox_scale
from fedray.losses import Logistic, Squared, clipped_weighted_gradients, margins
from fedray.privacy.mechanisms import GaussianNoise, NoNoise
from fedray.rng import SiloDraws
from tests.conftest import round_keys
from tests.protocols.isrl_dp.silos import synthetic_silos


def quadratic_silos(dim=40, num_silos=2):
    """Least squares whose Hessian diag(lam) has log-spaced eigenvalues in [1e-6, 1] and w* = 1.

    The spectral measure sum_j lam_j (w*_j)^2 delta_{lam_j} is then roughly uniform in lam, the case
    where accelerated methods on a fixed quadratic show their worst-case beta D^2 / R^2 rate (a
    spectrum concentrated away from 0 would converge faster; one like 1/j^2 slower). beta = 1.
    """
    lam = np.geomspace(1e-6, 1.0, dim)
    x_one = np.sqrt(dim) * np.diag(np.sqrt(lam))       # n = dim records, x^T x / n = diag(lam)
    x = np.stack([x_one] * num_silos)
    y = x @ np.ones(dim)                                 # F* = 0 at w* = 1
    return SiloArrays(np.arange(num_silos), x, y, np.full(num_silos, dim), np.linalg.norm(x, axis=2))


def objective(loss, silos, params):
    return loss.value(margins(params, silos.x), silos.y[None]).mean(axis=(1, 2))


def simulate(algorithm, silos, rounds, seed=0, replicas=1, participants=None, params0=None):
    """The driver's loop: participants per round (all by default), broadcast, silo half, server half."""
    num_silos = silos.x.shape[0]
    dim = silos.x.shape[2]
    state = algorithm.init(np.zeros((replicas, dim, 1)) if params0 is None else params0, round_keys(replicas))
    reps = np.zeros(replicas, dtype=int)
    for r in range(rounds):
        mask = np.ones((replicas, num_silos), dtype=bool)
        if participants is not None:
            rng = np.random.default_rng([seed, r])
            mask[:] = False
            mask[:, rng.choice(num_silos, participants, replace=False)] = True
        msgs = algorithm.silo_step(algorithm.broadcast(state), silos, SiloDraws(seed, reps, r, silos.silo_ids))
        state = algorithm.server_step(state, msgs, mask, round_keys(replicas))
    return state


LOSS = Logistic()
FED, SYNTH = synthetic_silos(6, 120, 3)


def test_noiseless_error_falls_like_one_over_rounds_squared():
    # Arrange: full batch K = n, no noise, no clipping, mu = 0, nu = 2 beta.
    silos = quadratic_silos()
    rounds = [8, 16, 32, 64]

    def error(algorithm, r):
        return objective(Squared(), silos, simulate(algorithm, silos, r).params)[0]

    accelerated = AcceleratedMinibatchSGD(Squared(), np.array([0.5]), 40, np.inf, NoNoise())
    plain = MinibatchSGD(Squared(), np.array([1.0]), 40, np.inf, NoNoise(), average_last=1)
    # Act
    acc_errors = [error(accelerated, r) for r in rounds]
    gd_errors = [error(plain, r) for r in rounds]
    # Assert: log-log slope near -2 (GL: F(w^ag_R) - F* <= 4 beta D^2 / (R (R+1))); plain GD's is near -1.
    acc_slope = np.polyfit(np.log(rounds), np.log(acc_errors), 1)[0]
    gd_slope = np.polyfit(np.log(rounds), np.log(gd_errors), 1)[0]
    assert -2.3 < acc_slope < -1.7
    assert -1.3 < gd_slope < -0.7
    d_squared = 40.0
    assert all(e <= 4 * 1.0 * d_squared / (r * (r + 1)) for e, r in zip(acc_errors, rounds))


@pytest.mark.parametrize("mu", [0.0, 0.3])
def test_first_query_point_is_the_initial_point(mu):
    # alpha_1 = 1 gives w^md_1 = w_0 for any mu and prox scale.
    w0 = np.random.default_rng(0).normal(size=(2, 4, 1))
    algorithm = AcceleratedMinibatchSGD(Squared(), np.array([0.1, 2.0]), 5, 1.0, NoNoise(), strong_convexity=mu)
    state = algorithm.init(w0, round_keys(w0.shape[0]))
    np.testing.assert_array_equal(algorithm.broadcast(state), w0)
    alpha, _ = algorithm.server.schedule(state)
    assert alpha == 1.0


@pytest.mark.parametrize("mu,radius", [(0.0, None), (0.7, None), (0.7, 1.0), (0.0, 0.5)])
def test_closed_form_prox_step_is_the_argmin(mu, radius):
    rng = np.random.default_rng(1)
    w_md, w_prev, grad = (rng.normal(size=(1, 3, 1)) for _ in range(3))
    alpha, eta = 0.4, np.array([1.3])

    def prox_objective(v):
        v = v.reshape(1, 3, 1)
        return float(alpha * (np.sum(grad * v) + mu / 2 * np.sum((w_md - v) ** 2))
                     + ((1 - alpha) * mu + eta[0]) / 2 * np.sum((w_prev - v) ** 2))

    constraints = [] if radius is None else [NonlinearConstraint(lambda v: v @ v, -np.inf, radius**2)]
    numeric = minimize(prox_objective, np.zeros(3), method="SLSQP", constraints=constraints,
                       options={"ftol": 1e-14, "maxiter": 500}).x
    closed = prox_step(w_md, w_prev, grad, alpha, eta, mu, radius)
    np.testing.assert_allclose(closed.ravel(), numeric, atol=1e-6)


def test_query_point_is_a_convex_combination_and_reduces_for_mu_zero():
    rng = np.random.default_rng(2)
    w_ag, w = rng.normal(size=(1, 3, 1)), rng.normal(size=(1, 3, 1))
    np.testing.assert_allclose(query_point(w_ag, w, 0.25, np.array([2.0]), 0.0), 0.75 * w_ag + 0.25 * w)
    ones = np.ones((1, 3, 1))
    np.testing.assert_allclose(query_point(ones, ones, 0.25, np.array([2.0]), 5.0), ones)


def test_regularized_run_reaches_the_regularized_minimiser():
    # f + lambda/2 ||w - w_0||^2 on the quadratic: (H + lambda I) w = H w* + lambda w_0.
    silos = quadratic_silos(dim=6)
    lam = np.geomspace(1e-6, 1.0, 6)
    w0 = np.full((1, 6, 1), -1.0)
    algorithm = AcceleratedMinibatchSGD(Squared(), np.array([0.4]), 6, np.inf, NoNoise(), regularization=0.5)
    state = simulate(algorithm, silos, 200, params0=w0)
    expected = (lam * 1.0 + 0.5 * -1.0) / (lam + 0.5)
    # Single-stage AC-SA is only O(1/R) on a strongly convex objective, hence the tolerance; the
    # unregularized minimiser (w* = 1) is O(1) away.
    np.testing.assert_allclose(state.params[0, :, 0], expected, atol=5e-4)


def test_projection_keeps_every_iterate_in_the_ball():
    algorithm = AcceleratedMinibatchSGD(Squared(), np.array([0.5]), 40, np.inf, NoNoise(), radius=2.0)
    state = simulate(algorithm, quadratic_silos(), 10)
    assert np.linalg.norm(state.params) <= 2.0 + 1e-12
    assert np.linalg.norm(state.prox_center) <= 2.0 + 1e-12


def test_round_without_participants_keeps_the_iterates():
    algorithm = AcceleratedMinibatchSGD(LOSS, np.array([0.5]), 20, 1.0, NoNoise())
    state = simulate(algorithm, SYNTH, 3)
    msgs = algorithm.silo_step(algorithm.broadcast(state), SYNTH, SiloDraws(0, np.array([0]), 3, SYNTH.silo_ids))
    after = algorithm.server_step(state, msgs, np.zeros((1, 6), dtype=bool), round_keys())
    np.testing.assert_array_equal(after.params, state.params)
    np.testing.assert_array_equal(after.prox_center, state.prox_center)
    assert after.round == state.round + 1


@pytest.mark.parametrize("cls", [AcceleratedMinibatchSGD, OnePassAcceleratedSGD])
def test_private_runs_decrease_the_loss(cls):
    algorithm = cls(LOSS, np.array([0.5]), 10, 1.0, GaussianNoise(np.full((1, 6), 0.05)))
    start = objective(LOSS, SYNTH, np.zeros((1, 5, 1)))[0]
    state = simulate(algorithm, SYNTH, 12, participants=3)
    assert objective(LOSS, SYNTH, state.params)[0] < start - 0.05


@pytest.mark.parametrize("cls", [AcceleratedMinibatchSGD, OnePassAcceleratedSGD])
def test_deterministic_given_seed_and_sensitive_to_it(cls):
    algorithm = cls(LOSS, np.array([0.5]), 10, 1.0, GaussianNoise(np.full((1, 6), 0.1)))
    a = simulate(algorithm, SYNTH, 5, seed=1).params
    assert np.array_equal(a, simulate(algorithm, SYNTH, 5, seed=1).params)
    assert not np.array_equal(a, simulate(algorithm, SYNTH, 5, seed=2).params)


@pytest.mark.parametrize("cls", [AcceleratedMinibatchSGD, OnePassAcceleratedSGD])
def test_replicas_equal_separate_runs(cls):
    both = cls(LOSS, np.array([0.5, 2.0]), 10, 1.0, GaussianNoise(np.full((2, 6), 0.1)))
    together = simulate(both, SYNTH, 6, replicas=2)
    assert together.params.shape == together.prox_center.shape == (2, 5, 1)
    for p, step in enumerate([0.5, 2.0]):
        alone = cls(LOSS, np.array([step]), 10, 1.0, GaussianNoise(np.full((1, 6), 0.1)))
        np.testing.assert_array_equal(together.params[p], simulate(alone, SYNTH, 6).params[0])


def test_zero_noise_and_no_clipping_is_the_non_private_method():
    private = AcceleratedMinibatchSGD(LOSS, np.array([0.5]), 10, np.inf, GaussianNoise(np.zeros((1, 6))))
    plain = AcceleratedMinibatchSGD(LOSS, np.array([0.5]), 10, np.inf, NoNoise())
    np.testing.assert_array_equal(simulate(private, SYNTH, 4).params, simulate(plain, SYNTH, 4).params)


def test_one_pass_batches_are_disjoint_and_use_each_record_at_most_once():
    n, k = 120, 25                                 # floor(n / K) = 4 rounds, 20 records never used
    blocks = [SiloDraws(7, np.array([0, 1]), r, np.arange(6)).epoch_slice(np.full(6, n), k) for r in range(4)]
    used = np.concatenate(blocks, axis=-1)         # (P, S, 4 K)
    for cell in used.reshape(-1, 4 * k):
        assert len(np.unique(cell)) == 4 * k and cell.min() >= 0 and cell.max() < n
    # Repetitions walk different permutations; a silo's permutation ignores its block-mates.
    assert not np.array_equal(used[0], used[1])
    alone = SiloDraws(7, np.array([0]), 2, np.array([3])).epoch_slice(np.array([n]), k)
    np.testing.assert_array_equal(alone[0, 0], blocks[2][0, 3])


def test_one_pass_silo_half_uses_the_epoch_blocks():
    algorithm = OnePassAcceleratedSGD(LOSS, np.array([0.5]), 10, 1.0, NoNoise())
    params = np.random.default_rng(0).normal(size=(1, 5, 1))
    draws = SiloDraws(0, np.array([0]), 3, SYNTH.silo_ids)
    weights = np.zeros((1, 6, 120))
    for s, block in enumerate(draws.epoch_slice(SYNTH.sizes, 10)[0]):
        weights[0, s, block] = 0.1
    expected = clipped_weighted_gradients(LOSS, params, SYNTH.x, SYNTH.y, weights, 1.0, SYNTH.x_norms)
    np.testing.assert_allclose(algorithm.silo_step(params, SYNTH, draws), expected)


def test_one_pass_refuses_more_than_floor_n_over_k_rounds():
    algorithm = OnePassAcceleratedSGD(LOSS, np.array([0.5]), 40, 1.0, NoNoise())
    simulate(algorithm, SYNTH, 3)                  # floor(120 / 40) = 3 rounds are fine
    with pytest.raises(ValueError, match=r"floor\(n / K\) = 3 \(K = 40\)"):
        simulate(algorithm, SYNTH, 4)


def test_one_pass_declares_disjoint_batches_and_one_release_per_round():
    assert OnePassAcceleratedSGD.recipe.one_pass and not AcceleratedMinibatchSGD.recipe.one_pass
    assert OnePassAcceleratedSGD.recipe.releases(25) == (25, 1)
    assert set(OnePassAcceleratedSGD.recipe.calibrations) == {"paper", "theory"}


def test_theory_prox_scales():
    # Lan: max{2 beta, sqrt(2 V^2 R(R+1)(R+2) / (3 D^2))}: R = 10, V = 1, D = 2: sqrt(2*1320/12) = sqrt(220).
    assert lan_prox_scale(1.0, 1.0, 2.0, 10) == pytest.approx(np.sqrt(220.0))
    assert lan_prox_scale(100.0, 1.0, 2.0, 10) == 200.0
    # Regularized: lambda = 0.5, V = 1, Delta = 2, R = 10: sqrt(0.5 * 1320 / 6) = sqrt(110).
    assert regularized_prox_scale(1.0, 0.5, 1.0, 2.0, 10) == pytest.approx(np.sqrt(110.0))
    assert regularized_prox_scale(10.0, 0.5, 1.0, 2.0, 10) == 21.0


def test_shared_minibatches_per_repetition_give_the_per_replica_messages_exactly():
    """The accelerated silo step draws one minibatch per repetition; the result is the per-replica path's."""
    from fedray.protocols.isrl_dp.minibatch_sgd import noisy_minibatch_mean

    reps = np.array([0, 1, 0, 2, 1])
    algorithm = AcceleratedMinibatchSGD(LOSS, np.linspace(0.1, 1.0, 5), 10, 1.0,
                                        GaussianNoise(np.random.default_rng(1).uniform(0.1, 0.5, (5, 6))))
    silos = SYNTH
    query = np.random.default_rng(2).normal(size=(5, SYNTH.x.shape[2], 1))
    draws = SiloDraws(3, reps, 4, silos.silo_ids)
    per_replica = noisy_minibatch_mean(LOSS, query, silos, draws.without_replacement(silos.sizes, 10), 1.0,
                                       algorithm.noise, draws)
    np.testing.assert_array_equal(algorithm.silo_step(query, silos, SiloDraws(3, reps, 4, silos.silo_ids)), per_replica)
