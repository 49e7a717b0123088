"""Phased-ERM and Phased-SCO (seed-003 Alg. 3 and 4, spec §2.4-2.5): localization by a sequence
of SCOutputPert releases, each on a more strongly regularised problem centred at the previous
release.

Symbols: n users of m items, a convex item loss l, G-Lipschitz on R^d (a linear model's loss on
records scaled to ||x|| <= B: G = r B), lambda the base regularization, T phases. Phase i (from 1)
minimises L_i(theta) = mean over its users of their average loss + (lambda_i / 2) ||theta -
thetahat_{i-1}||^2, lambda_i = lambda 4^i, thetahat_0 = 0, whose minimiser lies within G / lambda_i
of the centre, where every item loss of L_i is 2G-Lipschitz: SCOutputPert's certificate mode at
(2G, lambda_i). A phase that releases nothing keeps thetahat_{i-1} (spec A7). The output is
thetahat_T projected onto K = B(0, ``radius``) (post-processing).

Variants (``variant``): ``erm`` every user in every phase, T = ceil(log2(n m)), each phase at
(eps / T, delta / T, beta / T); ``sco`` phase i on the users with 0-based index in [floor(n / 2^i),
floor(n / 2^{i-1})), T = floor(log2(n / N0)), each phase at (eps, delta, beta / T); ``sco_eq`` T
equal disjoint batches of floor(n / T) users, T the smallest with 4^T >= 2 c T sqrt(d m) (spec
A9's variant).

Trust model: central user-level DP (a trusted server; per-user gradients reach only the
program). Unit: a user. Relation: replace one user. Guarantee: each phase's release is (eps_i,
delta_i)-DP by Thm 3.3 given the previous releases (the solver starts from the public centre and
is deterministic), so ``erm`` is (eps, delta) by basic composition of T releases and ``sco`` /
``sco_eq`` by parallel composition over disjoint users; the ledger charges each user one release
per phase it is in (a phase skipped for floating point, ``settled``, is charged all the same).
As in SCOutputPert, a failed check releases nothing for that phase, and whether it did is
outside the guarantee (the plan's statement says so). With ``noise_scale`` s < 1
every sigma_i is scaled by s: a diagnostic of the localization analysis, not DP, planned as such.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from fedray.core.evaluation import Metric
from fedray.core.objective import DataObjective
from fedray.core.program import ProgramRun
from fedray.core.protocol import RoundKeys
from fedray.objectives import LinearModelObjective
from fedray.protocols.user_level.deletion import TruncatedDiscreteLaplace
from fedray.protocols.user_level.phased_output_pert_planning import PhasedOutputPertRecipe
from fedray.protocols.user_level.solver import LinearModelProgram, minimize_ridge
from fedray.rng import Stream, generator


def settled(centre: np.ndarray, regularization: float, tolerance: float) -> bool:
    """Whether float64 cannot resolve the phase: next to the centre the regularizer's gradient
    lambda_i (theta - centre) moves by lambda_i ulp per representable step, more than the residual
    the certificate allows, so no point may certify (late phases of a faithful run: lambda_i ~ 1e16).
    The phase is then skipped and the centre kept, as after a failed check; the test reads only
    public values (lambda_i, the tolerance, the previous release), so the skip is post-processing."""
    step = np.spacing(np.max(np.abs(centre)) if centre.size else 0.0)
    return regularization * step * np.sqrt(centre.size) > tolerance / 4


@dataclass(frozen=True)
class Phase:
    """One phase: its users (ids, sorted), its regularization lambda_i, and per replica the
    constants of its release (``CertifiedPerturbation`` at (2G, lambda_i, n_i)) or None."""

    users: np.ndarray
    regularization: float
    mechanisms: tuple


@dataclass(frozen=True)
class PhasedOutputPert(LinearModelProgram):
    objective: LinearModelObjective
    phases: tuple                     # (T,) Phase
    noise_scale: float                # 1 for DP; s < 1 a non-private diagnostic
    radius: float                     # K = B(0, radius): the output's projection
    num_units: int
    model_shape: tuple
    num_replicas: int
    constants: dict = field(default_factory=dict)
    recipe: ClassVar[PhasedOutputPertRecipe] = PhasedOutputPertRecipe()

    def run(self, oracle, keys: RoundKeys) -> ProgramRun:
        data = DataObjective(oracle, self.objective, self.num_units)
        centres = np.zeros((self.num_replicas,) + self.model_shape)
        failed = np.zeros(self.num_replicas)
        charge = np.zeros((self.num_replicas, self.num_units), dtype=np.int64)
        calls = 0
        skipped = np.zeros(self.num_replicas)
        for index, phase in enumerate(self.phases):
            weights = np.zeros(self.num_units)
            weights[phase.users] = 1.0
            solved: dict = {}          # replicas at the same centre share one solve
            for replica in range(self.num_replicas):
                mechanism = phase.mechanisms[replica]
                # mu eta, and for the diagnostic s mu eta: the slack the certificate leaves the solver is
                # part of the noise budget, so the localization check scales it with the noise
                tolerance = phase.regularization * (mechanism.tolerance * self.noise_scale if mechanism is not None
                                                    else 1e-9)
                charge[replica, phase.users] += 1
                if settled(centres[replica], phase.regularization, tolerance):
                    skipped[replica] += 1
                    continue
                key = centres[replica].tobytes()
                if key not in solved:
                    solution = minimize_ridge(data, self.model_shape, phase.regularization,
                                              self.objective.smoothness, tolerance, weights, centre=centres[replica])
                    per_user = data.unit_gradients(solution.params)[phase.users, 0].reshape(phase.users.size, -1)
                    spread = float(np.linalg.norm(per_user - per_user.mean(axis=0), axis=1).max())
                    solved[key] = (solution, spread)
                    calls += solution.calls
                solution, spread = solved[key]
                if mechanism is None:
                    centres[replica] = solution.params[0]
                    continue
                phase_key = (*keys.streams[replica], keys.round, index)
                TruncatedDiscreteLaplace(mechanism.epsilon2, mechanism.delta2).sample(
                    generator(keys.seed, Stream.SERVER, *phase_key))       # R1: drawn, unused when certified
                if mechanism.certifies(spread, solution.gradient_norm):
                    noise = generator(keys.seed, Stream.OUTPUT_NOISE, *phase_key).standard_normal(self.model_shape)
                    centres[replica] = solution.params[0] + self.noise_scale * mechanism.noise_std * noise
                else:
                    failed[replica] += 1            # no release: the previous centre stays (spec A7)
        norms = np.linalg.norm(centres.reshape(self.num_replicas, -1), axis=1)
        released = centres * np.minimum(1.0, self.radius / np.maximum(norms, 1e-300)).reshape((-1,) + (1,) * len(self.model_shape))
        metrics = {"phases_without_release": Metric(failed, released=True),
                   "phases_settled": Metric(skipped, released=True),
                   "solver_calls": Metric(np.full(self.num_replicas, float(calls)), released=False)}
        return ProgramRun({"released": released}, charge, metrics)
