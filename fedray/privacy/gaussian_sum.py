"""Gaussian sums of user vectors under local and central DP: the baselines seed 000's shuffle
protocols are measured against (its intro: local DP pays sqrt(B) more noise in a sum of B users,
central DP is the floor the shuffle model approaches).

Both have the interface of P_vec's split form (``fedray.privacy.vector_sum.SplitVectorSum``):
``randomize(vectors, draws)`` runs where the users live and returns what leaves them, summed over
the users an actor holds for one step; ``estimate(total, users, step)`` runs at the server.

Unit and neighbouring relation: one user's vector, replaced by another (REPLACE_ONE). Inputs are
clipped to the l2 ball of radius L before they get here (``user_messages``), so the l2
sensitivity of one user's vector, and of any sum that contains it once, is 2 L.

``LocalGaussianSum``: trust model local DP. No one is trusted: every user adds its own
N(0, sigma^2 I_d) before the vector leaves it, so each message alone is (eps, delta)-DP; the sum
of B messages carries noise B sigma^2 per coordinate. Randomness: the NOISE stream at
(replica key, step, user block), drawn in the users' actor.

``CentralGaussianSum``: trust model central DP. A trusted server receives the exact sum of the
clipped vectors and releases it with one N(0, sigma^2 I_d) added; only that release, and what is
computed from it, is public. Randomness: the OUTPUT_NOISE stream at (run seed, replica key, step).
The step index keys the draw, so a step replayed (the driver re-running the steps an actor ran)
draws the same noise.

Calibration (both): sigma = analytic_sigma(eps, delta, 2 L) (Balle & Wang 2018), the smallest
noise for which one release is (eps, delta)-DP; how releases compose is the caller's ledger.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fedray.core.mechanism import Placement
from fedray.privacy.gaussian import analytic_sigma
from fedray.rng import SiloDraws, Stream, generator


def release_sigma(epsilon: float, delta: float, l2_bound: float) -> float:
    """sigma of one (eps, delta)-DP Gaussian release of a vector (or sum) whose one user's part
    lies in the l2 ball of radius ``l2_bound`` (replace-one sensitivity 2 l2_bound)."""
    return analytic_sigma(epsilon, delta, 2.0 * l2_bound)


@dataclass(frozen=True)
class LocalGaussianSum:
    """Each user's vector plus its own Gaussian noise, summed (module docstring)."""

    sigma: float
    placement: ClassVar[Placement] = Placement.CLIENT

    def randomize(self, vectors: np.ndarray, draws: SiloDraws) -> np.ndarray:
        """(P, S, K, D) clipped vectors -> (P, S, D): each of the K users' noisy vector, summed."""
        noisy = draws.blockwise(Stream.NOISE, vectors,
                                lambda block, rng: block + self.sigma * rng.standard_normal(block.shape))
        return noisy.sum(axis=2)

    def estimate(self, total: np.ndarray, users, step: int) -> np.ndarray:
        return total

    def sum_mse(self, users: int, dim: int) -> float:
        """E||estimate - sum||^2 = B d sigma^2."""
        return users * dim * self.sigma**2


@dataclass(frozen=True)
class CentralGaussianSum:
    """The exact sum, released by a trusted server with one Gaussian draw (module docstring)."""

    sigma: float
    seed: int
    streams: np.ndarray            # (P, k) each replica's stream key (``Replicas.streams``)
    placement: ClassVar[Placement] = Placement.SERVER

    def randomize(self, vectors: np.ndarray, draws: SiloDraws) -> np.ndarray:
        return vectors.sum(axis=2)

    def estimate(self, total: np.ndarray, users, step: int) -> np.ndarray:
        """(P, D) the released sum: ``total`` plus N(0, sigma^2 I) per replica, keyed by ``step``."""
        noise = np.stack([generator(self.seed, Stream.OUTPUT_NOISE, *row, step).standard_normal(total.shape[1:])
                          for row in np.asarray(self.streams).reshape(total.shape[0], -1)])
        return total + self.sigma * noise

    def sum_mse(self, users: int, dim: int) -> float:
        """E||estimate - sum||^2 = d sigma^2, whatever the number of users."""
        return dim * self.sigma**2
