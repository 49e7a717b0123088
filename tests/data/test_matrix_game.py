"""Matrix games (seed-001 E1 and §7 test 11): the exact gap, the padded game's structure, and the
counter-based samples (deterministic per id, unbiased, bounded, replaceable)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog

from fedray.data import DenseMatrixGame, PaddedMatrixGame
from fedray.errors import ConfigError
from fedray.protocols.mirror_descent.simplex import maurey


def _equilibrium(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The row player's minimax strategy of x^T A y (x pays), and the column player's, by linprog."""
    def solve(m):      # min_x max_j (m^T x)_j: variables (x, v), minimise v s.t. m^T x <= v
        rows, cols = m.shape
        res = linprog(np.r_[np.zeros(rows), 1.0], A_ub=np.c_[m.T, -np.ones(cols)], b_ub=np.zeros(cols),
                      A_eq=np.r_[np.ones(rows), 0.0][None], b_eq=[1.0], bounds=[(0, None)] * rows + [(None, None)],
                      method="highs")
        return res.x[:rows]
    return solve(a), solve(-a.T)


def test_gap_vanishes_at_the_linprog_equilibrium_of_random_games_and_is_positive_elsewhere():
    rng = np.random.default_rng(0)
    for _ in range(5):
        a = rng.uniform(-1, 1, size=(20, 30))
        game = DenseMatrixGame(payoff=a.tolist(), num_samples=10)
        x, y = _equilibrium(a)
        assert abs(game.gap(x[None], y[None])[0]) < 1e-7
        others = game.gap(rng.dirichlet(np.ones(20), 50), rng.dirichlet(np.ones(30), 50))
        assert np.all(others >= 0) and np.all(others > 1e-3)


@pytest.mark.parametrize("dim", [3, 4, 17, 200])
def test_padded_game_products_match_its_matrix_and_keep_the_base_equilibrium(dim):
    game = PaddedMatrixGame(num_samples=10, dim=dim)
    abar = game.matrix()
    rng = np.random.default_rng(dim)
    x, y = rng.dirichlet(np.ones(dim), 4), rng.dirichlet(np.ones(dim), 4)
    np.testing.assert_allclose(game.times(y), y @ abar.T, atol=1e-15)
    np.testing.assert_allclose(game.transpose_times(x), x @ abar, atol=1e-15)
    uniform = np.zeros((1, dim))
    uniform[0, :3] = 1 / 3
    assert abs(game.gap(uniform, uniform)[0]) < 1e-15
    assert np.all(game.gap(x, y) > 0)
    assert game.lipschitz == np.abs(abar).max() + 0.5 == (1.0 if dim > 3 else 0.75)


def test_samples_depend_on_their_id_alone_and_average_to_the_population():
    game = PaddedMatrixGame(num_samples=20_000, dim=6)
    everything = game.load(seed=3)
    part = game.load(seed=3, silo_ids=np.array([17, 5, 19_999]))
    rng = np.random.default_rng(0)
    x, y = rng.dirichlet(np.ones(6), 2), rng.dirichlet(np.ones(6), 2)
    np.testing.assert_array_equal(part.select(slice(1, 2)).gradient_sums(x, y)[0],
                                  everything.select(slice(5, 6)).gradient_sums(x, y)[0])
    assert not np.array_equal(game.load(seed=4).select(slice(5, 6)).gradient_sums(x, y)[0],
                              everything.select(slice(5, 6)).gradient_sums(x, y)[0])
    grad_x, grad_y = everything.gradient_sums(x, y)
    # E[A_z] = Abar: the mean sample gradient is the population's, within 5 standard errors.
    np.testing.assert_allclose(grad_x / 20_000, game.times(y), atol=5 * 0.5 / np.sqrt(20_000))
    np.testing.assert_allclose(grad_y / 20_000, game.transpose_times(x), atol=5 * 0.5 / np.sqrt(20_000))


