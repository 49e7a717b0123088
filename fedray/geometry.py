"""Feasible sets shared by the protocols: projections of per-replica iterates (P, ...)."""

from __future__ import annotations

import numpy as np


def project_l2_ball(params: np.ndarray, radius: float | None) -> np.ndarray:
    """Pi_W for W = {||w|| <= radius} per replica (axis 0); W = R^d when radius is None."""
    if radius is None:
        return params
    norms = np.linalg.norm(params.reshape(params.shape[0], -1), axis=1)
    factor = np.minimum(1.0, radius / np.maximum(norms, 1e-300))
    return params * factor.reshape((-1,) + (1,) * (params.ndim - 1))
