"""Nesterov smoothing of non-smooth GLM losses (seed-004 §3.6, Lemma D.7): hinge, absolute, Moreau envelopes.

Symbols: z = <w, x> the margin, phi(z, y) a loss that is G-Lipschitz in z (G = 1 for both losses
here), beta = ``smoothing``, L = G max ||x|| the Lipschitz constant of f(w, x) = phi(<w, x>, y) in w.

The beta-Moreau envelope over R^d of a GLM loss is a scalar envelope
--------------------------------------------------------------------
    f_beta(w, x) = min_{v in R^d} phi(<v, x>, y) + beta/2 ||w - v||^2.
For a target margin u = <v, x>, the closest v to w moves along x and costs ||w - v||^2 =
(u - z)^2 / ||x||^2, so f_beta(w, x) = min_u phi(u, y) + (1 / (2 t)) (u - z)^2 = phi_t(z), the scalar
Moreau envelope of phi with width t = ||x||^2 / beta, evaluated at z = <w, x>. Its gradient is
x phi_t'(z) with |phi_t'| <= G, so
  * ||grad f_beta(w, x)|| <= G ||x|| <= L: the envelope over R^d is L-Lipschitz. Lemma D.7's 2L is
    for the envelope with v restricted to W (spec §6 item 7); fedray's envelope is over R^d, so the
    function actually differentiated is L-Lipschitz and clipping at l2_clip >= max ||x|| is a no-op;
  * the Hessian x x^T phi_t'' has norm <= ||x||^2 / t = beta: grad f_beta is beta-Lipschitz;
  * f_beta <= f <= f_beta + G^2 ||x||^2 / (2 beta) <= f_beta + L^2 / (2 beta), per example.
For a G-Lipschitz piecewise-linear phi with one kink the envelope is a Huber function: with the
slope c = clip(excess / t) (excess measured from the kink), phi_t = excess c - t c^2 / 2.
A zero record (t = 0) gives phi itself and a zero gradient, without dividing by zero.

Interface (fedray.losses' GLM interface, C = 1 output)
------------------------------------------------------
``Hinge`` and ``Absolute`` are the non-smooth losses: ``value``, ``residual`` (a subgradient in z),
``error``, plus ``moreau(z, y, width)`` -> (phi_t(z), phi_t'(z)) on scalar margins.
``MoreauEnvelope(base, smoothing)`` is the smoothed loss an algorithm differentiates:
``residual(z, y, x_norms)`` is d f_beta / dz and needs the per-example norms; ``value(z, y)``
stays the ORIGINAL loss f (what the driver reports; runs are judged on f, not the surrogate);
``envelope(z, y, x_norms)`` is f_beta. ``needs_x_norms = True`` makes
``fedray.losses.clipped_weighted_gradients`` pass the cached norms of ``SiloArrays.x_norms``.
Select it with ``data.loss={_target_: fedray.smoothing.MoreauEnvelope, base: {_target_:
fedray.smoothing.Hinge}, smoothing: <beta>}``. Local SGD calls ``residual`` without norms, so it
raises a TypeError with a smoothed loss rather than silently using the non-smooth subgradient.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fedray.losses import Loss


def _huber_slope(excess: np.ndarray, width: np.ndarray, low: float, high: float) -> np.ndarray:
    """clip(excess / width, low, high), and clip(sign(excess)) where width = 0 (the subgradient)."""
    width = np.asarray(width, dtype=np.float64)
    positive = width > 0
    ratio = np.where(positive, excess / np.where(positive, width, 1.0), np.sign(excess))
    return np.clip(ratio, low, high)


@dataclass(frozen=True)
class Hinge(Loss):
    """max(0, 1 - s z) with s = 2y - 1 (labels {0, 1} mapped to -1, +1); 1-Lipschitz in z."""

    num_outputs: int = 1

    def value(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.maximum(0.0, 1.0 - (2.0 * y - 1.0) * z[..., 0])

    def residual(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The subgradient -s 1[s z < 1] (0 at the kink)."""
        return self.moreau(z[..., 0], y, 0.0)[1][..., None]

    def error(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """0/1 classification error with threshold 0 on the margin."""
        return ((z[..., 0] > 0.0) != (y > 0.5)).astype(np.float64)

    def moreau(self, z: np.ndarray, y: np.ndarray, width) -> tuple[np.ndarray, np.ndarray]:
        """(phi_t(z), phi_t'(z)) for margins z (no output axis) and width t >= 0."""
        sign = 2.0 * y - 1.0
        excess = 1.0 - sign * z                       # the kink is at s z = 1
        c = _huber_slope(excess, width, 0.0, 1.0)
        return excess * c - 0.5 * np.asarray(width) * c**2, -sign * c


@dataclass(frozen=True)
class Absolute(Loss):
    """|z - y| for regression (least absolute deviations); 1-Lipschitz in z."""

    num_outputs: int = 1

    def value(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.abs(z[..., 0] - y)

    def residual(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The subgradient sign(z - y) (0 at the kink)."""
        return self.moreau(z[..., 0], y, 0.0)[1][..., None]

    def error(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Squared prediction error, as ``Squared`` (the report turns sums of it into RMSE)."""
        return (z[..., 0] - y) ** 2

    def moreau(self, z: np.ndarray, y: np.ndarray, width) -> tuple[np.ndarray, np.ndarray]:
        """(phi_t(z), phi_t'(z)): the Huber function with threshold t."""
        excess = z - y
        c = _huber_slope(excess, width, -1.0, 1.0)
        return excess * c - 0.5 * np.asarray(width) * c**2, c


@dataclass(frozen=True)
class MoreauEnvelope(Loss):
    """The beta-Moreau envelope over R^d of ``base`` (module docstring); beta = ``smoothing`` > 0."""

    base: object
    smoothing: float

    needs_x_norms: ClassVar[bool] = True  # fedray.losses passes per-example ||x|| to residual

    @property
    def num_outputs(self) -> int:
        return self.base.num_outputs

    def width(self, x_norms: np.ndarray) -> np.ndarray:
        """t = ||x||^2 / beta per example."""
        return np.asarray(x_norms, dtype=np.float64) ** 2 / self.smoothing

    def value(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The original loss f (reported); see ``envelope`` for f_beta."""
        return self.base.value(z, y)

    def envelope(self, z: np.ndarray, y: np.ndarray, x_norms: np.ndarray) -> np.ndarray:
        """f_beta per example; ``x_norms`` broadcasts against z's leading axes."""
        return self.base.moreau(z[..., 0], y, self.width(x_norms))[0]

    def residual(self, z: np.ndarray, y: np.ndarray, x_norms: np.ndarray | None = None) -> np.ndarray:
        """d f_beta / dz, so that grad_w f_beta = x * residual."""
        if x_norms is None:
            raise TypeError(
                "MoreauEnvelope.residual needs the per-example norms x_norms (the envelope's width is "
                "||x||^2 / beta); use fedray.losses.clipped_weighted_gradients, which passes them"
            )
        return self.base.moreau(z[..., 0], y, self.width(x_norms))[1][..., None]

    def error(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return self.base.error(z, y)
