"""The multi-task pool (seed-001 E3 / E5 data): records depend on their id alone, sample gradients
are the objective's derivatives and average to the population's, and the certified gap's interval
contains the gap a direct solver finds."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from fedray.data import LogisticTasks
from fedray.data.logistic_tasks import link_value, project_simplex
from fedray.errors import ConfigError

SPEC = LogisticTasks(num_samples=4000, dim=12, tasks=3, pool=3000, sparsity=3)


def test_records_depend_on_their_id_alone_and_labels_follow_the_planted_tasks():
    samples = SPEC.load(seed=1)
    a, b = samples.select(np.array([7, 3])).records()
    a2, b2 = SPEC.load(seed=1, silo_ids=np.array([3, 7])).records()
    np.testing.assert_array_equal(a, a2[::-1])
    np.testing.assert_array_equal(b, b2[::-1])
    population = samples.population
    own = population.losses(population.planted)            # (task, task): each planted x* fits its own task
    assert np.all(np.diag(own) < own.min(axis=1, where=~np.eye(3, dtype=bool), initial=np.inf))
    with pytest.raises(ConfigError, match="data.spec.link"):
        LogisticTasks(link="hinge").validate()


@pytest.mark.parametrize("link", ["logistic", "squared_hinge"])
def test_sample_gradients_are_the_derivatives_of_f(link):
    spec = LogisticTasks(num_samples=50, dim=6, tasks=2, pool=100, sparsity=2, link=link)
    samples = spec.load(seed=0).select(slice(0, 5))
    rng = np.random.default_rng(0)
    x, y = rng.dirichlet(np.ones(6), 1), rng.dirichlet(np.ones(2), 1)
    a, b = samples.records()
    f = lambda xx, yy: float((yy[None] * link_value(link, b * (a @ xx)[:, None])).sum())   # noqa: E731
    grad_x, grad_y = samples.gradient_sums(x, y)
    eps = 1e-6
    numeric_x = [(f(x[0] + eps * e, y[0]) - f(x[0] - eps * e, y[0])) / (2 * eps) for e in np.eye(6)]
    numeric_y = [(f(x[0], y[0] + eps * e) - f(x[0], y[0] - eps * e)) / (2 * eps) for e in np.eye(2)]
    np.testing.assert_allclose(grad_x[0], numeric_x, atol=1e-6)
    np.testing.assert_allclose(grad_y[0], numeric_y, atol=1e-6)
    assert np.abs(grad_x).max() <= 5 * spec.lipschitz and np.abs(grad_y).max() <= 5 * spec.lipschitz


def test_certified_gap_interval_contains_a_direct_solvers_gap():
    samples = SPEC.load(seed=2)
    population = samples.population
    rng = np.random.default_rng(3)
    x, y = rng.dirichlet(np.ones(12), 2), rng.dirichlet(np.ones(3), 2)
    low, high = samples.game.gap_interval(x, y)
    for r in range(2):
        def inner(v):
            return float((population.losses(v[None]) * y[r]).sum())
        best = minimize(inner, np.full(12, 1 / 12), method="SLSQP", bounds=[(0, 1)] * 12, options={"ftol": 1e-12},
                        constraints=[{"type": "eq", "fun": lambda v: v.sum() - 1}]).fun
        direct = population.losses(x[r:r + 1]).max() - best
        assert low[r] - 1e-6 <= direct <= high[r] + 1e-6 and high[r] - low[r] < 1e-3


def test_simplex_projection():
    v = np.array([[0.5, 0.5, 0.5], [2.0, -1.0, 0.0], [0.2, 0.3, 0.5]])
    np.testing.assert_allclose(project_simplex(v), [[1 / 3] * 3, [1.0, 0.0, 0.0], [0.2, 0.3, 0.5]], atol=1e-15)
