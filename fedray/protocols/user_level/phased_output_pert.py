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

Strongly convex pipelines (``strong_convexity`` mu; spec §2.6-2.7): the item loss is l + (mu / 2)
||theta||^2, G-Lipschitz on K. A first SCOutputPert release theta0 at (eps/2, delta/2, beta, G, mu)
localizes: K' = K cap B(theta0, R'), R' = sigma0 (sqrt(d) + sqrt(2 ln(1/beta))) [+ 30 G
sqrt(ln(2/beta)) / (mu sqrt(n m)) for SCO, Prop. B.1], then the phases run at (eps/2, delta/2)
from theta0 projected onto K, their lambda planned for K' (diameter 2 R'); a localization that
releases nothing falls back to K' = K (spec A7), phases planned for K, from 0. With ``erm`` this is
Alg. 5, with ``sco`` / ``sco_eq`` Alg. 6; ``split_localization`` gives theta0 the first floor(n/4)
users and the phases the rest (spec A14). Each phase's certificate uses lambda_i, as the paper's
Phased-ERM does, although its problem is (mu + lambda_i)-strongly convex.

Trust model: central user-level DP (a trusted server; per-user gradients reach only the
program). Unit: a user. Relation: replace one user. Guarantee: each phase's release is (eps_i,
delta_i)-DP by Thm 3.3 given the previous releases (the solver starts from the public centre and
is deterministic), so ``erm`` is (eps, delta) by basic composition of T releases and ``sco`` /
``sco_eq`` by parallel composition over disjoint users, and with mu the localizing release adds
(eps/2, delta/2) to phases at (eps/2, delta/2) (basic composition); the ledger charges each user
every release it is in (a phase skipped for floating point, ``settled``, is charged all the same).
Each release is SCOutputPert's: a phase whose certificate fails runs Alg. 1's stable-set search
over its users (``on_unstable=search``, priced at planning from public sizes and refused beyond
``max_fallback_solves``), so whether and where it released is part of its DP output, and keeping
the previous centre after BOT (or K' = K after a localization that released nothing) is
post-processing: no unprivatised check steers a later phase. With
``on_unstable=abort_not_private`` a failed check releases nothing instead; that outcome steers
the later phases, so the whole run is NOT DP (ledger epsilon = inf; the statement says so;
``phases_without_release`` and ``localized`` are diagnostics). With ``noise_scale`` s < 1
every sigma_i is scaled by s: a diagnostic of the localization analysis, not DP, planned as such.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from fedray.core.evaluation import Metric
from fedray.core.objective import DataObjective
from fedray.core.program import ProgramRun
from fedray.core.protocol import RoundKeys
from fedray.objectives import LinearModelObjective
from fedray.protocols.user_level.deletion import DelOutputPert, TruncatedDiscreteLaplace
from fedray.privacy.mechanisms import PhaseGaussianNoise
from fedray.protocols.user_level.phased_output_pert_planning import ABORT, Phase, PhasedOutputPertRecipe
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
class PhasedOutputPert(LinearModelProgram):
    objective: LinearModelObjective
    phases: tuple                     # (T,) Phase: after a localizing release, or the only ones
    noise_scale: float                # 1 for DP; s < 1 a non-private diagnostic
    radius: float                     # K = B(0, radius): the output's projection
    num_units: int
    model_shape: tuple
    num_replicas: int
    constants: dict = field(default_factory=dict)
    ridge: float = 0.0                # mu of the item loss's (mu / 2) ||theta||^2 (Alg. 5 / 6), else 0
    localization: Phase | None = None  # Alg. 5 / 6's first release, at the centre 0
    fallback: tuple = ()              # (T,) Phase after a localization that released nothing (K' = K)
    on_unstable: str = "search"       # or ABORT: a failed check releases nothing (not DP)
    # The releases' Gaussian step (P, slots): phases, then fallback phases, then the localization;
    # s sigma added, sigma required (the value the ledger prices). None without privacy.
    noise: PhaseGaussianNoise | None = None
    recipe: ClassVar[PhasedOutputPertRecipe] = PhasedOutputPertRecipe()

    def run(self, oracle, keys: RoundKeys) -> ProgramRun:
        data = DataObjective(oracle, self.objective, self.num_units)
        centres = np.zeros((self.num_replicas,) + self.model_shape)
        tally: dict[str, Any] = {"failed": np.zeros(self.num_replicas), "settled": np.zeros(self.num_replicas),
                 "searched": np.zeros(self.num_replicas), "calls": 0,
                 "charge": np.zeros((self.num_replicas, self.num_units), dtype=np.int64),
                 "std_min": np.full(self.num_replicas, np.inf), "std_max": np.full(self.num_replicas, -np.inf)}
        localized = np.zeros(self.num_replicas, dtype=bool)
        if self.localization is not None:
            # theta0, projected onto K: within R' of theta0 when theta*(x) is (spec §2.6), the phases' start
            slot = len(self.phases) + len(self.fallback)
            localized = self._release(data, [self.localization] * self.num_replicas, len(self.phases), centres, keys,
                                      tally, [slot] * self.num_replicas)
            centres[~localized] = 0.0
            centres = _project(centres, self.radius)
        for index in range(len(self.phases)):
            first = [bool(localized[r] or not self.fallback) for r in range(self.num_replicas)]
            phases = [(self.phases if f else self.fallback)[index] for f in first]
            self._release(data, phases, index, centres, keys, tally,
                          [index if f else len(self.phases) + index for f in first])
        released = _project(centres, self.radius)
        dp = self.on_unstable != ABORT      # under the abort which phases released is outside any guarantee
        metrics = {"phases_without_release": Metric(tally["failed"], released=dp),
                   "phases_settled": Metric(tally["settled"], released=True),
                   "phases_searched": Metric(tally["searched"], released=False),
                   "solver_calls": Metric(np.full(self.num_replicas, float(tally["calls"])), released=False)}
        if self.localization is not None:
            metrics["localized"] = Metric(localized.astype(np.float64), released=dp)
        if self.noise is not None:      # the least and largest std the replica's releases got (0: none)
            some = np.isfinite(tally["std_min"])
            metrics["noise_std_added_min"] = Metric(np.where(some, tally["std_min"], 0.0), released=dp)
            metrics["noise_std_added_max"] = Metric(np.where(some, tally["std_max"], 0.0), released=dp)
        return ProgramRun({"released": released}, tally["charge"], metrics)

    def _release(self, data, phases: list, index: int, centres: np.ndarray, keys: RoundKeys, tally: dict,
                 slots: list) -> np.ndarray:
        """Each replica's phase ``phases[r]`` from its centre: solve min F + (ridge / 2) ||theta||^2 +
        (lambda_i / 2) ||theta - centre||^2, check the certificate, and on success move the centre to
        the release plus the Gaussian step of its slot ``slots[r]`` (in place); whether each replica released."""
        released = np.zeros(self.num_replicas, dtype=bool)
        plans = []
        for replica, phase in enumerate(phases):
            mechanism = phase.mechanisms[replica]
            total = self.ridge + phase.regularization
            # the two quadratic terms as one: (total / 2) ||theta - shifted||^2 + a constant
            shifted = centres[replica] * (phase.regularization / total)
            # mu eta, and for the diagnostic s mu eta: the slack the certificate leaves the solver is
            # part of the noise budget, so the localization check scales it with the noise
            tolerance = (mechanism.strong_convexity * mechanism.tolerance * self.noise_scale if mechanism is not None
                         else total * 1e-9)
            plans.append(((shifted.tobytes(), total, phase.users[0], phase.users.size), shifted, total, tolerance))
        # replicas at the same centre in the same phase share one solve, to the smallest of their
        # tolerances (public: their budgets), so each replica's map meets its own certificate's slack
        strictest: dict = {}
        for key, _, _, tolerance in plans:
            strictest[key] = min(tolerance, strictest.get(key, np.inf))
        solved: dict = {}
        for replica, (phase, (key, shifted, total, tolerance)) in enumerate(zip(phases, plans)):
            mechanism = phase.mechanisms[replica]
            tally["charge"][replica, phase.users] += phase.charge
            if settled(shifted, total, tolerance):
                tally["settled"][replica] += 1
                continue
            if key not in solved:
                weights = np.zeros(self.num_units)
                weights[phase.users] = 1.0
                solution = minimize_ridge(data, self.model_shape, total, self.objective.smoothness, strictest[key],
                                          weights, centre=shifted)
                per_user = data.unit_gradients(solution.params)[phase.users, 0].reshape(phase.users.size, -1)
                # the regularizers' gradients are the same for every user: they cancel in the spread
                spread = float(np.linalg.norm(per_user - per_user.mean(axis=0), axis=1).max())
                solved[key] = (solution, spread)
                tally["calls"] += solution.calls
            solution, spread = solved[key]
            if mechanism is None:
                centres[replica], released[replica] = solution.params[0], True
                continue
            phase_key = (*keys.streams[replica], keys.round, index)
            budget = TruncatedDiscreteLaplace(mechanism.epsilon2, mechanism.delta2).sample(
                generator(keys.seed, Stream.SERVER, *phase_key))       # R1: unused when certified
            if mechanism.certifies(spread, solution.gradient_norm):
                chosen = solution.params[0]                          # S* = {} for every R1 (App. C)
            elif self.on_unstable == ABORT:
                chosen = None                                        # not DP: the abort leaks
            else:                                                    # Alg. 1's search (the plan priced it)
                tally["searched"][replica] += 1
                found = DelOutputPert(mechanism.epsilon2, mechanism.delta2, mechanism.sensitivity).search(
                    self._solver_map(data, phase, solution, shifted, total, strictest[key], tally),
                    phase.users.size, budget)
                chosen = None if found is None else found[1]
            if chosen is not None:
                if self.noise is None:
                    raise ValueError("PhasedOutputPert with mechanisms needs its Gaussian step (noise); got None")
                step = self.noise.at(slots[replica], np.array([replica]))
                centres[replica] = step.apply(chosen[None], [generator(keys.seed, Stream.OUTPUT_NOISE, *phase_key)])[0][0]
                std = float(step.noise_std[0])
                tally["std_min"][replica] = min(tally["std_min"][replica], std)
                tally["std_max"][replica] = max(tally["std_max"][replica], std)
                released[replica] = True
            else:
                # BOT: the previous centre stays (spec A7); in DP mode post-processing of a DP output
                tally["failed"][replica] += 1
        return released

    def _solver_map(self, data, phase: Phase, solution, shifted: np.ndarray, total: float, tolerance: float,
                    tally: dict):
        """f(x_{-S}) for S a tuple of positions in ``phase.users``: the phase's solve (same centre,
        regularization and tolerance, from the same start) over the users kept; f(x) is ``solution``;
        with no user left, the regularizer's minimiser ``shifted`` (public)."""
        def f(deleted: tuple) -> np.ndarray:
            if not deleted:
                return solution.params[0]
            if len(deleted) == phase.users.size:
                return shifted.reshape(self.model_shape)
            weights = np.zeros(self.num_units)
            weights[np.delete(phase.users, list(deleted))] = 1.0
            found = minimize_ridge(data, self.model_shape, total, self.objective.smoothness, tolerance, weights,
                                   centre=shifted)
            tally["calls"] += found.calls
            return found.params[0]
        return f


def _project(models: np.ndarray, radius: float) -> np.ndarray:
    """Each replica's model projected onto B(0, radius)."""
    norms = np.linalg.norm(models.reshape(models.shape[0], -1), axis=1)
    return models * np.minimum(1.0, radius / np.maximum(norms, 1e-300)).reshape((-1,) + (1,) * (models.ndim - 1))
