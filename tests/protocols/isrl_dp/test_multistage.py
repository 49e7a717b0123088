"""Multi-stage AC-SA (seed-004 §3.4): stage formulas, restarts, linear convergence (T7)."""

import math

import numpy as np
import pytest

from fedray.protocols.isrl_dp import MultiStageAcceleratedSGD, MultiStageOnePassSGD
from fedray.data import SiloArrays
from fedray.protocols.isrl_dp.multistage import rounds_for_stages, stage_noise_scale, stage_rounds
from fedray.data import SyntheticLinear
from fedray.losses import Logistic, Squared, margins
from fedray.privacy.mechanisms import GaussianNoise, NoNoise
from fedray.rng import SiloDraws
from tests.conftest import round_keys


def strongly_convex_silos(dim=8):
    """Least squares with Hessian diag(lam), lam in [0.05, 1] (mu = 0.05, beta = 1), w* = 1, F* = 0."""
    lam = np.geomspace(0.05, 1.0, dim)
    x = np.stack([np.sqrt(dim) * np.diag(np.sqrt(lam))] * 2)
    y = x @ np.ones(dim)
    return SiloArrays(np.arange(2), x, y, np.full(2, dim), np.linalg.norm(x, axis=2))


def run(algorithm, silos, rounds, seed=0):
    state = algorithm.init(np.zeros((1, silos.x.shape[2], 1)), round_keys())
    states = [state]
    for r in range(rounds):
        msgs = algorithm.silo_step(algorithm.broadcast(state), silos, SiloDraws(seed, np.array([0]), r, silos.silo_ids))
        state = algorithm.server_step(state, msgs, np.ones((1, silos.x.shape[0]), dtype=bool), round_keys())
        states.append(state)
    return states


def gap(silos, params):
    return Squared().value(margins(params, silos.x), silos.y[None]).mean()


def make(**overrides):
    fields = dict(strong_convexity=0.05, smoothness=1.0, oracle_std=0.0, initial_gap=1.0)
    fields.update(overrides)
    return MultiStageAcceleratedSGD(Squared(), np.array([0.5]), 8, np.inf, NoNoise(), **fields)


def test_stage_formulas_match_hand_values():
    # beta = 1, mu = 0.05, V = 0.1, Delta = 2:
    # R_1 = ceil(max{4 sqrt(40), 128 * 0.01 / (3 * 0.05 * 2 * 1/4)}) = ceil(max{25.298, 17.067}) = 26
    # R_3: second term 128 * 0.01 / (3 * 0.05 * 2 / 16) = 68.267 -> 69
    assert stage_rounds(1, 1.0, 0.05, 0.1, 2.0) == 26
    assert stage_rounds(3, 1.0, 0.05, 0.1, 2.0) == 69
    # nu term of stage 1 at R_1 = 26: sqrt(0.05 * 0.01 / (3 * 2 * 1) * 26 * 27 * 28) = sqrt(1.638)
    assert stage_noise_scale(1, 26, 0.05, 0.1, 2.0) == pytest.approx(math.sqrt(0.05 * 0.01 / 6 * 26 * 27 * 28))
    assert rounds_for_stages(3, 1.0, 0.05, 0.1, 2.0) == 26 + stage_rounds(2, 1.0, 0.05, 0.1, 2.0) + 69


def test_prox_scale_is_the_larger_of_the_floor_and_the_variance_term():
    algorithm = MultiStageAcceleratedSGD(Squared(), np.array([0.5, 0.001]), 8, np.inf, NoNoise(),
                                         strong_convexity=0.05, smoothness=1.0, oracle_std=0.1, initial_gap=2.0)
    state = algorithm.init(np.zeros((2, 3, 1)), round_keys(2))
    term = stage_noise_scale(1, 26, 0.05, 0.1, 2.0)
    np.testing.assert_allclose(algorithm.stages.prox_scale(algorithm.step_size, state), [max(2.0, term), 1000.0])


def test_stages_restart_at_the_previous_output():
    silos = strongly_convex_silos()
    algorithm = make()
    r1 = stage_rounds(1, 1.0, 0.05, 0.0, 1.0)       # ceil(4 sqrt(40)) = 26 when V = 0
    states = run(algorithm, silos, r1 + 1)
    end_of_stage = states[r1]
    assert (states[r1 - 1].stage, states[r1 - 1].stage_round) == (1, r1 - 1)
    assert (end_of_stage.stage, end_of_stage.stage_round, end_of_stage.round) == (2, 0, r1)
    np.testing.assert_array_equal(end_of_stage.prox_center, end_of_stage.params)
    # The next stage starts with alpha_1 = 1: its query point is q_1.
    np.testing.assert_array_equal(algorithm.broadcast(end_of_stage), end_of_stage.params)


def test_noiseless_strongly_convex_convergence_is_linear():
    silos = strongly_convex_silos()
    algorithm = make()
    r1 = stage_rounds(1, 1.0, 0.05, 0.0, 1.0)
    states = run(algorithm, silos, 5 * r1)
    ends = np.array([gap(silos, states[k * r1].params) for k in range(6)])   # F(q_k), q_0 = w_0
    ratios = ends[1:] / ends[:-1]
    # Each stage at least quarters the gap (GL 2013 Prop. 7 halves it; deterministic runs do better).
    assert np.all(ratios < 0.25)
    assert ends[-1] < 1e-6 * ends[0]


def test_init_rejects_non_strongly_convex_settings():
    with pytest.raises(ValueError, match="strong_convexity must be > 0"):
        make(strong_convexity=0.0).init(np.zeros((1, 3, 1)), round_keys())
    with pytest.raises(ValueError, match="initial_gap"):
        make(initial_gap=None).init(np.zeros((1, 3, 1)), round_keys())


def test_multistage_one_pass_stays_within_one_pass():
    fed = SyntheticLinear(num_silos=3, samples_per_silo=60, dim=4, noise=0.5).load(0)
    silos = SiloArrays(np.arange(3), fed.x_train, fed.y_train, fed.n_train, np.linalg.norm(fed.x_train, axis=2))
    algorithm = MultiStageOnePassSGD(Logistic(), np.array([0.5]), 10, 1.0, GaussianNoise(np.full((1, 3), 0.1)),
                                     strong_convexity=0.05, smoothness=0.5, oracle_std=0.0, initial_gap=1.0)
    assert MultiStageOnePassSGD.recipe.one_pass
    states = run(algorithm, silos, 6)                # floor(60 / 10) = 6
    assert states[-1].round == 6
    with pytest.raises(ValueError, match="floor"):
        run(algorithm, silos, 7)
