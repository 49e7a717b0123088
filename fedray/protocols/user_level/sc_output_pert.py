"""SCOutputPert in certificate mode (seed-003 Alg. 2 with App. C, spec §2.3b): user-level output
perturbation whose noise scales with the LOCAL deletion sensitivity of the strongly convex ERM
minimiser, O(G / (mu n sqrt(m))) instead of the global 2 G / (mu n).

Symbols (``fedray.protocols.user_level.deletion``): n users with m items each (every user the
same m), f_u the user's average loss, the item loss l = (logistic or softmax loss of a linear
model, records scaled to ||x|| <= B) + (mu/2) ||theta||^2, K = B(0, r B / mu) (never active: every
sub-dataset's minimiser lies inside), so G = 2 r B with r = sup |dl/dz|.

Trust model: central user-level DP (the trusted server solves through the oracle; per-user
gradients reach only the program). Unit: a user, all m items. Relation: replace one user.
Mechanism (one release per replica): solve to residual ||grad|| <= mu eta (deterministic, from
0, never warm-started from another dataset); compute every user's mean gradient gbar_u and
gamma = max_u ||gbar_u - mean_v gbar_v||; draw the deletion budget R1 ~ TDLap(eps2, delta2)
(always, unused on this path); if the certificate holds, release theta + N(0, sigma^2 I), else
release nothing ("no release", reported as ``released`` = 0, never replaced by an unprotected
output). Guarantee: (eps, delta)-DP by Thm 3.3 between neighbours on which the check passes for
both (the release is then exactly DelOutputPert's with f = the solver's map, whose Delta_{4 kappa}
the certificate bounds); whether it passes is not private: one user can flip it, and the run's
statement names that outcome as outside the guarantee (spec A16). The ledger charges each user
one (eps, delta) release per replica, a certificate-style event (the argument is the paper's,
not an accountant's). Utility needs the items of users exchangeable (random permutation);
privacy does not. Refuses n < N0 = 8 kappa + 2 at planning unless ``allow_few_users``.

Exact mode (``mode=exact``, spec §2.3, mean estimation): a loss linear in the record (``Linear``,
each record a user's mean item) in one dimension, where f(y) is the mean of the users' points
and Delta_{4 kappa} f(x) has an exact sorted formula (``mean_deletion_sensitivity``); the release
needs Delta_{4 kappa} f(x) <= Delta_exact (Thm 3.6's constant, about 30x below the certificate's
at n = 1,000), otherwise nothing is released, as above.
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
from fedray.protocols.user_level.deletion import TruncatedDiscreteLaplace, mean_deletion_sensitivity
from fedray.protocols.user_level.planning import CertifiedPerturbationRecipe
from fedray.protocols.user_level.solver import LinearModelProgram, minimize_ridge
from fedray.rng import Stream


@dataclass(frozen=True)
class SCOutputPert(LinearModelProgram):
    """The program (``fedray.core.program.CentralProgram``); ``mechanisms`` holds each replica's
    constants (its budget), or None without privacy (then the certified solution is released)."""

    objective: LinearModelObjective
    strong_convexity: float
    mechanisms: tuple                 # (P,) CertifiedPerturbation / ExactPerturbation, or None
    tolerance: float                  # mu eta of the strictest replica (all solve once)
    num_units: int
    model_shape: tuple
    constants: dict = field(default_factory=dict)
    mode: str = "certificate"
    recipe: ClassVar[CertifiedPerturbationRecipe] = CertifiedPerturbationRecipe()

    def run(self, oracle, keys: RoundKeys) -> ProgramRun:
        data = DataObjective(oracle, self.objective, self.num_units)
        mu = self.strong_convexity
        zero = np.zeros((1,) + self.model_shape)
        if getattr(self.objective.loss, "linear_in_record", False):
            # each user's gradient is constant, so the minimiser over any sub-dataset is the mean of
            # the points a_u = -grad f_u / mu (spec §2.3b: quadratic problems in closed form); the
            # residual ||mean_u grad f_u + mu theta|| is computed, not assumed
            _, mean_gradient = data.value_and_gradient(zero)
            params, calls = -mean_gradient / mu, 2
            residual = float(np.linalg.norm(mean_gradient + mu * params))
            at = zero
        else:
            solution = minimize_ridge(data, self.model_shape, mu, self.objective.smoothness, self.tolerance)
            params, residual, calls = solution.params, solution.gradient_norm, solution.calls + 2
            _, mean_gradient = data.value_and_gradient(params)
            at = params
        # u_u = grad f_u - mean_v grad f_v (the regularizer's terms cancel): its largest norm
        gamma = data.largest_deviation(at, mean_gradient[0])
        if self.mode == "exact":           # 1-D points for the sorted formula
            points = -data.unit_gradients(zero)[:, 0].reshape(self.num_units) / mu
            calls += 1
        num_replicas = len(self.mechanisms)
        released = np.repeat(params, num_replicas, axis=0)
        passed, bound, budget, sigma, limit = (np.ones(num_replicas) for _ in range(5))
        for replica, mechanism in enumerate(self.mechanisms):
            if mechanism is None:
                sigma[replica], bound[replica], budget[replica], limit[replica] = 0.0, np.nan, np.nan, np.nan
                continue
            limit[replica] = mechanism.sensitivity
            budget[replica] = TruncatedDiscreteLaplace(mechanism.epsilon2, mechanism.delta2).sample(
                keys.generator(Stream.SERVER, replica))
            if self.mode == "exact":
                bound[replica] = mean_deletion_sensitivity(points, mechanism.deletions)
            else:
                bound[replica] = mechanism.certificate(gamma, residual)
            sigma[replica] = mechanism.noise_std
            if bound[replica] <= mechanism.sensitivity:
                released[replica] += mechanism.noise_std * self.output_noise(keys, replica)
            else:
                passed[replica] = 0.0
                released[replica] = np.nan          # no release: nothing unprotected leaves
        charge = np.ones((num_replicas, self.num_units), dtype=np.int64)
        metrics = {"released": Metric(passed, released=True),
                   "noise_std": Metric(sigma, released=True),
                   "certificate": Metric(bound, released=False),
                   "certificate_limit": Metric(limit, released=True),    # public: what the noise is calibrated for
                   "gradient_spread": Metric(np.full(num_replicas, gamma), released=False),
                   "residual": Metric(np.full(num_replicas, residual), released=False),
                   "deletion_budget": Metric(budget, released=False),
                   "solver_calls": Metric(np.full(num_replicas, float(calls)), released=False)}
        return ProgramRun({"released": released}, charge, metrics)
