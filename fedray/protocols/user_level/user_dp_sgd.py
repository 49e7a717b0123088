"""Seed 002's baseline B1 (spec §4.3): user-level DP-SGD, "a user is a record".

Trust model: central user-level DP (a trusted server). Unit: a user (m items); relation: replace
one user's items. Round t: K of the N users, uniformly without replacement
(``participation=uniform``), each send q(Z), their mean gradient at the iterate; the server clips
each to ``l2_clip`` (L), averages them (replace-one sensitivity 2 L / K) and releases the mean plus
N(0, sigma^2 I), sigma = z 2 L / K (``ServerGaussianNoise``: sum sensitivity 2 L, divisor K), then
steps w <- Pi_W(w - eta g). The output is the average
iterate. z comes from the accountant: the T-fold subsampled (K of N, without replacement)
Gaussian at (eps, delta) by dp-accounting's RDP (``fedray.privacy.accounting``); the ledger
(``CentralGaussianAccountant``) prices the event of the very step the server applies; every user is
charged every round (the subsampling credit is ex ante: the sampled sets stay secret), so each
carries the federation's epsilon. Its privacy term ~ sqrt(d ln(1/delta)) / (eps n) does not fall
with m. Server draws from the SERVER stream of the round's keys (the replica's row, the round).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np

from fedray.core.evaluation import Metric
from fedray.core.protocol import RoundKeys
from fedray.data.federation import SiloArrays
from fedray.gradient_descent import GradientState, ProjectedGradient
from fedray.privacy.mechanisms import ServerGaussianNoise
from fedray.protocols.user_level.accelerated_erm import user_mean_gradients
from fedray.protocols.user_level.planning import UserSampledGaussian
from fedray.rng import Stream


class UserSgdState(NamedTuple):
    round: int
    solver: GradientState
    gradients: np.ndarray        # (P,) gradient evaluations so far (K m per round)


@dataclass(frozen=True)
class UserDpSgd:
    """B1's halves (module docstring); ``noise`` the server's Gaussian step, std (P,) = z 2 L / K."""

    loss: Any
    solver: ProjectedGradient
    l2_clip: float
    noise: ServerGaussianNoise
    num_rounds: int
    items: int                   # m (the same for every user)

    recipe: ClassVar[UserSampledGaussian] = UserSampledGaussian()

    def init(self, params0: np.ndarray, keys: RoundKeys) -> UserSgdState:
        return UserSgdState(0, self.solver.init(params0), np.zeros(params0.shape[0], dtype=np.int64))

    def broadcast(self, state: UserSgdState) -> np.ndarray:
        return self.solver.broadcast(state.solver)

    def silo_step(self, query: np.ndarray, users: SiloArrays, draws, participation: np.ndarray) -> np.ndarray:
        return user_mean_gradients(self.loss, query, users, participation)

    def charge(self, state: UserSgdState, participation: np.ndarray) -> np.ndarray:
        return participation            # the rounds accountant charges every user of a round with any

    def server_step(self, state: UserSgdState, values: np.ndarray, mask: np.ndarray, keys: RoundKeys) -> UserSgdState:
        p = values.shape[0]
        k = mask.sum(axis=1)
        flat = values.reshape(p, values.shape[1], -1)
        with np.errstate(over="ignore", invalid="ignore"):
            norms = np.linalg.norm(flat, axis=2)
        # A non-finite (or overflowing) user gradient counts as the zero vector, which is inside the
        # clip ball: the sensitivity stays 2 L / K, and no 0 * inf turns the release into NaN.
        usable = mask & np.isfinite(norms)
        factor = np.where(usable, np.minimum(1.0, self.l2_clip / np.maximum(np.where(usable, norms, 1.0), 1e-300)), 0.0)
        mean = np.einsum("ps,psd->pd", factor, np.where(usable[..., None], flat, 0.0)) / np.maximum(k, 1)[:, None]
        noisy, _ = self.noise.apply(mean, [keys.generator(Stream.SERVER, r) for r in range(p)])
        gradient = noisy.reshape(state.solver.params.shape)
        return UserSgdState(state.round + 1, self.solver.step(state.solver, gradient, k),
                            state.gradients + k * self.items)

    def metrics(self, state: UserSgdState) -> dict:
        return {"gradient_evaluations": Metric(state.gradients.astype(np.float64), True)}

    def done(self, state: UserSgdState) -> np.ndarray:
        return np.full(state.solver.params.shape[0], state.round >= self.num_rounds)

    def output(self, state: UserSgdState) -> dict[str, np.ndarray]:
        """The average iterate (the model), and the last."""
        return {"avg": state.solver.params, "last": state.solver.iterate}