def test_sample_gradients_are_bounded_by_l0_and_unbiased_at_maurey_points():
    game = PaddedMatrixGame(num_samples=50, dim=8, padding=0.5, noise=0.5)
    samples = game.load(seed=1)
    vertices = np.eye(8)
    for i in range(50):                     # |(A_z e_j)_i| <= max|A_z| <= L0 at every vertex
        g_x, g_y = samples.select(slice(i, i + 1)).gradient_sums(vertices, vertices)
        assert np.abs(g_x).max() <= game.lipschitz and np.abs(g_y).max() <= game.lipschitz
    rng = np.random.default_rng(2)
    x, y = rng.dirichlet(np.ones(8)), rng.dirichlet(np.ones(8))
    draws = 40_000
    xhat = maurey(rng.choice(8, size=(draws, 1), p=x), 8)
    yhat = maurey(rng.choice(8, size=(draws, 1), p=y), 8)
    one = samples.select(slice(0, 1))
    sampled_x, _ = one.gradient_sums(xhat, yhat)
    exact_x, _ = one.gradient_sums(x[None], y[None])
    np.testing.assert_allclose(sampled_x.mean(axis=0), exact_x[0], atol=5 * game.lipschitz / np.sqrt(draws))


def test_a_replaced_sample_takes_its_payoff_and_bad_payoffs_are_refused():
    game = PaddedMatrixGame(num_samples=4, dim=5)
    samples = game.load(seed=0)
    adversarial = np.where(np.arange(25).reshape(5, 5) % 2 == 0, 1.0, -1.0)
    neighbour = samples.replace(2, adversarial)
    x, y = np.full((1, 5), 0.2), np.eye(5)[[1]]
    mine, theirs = samples.gradient_sums(x, y)[0], neighbour.gradient_sums(x, y)[0]
    alone = samples.select(slice(2, 3)).gradient_sums(x, y)[0]
    np.testing.assert_allclose((theirs - mine)[0], adversarial @ y[0] - alone[0], atol=1e-15)
    with pytest.raises(ConfigError, match="payoff"):
        samples.replace(0, 2 * adversarial)
    with pytest.raises(ConfigError, match="data.spec.payoff"):
        DenseMatrixGame(payoff=[[1.0, 2.0], [3.0]]).validate()


DENSE = ["algorithm=smd", "privacy=central_sampling", "participation=sequential", "data=dense_game"]


def test_a_payoff_given_on_the_command_line_is_planned_as_a_read_only_array():
    """Hydra hands config lists over as OmegaConf ListConfigs, which numpy converted on every
    product (3.5 ms instead of 3.5 us for this 2 x 3 payoff); the plan converts them once."""
    from fedray.plan import make_plan
    from tests.conftest import compose

    listed = [[0.5, -0.5, 0.1], [-0.25, 0.25, 0.0]]
    game = make_plan(compose(*DENSE, f"data.spec.payoff={listed}")).dataset
    assert type(game.payoff) is np.ndarray and game.payoff.dtype == np.float64 and not game.payoff.flags.writeable
    np.testing.assert_array_equal(game.payoff, listed)
    y = np.array([[0.2, 0.3, 0.5]])
    np.testing.assert_array_equal(game.times(y), DenseMatrixGame(payoff=listed, num_samples=10).times(y))
    with pytest.raises(ConfigError, match="data.spec.payoff"):       # a ragged list is still named
        make_plan(compose(*DENSE, "data.spec.payoff=[[1.0,2.0],[3.0]]"))


def test_payoffs_that_differ_in_any_element_or_digit_load_different_silos():
    """The actor pool reuses loaded silos for an equal data key (the spec's repr): an array field
    must not be summarised ("...") or rounded there."""
    from fedray.plan import make_plan
    from fedray.runtime.driver import _data_key
    from tests.conftest import compose

    big = np.zeros((40, 40))            # past numpy's 1,000-element summary threshold
    keys = set()
    for change in (0.0, 1e-12):
        payoff = big.copy()
        payoff[20, 20] = 0.5 + change
        config = compose(*DENSE)
        config.data.spec.payoff = payoff.tolist()       # as the override would set it, without parsing 1,600 numbers
        keys.add(_data_key(make_plan(config)))
    assert len(keys) == 2
