"""Accelerated noisy minibatch SGD: ISRL-DP AC-SA (seed-004 Alg. 1, §3.2) and its one-pass form (§3.3).

Symbols: N silos, M participating per round, K records per minibatch, R rounds, L = 2 * l2_clip,
mu = ``strong_convexity``, lambda = ``regularization``, nu = 1 / ``step_size`` (the prox scale),
alpha_r the averaging weight and eta_r the PROX WEIGHT of round r (an inverse step size; §6 item 1).

Trust model: ISRL-DP with ``GaussianNoise`` (no trusted server; silos do not trust each other;
every message leaving a silo is already private). Non-private with ``NoNoise``.
Unit and neighbouring relation: record level; replace one record of one silo (REPLACE_ONE).
Guarantee: each silo's transcript is (eps, delta)-DP, where (eps, delta) is what the silo's ledger
reports. The iterates w^md, w, w^ag are post-processing of the transcript.
Silo half (lines 5-8): Alg. 2's silo half at the query point w^md_r (``noisy_minibatch_mean``):
K records WITHOUT replacement, per-example gradients clipped to ``l2_clip``, mean, Gaussian noise
inside the silo. The one-pass variant takes the K records from disjoint blocks of a per-silo
permutation fixed for the run (``SiloDraws.epoch_slice``), so each record is used at most once.
Server half (lines 9-10): average the M messages, add the regularizer's gradient
lambda (w^md_r - w_0) (data independent, so the sensitivity is unchanged), take the prox step
    w_r = Pi_W([alpha_r mu' w^md_r + ((1 - alpha_r) mu' + eta_r) w_{r-1} - alpha_r g_r] / (mu' + eta_r)),
mu' = mu + lambda (the regularized loss is mu'-strongly convex), then w^ag_r = alpha_r w_r +
(1 - alpha_r) w^ag_{r-1}, the output. A replica with no participant keeps its iterates.
Schedule (Ghadimi-Lan 2012 [GL]): alpha_r = 2 / (r + 1), eta_r = 4 nu / (r (r + 1)), r = 1..R.
``step_size`` carries 1/nu per replica: with mu' = 0 the prox centre moves by alpha_r / eta_r =
r * step_size / 2 along the gradient, and GL's condition nu >= 2 beta reads step_size <= 1/(2 beta).
Calibration: ERM (Thm F.1/F.2) uses Alg. 2's formulas (the same ``recipe``). One-pass
(Thm 3.1/E.1): G2 per release, sigma^2 = 32 L^2 ln(1.25/delta)/(eps^2 K^2), and parallel
composition over the disjoint batches (``recipe.one_pass``: the ledger charges one release).
Randomness: NOISE stream keyed by (repetition, round, silo); MINIBATCH keyed by (repetition,
round, silo), or for one-pass by (repetition, EPOCH_ROUND, silo) (see ``fedray.rng``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np

from fedray.data.federation import SiloArrays
from fedray.geometry import project_l2_ball
from fedray.protocols.isrl_dp.base import ServerState, advance, initial_state, masked_mean, outputs
from fedray.protocols.isrl_dp.planning import SiloGaussian
from fedray.protocols.isrl_dp.minibatch_sgd import MinibatchSGD, noisy_minibatch_mean
from fedray.protocols.isrl_dp import calibration
from fedray.rng import SiloDraws


class AcceleratedState(NamedTuple):
    """AC-SA iterates per replica; ``params`` is w^ag, the output the driver evaluates."""

    round: int                # rounds completed
    params: np.ndarray        # (P, d, C) w^ag
    prox_center: np.ndarray   # (P, d, C) w, the prox centre of line 9
    anchor: np.ndarray        # (P, d, C) w_0, the centre of the regularizer
    tail: np.ndarray          # (W, P, d, C) last iterates w^ag, for tail_average
    tail_filled: int
    stage: int = 1            # multi-stage: the current stage k (always 1 for a single stage)
    stage_round: int = 0      # rounds completed in the stage; the schedule's r is stage_round + 1


def averaging_weight(r: int) -> float:
    """alpha_r = 2 / (r + 1); alpha_1 = 1."""
    return 2.0 / (r + 1.0)


def prox_weight(r: int, prox_scale: np.ndarray) -> np.ndarray:
    """eta_r = 4 nu / (r (r + 1)) per replica (a prox weight, not a step size)."""
    return 4.0 * np.asarray(prox_scale, dtype=np.float64) / (r * (r + 1.0))


def query_point(w_ag: np.ndarray, w: np.ndarray, alpha: float, eta: np.ndarray, mu: float) -> np.ndarray:
    """w^md_r of Alg. 1 line 4; ``eta`` (P,). With alpha = 1 it is w (so w^md_1 = w_0)."""
    eta = np.asarray(eta, dtype=np.float64)[:, None, None]
    denom = eta + (1.0 - alpha**2) * mu
    return ((1.0 - alpha) * (mu + eta) / denom) * w_ag + (alpha * ((1.0 - alpha) * mu + eta) / denom) * w


def prox_step(
    w_md: np.ndarray, w: np.ndarray, grad: np.ndarray, alpha: float, eta: np.ndarray, mu: float,
    radius: float | None,
) -> np.ndarray:
    """argmin_{w' in W} alpha [<g, w'> + mu/2 ||w^md - w'||^2] + ((1 - alpha) mu + eta)/2 ||w - w'||^2.

    The objective is an isotropic quadratic, so the constrained minimiser is the projection of the
    unconstrained one (Alg. 1 line 9, closed form).
    """
    eta = np.asarray(eta, dtype=np.float64)[:, None, None]
    centre_weight = (1.0 - alpha) * mu + eta
    return project_l2_ball((alpha * mu * w_md + centre_weight * w - alpha * grad) / (mu + eta), radius)


def lan_prox_scale(smoothness: float, oracle_std: float, diameter: float, num_rounds: int) -> float:
    """nu = max{2 beta, [2 V^2 R (R+1) (R+2) / (3 D^2)]^(1/2)} (Lan 2012, mu = 0; seed-004 §3.3)."""
    r = num_rounds
    return max(2.0 * smoothness, math.sqrt(2.0 * oracle_std**2 * r * (r + 1) * (r + 2) / (3.0 * diameter**2)))


def regularized_prox_scale(
    smoothness: float, regularization: float, oracle_std: float, initial_gap: float, num_rounds: int
) -> float:
    """nu = max{2 (beta + lambda), [lambda V^2 R (R+1) (R+2) / (3 Delta)]^(1/2)} (seed-004 §3.3)."""
    r = num_rounds
    return max(
        2.0 * (smoothness + regularization),
        math.sqrt(regularization * oracle_std**2 * r * (r + 1) * (r + 2) / (3.0 * initial_gap)),
    )


@dataclass(frozen=True)
class AcceleratedMinibatchSGD:
    """Alg. 1 (AC-SA) with per-replica prox scales 1/``step_size`` (P,) and per-(replica, silo) noise."""

    loss: object
    step_size: np.ndarray         # (P,) 1/nu; see the module docstring
    batch_size: int
    l2_clip: float
    noise: object                 # GaussianNoise(noise_std (P, N)) or NoNoise()
    strong_convexity: float = 0.0  # mu >= 0 of the loss
    regularization: float = 0.0    # lambda >= 0: the run minimises f + lambda/2 ||w - w_0||^2
    radius: float | None = None    # W = l2 ball of this radius; None = R^d
    average_last: int = 1          # the output is w^ag; the tail average is reported as well

    # ISRL-DP or no privacy; ERM noise as Alg. 2 (Thm F.1). A one-pass recipe (disjoint batches,
    # parallel composition) makes the silo half take block r of a per-silo permutation.
    recipe: ClassVar[SiloGaussian] = MinibatchSGD.recipe

    @staticmethod
    def check_fields(fields: dict) -> None:
        """Nothing beyond the planner's checks."""

    def init(self, params0: np.ndarray) -> AcceleratedState:
        self.check_fields({f.name: getattr(self, f.name) for f in dataclasses.fields(self)})
        w0 = project_l2_ball(np.asarray(params0, dtype=np.float64), self.radius)
        empty = initial_state(w0, self.average_last)
        return AcceleratedState(0, w0.copy(), w0.copy(), w0.copy(), empty.tail, 0)

    def output(self, state: AcceleratedState) -> dict[str, np.ndarray]:
        return outputs(state)

    def prox_scale(self, state: AcceleratedState) -> np.ndarray:
        """nu per replica (P,)."""
        return 1.0 / np.asarray(self.step_size, dtype=np.float64)

    def schedule(self, state: AcceleratedState) -> tuple[float, np.ndarray]:
        """(alpha_r, eta_r (P,)) of the round ``state`` is about to run."""
        r = state.stage_round + 1
        return averaging_weight(r), prox_weight(r, self.prox_scale(state))

    def broadcast(self, state: AcceleratedState) -> np.ndarray:
        alpha, eta = self.schedule(state)
        return query_point(state.params, state.prox_center, alpha, eta, self._mu)

    def silo_step(self, query: np.ndarray, silos: SiloArrays, draws: SiloDraws) -> np.ndarray:
        if self.recipe.one_pass:
            idx = draws.epoch_slice(silos.sizes, self.batch_size)
            return noisy_minibatch_mean(self.loss, query, silos, idx, self.l2_clip, self.noise, draws)
        # One minibatch per repetition, shared by its replicas (the same draws as per replica).
        idx = draws.without_replacement(silos.sizes, self.batch_size, by_repetition=True)
        return noisy_minibatch_mean(self.loss, query, silos, idx, self.l2_clip, self.noise, draws,
                                    batch_of=draws.replica_to_rep)

    def server_step(self, state: AcceleratedState, messages: np.ndarray, mask: np.ndarray) -> AcceleratedState:
        alpha, eta = self.schedule(state)
        w_md = query_point(state.params, state.prox_center, alpha, eta, self._mu)
        mean, counts = masked_mean(messages, mask)
        grad = mean + self.regularization * (w_md - state.anchor)
        w = prox_step(w_md, state.prox_center, grad, alpha, eta, self._mu, self.radius)
        w_ag = alpha * w + (1.0 - alpha) * state.params
        took_part = (counts > 0)[:, None, None]
        return self._next(state, np.where(took_part, w, state.prox_center), np.where(took_part, w_ag, state.params))

    @property
    def _mu(self) -> float:
        return float(self.strong_convexity) + float(self.regularization)

    def _next(self, state: AcceleratedState, w: np.ndarray, w_ag: np.ndarray) -> AcceleratedState:
        """The state after a round; the multi-stage wrapper overrides it to restart stages."""
        ring = advance(ServerState(state.round, state.params, state.tail, state.tail_filled), w_ag)
        return state._replace(
            round=ring.round, params=w_ag, prox_center=w, tail=ring.tail, tail_filled=ring.tail_filled,
            stage_round=state.stage_round + 1,
        )


@dataclass(frozen=True)
class OnePassAcceleratedSGD(AcceleratedMinibatchSGD):
    """One-pass Alg. 1 for heterogeneous SCO (seed-004 §3.3): disjoint batches, R <= floor(n / K).

    Each record enters at most one noisy release, so the planner's ledger uses parallel
    composition (``recipe.one_pass``) and the noise is calibrated to the full budget per round.
    Running more than floor(n / K) rounds raises ``ValueError`` in the silo half
    (``SiloDraws.epoch_slice``); the private calibration already refuses such a plan.
    """

    # G2 + parallel composition; "paper" and "theory" coincide (Thm 3.1 / E.1).
    recipe: ClassVar[SiloGaussian] = SiloGaussian({
        "paper": calibration.one_pass_noise_multiplier,
        "theory": calibration.one_pass_noise_multiplier,
    }, one_pass=True)
