"""P_SGD (seed-000 Alg. 3, Thm 4.1): projected SGD over disjoint batches of users, each batch's
gradients summed by the vector-sum protocol P_vec behind a shuffler.

Symbols: n users with one record each, B = ``batch_size`` users per step, T <= floor(n / B)
steps (``num_rounds``), L = ``l2_clip`` (Delta2 of P_vec: each user's gradient is clipped to the
L-ball before the randomizer, the spec's defensive rule, a no-op for L-Lipschitz losses),
Theta = the l2 ball of radius D = ``radius`` (R^d when None), eta = ``step_size`` per replica.

Trust model: shuffle DP. The analyzer (server) is untrusted; each user trusts only itself and a
shuffler trusted to permute and drop sender identity. Nothing but P_vec's randomized 1-bit counts
leaves a user, and the server sees only their per-coordinate sum (the shuffler's output).
Unit and neighbouring relation: user level = record level (one record per user); replace one
user's record (REPLACE_ONE).
Guarantee: each step is one P_vec invocation over its B users, (eps, delta)-DP (seed-000 Thm 3.2,
0 < eps <= 15, 0 < delta < 1/2); every user is in exactly one batch, so by parallel composition
the whole run is (eps, delta)-SDP. The iterates are post-processing of the released sums.
Step t: the users of batch t compute grad l(theta_{t-1}, x) at the broadcast iterate, clip it to L
and run P_vec's randomizer (``fedray.privacy.vector_sum.SplitVectorSum``); the server debiases
the summed counts (A_vec with n = B), divides by B and steps: theta_t = Pi_Theta(theta_{t-1} -
eta g_t) (the paper prints "+"; it is descent, spec §3.1). Output: theta_bar = (1/T) sum_{t<T}
theta_t (theta_T excluded), and the last iterate.
Calibration: P_vec's (g, b, p) from (eps, delta, d, B, L) by seed-000 §2.2
(``vector_sum_parameters``). B, T and eta come from the config (``algorithm.parameters=manual``)
or from the paper's formulas (``paper``, or ``exact`` with P_vec's real error; see
``fedray.protocols.shuffle_sco.hyperparameters``).
Runs as ``fedray.core.protocol.SequentialSteps``: a block of steps per Ray call where the users live.
Randomness: P_vec's draws from the NOISE stream at (repetition, step, user block) (``SiloDraws``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np

from fedray.core.protocol import RoundKeys
from fedray.data.federation import SiloArrays
from fedray.geometry import project_l2_ball
from fedray.losses import clip_factors, loss_residual
from fedray.protocols.shuffle_sco.planning import PvecSteps
from fedray.rng import SiloDraws


class PSGDState(NamedTuple):
    round: int                 # steps completed, t
    params: np.ndarray         # (P, d, C) theta_t
    iterate_sum: np.ndarray    # (P, d, C) sum_{s<t} theta_s, for theta_bar


@dataclass(frozen=True)
class PvecHalves:
    """What P_SGD and P_GD share: the users' half, the iterate and its average, and the projected
    step on a step's sum (their server halves differ in what they receive: ``PSGD``, ``PGD``)."""

    loss: Any
    step_size: np.ndarray          # (P,) eta
    batch_size: int                # B
    l2_clip: float                 # L = Delta2
    vector_sum: Any             # SplitVectorSum (sdp), Local/CentralGaussianSum (baselines), ExactSum (none)
    radius: float | None = None

    def init(self, params0: np.ndarray, keys: RoundKeys) -> PSGDState:
        theta0 = project_l2_ball(np.asarray(params0, dtype=np.float64), self.radius)
        return PSGDState(0, theta0, np.zeros_like(theta0))

    def broadcast(self, state: PSGDState) -> np.ndarray:
        return state.params

    def silo_step(self, params: np.ndarray, users: SiloArrays, draws: SiloDraws) -> np.ndarray:
        return user_messages(self, params, users, draws)

    def sum_step(self, state: PSGDState, summed: np.ndarray, keys: RoundKeys) -> PSGDState:
        """The batch's gradient estimate (a central release draws from the step's ``keys``), then the projected step."""
        gradient = batch_gradient(self, summed, keys)
        theta = project_l2_ball(state.params - self.step_size[:, None, None] * gradient, self.radius)
        return PSGDState(state.round + 1, theta, state.iterate_sum + state.params)

    def output(self, state: PSGDState) -> dict[str, np.ndarray]:
        average = state.iterate_sum / max(state.round, 1) if state.round else state.params
        return {"last": state.params, "avg": average}


@dataclass(frozen=True)
class PSGD(PvecHalves):
    """The two halves of P_SGD with a vector-sum step ``vector_sum`` (P_vec, or the exact sum)."""

    recipe: ClassVar[PvecSteps] = PvecSteps()

    def server_step(self, state: PSGDState, summed: np.ndarray, keys: RoundKeys) -> PSGDState:
        """The batch's gradient estimate, then the projected step."""
        return self.sum_step(state, summed, keys)


def user_messages(alg, params: np.ndarray, users: SiloArrays, draws: SiloDraws) -> np.ndarray:
    """(P, S, d, C) each user's randomized message at ``params``: P_vec counts of its gradient
    clipped to ``alg.l2_clip`` (the users' half of every sequential P_vec protocol)."""
    x, y, norms = users.x[:, 0], users.y[:, 0], users.x_norms[:, 0]          # one record per user
    residual = loss_residual(alg.loss, np.matmul(x, params), y, norms)        # (P, S, C)
    coef = residual * clip_factors(norms, residual, alg.l2_clip)[..., None]
    grads = x[None, :, :, None] * coef[:, :, None, :]                          # (P, S, d, C)
    p, s, d, c = grads.shape
    return alg.vector_sum.randomize(grads.reshape(p, s, 1, d * c), draws).reshape(p, s, d, c)


def batch_gradient(alg, summed: np.ndarray, keys: RoundKeys) -> np.ndarray:
    """The server's estimate of a step's sum from the summed messages (P, d, C) (A_vec, or a
    central release drawn from the step's ``keys``), divided by B: the batch's mean gradient estimate."""
    estimate = alg.vector_sum.estimate(summed.reshape(summed.shape[0], -1), alg.batch_size, keys)
    return estimate.reshape(summed.shape) / alg.batch_size
