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

import math
from dataclasses import dataclass
from typing import Callable, ClassVar

import numpy as np


def _special():
    """scipy.special, imported at the first loss evaluation: a planning driver needs only the
    losses' constants, and the import takes 0.4 s of its start-up."""
    from scipy import special

    return special


class Loss:
    """What fedray reads of a loss (``data.loss``); every loss subclasses it, so the flags below
    hold as declared where a loss says nothing.

    A loss is a frozen dataclass of numeric settings with ``num_outputs`` (C) and, per example,
    ``value(z, y)``, ``residual(z, y)`` (dl/dz, (..., C)) and ``error(z, y)``; a twice
    differentiable one adds ``curvature(z, y, u)``. Flags:

    - ``linear_in_record``: the loss is linear in the record, so a record that is the mean of m
      items has the items' average loss (data of user means, ``FederationShape.summarised_items``);
    - ``needs_x_norms``: ``residual`` also takes the per-example norms ||x|| (a Moreau envelope,
      whose width is ||x||^2 / beta; ``loss_residual`` passes them).
    """

    linear_in_record: ClassVar[bool] = False
    needs_x_norms: ClassVar[bool] = False

    @property
    def num_outputs(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} declares no num_outputs")

    def value(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} defines no value")

    def residual(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} defines no residual")

    def error(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} defines no error")


