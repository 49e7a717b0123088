"""P_GD (seed-000 Alg. 5, Lemma B.6, Thm 4.9): fully interactive projected gradient descent, all n
users every round, their gradients summed by P_vec behind a shuffler.

Symbols: n users with one record each, T rounds (``num_rounds``), L = ``l2_clip`` (P_vec's
Delta2), Theta = the l2 ball of ``radius`` (R^d when None), eta = ``step_size`` per replica,
(eps_0, delta_0) P_vec's budget per round.

Trust model: shuffle DP, as P_SGD (``fedray.protocols.shuffle_sco.p_sgd``): nothing but P_vec's
1-bit counts leaves a user and the server sees their per-coordinate sum. Unit and neighbouring
relation: a user = its one record, replace one user's record. Guarantee: each round is one P_vec
invocation over all n users at (eps_0, delta_0); a user takes part in all T rounds, so the run is
(eps, delta)-SDP by advanced composition with slack delta' = delta / (T + 1) (spec §3.5; eps_0
from ``fedray.protocols.shuffle_sco.planning.per_round_budget``, shrunk when the paper's would
overspend).
Round t = 0..T-1 (T1, T9): g_t = (1/n) A_vec(sum of all users' messages at theta_t), theta_{t+1} =
Pi_Theta(theta_t - eta g_t) from theta_0 = Pi_Theta(0) (A4). Output: theta_bar = (1/T) sum_{t<T}
theta_t (and the last iterate). T and eta as set, or from the paper's formulas
(``algorithm.parameters=paper|exact``, ``hyperparameters.gd_schedule``).
Strongly convex losses (Thm 4.9 part 2, ``strong_convexity`` = lambda with ``parameters=paper|exact``):
the Feldman-Koren-Talwar reduction, k = ceil(log2 log2 n) phases of P_GD on disjoint groups of
n_j = floor(n / k) users (``PhasedGroups``), each phase T = T(n_j) rounds of its own group with
P_vec for n_j users, phase j's eta with D := R_{j-1}, started from the previous phase's average
iterate (``hyperparameters.gd_phase_schedule``); a user takes part in the T rounds of its phase
only, so advanced composition over T rounds gives (eps, delta) and the groups compose in parallel.
The output is the last phase's average.
Runs as ``fedray.core.protocol.SampledRounds`` with ``AllUnits`` (``PhasedGroups`` when phased):
one Ray call per actor per round.
Randomness: P_vec's draws from the NOISE stream at (replica key, round, user block).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fedray.core.protocol import RoundKeys, step_sum
from fedray.protocols.shuffle_sco.p_sgd import PSGDState, PvecHalves
from fedray.protocols.shuffle_sco.planning import PvecRounds


@dataclass(frozen=True)
class PGD(PvecHalves):
    """P_SGD's halves with every user in every step: ``batch_size`` is n, and the server step
    takes the round's messages as ``SampledRounds`` delivers them (the summing shuffler's sum)."""

    strong_convexity: float | None = None    # lambda > 0: the phases of Thm 4.9b
    phases: dict | None = None               # group_size, rounds, step_sizes, radii

    recipe: ClassVar[PvecRounds] = PvecRounds()

    def server_step(self, state: PSGDState, messages: np.ndarray, mask: np.ndarray, keys: RoundKeys) -> PSGDState:
        summed = step_sum(messages, mask)
        if self.phases is None:
            return self.sum_step(state, summed, keys)
        rounds = int(self.phases["rounds"])
        step = self.phases["step_sizes"][state.round // rounds]
        current = dataclasses.replace(self, step_size=np.full_like(self.step_size, step), phases=None)
        state = current.sum_step(state, summed, keys)
        if state.round % rounds:
            return state
        # The phase ends: the next starts from this phase's average iterate (theta_0 .. theta_{T-1}).
        return PSGDState(state.round, state.iterate_sum / rounds, np.zeros_like(state.iterate_sum))

    def output(self, state: PSGDState) -> dict[str, np.ndarray]:
        if self.phases is None:
            return super().output(state)
        return {"avg": state.params}                # the last phase's average
