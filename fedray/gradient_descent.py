"""Projected (stochastic) gradient descent with a constant step, as a server half with AC-SA's
interface (``fedray.acsa.AcSa``: ``init``, ``broadcast``, ``step``, the output in ``params``), so
a protocol can swap one for the other (seed 002's ablation A2 and its full-batch baseline B2).

Round r: w_{r+1} = Pi_W(w_r - eta (g_r + lambda (w_r - w_0))) at the query point w_r; the output
is the running average of w_1..w_r (the convex-case output for noisy gradients), or with
``average=False`` the last iterate (exact full-batch gradients: the average lags by O(1 / r)). A replica whose round had no
gradient keeps its iterates. Post-processing of the gradient estimates only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from fedray.geometry import project_l2_ball


class GradientState(NamedTuple):
    round: int
    iterate: np.ndarray       # (P, d, C) w_r, the query point
    anchor: np.ndarray        # (P, d, C) w_0, the centre of the regularizer
    params: np.ndarray        # (P, d, C) the average of the iterates so far (w_0 before any)
    steps: np.ndarray         # (P,) rounds that moved each replica


@dataclass(frozen=True)
class ProjectedGradient:
    step_size: np.ndarray                 # (P,) eta
    regularization: float = 0.0          # lambda: the run minimises f + lambda/2 ||w - w_0||^2
    radius: float | None = None          # W = l2 ball of this radius; None = R^d
    average: bool = True                 # the output: the average iterate, or the last

    def init(self, params0: np.ndarray) -> GradientState:
        w0 = project_l2_ball(np.asarray(params0, dtype=np.float64), self.radius)
        return GradientState(0, w0.copy(), w0.copy(), w0.copy(), np.zeros(w0.shape[0], dtype=np.int64))

    def broadcast(self, state: GradientState) -> np.ndarray:
        return state.iterate

    def step(self, state: GradientState, gradient: np.ndarray, counts: np.ndarray) -> GradientState:
        moved = counts > 0
        eta = np.asarray(self.step_size, dtype=np.float64)[:, None, None]
        grad = gradient + self.regularization * (state.iterate - state.anchor)
        iterate = np.where(moved[:, None, None], project_l2_ball(state.iterate - eta * grad, self.radius),
                           state.iterate)
        steps = state.steps + moved
        weight = (moved / np.maximum(steps, 1))[:, None, None]
        average = np.where(state.steps[:, None, None] == 0, iterate, state.params + weight * (iterate - state.params))
        average = np.where(moved[:, None, None], average, state.params)
        return GradientState(state.round + 1, iterate, state.anchor, average if self.average else iterate, steps)
