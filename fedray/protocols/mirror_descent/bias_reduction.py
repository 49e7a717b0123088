"""Seed-001 Alg. 2: randomised multilevel Monte Carlo (MLMC) bias reduction of gradients at
vertex-sampled points, with truncated geometric levels (spec §3.2, errata §6 item 2).

Level N ~ TG(1/2, M): P[N = k] = 2^{-k} / C_M for k = 0..M, C_M = 2 - 2^{-M}, so E[2^N] =
(M + 1) / C_M. At level N the estimator draws 2^{N+1} iid vertices per player from P_x (and
P_y), takes the mean of all of them (x+), of the first half (x-) and the first draw alone
(xhat^1), and returns

    g = C_M 2^N (Phi(x+) - Phi(x-)) + Phi(xhat^1)

on one batch. Telescoping, E[g] = E[Phi at the mean of 2^{M+1} iid draws]: the bias of 2^{M+1}
draws at an expected cost of 2 E[2^N] + 1 ~ 2 (M + 1) / C_M draws (Lemma 3.15). The levels come
from their own stream (data-independent), apart from the vertex draws (spec §6 item 17).
"""

from __future__ import annotations

import numpy as np

from fedray.core.sampling import draw_truncated_geometric as draw_levels
from fedray.core.sampling import truncated_geometric as level_probabilities

__all__ = ["combine", "draw_levels", "expected_cost", "level_points", "level_probabilities", "normaliser"]


def normaliser(levels: int) -> float:
    """C_M = sum_{k=0}^{M} 2^{-k} = 2 - 2^{-M}."""
    return 2.0 - 2.0 ** -levels


def expected_cost(levels: int) -> float:
    """E[2^N] = (M + 1) / C_M."""
    return (levels + 1) / normaliser(levels)


def level_points(vertices: np.ndarray, level: int, dim: int) -> np.ndarray:
    """(3, dim) the points x+, x-, xhat^1 of 2^{N+1} vertex draws (``vertices``, in draw order)."""
    count = 2 ** (level + 1)
    if vertices.shape[-1] != count:
        raise ValueError(f"level {level} takes {count} draws, got {vertices.shape[-1]}")
    points = np.zeros((3, dim))
    np.add.at(points[0], vertices, 1.0 / count)
    np.add.at(points[1], vertices[:count // 2], 2.0 / count)
    points[2, vertices[0]] = 1.0
    return points


def combine(at_points: np.ndarray, level: int, levels: int) -> np.ndarray:
    """g = C_M 2^N (Phi(x+) - Phi(x-)) + Phi(xhat^1) from the operator at the three points (3, ...)."""
    weight = normaliser(levels) * 2.0 ** level
    return weight * (at_points[0] - at_points[1]) + at_points[2]
