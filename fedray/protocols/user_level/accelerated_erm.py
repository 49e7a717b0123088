"""Seed 002's Alg. 3: user-level DP accelerated phased ERM with outlier-gradient removal (each phase
is Alg. 2, accelerated minibatch SGD on a regularised ERM), at a trusted server.

Trust model: central user-level DP (the server sees each sampled user's averaged gradient).
Unit: a user (m items); relation: replace one user's items.

Phase i = 1..l reads n_i fresh users (``fedray.core.sampling.PhasedSubsets``) and runs T_i steps
of AC-SA (``fedray.acsa``, GL13's restarts within the phase, ``phased_parameters.stage_lengths``)
on F_i(x) = (mean user loss) + lambda_i / 2 ||x - x_{i-1}||^2, started at x_{i-1}. Step t: K_i of
the phase's users, drawn without replacement, each send q(Z), their mean gradient at the query
point x_md (m gradient evaluations each); the server runs ``OutlierRemovalStep`` (AboveThreshold
on the concentration score at 2 tau against the phase's pass level, drawn once per phase; the
outlier filter; N(0, sigma_i^2 I)) and one AC-SA step with G = ghat + lambda_i (x_md - x_{i-1}).
x_i is the phase's x_ag; the output is x_l. A failed test halts the replica: its output is the
public point 0 (spec §5 item 7) and it releases nothing more.

Privacy (Thm 3.1 / C.1, spec §2.3): given x_{i-1}, a phase is (eps, delta)-DP for each of its
users: AboveThreshold over its T_i scores is eps/2-DP (sensitivity < 2); on the good event a pass
means the scores are concentrated, the filtered mean moves by O(tau log(1/zeta) / K_i) when one
user is replaced (Lemma C.2), and sigma_i with subsampling at K_i / n_i and advanced composition
over T_i steps makes the noisy gradients eps/2-DP. Phases read disjoint users, so the run is
(eps, delta)-DP by parallel composition: the ledger charges every user of a phase once, at the
phase's first round, per replica still running (``fedray.privacy.ledger.PhaseAccountant``). The
argument is the paper's (with hidden constants): the plan names the conditions that fail at the
run's size. Released: the noisy gradients, the test outcomes (the halting round), the iterates,
the output, and the gradient count (a function of the halting round). Diagnostic: how many users
the filter kept. Every server draw comes from the SERVER stream of the round's keys (the replica's row, the round).

Without privacy (``private=False``) a step averages the K_i gradients: no test, filter or noise.

Remark 3.6 (a mu-strongly convex risk, ``algorithm.strong_convexity``): k runs of Alg. 3, run j on
its own n / k fresh users from run j-1's output, with R replaced by a public distance bound D_j
(``phased_parameters.restarts``, FKT20 Sec. 5.1's reduction). A run's first phase starts and is
anchored at the previous phase's x_ag, as every phase is, so the runs are just more phases here,
each with its own lambda_i, T_i, K_i, sigma_i and tau (n_j in its log). Every user belongs to one
phase of one run, so parallel composition covers the runs as it covers the phases.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np

from fedray.acsa import AcceleratedState
from fedray.core.evaluation import Metric
from fedray.core.planning import ProtocolRecipe
from fedray.core.protocol import RoundKeys
from fedray.core.sampling import phase_of
from fedray.data.federation import SiloArrays
from fedray.losses import clipped_weighted_gradients, loss_residual
from fedray.privacy.mechanisms import PhaseGaussianNoise
from fedray.protocols.user_level.outlier_removal import OutlierRemovalStep
from fedray.protocols.user_level.phased_planning import AcceleratedErm, FullBatchFiltered
from fedray.rng import Stream


def user_mean_gradients(loss, query: np.ndarray, users: SiloArrays, participation: np.ndarray,
                        shifts: np.ndarray | None = None) -> np.ndarray:
    """(P, U, d, C) q(Z): each user's mean per-item gradient at its replica's query point (m
    gradient evaluations per user), unclipped, for the (replica, user) pairs of ``participation``
    (P, U) only (zero elsewhere): replicas sample different users, so computing every pair would
    cost up to P times the work. ``shifts`` (P, U, n) moves each record's margin: the gradient
    at the query point plus a perturbation y with <y, x> = shift (randomized smoothing)."""
    weights = (np.arange(users.x.shape[1])[None, :] < users.sizes[:, None]) / users.sizes[:, None]
    out = np.zeros(participation.shape + query.shape[1:])
    for r in np.flatnonzero(participation.any(axis=1)):
        taken = np.flatnonzero(participation[r])
        if shifts is None:
            out[r, taken] = clipped_weighted_gradients(loss, query[r:r + 1], users.x[taken], users.y[taken],
                                                       weights[None, taken], np.inf, users.x_norms[taken])[0]
            continue
        x = users.x[taken]                                                      # (k, n, d)
        margins = np.matmul(x, query[r]) + shifts[r, taken][..., None]          # (k, n, C)
        residual = loss_residual(loss, margins, users.y[taken], users.x_norms[taken]) * weights[taken][..., None]
        out[r, taken] = np.matmul(x.transpose(0, 2, 1), residual)              # (k, d, C)
    return out


class PhasedErmState(NamedTuple):
    round: int
    solver: AcceleratedState     # the current phase's AC-SA iterates, (P, d, C)
    pass_level: np.ndarray       # (P,) Delta_i of the current phase
    halted: np.ndarray           # (P,) bool
    gradients: np.ndarray        # (P,) gradient evaluations so far
    kept: np.ndarray             # (P,) users the filter kept at the last step (diagnostic; NaN once halted)


@dataclass(frozen=True)
class AcceleratedPhasedERM:
    """The two halves of Alg. 3 (module docstring); per-phase tuples are (l,)."""

    loss: Any
    solvers: tuple               # AcSa per phase: lambda_i, 1 / (beta + lambda_i), its stages, X
    steps: tuple                 # T_i
    batch: tuple                 # K_i
    phase_starts: tuple          # the first round of each phase
    unit_phase: np.ndarray       # (N,) each user's phase (-1: none; ``PhasedSubsets.members``)
    items: int                   # m
    thresholds: tuple            # tau per phase (Remark 3.6's runs each have their own n)
    noise: PhaseGaussianNoise    # sigma_i (P, l), the step the ledger prices (zeros without privacy)
    epsilon: float               # the run's eps (each phase's); unused without privacy
    private: bool
    smoothing_radius: float = 0.0    # r > 0: gradients at x + y, y uniform in B(0, r) per record and step (App. D)

    recipe: ClassVar[ProtocolRecipe] = AcceleratedErm()

    @property
    def num_rounds(self) -> int:
        return int(sum(self.steps))

    def _phase(self, round_index: int) -> int:
        return min(phase_of(self.steps, round_index), len(self.steps) - 1)

    def init(self, params0: np.ndarray, keys: RoundKeys) -> PhasedErmState:
        p = params0.shape[0]
        return PhasedErmState(0, self.solvers[0].init(params0), np.zeros(p), np.zeros(p, dtype=bool),
                              np.zeros(p, dtype=np.int64), np.zeros(p, dtype=np.int64))

    def broadcast(self, state: PhasedErmState) -> np.ndarray:
        return self.solvers[self._phase(state.round)].broadcast(state.solver)

    def silo_step(self, query: np.ndarray, users: SiloArrays, draws, participation: np.ndarray) -> np.ndarray:
        """(P, U, d, C): each sampled user's mean gradient over its m items at its replica's query
        point (no clip: the filter, not a clip, bounds a user's influence)."""
        shifts = None
        if self.smoothing_radius > 0:
            projections = draws.ball_projections(users.x.shape[1], query.shape[1])          # (P, U, n)
            shifts = self.smoothing_radius * users.x_norms[None] * projections
        return user_mean_gradients(self.loss, query, users, participation, shifts)

    def charge(self, state: PhasedErmState, participation: np.ndarray) -> np.ndarray:
        """(P, N): at a phase's first round, each of its users once per replica still running."""
        charge = np.zeros(participation.shape, dtype=np.int64)
        phase = self._phase(state.round)
        if state.round == self.phase_starts[phase]:
            charge[np.ix_(~state.halted, self.unit_phase == phase)] = 1
        return charge

    def server_step(self, state: PhasedErmState, values: np.ndarray, mask: np.ndarray,
                    keys: RoundKeys) -> PhasedErmState:
        """Replicas still running received their K_i users' gradients (a halted one takes no part);
        the test, filter and noise draw from the SERVER stream of the round's ``keys``."""
        t, p = state.round, values.shape[0]
        phase = self._phase(t)
        k = self.batch[phase]
        running = np.flatnonzero(~state.halted)
        vectors = values[mask].reshape(running.size, k, -1)     # each running replica's K_i users, in id order
        pass_level, halted = state.pass_level.copy(), state.halted.copy()
        gradient, kept = np.zeros((p, vectors.shape[2])), np.full(p, np.nan)
        if self.private and running.size:
            step = OutlierRemovalStep(self.epsilon, self.thresholds[phase], self.noise.at(phase, running))
            generators = [keys.generator(Stream.SERVER, int(r)) for r in running]
            if t == self.phase_starts[phase]:
                pass_level[running] = step.pass_level(k, generators)
            result = step(vectors, pass_level[running], generators)
            halted[running], kept[running] = result.halted, result.kept
            gradient[running] = np.where(result.halted[:, None], 0.0, result.gradient)
        elif running.size:
            gradient[running], kept[running] = vectors.mean(axis=1), k
        solver = self.solvers[phase]
        advanced = solver.step(state.solver, gradient.reshape(state.solver.params.shape), (~halted).astype(np.int64))
        if t + 1 == self.phase_starts[phase] + self.steps[phase] and phase + 1 < len(self.steps):
            advanced = self.solvers[phase + 1].init(advanced.params)       # x_i: the next phase's start and anchor
        gradients = state.gradients.copy()
        gradients[running] += k * self.items
        return PhasedErmState(t + 1, advanced, pass_level, halted, gradients, kept)

    def metrics(self, state: PhasedErmState) -> dict:
        phase = self._phase(max(state.round - 1, 0))
        metrics = {"halted": Metric(state.halted.astype(np.float64), True),
                   "gradient_evaluations": Metric(state.gradients.astype(np.float64), True),
                   "kept_fraction": Metric(state.kept / self.batch[phase], False)}
        if self.private:        # the std the round's release got (0 where a replica halted: no release)
            std = np.where(state.halted, 0.0, np.asarray(self.noise.noise_std, dtype=np.float64)[:, phase])
            metrics |= {"noise_std_added_min": Metric(std, True), "noise_std_added_max": Metric(std.copy(), True)}
        return metrics

    def done(self, state: PhasedErmState) -> np.ndarray:
        return state.halted | (state.round >= self.num_rounds)

    def output(self, state: PhasedErmState) -> dict[str, np.ndarray]:
        """x_l (the current phase's x_ag while running), the public 0 where a replica halted."""
        return {"last": np.where(state.halted[:, None, None], 0.0, state.solver.params)}


@dataclass(frozen=True)
class FilteredGradientDescent(AcceleratedPhasedERM):
    """Baseline B2 (``phased_planning.FullBatchFiltered``): one phase of every user for T steps of
    projected gradient descent, each step through the same test, filter and noise."""

    recipe: ClassVar[FullBatchFiltered] = FullBatchFiltered()
