"""Objectives over the units' records, for programs that query the data many times (solvers).

An ``Objective`` evaluates each unit's average loss f_u(W) = (1/m_u) sum_j l(W; z_uj) and its
derivatives for every unit of a shard at once, one row per unit (unit axis first, replica axis
second), so that per-unit weights apply where the data lives and the oracle's ``unit_sum`` adds
the rows in a fixed order.

``DataObjective`` is the driver's view: the weighted average

    F_w(W) = sum_u w_u f_u(W) / sum_u w_u,       w_u >= 0 (default 1; 0 deletes unit u)

with its gradient and Hessian-vector products, and the per-unit gradients, each one oracle
call over the actors' shards. Weights are how a program asks about a neighbouring or reduced
dataset (deleting users, seed 003's stable-set search) without moving any record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from fedray.core.oracle import Oracle


@runtime_checkable
class Objective(Protocol):
    def values(self, params: np.ndarray, shard: Any) -> np.ndarray: ...            # (U, P)

    def gradients(self, params: np.ndarray, shard: Any) -> np.ndarray: ...         # (U, P, ...)

    def hvps(self, params: np.ndarray, vectors: np.ndarray, shard: Any) -> np.ndarray: ...   # (U, P, ...)


def _weights(unit_ids: np.ndarray, weights: np.ndarray | None) -> np.ndarray:
    return np.ones(unit_ids.size) if weights is None else np.asarray(weights, dtype=np.float64)[unit_ids]


def _scaled(rows: np.ndarray, w: np.ndarray) -> np.ndarray:
    return rows * w.reshape((-1,) + (1,) * (rows.ndim - 1))


def _value_gradient_rows(shard, unit_ids, objective, params, weights) -> np.ndarray:
    w = _weights(unit_ids, weights)
    values = _scaled(objective.values(params, shard), w)
    gradients = _scaled(objective.gradients(params, shard), w)
    return np.concatenate([values, gradients.reshape(gradients.shape[0], -1)], axis=1)


def _hvp_rows(shard, unit_ids, objective, params, vectors, weights) -> np.ndarray:
    return _scaled(objective.hvps(params, vectors, shard), _weights(unit_ids, weights))


def _gradient_rows(shard, objective, params) -> np.ndarray:
    return objective.gradients(params, shard)


def _largest_deviation(shard, objective, params, centre) -> float:
    gradients = objective.gradients(params, shard)[:, 0]
    if gradients.shape[0] == 0:
        return 0.0
    return float(np.sqrt(((gradients - centre) ** 2).reshape(gradients.shape[0], -1).sum(axis=1).max()))


@dataclass(frozen=True)
class DataObjective:
    """F_w over every unit, through ``oracle`` (module docstring). ``params`` (P, ...) carries one
    model per replica; values come back (P,), gradients and products shaped like ``params``."""

    oracle: Oracle
    objective: Objective
    num_units: int

    def _total(self, weights: np.ndarray | None) -> float:
        if weights is None:
            return float(self.num_units)
        weights = np.asarray(weights, dtype=np.float64)
        if weights.shape != (self.num_units,) or np.any(weights < 0) or not np.any(weights > 0):
            raise ValueError(f"weights must be ({self.num_units},), >= 0 and not all 0; got shape {weights.shape}")
        return float(weights.sum())

    def value_and_gradient(self, params: np.ndarray, weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        total = self._total(weights)
        summed = self.oracle.unit_sum(_value_gradient_rows, self.objective, params, weights)
        num_replicas = params.shape[0]
        return summed[:num_replicas] / total, summed[num_replicas:].reshape(params.shape) / total

    def hvp(self, params: np.ndarray, vectors: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        total = self._total(weights)
        return self.oracle.unit_sum(_hvp_rows, self.objective, params, vectors, weights) / total

    def largest_deviation(self, params: np.ndarray, centre: np.ndarray) -> float:
        """max_u ||grad f_u(W) - centre|| for the one model ``params`` (1, ...), computed where the
        units live: one number per actor reaches the driver, no unit's gradient."""
        return max(self.oracle.map(_largest_deviation, self.objective, params, np.asarray(centre)), default=0.0)

    def unit_gradients(self, params: np.ndarray) -> np.ndarray:
        """(N, P, ...) every unit's own gradient grad f_u(W), in unit order (for a trusted server
        that examines units one by one)."""
        return np.concatenate(self.oracle.map(_gradient_rows, self.objective, params))
