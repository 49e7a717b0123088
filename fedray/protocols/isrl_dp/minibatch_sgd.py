"""Noisy minibatch SGD: ISRL-DP MB-SGD (seed-004 Alg. 2) and its non-private baseline.

Symbols: N silos, M participating per round, K records per minibatch, R rounds, L = 2 * l2_clip.

Trust model: ISRL-DP with ``GaussianNoise`` (no trusted server; silos do not trust each other;
every message leaving a silo is already private). Non-private with ``NoNoise``.
Unit and neighbouring relation: record level; replace one record of one silo (REPLACE_ONE).
Guarantee: each silo's transcript is (eps, delta)-DP where (eps, delta) is what the silo's ledger
reports for the rounds it took part in.
Silo half (line 6-7): draw K of the silo's n records WITHOUT replacement, average their
per-example gradients clipped to ``l2_clip`` (replace-one sensitivity 2 l2_clip / K), add
N(0, noise_std^2 I) inside the silo. (The paper samples with replacement; fedray samples the way
its accountant event says, so the accounted epsilon is the epsilon of what ran.)
Server half (line 8-9): average the M messages, step, project onto W.
Calibration: noise_std = noise_multiplier * 2 l2_clip / K with the multiplier from
``fedray.protocols.isrl_dp.calibration`` (paper mode: seed-004 §5; theory mode: Thm 2.1).
Randomness: MINIBATCH and NOISE streams keyed by (repetition, round, silo).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedray.core.protocol import RoundKeys
from fedray.core.terms import Calibration
from fedray.data.federation import SiloArrays
from fedray.losses import clipped_minibatch_means
from fedray.geometry import project_l2_ball
from fedray.protocols.isrl_dp.base import PlainIterate, ServerState, advance, masked_mean
from fedray.protocols.isrl_dp.planning import SiloGaussian
from fedray.protocols.isrl_dp import calibration, theory
from fedray.rng import SiloDraws


@dataclass(frozen=True)
class MinibatchSGD(PlainIterate):
    """Alg. 2 with per-replica step sizes ``step_size`` (P,) and per-(replica, silo) noise."""

    loss: Any
    step_size: np.ndarray
    batch_size: int
    l2_clip: float | np.ndarray      # or one per replica (a clip grid)
    noise: Any                 # GaussianNoise(noise_std (P, N)) or NoNoise()
    radius: float | None = None   # W = l2 ball of this radius; None = R^d (the experiments)
    average_last: int = 8

    # ISRL-DP (noise in the silo) or no privacy; noise multiplier formulas by privacy.calibration.
    recipe: ClassVar[SiloGaussian] = SiloGaussian({
        Calibration.PAPER: calibration.paper_minibatch_noise_multiplier,
        Calibration.THEORY: calibration.theory_minibatch_noise_multiplier,
    }, theorem=theory.mb_sgd_convex)

    def silo_step(self, params: np.ndarray, silos: SiloArrays, draws: SiloDraws) -> np.ndarray:
        idx = draws.without_replacement(silos.sizes, self.batch_size, by_repetition=True)   # (U, S, K)
        return noisy_minibatch_mean(self.loss, params, silos, idx, self.l2_clip, self.noise, draws,
                                    batch_of=draws.replica_to_rep)

    def server_step(self, state: ServerState, messages: np.ndarray, mask: np.ndarray, keys: RoundKeys) -> ServerState:
        mean, counts = masked_mean(messages, mask)
        step = np.where(counts > 0, self.step_size, 0.0)[:, None, None]
        return advance(state, project_l2_ball(state.params - step * mean, self.radius))


def noisy_minibatch_mean(
    loss, params: np.ndarray, silos: SiloArrays, idx: np.ndarray, l2_clip, noise, draws: SiloDraws,
    batch_of: np.ndarray | None = None,
) -> np.ndarray:
    """The silo half of Alg. 2 lines 6-7 for given minibatches; shared by the MB-SGD family.

    Averages the per-example gradients at ``params`` (P, d, C) of the records ``idx`` (P, S, K)
    (distinct within a cell), each clipped to ``l2_clip``, and adds the noise step with standard
    normals from ``draws``' NOISE stream, inside the silo. Returns (P, S, d, C) private messages.
    With ``batch_of`` (P,), ``idx`` is (B, S, K) and replica p uses minibatch ``batch_of[p]``
    (the by-repetition draws, shared by the replicas of a repetition).
    """
    grads = clipped_minibatch_means(loss, params, silos.x, silos.y, silos.x_norms, idx, l2_clip, batch_of)
    normals = draws.standard_normal(grads.shape[2:]) if noise.draws_normals else None
    # The step's per-cell metrics stay in the silo (only messages leave it); the server logs the
    # same step's ``round_metrics`` of the silos that took part (``SampledRounds.client_step_metrics``).
    private, _ = noise.select(silos.silo_ids).apply(grads, normals)
    return private
