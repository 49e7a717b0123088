"""Reference per-example gradients and clipping, materialised one example at a time: the slow,
obvious form the fused paths of ``fedray.losses`` are checked against."""

from __future__ import annotations

import numpy as np

from fedray.losses import loss_residual


def per_example_gradients(loss, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Unclipped per-example gradients (n, d, C) of one model (d, C) on records x (n, d).

    Materialises the gradients (a reference for tests).
    """
    z = x @ params
    return x[:, :, None] * loss_residual(loss, z, y, np.linalg.norm(x, axis=-1))[:, None, :]


def clip_per_example(gradients: np.ndarray, l2_clip: float) -> np.ndarray:
    """Scale each example's gradient (leading axis) to l2 norm at most ``l2_clip``."""
    if gradients.ndim < 2:
        raise ValueError(
            f"per-example clipping needs a leading example axis; got shape {gradients.shape}"
        )
    flat = gradients.reshape(gradients.shape[0], -1)
    norms = np.linalg.norm(flat, axis=1)
    with np.errstate(divide="ignore"):
        factor = np.minimum(1.0, l2_clip / norms)
    return gradients * factor.reshape((-1,) + (1,) * (gradients.ndim - 1))
