"""A driver-side solver for the ridge-regularised objective, stopped by a gradient certificate.

Minimises G(W) = F(W) + (lambda / 2) ||W||^2 (F: ``fedray.core.objective.DataObjective``, one
oracle call per evaluation) and returns a W with ||grad G(W)|| <= ``tolerance``. G is
lambda-strongly convex, so that certificate bounds the distance to the exact minimiser,
||W - W*|| <= tolerance / lambda, whatever path the solver took: a privacy argument can add
2 tolerance / lambda to the sensitivity of W* and need not trust the solver.

Path: scipy's trust-region Newton-CG (value, gradient and Hessian-vector products, each an oracle
call) to the tolerance, then, if floating point stopped it short, gradient steps 1 / (beta +
lambda), which contract to W* for a beta-smooth F. Deterministic: the same data give the same
iterates on any actor layout (the oracle's sums are layout independent).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from scipy.optimize import minimize

from fedray.evaluation import LinearModelEvaluation
from fedray.rng import Stream


class Solution(NamedTuple):
    params: np.ndarray          # (1, ...) the minimiser found
    gradient_norm: float        # ||grad G(params)||, <= the tolerance asked for
    calls: int                  # oracle calls made


def minimize_ridge(data, shape: tuple, regularization: float, smoothness: float, tolerance: float,
                   weights: np.ndarray | None = None, max_calls: int = 10_000,
                   centre: np.ndarray | None = None) -> Solution:
    """min_W F_w(W) + (lambda / 2) ||W - centre||^2 over W of ``shape`` (centre 0 unless given),
    from the centre, to ||grad|| <= ``tolerance``."""
    calls = 0
    origin = np.zeros(int(np.prod(shape))) if centre is None else np.asarray(centre, dtype=np.float64).reshape(-1)

    def value_gradient(flat: np.ndarray) -> tuple[float, np.ndarray]:
        nonlocal calls
        calls += 1
        params = flat.reshape((1,) + shape)
        value, gradient = data.value_and_gradient(params, weights)
        offset = flat - origin
        return (float(value[0]) + 0.5 * regularization * float(offset @ offset),
                gradient.reshape(-1) + regularization * offset)

    def hessp(flat: np.ndarray, vector: np.ndarray) -> np.ndarray:
        nonlocal calls
        calls += 1
        product = data.hvp(flat.reshape((1,) + shape), vector.reshape((1,) + shape), weights)
        return product.reshape(-1) + regularization * vector

    found = minimize(value_gradient, origin.copy(), jac=True, hessp=hessp, method="trust-ncg",
                     options={"gtol": tolerance, "maxiter": 200})
    flat = found.x
    _, gradient = value_gradient(flat)
    step = 1.0 / (smoothness + regularization)
    while np.linalg.norm(gradient) > tolerance:
        if calls >= max_calls:
            raise RuntimeError(f"the solver stopped at gradient norm {np.linalg.norm(gradient):.3g} after {calls} "
                               f"oracle calls; tolerance {tolerance:g} (raise algorithm.gradient_tolerance)")
        flat = flat - step * gradient
        _, gradient = value_gradient(flat)
    return Solution(flat.reshape((1,) + shape), float(np.linalg.norm(gradient)), calls)


class LinearModelProgram:
    """What a driver-side program releasing linear models shares: its server noise draws and the
    evaluation of its releases (diagnostic training loss and test error on the users' records);
    needs ``objective``, ``num_units`` and ``model_shape``."""

    objective: Any             # the program's fields these methods read
    num_units: int
    model_shape: tuple[int, ...]

    def output_generator(self, keys, replica: int) -> np.random.Generator:
        """Replica ``replica``'s stream for the noise of its released model."""
        return keys.generator(Stream.OUTPUT_NOISE, replica)

    def output_noise(self, keys, replica: int) -> np.ndarray:
        """Replica ``replica``'s standard normal draw for its released model (its own stream)."""
        return self.output_generator(keys, replica).standard_normal(self.model_shape)

    def evaluate(self, models: np.ndarray, federation) -> dict:
        return LinearModelEvaluation(self.objective.loss).shard_parts(models, federation)

    def combine(self, parts: list[dict]) -> dict:
        return LinearModelEvaluation(self.objective.loss).combine(parts, self.num_units)
