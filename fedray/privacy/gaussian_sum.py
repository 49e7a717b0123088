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
computed from it, is public. Randomness: the OUTPUT_NOISE stream at (run seed, replica key, step),
from the step's ``RoundKeys`` the server step passes in.
The step index keys the draw, so a step replayed (the driver re-running the steps an actor ran)
draws the same noise.

Calibration (both): sigma = analytic_sigma(eps, delta, 2 L) (Balle & Wang 2018), the smallest
noise for which one release is (eps, delta)-DP; how releases compose is the caller's ledger.

``CentralGaussianSum(..., draws=2)`` with ``pan_private_sigma``: seed 000's pan-private AC-SA
(App. C, Alg. 6). Trust model: a curator that is trusted to run the algorithm but whose internal
state may be seen ONCE by an intruder (pan-privacy, Def C.2). Each step's gradient accumulator
starts from a fresh N(0, zeta^2 I) before any user's data enters it, and a second fresh draw is
added before the step uses it; on the sum of B clipped gradients that is two draws of B zeta each,
zeta^2 = 8 L^2 ln(2/delta) / (B^2 eps^2): the classic Gaussian mechanism (Lemma C.5, eps < 1) with
Delta_2 = 2 L / B on the mean, so the state at any one moment and the output are (eps, delta)-DP
(Lemma C.4, 0 < eps, delta < 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fedray.core.mechanism import Placement
from fedray.core.protocol import RoundKeys
from fedray.privacy.gaussian import analytic_sigma
from fedray.rng import SiloDraws, Stream, generators


def pan_private_sigma(epsilon: float, delta: float, l2_bound: float) -> float:
    """B zeta, the std of each of the two draws pan-private AC-SA adds to a step's SUM of B vectors:
    zeta^2 = 8 L^2 ln(2/delta) / (B^2 eps^2) (seed-000 §3.6) on the mean, so B zeta =
    sqrt(8 ln(2/delta)) L / eps whatever B."""
    if not (0 < epsilon < 1 and 0 < delta < 1):
        raise ValueError(f"pan-private AC-SA needs 0 < epsilon < 1 and 0 < delta < 1 (Lemma C.5); got {epsilon}, {delta}")
    return math.sqrt(8.0 * math.log(2.0 / delta)) * l2_bound / epsilon


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

    def estimate(self, total: np.ndarray, users, keys: RoundKeys | None = None) -> np.ndarray:
        return total

    def sum_mse(self, users: int, dim: int) -> float:
        """E||estimate - sum||^2 = B d sigma^2."""
        return users * dim * self.sigma**2


def _required(keys: RoundKeys | None) -> RoundKeys:
    if keys is None:
        raise ValueError("a central Gaussian release draws from the step's keys; got keys=None")
    return keys


@dataclass(frozen=True)
class CentralGaussianSum:
    """The exact sum, released by a trusted server with one Gaussian draw (module docstring)."""

    sigma: float
    draws: int = 1                 # independent N(0, sigma^2 I) draws per release (2: pan-private AC-SA)
    placement: ClassVar[Placement] = Placement.SERVER

    def randomize(self, vectors: np.ndarray, draws: SiloDraws) -> np.ndarray:
        return vectors.sum(axis=2)

    def estimate(self, total: np.ndarray, users, keys: RoundKeys | None = None) -> np.ndarray:
        """(P, D) the released sum: ``total`` plus ``draws`` N(0, sigma^2 I) per replica, keyed by
        the step's ``keys`` (its round and each replica's row of ``keys.streams``)."""
        return total + self.sigma * self._noise(total, _required(keys)).sum(axis=1)

    def intruder_view(self, total: np.ndarray, keys: RoundKeys) -> tuple[np.ndarray, np.ndarray]:
        """(state, release), each (P, D): what an intruder who reads the curator's accumulator once,
        after the step's last user entered it, sees, and the step's release, from the same draws.

        The state is ``total`` plus the draws made before any user's data (all but the last:
        Alg. 6 lines 5-6 with ``draws=2``); the release adds the last draw (line 10), exactly as
        ``estimate`` does. With ``draws=1`` (the central baseline) the state is the exact sum: a
        central curator is not pan-private. The runtime never forms the state (it adds the draws
        at once); this is the view pan-privacy (seed 000, Def. C.2) protects, for audits."""
        noise = self._noise(total, keys)
        return total + self.sigma * noise[:, :-1].sum(axis=1), total + self.sigma * noise.sum(axis=1)

    def _noise(self, total: np.ndarray, keys: RoundKeys) -> np.ndarray:
        """(P, draws, D) the step's standard normal draws per replica, in the order they are added."""
        rows = np.asarray(keys.streams).reshape(total.shape[0], -1)
        return np.stack([rng.standard_normal((self.draws,) + total.shape[1:])
                         for rng in generators(keys.seed, Stream.OUTPUT_NOISE, rows, keys.round)])

    def sum_mse(self, users: int, dim: int) -> float:
        """E||estimate - sum||^2 = draws d sigma^2, whatever the number of users."""
        return self.draws * dim * self.sigma**2
