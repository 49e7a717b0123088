"""The per-unit objective of a linear model (``fedray.core.objective.Objective``).

f_u(W) = (1/m_u) sum_j l(<x_uj, W>, y_uj) for every unit u of a federation shard, with W (d, C)
per replica, where records longer than ``feature_bound`` are scaled to it (a record-by-record map,
so neighbouring datasets stay neighbours). With ``feature_bound`` = B and a loss whose
|dl/dz| <= r and d^2 l / dz^2 <= c, every f_u is G = r B Lipschitz and beta = c B^2 smooth
(``lipschitz``, ``smoothness``): the constants a sensitivity argument and a step size need.
"""

from __future__ import annotations

from typing import Any

import math
from dataclasses import dataclass

import numpy as np

from fedray.losses import margins, silo_weighted_sums


@dataclass(frozen=True)
class LinearModelObjective:
    loss: Any
    feature_bound: float = math.inf

    @property
    def lipschitz(self) -> float:
        return float(self.loss.residual_bound) * self.feature_bound

    @property
    def smoothness(self) -> float:
        return float(self.loss.curvature_bound) * self.feature_bound**2

    def _records(self, fed) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Features (bounded), labels, and each real record's weight 1 / m_u (0 on padding)."""
        x = fed.x_train
        if math.isfinite(self.feature_bound):
            norms = np.linalg.norm(x, axis=2, keepdims=True)
            x = x * np.minimum(1.0, self.feature_bound / np.maximum(norms, 1e-300))
        weight = fed.train_mask() / np.maximum(fed.n_train, 1)[:, None]
        return x, fed.y_train, weight

    def values(self, params: np.ndarray, fed) -> np.ndarray:
        x, y, weight = self._records(fed)
        losses = self.loss.value(margins(params, x), y[None]) * weight           # (P, U, n)
        return losses.sum(axis=2).T

    def gradients(self, params: np.ndarray, fed) -> np.ndarray:
        x, y, weight = self._records(fed)
        coef = self.loss.residual(margins(params, x), y[None]) * weight[None, ..., None]
        return silo_weighted_sums(coef, x).transpose(1, 0, 2, 3)                  # (U, P, d, C)

    def hvps(self, params: np.ndarray, vectors: np.ndarray, fed) -> np.ndarray:
        x, y, weight = self._records(fed)
        u = margins(vectors, x)
        coef = self.loss.curvature(margins(params, x), y[None], u) * weight[None, ..., None]
        return silo_weighted_sums(coef, x).transpose(1, 0, 2, 3)
