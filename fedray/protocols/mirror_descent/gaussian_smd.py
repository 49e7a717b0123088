"""A baseline for seed 001, not from the paper (spec §3.6): entropic stochastic mirror descent
made private the Euclidean way, by Gaussian noise on each step's gradient, with the iterates
released.

Trust model: central DP (a trusted curator). Unit and relation: one sample, replace one. Step t
reads the disjoint batch [t B, (t + 1) B) and evaluates the batch's gradients at the current
iterates (x^t, y^t) themselves (no vertex sampling); the curator releases the noisy mean gradient

    g~ = (1/B) sum_{z in B_t} (grad_x f, grad_y f)(x^t, y^t; z) + N(0, sigma^2 I_{dx + dy})

and steps s_x -= tau g~_x, s_y += tau g~_y. Calibration: every coordinate of a sample's gradient
is at most L0, so replacing one sample moves the batch mean by at most 2 L0 sqrt(dx + dy) / B in
l2, and sigma is the analytic Gaussian for (eps, delta) at that sensitivity
(``fedray.privacy.gaussian.analytic_sigma``). Each sample is in one batch and the other steps'
releases are post-processing of the earlier ones: by parallel composition the run is
(eps, delta)-DP. The outputs (the average and the last iterate) are post-processing. The noise
is the server's step ``noise`` (``CalibratedGaussianNoise``; ``NoNoise`` without privacy), the
value the ledger prices (``CertifiedReleases``); its normals come from the OUTPUT_NOISE counter
stream of each replica, keyed by the step.

The noise's l_inf norm grows like sigma sqrt(2 ln(2 (dx + dy))) with sigma ~ sqrt(dx + dy): the
poly(d) price the paper's vertex sampling avoids.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np

from fedray.core.protocol import RoundKeys
from fedray.privacy.mechanisms import CalibratedGaussianNoise, NoNoise
from fedray.protocols.mirror_descent.planning import GaussianNoise
from fedray.protocols.mirror_descent.simplex import softmax
from fedray.rng import Stream


class GaussianSmdState(NamedTuple):
    round: int
    score_x: np.ndarray         # (P, dx)
    score_y: np.ndarray         # (P, dy)
    iterate_x: np.ndarray       # (P, dx) sum of x^s, s < t (the released average's numerator)
    iterate_y: np.ndarray


@dataclass(frozen=True)
class GaussianSMD:
    """The two halves of Gaussian-noise SMD (module docstring)."""

    step_size: np.ndarray         # (P,) tau
    batch_size: int               # B
    num_steps: int                # T
    rows: int
    columns: int
    noise: CalibratedGaussianNoise | NoNoise      # the server's Gaussian step on the batch mean gradient

    recipe: ClassVar[GaussianNoise] = GaussianNoise()

    def init(self, params0: np.ndarray, keys: RoundKeys) -> GaussianSmdState:
        p = params0.shape[0]
        zeros_x, zeros_y = np.zeros((p, self.rows)), np.zeros((p, self.columns))
        return GaussianSmdState(0, zeros_x, zeros_y, zeros_x, zeros_y)

    def broadcast(self, state: GaussianSmdState) -> tuple[np.ndarray, np.ndarray]:
        """The current iterates, where the batch's gradients are taken."""
        return softmax(state.score_x), softmax(state.score_y)

    def silo_step(self, query: tuple, samples, draws) -> np.ndarray:
        grad_x, grad_y = samples.gradient_sums(*query)
        return np.concatenate([grad_x, grad_y], axis=1)

    def server_step(self, state: GaussianSmdState, summed: np.ndarray, keys: RoundKeys) -> GaussianSmdState:
        mean = summed / self.batch_size
        normals = np.stack([stream.normals(state.round, summed.shape[1]) for stream in
                            keys.counters(Stream.OUTPUT_NOISE)]) if self.noise.draws_normals else None
        noisy, _ = self.noise.apply(mean, normals)
        x, y = softmax(state.score_x), softmax(state.score_y)
        tau = self.step_size[:, None]
        return GaussianSmdState(state.round + 1, state.score_x - tau * noisy[:, :self.rows],
                                state.score_y + tau * noisy[:, self.rows:], state.iterate_x + x, state.iterate_y + y)

    def releases(self, first: int, steps: int) -> np.ndarray:
        """(P,) Gaussian releases of steps [first, first + steps) (priced by parallel composition)."""
        return np.full(self.step_size.shape[0], steps, dtype=np.int64)

    def released(self, state: GaussianSmdState) -> np.ndarray:
        """Nothing the driver needs per step (the noisy gradient is released, and dense; the state has it)."""
        return np.zeros((state.score_x.shape[0], 0))

    def output(self, state: GaussianSmdState) -> dict[str, np.ndarray]:
        steps = max(state.round, 1)
        average = np.concatenate([state.iterate_x, state.iterate_y], axis=1) / steps
        last = np.concatenate([softmax(state.score_x), softmax(state.score_y)], axis=1)
        return {"output": average if state.round else last, "last": last}
