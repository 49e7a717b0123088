"""SCOutputPert (seed-003 Alg. 2, with App. C's certificate as its fast path, spec §2.3-2.3b):
user-level output perturbation whose noise scales with the LOCAL deletion sensitivity of the
strongly convex ERM minimiser, O(G / (mu n sqrt(m))) instead of the global 2 G / (mu n).

Symbols (``fedray.protocols.user_level.deletion``): n users with m items each (every user the
same m), f_u the user's average loss, the item loss l = (logistic or softmax loss of a linear
model, records scaled to ||x|| <= B) + (mu/2) ||theta||^2, K = B(0, r B / mu) (never active: every
sub-dataset's minimiser lies inside), so G = 2 r B with r = sup |dl/dz|.

Trust model: central user-level DP (the trusted server solves through the oracle; per-user
gradients reach only the program). Unit: a user, all m items. Relation: replace one user.
Mechanism (one release per replica): Alg. 1 (DelOutputPert) with f = the solver's deterministic
map (from 0, to residual ||grad|| <= mu eta, never warm-started from another dataset): draw the
deletion budget R1 ~ TDLap(eps2, delta2); if S = {} is certified stable (below), release
f(x) + N(0, sigma^2 I) at once, which is what Alg. 1 releases for every R1; otherwise
(``on_unstable=search``) run Alg. 1's stable-set search and release f(x_{-S*}) + N(0, sigma^2 I),
or nothing (BOT, reported as ``released`` = 0, never an unprotected output). The Gaussian is
``noise`` (``PhaseGaussianNoise``, one column: sigma per replica, the value the ledger prices),
drawn from each replica's OUTPUT_NOISE stream. Guarantee:
(eps, delta)-DP by Thm 3.3 for every outcome, whether it released included. Calibration: the
paper's sigma = sqrt(2 ln(2/delta2)) 8 kappa Delta / eps2, or with
``privacy.calibration=tight`` the same guarantee from Thm 3.3's coupling computed exactly
(``deletion_tight``) and a certificate that may take the smooth route
(``CertifiedPerturbation.smooth_spread``): 981x less noise at the synthetic preset. The ledger
charges each user one (eps, delta) release per replica (the argument is the paper's, not an
accountant's). Utility
needs the items of users exchangeable (random permutation); privacy does not. Refuses
n < N0 = 8 kappa + 2 at planning unless ``allow_few_users``.

Certificate mode (``mode=certificate``): S = {} is certified when (2r + 1) gammat / (mu (n - r -
1)) + 2 res / mu + 2 eta <= Delta, gammat = max_u ||gbar_u - mean_v gbar_v|| (App. C); the search
enumerates sub-datasets and solves each (``DelOutputPert.search``), which the plan prices from
public sizes and refuses beyond ``max_fallback_solves`` (every realistic n).

Exact mode (``mode=exact``, spec §2.3, mean estimation): a loss linear in the record (``Linear``,
each record a user's mean item) in one dimension, f(y) the mean of the users' points. The search
runs over windows (delete the j lowest and s - j highest points) accepted when the points kept
span at most Delta (n - 4 kappa) (``deletion.WindowSearch``, polynomial, with its proof); S = {}
is accepted exactly when all points do, and then the release is bit for bit the solution plus
noise. Delta = Delta_exact (Thm 3.6's constant, about 30x below the certificate's at n = 1,000).
``certificate`` reports Delta_{4 kappa} f(x) by the sorted formula (diagnostic).

``on_unstable=abort_not_private``: release nothing whenever S = {} fails its check (the exact
mode's test is then Delta_{4 kappa} f(x) <= Delta). NOT DP: one user can flip whether it releases
(spec A16), so the ledger prices every release at epsilon = inf, the statement says so, and
``released`` is a diagnostic.
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
from fedray.privacy.mechanisms import PhaseGaussianNoise
from fedray.protocols.user_level.deletion import (
    DelOutputPert,
    TruncatedDiscreteLaplace,
    WindowSearch,
    mean_deletion_sensitivity,
)
from fedray.protocols.user_level.planning import ABORT, CertifiedPerturbationRecipe
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
    on_unstable: str = "search"       # or ABORT: a failed check releases nothing (not DP)
    noise: PhaseGaussianNoise | None = None     # sigma (P, 1), the Gaussian step the ledger prices (None: B0)
    recipe: ClassVar[CertifiedPerturbationRecipe] = CertifiedPerturbationRecipe()

    def run(self, oracle, keys: RoundKeys) -> ProgramRun:
        data = DataObjective(oracle, self.objective, self.num_units)
        mu = self.strong_convexity
        zero = np.zeros((1,) + self.model_shape)
        linear = self.objective.loss.linear_in_record      # ``fedray.losses.Loss`` declares it
        if linear:
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
        if self.mode == "exact":           # 1-D points for the sorted formula and the window search
            points = -data.unit_gradients(zero)[:, 0].reshape(self.num_units) / mu
            calls += 1
        solved: dict = {(): params[0]}
        search_calls = [0]                   # oracle calls of the search's solves

        def solver_map(deleted: tuple) -> np.ndarray:
            """f(x_{-S}): the same deterministic map as the full solve (from 0, to the tolerance),
            over the users kept, once per sub-dataset for all replicas; f of no user is the public
            point 0 (spec A20)."""
            if deleted not in solved:
                weights = np.ones(self.num_units)
                weights[list(deleted)] = 0.0
                if len(deleted) == self.num_units:
                    solved[deleted] = zero[0]
                elif linear:
                    solved[deleted] = -data.value_and_gradient(zero, weights)[1][0] / mu
                    search_calls[0] += 1
                else:
                    found = minimize_ridge(data, self.model_shape, mu, self.objective.smoothness, self.tolerance,
                                           weights)
                    solved[deleted], search_calls[0] = found.params[0], search_calls[0] + found.calls
            return solved[deleted]

        num_replicas = len(self.mechanisms)
        released = np.repeat(params, num_replicas, axis=0)
        passed, bound, budget, sigma, limit = (np.ones(num_replicas) for _ in range(5))
        deleted = np.zeros(num_replicas)               # |S*| (diagnostic: not part of the output)
        for replica, mechanism in enumerate(self.mechanisms):
            if mechanism is None:
                sigma[replica], bound[replica], budget[replica], limit[replica] = 0.0, np.nan, np.nan, np.nan
                continue
            limit[replica] = mechanism.sensitivity
            budget[replica] = TruncatedDiscreteLaplace(mechanism.epsilon2, mechanism.delta2).sample(
                keys.generator(Stream.SERVER, replica))
            sigma[replica] = mechanism.noise_std
            # S = {}'s check: Delta_{4 kappa} f(x) by the sorted formula, or App. C's certificate
            bound[replica] = mean_deletion_sensitivity(points, mechanism.deletions) if self.mode == "exact" \
                else mechanism.certificate(gamma, residual)
            certified = bound[replica] <= mechanism.sensitivity
            if self.on_unstable == ABORT:
                chosen = (0, params[0]) if certified else None        # not DP: the abort leaks
            elif self.mode == "exact":
                found = WindowSearch.for_mechanism(mechanism.sensitivity, mechanism.kappa, self.num_units) \
                    .release_point(points, int(budget[replica]))
                # s* = 0 releases the solution computed above (the fast path, bit for bit)
                chosen = None if found is None else (0, params[0]) if found[0] == 0 else \
                    (found[0], found[1].reshape(self.model_shape))
            elif certified:
                chosen = (0, params[0])                                 # S* = {} for every R1 (App. C)
            else:
                stable = DelOutputPert(mechanism.epsilon2, mechanism.delta2, mechanism.sensitivity).search(
                    solver_map, self.num_units, int(budget[replica]))
                chosen = None if stable is None else (len(stable[0]), stable[1])
            if chosen is None:
                passed[replica], deleted[replica] = 0.0, np.nan
                released[replica] = np.nan          # BOT: nothing leaves
            else:
                deleted[replica] = chosen[0]
                if self.noise is None:
                    raise ValueError("SCOutputPert with mechanisms needs its Gaussian step (noise); got None")
                step = self.noise.at(0, np.array([replica]))
                released[replica] = step.apply(chosen[1][None], [self.output_generator(keys, replica)])[0][0]
        charge = np.ones((num_replicas, self.num_units), dtype=np.int64)
        dp = self.on_unstable != ABORT            # under the abort the release bit is outside any guarantee
        metrics = {"released": Metric(passed, released=dp),
                   "noise_std": Metric(sigma, released=True),
                   "certificate": Metric(bound, released=False),
                   "deleted_users": Metric(deleted, released=False),
                   "certificate_limit": Metric(limit, released=True),    # public: what the noise is calibrated for
                   "gradient_spread": Metric(np.full(num_replicas, gamma), released=False),
                   "residual": Metric(np.full(num_replicas, residual), released=False),
                   "deletion_budget": Metric(budget, released=False),
                   "solver_calls": Metric(np.full(num_replicas, float(calls + search_calls[0])), released=False)}
        if self.noise is not None:      # the std the release got (0 where nothing was released)
            std = np.where(passed > 0, np.asarray(self.noise.noise_std, dtype=np.float64)[:, 0], 0.0)
            metrics |= {"noise_std_added_min": Metric(std, released=True),
                        "noise_std_added_max": Metric(std.copy(), released=True)}
        return ProgramRun({"released": released}, charge, metrics)
