"""P_AGD (seed-000 Alg. 4, Thm 4.3): Lan's accelerated SA over disjoint batches of users, each
batch's gradients summed by P_vec behind a shuffler.

Symbols: n users with one record each, B = ``batch_size`` users per step, T <= floor(n / B) steps
(``num_rounds``), L = ``l2_clip`` (P_vec's Delta2), beta = ``smoothness`` of the loss, Theta =
the l2 ball of radius D/2 = ``radius`` (R^d when None), sigma the gradient estimate's std.

Trust model, unit, neighbouring relation and guarantee: as P_SGD (``fedray.protocols.shuffle_sco.p_sgd``):
shuffle DP, a user = its one record, replace one user's record; each step one P_vec invocation
over its B users, every user in one batch, so the run is (eps, delta)-SDP by parallel composition.
Step t = 1..T (spec §3.2, T2/T3): alpha_t = 2 / (t + 2), L_t = ((T + 2)^(3/2) sigma / D + beta) / (t + 1),
    theta^md_t  = alpha_t theta_t + (1 - alpha_t) theta^ag_t                 broadcast to batch t
    g_t         = (1/B) A_vec(sum of batch t's P_vec messages at theta^md_t)
    theta_{t+1} = Pi_Theta(theta_t - g_t / L_t)
    theta^ag_{t+1} = alpha_t theta_{t+1} + (1 - alpha_t) theta^ag_t          the output
which is the AC-SA server ``fedray.acsa.AcSa`` with mu = 0, step size 2 / (L_t (t + 1)) and its
schedule started at r = 2 (``first_round``). ``step_size`` carries 2 / ((T + 2)^(3/2) sigma / D +
beta) per replica: set it (``parameters=manual``) or let ``paper`` / ``exact`` compute B, T and
it (``fedray.protocols.shuffle_sco.hyperparameters``).
Strongly convex losses (Thm 4.8, ``strong_convexity`` = lambda with ``parameters=paper|exact``):
k = ceil(log2 log2 n) phases on disjoint groups of floor(n / k) users; phase j is P_AGD with its
own B_j, T_j, step size and P_vec (for B_j users), with D := R_{j-1} in its formulas (spec A6),
restarted from the previous phase's output; parallel composition still gives (eps, delta). 4.8b
takes a smooth loss and ``smoothness``; 4.8a a Moreau-envelope loss of null smoothing, each phase
smoothed P_AGD with its own envelope beta_j (``hyperparameters.agd_phase_schedule``).
Randomness: P_vec's draws from the NOISE stream at (replica key, step, user block).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedray.acsa import AcceleratedState, AcSa, Phases, SingleStage
from fedray.core.protocol import RoundKeys
from fedray.core.sampling import phase_of
from fedray.data.federation import SiloArrays
from fedray.protocols.shuffle_sco.hyperparameters import agd_schedule
from fedray.protocols.shuffle_sco.p_sgd import batch_gradient, user_messages
from fedray.protocols.shuffle_sco.planning import PvecSteps, SmoothPvecSettings
from fedray.rng import SiloDraws


@dataclass(frozen=True)
class PAGD:
    """The two halves of P_AGD with a vector-sum step ``vector_sum`` (P_vec, or the exact sum).

    With ``phases`` (strongly convex losses, Thm 4.8): phase j runs P_AGD on its own group of users
    (the sampler is the matching ``PhasedBatches``) with its own B_j, T_j, step size and P_vec
    calibrated for B_j users, from the previous phase's output (``fedray.acsa.Phases``).
    """

    loss: Any
    step_size: np.ndarray          # (P,) 2 / ((T + 2)^(3/2) sigma / D + beta)
    batch_size: int                # B
    l2_clip: float                 # L = Delta2
    vector_sum: Any             # SplitVectorSum (sdp), Local/CentralGaussianSum (baselines), ExactSum (none)
    radius: float | None = None
    smoothness: float | None = None          # beta, for the paper / exact step size
    strong_convexity: float | None = None    # lambda > 0: the phased method of Thm 4.8
    phases: dict | None = None               # batch_sizes, steps, step_sizes, vector_sums per phase

    recipe: ClassVar[PvecSteps] = PvecSteps(schedule=agd_schedule, needs_smoothness=True,
                                                  settings=SmoothPvecSettings)

    @property
    def server(self) -> AcSa:
        stages = SingleStage() if self.phases is None else \
            Phases(tuple(self.phases["step_sizes"]), tuple(self.phases["steps"]), first_round=2)
        return AcSa(self.step_size, radius=self.radius, stages=stages, first_round=2)

    def phase(self, index: int) -> "PAGD":
        """Phase ``index`` (0-based) as a plain P_AGD: its B, its P_vec and (4.8a) its envelope."""
        loss, phases = self.loss, self.phases
        if phases is None:
            raise ValueError("phase(): this P_AGD has no phases (algorithm.strong_convexity sets them)")
        if phases.get("envelope"):
            loss = dataclasses.replace(loss, smoothing=phases["smoothings"][index])
        return dataclasses.replace(self, loss=loss, batch_size=int(phases["batch_sizes"][index]),
                                   vector_sum=phases["vector_sums"][index], phases=None)

    def init(self, params0: np.ndarray, keys: RoundKeys) -> AcceleratedState:
        return self.server.init(params0)

    def broadcast(self, state: AcceleratedState) -> np.ndarray:
        return self.server.broadcast(state)

    def silo_step(self, query: np.ndarray, users: SiloArrays, draws: SiloDraws) -> np.ndarray:
        if self.phases is None:
            return user_messages(self, query, users, draws)
        # The step index (which keys the draws) says which phase's P_vec the users run.
        return user_messages(self.phase(phase_of(self.phases["steps"], draws.round_index)), query, users, draws)

    def server_step(self, state: AcceleratedState, summed: np.ndarray, keys: RoundKeys) -> AcceleratedState:
        current = self if self.phases is None else self.phase(state.stage - 1)
        return self.server.step(state, batch_gradient(current, summed, keys), np.ones(summed.shape[0]))

    def output(self, state: AcceleratedState) -> dict[str, np.ndarray]:
        return {"last": state.params}
