"""Simulation-only analysis of a federation: the optimum F*, heterogeneity and test metrics.

Used by the report (``fedray.report``) to turn logged losses into the paper's quantities. It
reads every silo's records at once, so it is never part of the protocol path (no privacy
claim covers it; seed-004 §5: "pre-processing, the L estimate and tuning are NOT private").

Symbols: N silos, n_i training records of silo i, w a (d, C) model.

- Empirical objective, the one the driver logs as ``train_loss``:
  F^(w) = (1/N) sum_i F^_i(w),  F^_i(w) = (1/n_i) sum_j f(w, x_ij). For equal silo sizes
  (MNIST, obesity) it is the pooled mean loss of the paper; for insurance's smaller last silo
  it weights silos equally, so that F^(w) - F* >= 0 for the logged loss.
- F* = min_w F^(w) by damped Newton (seed-004 §5: step 0.5, tol 1e-6, at most 1000 steps),
  with a least-squares Newton direction (the softmax Hessian is singular along w -> w + c 1^T).
- upsilon*^2 = (1/N) sum_i ||grad F^_i(w*)||^2 (seed-004 §5, following Woodworth et al. 2020b).
- Relative RMSE = sqrt( sum_test (y - y^)^2 / sum_test (y - ybar_train)^2 ), ybar_train the mean
  of the pooled training labels; the naive predictor ybar_train scores exactly 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit, softmax

from fedray.data.federation import Federation
from fedray.losses import Logistic, Softmax, Squared, loss_residual

NEWTON_STEP = 0.5
NEWTON_TOL = 1e-6
NEWTON_MAX_STEPS = 1000


@dataclass(frozen=True)
class Optimum:
    """Result of ``newton_optimum``: w* (d, C), F* = F^(w*), steps taken, final gradient norm."""

    params: np.ndarray
    value: float
    steps: int
    gradient_norm: float
    converged: bool


def _pooled(fed: Federation) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Real training records stacked: x (m, d), y (m,), silo id (m,), weight 1/(N n_i) (m,)."""
    mask = fed.train_mask()
    silo = np.broadcast_to(np.arange(fed.num_silos)[:, None], mask.shape)[mask]
    weight = 1.0 / (fed.num_silos * fed.n_train[silo].astype(np.float64))
    return fed.x_train[mask], fed.y_train[mask], silo, weight


def objective(loss, params: np.ndarray, fed: Federation) -> float:
    """F^(params) = (1/N) sum_i F^_i(params) for one model ``params`` (d, C)."""
    x, y, _, weight = _pooled(fed)
    return float(weight @ loss.value(x @ params, y))


def silo_gradients(loss, params: np.ndarray, fed: Federation) -> np.ndarray:
    """grad F^_i(params) for every silo: (N, d, C)."""
    x, y, silo, weight = _pooled(fed)
    r = loss_residual(loss, x @ params, y, np.linalg.norm(x, axis=1))          # (m, C)
    per_record = x[:, :, None] * r[:, None, :] * (weight * fed.num_silos)[:, None, None]
    out = np.zeros((fed.num_silos,) + params.shape)
    np.add.at(out, silo, per_record)
    return out


def _gradient_and_hessian(loss, params: np.ndarray, x: np.ndarray, y: np.ndarray, weight: np.ndarray):
    d, c = params.shape
    z = x @ params
    grad = x.T @ (loss_residual(loss, z, y, np.linalg.norm(x, axis=1)) * weight[:, None])   # (d, C)
    if isinstance(loss, Squared):
        hess = (x * weight[:, None]).T @ x
    elif isinstance(loss, Logistic):
        p = expit(np.clip(z[:, 0], -loss.margin_clip, loss.margin_clip))
        hess = (x * (weight * p * (1.0 - p))[:, None]).T @ x
    elif isinstance(loss, Softmax):
        p = softmax(z, axis=-1)
        a = np.einsum("mc,ce->mce", p, np.eye(c)) - p[:, :, None] * p[:, None, :]       # (m, C, C)
        scaled = (x * weight[:, None])[:, :, None, None] * a[:, None, :, :]              # (m, d, C, C)
        hess = np.tensordot(scaled, x, axes=([0], [0])).transpose(0, 1, 3, 2).reshape(d * c, d * c)
    else:
        raise TypeError(f"newton_optimum supports Squared, Logistic and Softmax losses; got {type(loss).__name__}")
    return grad, hess


def newton_optimum(loss, fed: Federation, step: float = NEWTON_STEP, tol: float = NEWTON_TOL,
                   max_steps: int = NEWTON_MAX_STEPS) -> Optimum:
    """Damped Newton from w = 0 on F^ (seed-004 §5: step 0.5, tol 1e-6, max 1000).

    Stops when the Newton direction's norm is below ``tol * max(1, ||w||)`` (relative, because
    insurance's weights are in dollars).
    """
    x, y, _, weight = _pooled(fed)
    params = np.zeros((fed.dim, loss.num_outputs))
    converged, steps = False, 0
    for steps in range(1, max_steps + 1):
        grad, hess = _gradient_and_hessian(loss, params, x, y, weight)
        direction = np.linalg.lstsq(hess, grad.reshape(-1), rcond=None)[0].reshape(params.shape)
        params = params - step * direction
        if np.linalg.norm(direction) < tol * max(1.0, float(np.linalg.norm(params))):
            converged = True
            break
    grad, _ = _gradient_and_hessian(loss, params, x, y, weight)
    return Optimum(params, objective(loss, params, fed), steps, float(np.linalg.norm(grad)), converged)


def heterogeneity(loss, params: np.ndarray, fed: Federation) -> float:
    """upsilon*^2 = (1/N) sum_i ||grad F^_i(w*)||^2 at ``params`` = w*."""
    grads = silo_gradients(loss, params, fed)
    return float(np.mean(np.sum(grads.reshape(fed.num_silos, -1) ** 2, axis=1)))


def regression_baseline(fed: Federation) -> tuple[float, float, int]:
    """(ybar_train, sum_test (y - ybar_train)^2, number of test records) over the pooled silos."""
    ybar = float(fed.y_train[fed.train_mask()].mean())
    y_test = fed.y_test[fed.test_mask()]
    return ybar, float(np.sum((y_test - ybar) ** 2)), int(y_test.size)


def relative_rmse(test_mse: np.ndarray | float, fed: Federation) -> np.ndarray:
    """Relative test RMSE from the pooled test mean squared error (the driver's ``test_error``
    for ``Squared``, = sum_test (y - y^)^2 / #test): sqrt(#test * mse / sum_test (y - ybar_train)^2)."""
    _, total, count = regression_baseline(fed)
    return np.sqrt(np.asarray(test_mse, dtype=np.float64) * count / total)


def relative_rmse_of(params: np.ndarray, fed: Federation) -> float:
    """Relative test RMSE of a linear model ``params`` (d, 1) on ``fed``'s test sets."""
    _, total, _ = regression_baseline(fed)
    x, y = fed.x_test[fed.test_mask()], fed.y_test[fed.test_mask()]
    return float(np.sqrt(np.sum((y - x @ params[:, 0]) ** 2) / total))
