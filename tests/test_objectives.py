"""The linear-model objective: per-unit averages, gradients and Hessian-vector products agree
with finite differences, records are bounded as declared, and the declared constants hold."""

import numpy as np
import pytest

from fedray.data.federation import Federation
from fedray.losses import Logistic, Softmax, Squared
from fedray.objectives import LinearModelObjective


def _federation(loss, num_units=4, width=6, dim=3, seed=0) -> Federation:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((num_units, width, dim)) * 2.0
    n = rng.integers(1, width + 1, size=num_units)
    n[0] = width
    if loss.num_outputs > 1:
        y = rng.integers(0, loss.num_outputs, size=(num_units, width)).astype(float)
    else:
        y = rng.integers(0, 2, size=(num_units, width)).astype(float)
    mask = np.arange(width)[None, :] < n[:, None]
    x, y = x * mask[..., None], y * mask
    task = "multiclass" if loss.num_outputs > 1 else "binary"
    return Federation(x, y, n, x[:, :2], y[:, :2], np.full(num_units, 2), task, loss.num_outputs)


LOSSES = [Logistic(), Squared(), Softmax(num_outputs=3)]


@pytest.mark.parametrize("loss", LOSSES, ids=lambda l: type(l).__name__)
@pytest.mark.parametrize("bound", [np.inf, 1.5])
def test_gradients_and_hvps_match_finite_differences(loss, bound):
    fed = _federation(loss)
    objective = LinearModelObjective(loss, bound)
    rng = np.random.default_rng(1)
    params = rng.standard_normal((2, 3, loss.num_outputs)) * 0.3
    direction = rng.standard_normal(params.shape)
    h = 1e-6
    values = lambda w: objective.values(w, fed)          # (U, P)
    numeric = (values(params + h * direction) - values(params - h * direction)) / (2 * h)
    analytic = np.einsum("updc,pdc->up", objective.gradients(params, fed), direction)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7)
    grad = lambda w: objective.gradients(w, fed)
    numeric = (grad(params + h * direction) - grad(params - h * direction)) / (2 * h)
    np.testing.assert_allclose(objective.hvps(params, direction, fed), numeric, rtol=1e-4, atol=1e-6)


def test_unit_values_are_averages_over_the_real_records_only():
    loss = Logistic()
    fed = _federation(loss)
    params = np.full((1, 3, 1), 0.2)
    values = LinearModelObjective(loss).values(params, fed)[:, 0]
    for u in range(fed.num_silos):
        n = fed.n_train[u]
        z = fed.x_train[u, :n] @ params[0, :, 0]
        p = 1 / (1 + np.exp(-z))
        y = fed.y_train[u, :n]
        np.testing.assert_allclose(values[u], np.mean(-(y * np.log(1e-12 + p) + (1 - y) * np.log(1e-12 + 1 - p))))


@pytest.mark.parametrize("loss", [Logistic(), Softmax(num_outputs=3)], ids=lambda l: type(l).__name__)
def test_declared_lipschitz_and_smoothness_bound_the_units(loss):
    """||grad f_u|| <= G and ||H_u v|| <= beta ||v|| at random points, and some come close."""
    fed = _federation(loss, num_units=20, seed=3)
    objective = LinearModelObjective(loss, 1.5)
    rng = np.random.default_rng(4)
    worst_g, worst_h = 0.0, 0.0
    for _ in range(30):
        params = rng.standard_normal((1, 3, loss.num_outputs)) * 5
        g = np.linalg.norm(objective.gradients(params, fed).reshape(20, -1), axis=1)
        v = rng.standard_normal(params.shape)
        hv = np.linalg.norm(objective.hvps(params * 0.01, v, fed).reshape(20, -1), axis=1) / np.linalg.norm(v)
        worst_g, worst_h = max(worst_g, g.max()), max(worst_h, hv.max())
    assert worst_g <= objective.lipschitz + 1e-12 and worst_h <= objective.smoothness + 1e-12
    assert worst_g > 0.5 * objective.lipschitz