@dataclass(frozen=True)
class Logistic(Loss):
    """Binary cross-entropy, labels in {0, 1}, with the margin clipped to [-margin_clip, margin_clip].

    Clipping the margin (seed-004 E1: "clipped <w,x> to [-15,15]") keeps log terms finite;
    the gradient uses the clipped probability, (sigmoid(clip(z)) - y) x, as the paper does.
    |dl/dz| <= 1, so the per-example gradient norm is at most ||x||.
    """

    margin_clip: float = 15.0
    num_outputs: int = 1
    residual_bound = 1.0           # sup |dl/dz|
    curvature_bound = 0.25         # sup d^2 l / dz^2

    def value(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        p = _special().expit(np.clip(z[..., 0], -self.margin_clip, self.margin_clip))
        return -(y * np.log(1e-12 + p) + (1.0 - y) * np.log(1e-12 + 1.0 - p))

    def residual(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        p = _special().expit(np.clip(z[..., 0], -self.margin_clip, self.margin_clip))
        return (p - y)[..., None]

    def curvature(self, z: np.ndarray, y: np.ndarray, u: np.ndarray) -> np.ndarray:
        """d residual / dz applied to u: p (1 - p) u inside the margin clip, 0 outside (the
        residual is constant there)."""
        p = _special().expit(z[..., 0])
        return (p * (1.0 - p) * (np.abs(z[..., 0]) < self.margin_clip))[..., None] * u

    def error(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """0/1 classification error with threshold 0.5 on the probability."""
        return ((z[..., 0] > 0.0) != (y > 0.5)).astype(np.float64)


@dataclass(frozen=True)
class Squared(Loss):
    """Half squared error (y - z)^2 / 2 for regression; the residual is unbounded, so clip."""

    num_outputs: int = 1
    residual_bound = float("inf")
    curvature_bound = 1.0

    def value(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return 0.5 * (z[..., 0] - y) ** 2

    def residual(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return (z[..., 0] - y)[..., None]

    def curvature(self, z: np.ndarray, y: np.ndarray, u: np.ndarray) -> np.ndarray:
        return u

    def error(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Squared prediction error (the report turns sums of it into RMSE)."""
        return (z[..., 0] - y) ** 2


@dataclass(frozen=True)
class Linear(Loss):
    """The negative score -y z, labels clipped to [-1, 1] (a record-by-record map, as the feature
    bound is). With the ridge term (mu / 2) ||W||^2 of a strongly convex program the minimiser is
    the mean of the records y x over mu: mean estimation, where each record may be a user's mean
    of m items (``fedray.data.BinomialUserMeans``), whose average loss it reproduces exactly
    because the loss is linear in the record (``linear_in_record``). |dl/dz| <= 1, no curvature."""

    num_outputs: int = 1
    residual_bound = 1.0
    curvature_bound = 0.0
    linear_in_record: ClassVar[bool] = True

    def value(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return -np.clip(y, -1.0, 1.0) * z[..., 0]

    def residual(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.broadcast_to(-np.clip(y, -1.0, 1.0), z.shape[:-1])[..., None]

    def curvature(self, z: np.ndarray, y: np.ndarray, u: np.ndarray) -> np.ndarray:
        return np.zeros_like(u)

    def error(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Whether the score's sign disagrees with the label's."""
        return (z[..., 0] * y <= 0.0).astype(np.float64)


@dataclass(frozen=True)
class Huber(Loss):
    """The half squared error with its residual clipped at ``threshold``: (z - y)^2 / 2 where |z - y|
    <= threshold, threshold |z - y| - threshold^2 / 2 beyond. Equal to ``Squared`` wherever the
    residual stays within the threshold (on P1's ball of radius 1, |z - y| <= 2), with a bounded
    derivative, so a sensitivity argument that needs sup |dl/dz| holds for any labels."""

    threshold: float = 2.0
    num_outputs: int = 1
    curvature_bound = 1.0

    @property
    def residual_bound(self) -> float:
        return float(self.threshold)

    def value(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        gap = np.abs(z[..., 0] - y)
        return np.where(gap <= self.threshold, 0.5 * gap**2, self.threshold * gap - 0.5 * self.threshold**2)

    def residual(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.clip(z[..., 0] - y, -self.threshold, self.threshold)[..., None]

    def curvature(self, z: np.ndarray, y: np.ndarray, u: np.ndarray) -> np.ndarray:
        return (np.abs(z[..., 0] - y) < self.threshold)[..., None] * u

    def error(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Squared prediction error, as ``Squared``."""
        return (z[..., 0] - y) ** 2


@dataclass(frozen=True)
class Softmax(Loss):
    """Multiclass cross-entropy; y holds class indices. ||dl/dz|| <= sqrt(2)."""

    num_outputs: int = 2
    residual_bound = math.sqrt(2.0)
    curvature_bound = 0.5          # ||diag(s) - s s^T|| <= 1/2

    def value(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        logp = _special().log_softmax(z, axis=-1)
        return -np.take_along_axis(logp, y[..., None].astype(np.int64), axis=-1)[..., 0]

    def residual(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        r = _special().softmax(z, axis=-1)
        onehot = np.arange(z.shape[-1]) == y[..., None].astype(np.int64)
        return r - onehot

    def curvature(self, z: np.ndarray, y: np.ndarray, u: np.ndarray) -> np.ndarray:
        """(diag(s) - s s^T) u, s = softmax(z)."""
        s = _special().softmax(z, axis=-1)
        return s * u - s * np.sum(s * u, axis=-1, keepdims=True)

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


def clip_factors(x_norms: np.ndarray, residual: np.ndarray, l2_clip) -> np.ndarray:
    """min(1, l2_clip / ||x (dl/dz)^T||) for each example; zero gradients are left alone.

    ``x_norms`` (S, n) broadcasts against the residual's leading axes (P, S, n, C); ``l2_clip`` is
    a number or one per replica, shaped to broadcast the same way (``replica_clips``).
    """
    if np.ndim(l2_clip) == 0 and np.isinf(l2_clip):
        return np.ones(residual.shape[:-1])
    # ||r|| as numpy's norm computes it (sqrt of the summed squares), without its per-call overhead.
    norms = x_norms * np.sqrt(np.add.reduce(residual * residual, axis=-1))
    # l2_clip / 0 = inf (factor 1), without the cost of an errstate context in hot loops.
    ratio = np.divide(l2_clip, norms, out=np.full(norms.shape, np.inf), where=norms > 0)
    return np.minimum(1.0, ratio)


def replica_clips(l2_clip, replicas, ndim: int):
    """The clip of each of ``replicas`` shaped (c, 1, ..., 1) to broadcast against (c, ...) arrays
    of ``ndim`` axes; a number (one clip for every replica) is returned as it is."""
    if np.ndim(l2_clip) == 0:
        return l2_clip
    return np.asarray(l2_clip)[replicas].reshape((-1,) + (1,) * (ndim - 1))


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


# Replicas of one minibatch are processed in chunks of about this many (replica, silo, record)
# values, so the margins and residuals of a chunk stay in the core's cache.
_CHUNK_VALUES = 1 << 16


def clipped_minibatch_means(
    loss, params: np.ndarray, x: np.ndarray, y: np.ndarray, x_norms: np.ndarray, idx: np.ndarray, l2_clip,
    batch_of: np.ndarray | None = None,
) -> np.ndarray:
    """(1/K) sum_k clip(grad f(params[p], x[s, idx[b, s, k]])), b = batch_of[p], for every replica p and silo s.

    The hot path of the MB-SGD family. ``idx`` (B, S, K) holds B minibatches of each silo and
    replica p uses minibatch ``batch_of[p]`` (default: B = P and replica p uses idx[p]). Replicas
    of one repetition share their minibatch (``SiloDraws(by_repetition=True)``), so its K records
    are gathered once, B S K d values instead of P S K d, and read in place by every replica that
    uses it. Only the sampled records are touched (the dense ``clipped_weighted_gradients``
    touches all n, which costs more at every P measured, see experiments/benchmark/silo_step.py).

    Every product is one (replica, silo) pair's matrix-vector product, (K, d) by (d, C) and
    (d, K) by (K, C), with the same shapes whatever else shares the call, so a silo's result is
    bit for bit the same for any actor layout and any number of replicas. Returns (P, S, d, C).
    """
    num_silos, width, dim = x.shape
    num_replicas, _, outputs = params.shape
    batch_of = np.arange(num_replicas) if batch_of is None else np.asarray(batch_of)
    k = idx.shape[-1]
    chunk = max(1, _CHUNK_VALUES // max(1, num_silos * k))
    flat_x = x.reshape(num_silos * width, dim)
    offsets = (np.arange(num_silos) * width)[:, None]
    out = np.empty((num_replicas, num_silos, dim, outputs))
    batches = np.unique(batch_of)
    if batches.size == num_replicas:
        # Every replica has a minibatch of its own (its own streams): gather a chunk of replicas'
        # minibatches at once instead of one call per replica; the per-pair products are the same.
        for start in range(0, num_replicas, chunk):
            replicas = np.arange(start, min(start + chunk, num_replicas))
            rows = idx[batch_of[replicas]] + offsets                           # (c, S, K)
            xb = np.take(flat_x, rows, axis=0)                                 # (c, S, K, d)
            yb, nb = np.take(y, rows), np.take(x_norms, rows)                  # (c, S, K)
            z = np.matmul(xb, params[replicas][:, None])                       # (c, S, K, C)
            r = loss_residual(loss, z, yb, nb)
            coef = r * (clip_factors(nb, r, replica_clips(l2_clip, replicas, 3)) / k)[..., None]
            out[replicas] = np.matmul(xb.transpose(0, 1, 3, 2), coef)         # (c, S, d, C)
        return out
    for batch in batches:
        rows = idx[batch] + offsets                                        # (S, K) rows of the flat arrays
        xb = np.take(flat_x, rows, axis=0)[None]                           # (1, S, K, d)
        yb, nb = np.take(y, rows)[None], np.take(x_norms, rows)[None]      # (1, S, K)
        users = np.flatnonzero(batch_of == batch)
        for start in range(0, users.size, chunk):
            replicas = users[start:start + chunk]
            z = np.matmul(xb, params[replicas][:, None])                   # (c, S, K, C)
            r = loss_residual(loss, z, yb, nb)
            coef = r * (clip_factors(nb, r, replica_clips(l2_clip, replicas, 3)) / k)[..., None]
            out[replicas] = np.matmul(xb.transpose(0, 1, 3, 2), coef)      # (c, S, d, C)
    return out


def clipped_example_gradients(
    loss, params: np.ndarray, x: np.ndarray, y: np.ndarray, x_norms: np.ndarray, idx: np.ndarray, l2_clip: float
) -> np.ndarray:
    """clip(grad f(params[p], x[s, idx[p, s, k]])) kept apart, (P, S, K, d, C): for protocols whose
    randomizer takes each record's gradient as its own input (P_vec, one user per record)."""
    silo_axis = np.arange(x.shape[0])[None, :, None]
    xb, yb, nb = x[silo_axis, idx], y[silo_axis, idx], x_norms[silo_axis, idx]   # (P, S, K, d), (P, S, K)
    r = loss_residual(loss, np.matmul(xb, params[:, None]), yb, nb)             # (P, S, K, C)
    coef = r * clip_factors(nb, r, l2_clip)[..., None]
    return xb[..., :, None] * coef[..., None, :]


def loss_residual(loss: Loss, z: np.ndarray, y: np.ndarray, x_norms: np.ndarray) -> np.ndarray:
    """dl/dz of ``loss``; a loss whose value depends on ||x|| too (``needs_x_norms``, e.g. a
    Moreau envelope, see ``fedray.smoothing``) also receives the per-example norms."""
    if loss.needs_x_norms:
        with_norms: Callable[..., np.ndarray] = loss.residual      # residual(z, y, x_norms): the flag's promise
        return with_norms(z, y, x_norms)
    return loss.residual(z, y)
