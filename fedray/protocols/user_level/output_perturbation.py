"""User-level output perturbation: the regularised ERM minimiser plus Gaussian noise, solved at
the driver through the oracle (seed-003 spec §4, baselines B0 and B1; Chaudhuri, Monteleoni and
Sarwate 2011 at the user level).

Symbols: n users (units) with m_u records each, f_u = user u's average loss (a linear model,
records scaled to ||x|| <= B), F = (1/n) sum_u f_u, lambda = ``regularization``,
G = sup |dl/dz| B (every f_u is G-Lipschitz), tau = ``gradient_tolerance``.

Trust model: central user-level DP (a trusted server runs the solver; its oracle calls read the
users' records and stay inside the program). Unit: a user, all of its records. Neighbouring
relation: replace one user's records (any number of them). Release: W~ = W^ + N(0, sigma^2 I)
once per replica, where W^ satisfies ||grad G(W^)|| <= tau for G = F + (lambda/2)||W||^2
(``fedray.protocols.user_level.solver``).

Sensitivity: G is lambda-strongly convex and replacing user u changes grad G by
(grad f_u' - grad f_u)/n, of norm <= 2G/n, so the exact minimisers of neighbours are within
2G/(lambda n); each certified W^ is within tau/lambda of its exact minimiser. Hence
Delta = 2G/(lambda n) + 2 tau/lambda. Calibration: ``accountant`` = the analytic Gaussian
(the smallest sigma that is (eps, delta)-DP for Delta, ``fedray.privacy.gaussian``), ``paper`` =
the classic sqrt(2 ln(1.25/delta)) Delta / eps (eps < 1 only). Each replica draws its own noise
from the server's stream keyed by its row of ``Replicas.streams``; the noise is ``noise``
(``CalibratedGaussianNoise``, sigma per replica; ``NoNoise`` for B0), the value the ledger prices
(``CertifiedReleases``). A run that cannot reach the
certificate fails instead of releasing. Without privacy (B0) the program releases W^ itself.
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
from fedray.privacy.mechanisms import CalibratedGaussianNoise, NoNoise
from fedray.protocols.user_level.planning import OutputPerturbationRecipe
from fedray.protocols.user_level.solver import LinearModelProgram, minimize_ridge


@dataclass(frozen=True)
class OutputPerturbation(LinearModelProgram):
    """The program (``fedray.core.program.CentralProgram``); ``noise`` the server's Gaussian step,
    sigma (P,) per replica (``NoNoise`` without privacy)."""

    objective: LinearModelObjective
    regularization: float
    gradient_tolerance: float
    noise: CalibratedGaussianNoise | NoNoise
    num_replicas: int
    num_units: int
    model_shape: tuple
    constants: dict = field(default_factory=dict)
    recipe: ClassVar[OutputPerturbationRecipe] = OutputPerturbationRecipe()

    def run(self, oracle, keys: RoundKeys) -> ProgramRun:
        data = DataObjective(oracle, self.objective, self.num_units)
        solution = minimize_ridge(data, self.model_shape, self.regularization, self.objective.smoothness,
                                  self.gradient_tolerance)
        num_replicas = self.num_replicas
        released = np.repeat(solution.params, num_replicas, axis=0)
        charge = np.ones((num_replicas, self.num_units), dtype=np.int64)
        std = np.zeros(num_replicas)
        report: dict = {}
        if self.noise.draws_normals:
            normals = np.stack([self.output_noise(keys, replica) for replica in range(num_replicas)])
            released, applied = self.noise.apply(released, normals)
            std, report = applied["noise_std"], self.noise.round_metrics(charge)
        metrics = {"noise_std": Metric(std, released=True), **report,
                   "solver_calls": Metric(np.full(num_replicas, float(solution.calls)), released=False),
                   "certificate_gradient_norm": Metric(np.full(num_replicas, solution.gradient_norm), released=False)}
        return ProgramRun({"released": released}, charge, metrics)
