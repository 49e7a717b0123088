"""fedray.analysis: Newton's F* against scipy, upsilon*^2, relative RMSE (seed-004 §5, §7 T14)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from fedray.analysis import (
    heterogeneity,
    newton_optimum,
    objective,
    regression_baseline,
    relative_rmse,
    relative_rmse_of,
    silo_gradients,
)
from fedray.data import stack_silos
from fedray.losses import Logistic, Softmax, Squared


def _federation(task: str, sizes=(40, 40, 30), dim=4, classes=3, seed=0, same=False):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(dim, classes if task == "multiclass" else 1))
    train, test = [], []
    for i, n in enumerate(sizes):
        silo_rng = np.random.default_rng(seed if same else seed + 1 + i)
        x = np.hstack([silo_rng.normal(loc=0.0 if same else 0.3 * i, size=(n + 10, dim - 1)), np.ones((n + 10, 1))])
        z = x @ w
        if task == "regression":
            y = z[:, 0] + silo_rng.normal(size=n + 10)
        elif task == "binary":
            y = (silo_rng.random(n + 10) < 1 / (1 + np.exp(-z[:, 0]))).astype(float)
        else:
            y = np.argmax(z + silo_rng.gumbel(size=z.shape), axis=1).astype(float)
        train.append((x[:n], y[:n]))
        test.append((x[n:], y[n:]))
    outputs = classes if task == "multiclass" else 1
    return stack_silos(train, test, task=task, num_outputs=outputs)


LOSSES = [("regression", Squared()), ("binary", Logistic()), ("multiclass", Softmax(num_outputs=3))]


@pytest.mark.parametrize(("task", "loss"), LOSSES)
def test_newton_optimum_matches_scipy(task, loss):
    fed = _federation(task)
    shape = (fed.dim, loss.num_outputs)

    optimum = newton_optimum(loss, fed)
    reference = minimize(lambda v: objective(loss, v.reshape(shape), fed), np.zeros(np.prod(shape)),
                         jac=lambda v: silo_gradients(loss, v.reshape(shape), fed).mean(axis=0).ravel(),
                         method="BFGS", options={"gtol": 1e-10, "maxiter": 10000})

    assert optimum.converged and optimum.steps < 1000
    assert optimum.value == pytest.approx(reference.fun, rel=1e-8, abs=1e-10)
    assert optimum.value <= reference.fun + 1e-10
    assert optimum.gradient_norm < 1e-6  # §7 T14: near-zero full gradient


def test_objective_weights_silos_equally():
    # F^ = (1/N) sum_i F^_i: the 30-record silo counts as much as the 40-record ones.
    fed = _federation("regression")
    w = np.ones((fed.dim, 1))
    per_silo = [np.mean(0.5 * (fed.x_train[i, :n] @ w[:, 0] - fed.y_train[i, :n]) ** 2)
                for i, n in enumerate(fed.n_train)]

    assert objective(Squared(), w, fed) == pytest.approx(np.mean(per_silo))


def test_heterogeneity_is_zero_for_identical_silos_and_positive_otherwise():
    same = _federation("binary", sizes=(50, 50, 50), same=True)
    different = _federation("binary", sizes=(50, 50, 50))

    upsilon_same = heterogeneity(Logistic(), newton_optimum(Logistic(), same).params, same)
    upsilon_diff = heterogeneity(Logistic(), newton_optimum(Logistic(), different).params, different)

    assert upsilon_same < 1e-12
    assert upsilon_diff > 1e-3


def test_heterogeneity_hand_value():
    # Two silos, one record each, squared loss at w = 0: grad F^_i = -y_i x_i.
    # x = (1, 0) with y = 2 and x = (0, 1) with y = 1: (4 + 1) / 2 = 2.5.
    fed = stack_silos([(np.array([[1.0, 0.0]]), np.array([2.0])), (np.array([[0.0, 1.0]]), np.array([1.0]))],
                      [(np.zeros((1, 2)), np.zeros(1))] * 2, task="regression", num_outputs=1)

    assert heterogeneity(Squared(), np.zeros((2, 1)), fed) == pytest.approx(2.5)


def test_naive_predictor_has_relative_rmse_one():
    # §7 T14: predicting ybar_train everywhere scores exactly 1.
    fed = _federation("regression")
    ybar, total, count = regression_baseline(fed)
    naive = np.zeros((fed.dim, 1))
    naive[-1, 0] = ybar  # the intercept column

    assert relative_rmse_of(naive, fed) == pytest.approx(1.0)
    assert relative_rmse(total / count, fed) == pytest.approx(1.0)
    assert relative_rmse_of(newton_optimum(Squared(), fed).params, fed) < 1.0
