"""Local SGD / FedAvg and its ISRL-DP variant (seed-004 §3.9, App. I), the experiments' baselines.

Symbols: K local steps per round (the same K as MB-SGD's batch), R rounds, L = 2 * l2_clip.

Trust model: ISRL-DP with ``GaussianNoise`` (noise added to every local step inside the silo);
non-private FedAvg with ``NoNoise``.
Unit and neighbouring relation: record level, replace one record of one silo (REPLACE_ONE).
Silo half: start from the broadcast model, take K steps w <- w - eta (clip(grad f(w, x_t)) + u_t),
x_t drawn uniformly with replacement, u_t ~ N(0, noise_std^2 I); send the local model.
Each step releases a single-record gradient (one draw with replacement is one draw without), so
one participation is K compositions of the Gaussian subsampled at rate 1/n.
Server half: average the local models (no projection, as in the paper).
Calibration: paper mode sigma^2 = 8 L^2 ln(1/delta) R K / (n^2 eps^2) (seed-004 §3.9a); the paper
notes the moments-accountant batch condition is not met at q = 1/n (§6 item 12): the ledger
reports the accountant's epsilon of what actually ran.
Randomness: MINIBATCH and NOISE streams keyed by (repetition, round, silo).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedray.algorithms.base import ServerState, SiloArrays, advance, initial_state, masked_mean
from fedray.losses import clip_factors, loss_residual
from fedray.privacy import calibration
from fedray.rng import SiloDraws


@dataclass(frozen=True)
class LocalSGD:
    """K local steps per participating silo, then model averaging."""

    loss: object
    step_size: np.ndarray
    batch_size: int  # K local steps, one record each (the paper matches MB-SGD's K)
    l2_clip: float
    noise: object
    average_last: int = 8

    # Who must be trusted: ISRL-DP with noise in the silo, or nobody protected (baseline).
    TRUST_MODELS = ("isrl_dp", "none")
    # Noise multiplier formulas (n, eps, delta, R, K) -> multiplier, by privacy.calibration.
    CALIBRATIONS = {"paper": calibration.paper_local_sgd_noise_multiplier}

    @staticmethod
    def releases(batch_size: int) -> tuple[int, int]:
        """(records per noisy release, noisy releases per participation)."""
        return 1, batch_size

    def init(self, params0: np.ndarray) -> ServerState:
        return initial_state(params0, self.average_last)

    def broadcast(self, state: ServerState) -> np.ndarray:
        return state.params

    def silo_step(self, params: np.ndarray, silos: SiloArrays, draws: SiloDraws) -> np.ndarray:
        num_replicas, num_silos = params.shape[0], silos.x.shape[0]
        idx = draws.with_replacement(silos.sizes, self.batch_size)            # (P, S, K)
        normals = draws.standard_normal((self.batch_size,) + params.shape[1:])  # (P, S, K, d, C)
        noise = self.noise.select(silos.silo_ids)
        local = np.broadcast_to(params[:, None], (num_replicas, num_silos) + params.shape[1:]).copy()
        silo_axis = np.arange(num_silos)[None, :]
        eta = self.step_size[:, None, None, None]
        for t in range(self.batch_size):
            x_t = silos.x[silo_axis, idx[:, :, t]]                  # (P, S, d)
            y_t = silos.y[silo_axis, idx[:, :, t]]                  # (P, S)
            z = np.einsum("psd,psdc->psc", x_t, local)
            norms = silos.x_norms[silo_axis, idx[:, :, t]]
            r = loss_residual(self.loss, z, y_t, norms)              # (P, S, C)
            r = r * clip_factors(norms, r, self.l2_clip)[..., None]
            grad = x_t[..., None] * r[:, :, None, :]                # (P, S, d, C)
            noisy, _ = noise.apply(grad, normals[:, :, t])
            local -= eta * noisy
        return local

    def server_step(self, state: ServerState, messages: np.ndarray, mask: np.ndarray) -> ServerState:
        mean, counts = masked_mean(messages, mask)
        return advance(state, np.where((counts > 0)[:, None, None], mean, state.params))
