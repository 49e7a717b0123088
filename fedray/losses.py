"""Convex losses of linear models, with batched per-example gradients and l2 clipping.

Every loss here is a function of the margin z = x^T W (W has shape (d, C); C = 1 for binary
and regression, the number of classes for softmax). The per-example gradient is then the
outer product x (dl/dz)^T, whose l2 (Frobenius) norm is ||x|| * ||dl/dz||. fedray uses that
structure to clip per-example gradients and average them without ever materialising a
(replicas, silos, records, d, C) array: clipping scales the residual dl/dz, and the average is
one einsum of the scaled residuals against the silo's records.

Shapes: params (P, d, C) for P replicas; silo records x (S, n, d), y (S, n); margins
(P, S, n, C); per-record weights (P, S, n) (the multiplicity of a record in a minibatch over K).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit, log_softmax, softmax


@dataclass(frozen=True)
class Logistic:
    """Binary cross-entropy, labels in {0, 1}, with the margin clipped to [-margin_clip, margin_clip].

    Clipping the margin (seed-004 E1: "clipped <w,x> to [-15,15]") keeps log terms finite;
    the gradient uses the clipped probability, (sigmoid(clip(z)) - y) x, as the paper does.
    |dl/dz| <= 1, so the per-example gradient norm is at most ||x||.
    """

    margin_clip: float = 15.0
    num_outputs: int = 1

    def value(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        p = expit(np.clip(z[..., 0], -self.margin_clip, self.margin_clip))
        return -(y * np.log(1e-12 + p) + (1.0 - y) * np.log(1e-12 + 1.0 - p))

    def residual(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        p = expit(np.clip(z[..., 0], -self.margin_clip, self.margin_clip))
        return (p - y)[..., None]

    def error(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """0/1 classification error with threshold 0.5 on the probability."""
        return ((z[..., 0] > 0.0) != (y > 0.5)).astype(np.float64)


@dataclass(frozen=True)
class Squared:
    """Half squared error (y - z)^2 / 2 for regression; the residual is unbounded, so clip."""

    num_outputs: int = 1

    def value(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return 0.5 * (z[..., 0] - y) ** 2

    def residual(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return (z[..., 0] - y)[..., None]

    def error(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Squared prediction error (the report turns sums of it into RMSE)."""
        return (z[..., 0] - y) ** 2


@dataclass(frozen=True)
class Softmax:
    """Multiclass cross-entropy; y holds class indices. ||dl/dz|| <= sqrt(2)."""

    num_outputs: int = 2

    def value(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        logp = log_softmax(z, axis=-1)
        return -np.take_along_axis(logp, y[..., None].astype(np.int64), axis=-1)[..., 0]

    def residual(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        r = softmax(z, axis=-1)
        onehot = np.arange(z.shape[-1]) == y[..., None].astype(np.int64)
        return r - onehot

    def error(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return (np.argmax(z, axis=-1) != y.astype(np.int64)).astype(np.float64)


def margins(params: np.ndarray, x: np.ndarray) -> np.ndarray:
    """z[p, s, n, c] = sum_d x[s, n, d] params[p, d, c].

    One product over all silos' rows, so a silo's margins do not depend on which other silos
    (or how many replicas) share the call: runs are bit-identical for any actor layout.
    """
    num_replicas, dim, outputs = params.shape
    flat = params.transpose(1, 0, 2).reshape(dim, num_replicas * outputs)
    z = np.matmul(x, flat)                                    # (S, n, P*C)
    return z.reshape(x.shape[0], x.shape[1], num_replicas, outputs).transpose(2, 0, 1, 3)


def clip_factors(x_norms: np.ndarray, residual: np.ndarray, l2_clip: float) -> np.ndarray:
    """min(1, l2_clip / ||x (dl/dz)^T||) for each example; zero gradients are left alone.

    ``x_norms`` (S, n) broadcasts against the residual's leading axes (P, S, n, C).
    """
    if np.isinf(l2_clip):
        return np.ones(residual.shape[:-1])
    norms = x_norms * np.linalg.norm(residual, axis=-1)
    with np.errstate(divide="ignore"):
        return np.minimum(1.0, l2_clip / norms)


def clipped_weighted_gradients(
    loss,
    params: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    weights: np.ndarray,
    l2_clip: float,
    x_norms: np.ndarray | None = None,
) -> np.ndarray:
    """sum_n weights[p,s,n] * clip(grad f(params[p], x[s,n])) for every replica p and silo s.

    With weights = (multiplicity of record n in the minibatch) / K this is the clipped
    minibatch mean gradient of seed-004 Alg. 2 line 7. Returns (P, S, d, C).
    """
    z = margins(params, x)
    norms = np.linalg.norm(x, axis=-1) if x_norms is None else x_norms
    r = loss_residual(loss, z, y[None], norms)
    coef = r * (weights * clip_factors(norms, r, l2_clip))[..., None]
    return silo_weighted_sums(coef, x)


def silo_weighted_sums(coef: np.ndarray, x: np.ndarray) -> np.ndarray:
    """out[p, s, d, c] = sum_n coef[p, s, n, c] x[s, n, d], one matrix product per silo.

    A batched product over silos sums each silo's records in the same order whatever the number
    of silos or replicas in the call, so results do not depend on the actor layout.
    """
    num_replicas, num_silos, rows, outputs = coef.shape
    stacked = coef.transpose(1, 0, 3, 2).reshape(num_silos, num_replicas * outputs, rows)
    out = np.matmul(stacked, x)                               # (S, P*C, d)
    return out.reshape(num_silos, num_replicas, outputs, x.shape[2]).transpose(1, 0, 3, 2)


def clipped_minibatch_means(
    loss, params: np.ndarray, x: np.ndarray, y: np.ndarray, x_norms: np.ndarray, idx: np.ndarray, l2_clip: float
) -> np.ndarray:
    """(1/K) sum_k clip(grad f(params[p], x[s, idx[p, s, k]])) for every replica p and silo s.

    The hot path of the MB-SGD family: gathers the K sampled records of each (replica, silo) and
    works on them only (the dense ``clipped_weighted_gradients`` touches all n). Products are
    batched per (replica, silo), so a silo's result does not depend on the actor layout.
    Returns (P, S, d, C).
    """
    silo_axis = np.arange(x.shape[0])[None, :, None]
    xb, yb, nb = x[silo_axis, idx], y[silo_axis, idx], x_norms[silo_axis, idx]   # (P, S, K, d), (P, S, K)
    z = np.matmul(xb, params[:, None])                                          # (P, S, K, C)
    r = loss_residual(loss, z, yb, nb)
    coef = r * (clip_factors(nb, r, l2_clip) / idx.shape[-1])[..., None]
    return np.matmul(xb.transpose(0, 1, 3, 2), coef)                            # (P, S, d, C)


def per_example_gradients(loss, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Unclipped per-example gradients (n, d, C) of one model (d, C) on records x (n, d).

    Materialises the gradients; meant for tests and audits, not for hot paths.
    """
    z = x @ params
    return x[:, :, None] * loss_residual(loss, z, y, np.linalg.norm(x, axis=-1))[:, None, :]


def loss_residual(loss, z: np.ndarray, y: np.ndarray, x_norms: np.ndarray) -> np.ndarray:
    """dl/dz of ``loss``; a loss whose value depends on ||x|| too (``needs_x_norms``, e.g. a
    Moreau envelope, see ``fedray.smoothing``) also receives the per-example norms."""
    if getattr(loss, "needs_x_norms", False):
        return loss.residual(z, y, x_norms)
    return loss.residual(z, y)


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
