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
from typing import Any, ClassVar

import numpy as np

from fedray.core.protocol import RoundKeys
from fedray.core.terms import Calibration
from fedray.data.federation import SiloArrays
from fedray.protocols.isrl_dp.base import PlainIterate, ServerState, advance, masked_mean
from fedray.protocols.isrl_dp.planning import LocalSettings, SiloGaussian
from fedray.losses import clip_factors, loss_residual, replica_clips
from fedray.protocols.isrl_dp import calibration
from fedray.rng import SiloDraws

# Records of about this many values (steps x repetitions x silos x d) are gathered at a time.
_CHUNK_VALUES = 1 << 20


@dataclass(frozen=True)
class LocalSGD(PlainIterate):
    """K local steps per participating silo, then model averaging."""

    loss: Any
    step_size: np.ndarray
    batch_size: int  # K local steps, one record each (the paper matches MB-SGD's K)
    l2_clip: float | np.ndarray      # or one per replica (a clip grid)
    noise: Any
    average_last: int = 8

    # ISRL-DP (noise in every local step) or no privacy; a participation is K one-record releases.
    recipe: ClassVar[SiloGaussian] = SiloGaussian({Calibration.PAPER: calibration.paper_local_sgd_noise_multiplier},
                                                  local_steps=True, settings=LocalSettings)

    def silo_step(self, params: np.ndarray, silos: SiloArrays, draws: SiloDraws) -> np.ndarray:
        """The K noisy local steps of every (replica, silo) pair; returns the local models (P, S, d, C).

        Each step is elementwise per pair, plus one einsum over d per pair, so a pair's result is
        bit for bit the same whatever other silos or replicas share the call.
        """
        num_silos, width, dim = silos.x.shape
        steps, shape = self.batch_size, (params.shape[0], num_silos) + params.shape[1:]
        # Records and normals are drawn once per distinct stream key (replicas with common random
        # numbers share them, and each step copies its (U, S, ...) slice out to the P replicas).
        # Records are gathered in chunks of steps.
        idx = draws.with_replacement(silos.sizes, steps, by_repetition=True)          # (U, S, K)
        rows = np.moveaxis(idx + (np.arange(num_silos) * width)[:, None], 2, 0)       # (K, U, S)
        rep = draws.replica_to_rep
        y_steps, norm_steps = np.take(silos.y, rows)[:, rep], np.take(silos.x_norms, rows)[:, rep]   # (K, P, S)
        noise = self.noise.select(silos.silo_ids)
        normals = draws.standard_normal((steps,) + params.shape[1:], by_repetition=True) \
            if noise.draws_normals else None                                        # (U, S, K, d, C)
        eta = self.step_size[:, None, None, None]
        clip = replica_clips(self.l2_clip, slice(None), 2)                         # a number, or (P, 1)
        local = np.broadcast_to(params[:, None], shape).copy()
        normal_t: np.ndarray | None
        x_t, normal_t, grad = np.empty(shape[:3]), np.empty(shape), np.empty(shape)
        # Replicas with streams of their own (the default) draw for themselves: no copy per step.
        own = np.array_equal(rep, np.arange(rep.size))
        chunk = max(1, _CHUNK_VALUES // max(1, rows[0].size * dim))
        for first in range(0, steps, chunk):
            x_steps = np.take(silos.x.reshape(num_silos * width, dim), rows[first:first + chunk], axis=0)
            for t in range(first, min(first + chunk, steps)):
                # mode="clip" (the indices are valid) lets take write into ``out`` without a buffer.
                if own:
                    x_t = x_steps[t - first]
                else:
                    np.take(x_steps[t - first], rep, axis=0, out=x_t, mode="clip")   # (P, S, d)
                z = np.einsum("psd,psdc->psc", x_t, local)
                r = loss_residual(self.loss, z, y_steps[t], norm_steps[t])           # (P, S, C)
                r = r * clip_factors(norm_steps[t], r, clip)[..., None]
                np.multiply(x_t[..., None], r[:, :, None, :], out=grad)              # (P, S, d, C)
                if normals is None:
                    normal_t = None
                elif own:
                    normal_t = normals[:, :, t]
                else:
                    np.take(normals[:, :, t], rep, axis=0, out=normal_t, mode="clip")
                noisy, _ = noise.apply(grad, normal_t)     # its metrics: logged by the server (minibatch_sgd)
                local -= np.multiply(eta, noisy, out=noisy)
        return local

    def server_step(self, state: ServerState, messages: np.ndarray, mask: np.ndarray, keys: RoundKeys) -> ServerState:
        mean, counts = masked_mean(messages, mask)
        return advance(state, np.where((counts > 0)[:, None, None], mean, state.params))
