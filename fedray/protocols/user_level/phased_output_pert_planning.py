"""Planning Phased-ERM / Phased-SCO (``fedray.protocols.user_level.phased_output_pert``; seed-003
spec §2.4, §2.5, A7-A9, A12, A13): the phases, their users and regularization, each phase's
SCOutputPert constants, the ledger, and the refusals, all from public inputs (n, m, d, G, R, eps,
delta, beta) before any actor starts.

lambda (``regularization``): a number, ``paper`` (G sqrt(d) / (R n sqrt(m)), Thm 4.1's) or
``balanced``, the argmin of the public oracle bound on the excess risk (spec §2.4-2.5):
    B(lambda) = 2 lambda R^2 + sum_{i<T} (lambda_{i+1} / 2) d sigma_i^2 + G sqrt(d) sigma_T
                [+ sum_i 16 G^2 / (lambda_i n_i m) for SCO],
with sigma_i = c_i 2G / (lambda_i n_i sqrt(m)) and c_i phase i's certificate constant; for ERM it
is 2 lambda R^2 + Q / lambda, minimised at sqrt(Q / (2 R^2)). Without privacy the phases and
a balanced lambda are those of (eps, delta) = (1, 1e-5); a given or ``paper`` lambda has no user floor.

With ``strong_convexity`` (Alg. 5 / 6, spec §2.6-2.7) every release gets half the budget, beta
defaults to 1 / (2 n^2 m), and two phase lists are planned: for K' = K cap B(theta0, R') (lambda
for its diameter min(2 R', 2 radius); the paper's lambda writes R') and, for a localization that released nothing,
for K.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import math
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.optimize import minimize_scalar

from fedray.checks import number_in, positive
from fedray.core.planning import (
    AlgorithmSettings, PlanContext, PlannedAlgorithm, PlannedProtocol, Positive, ProtocolRecipe,
    Within, settings_of,
)
from fedray.core.protocol import Routing
from fedray.core.terms import Calibration, Relation, TrustModel
from fedray.errors import ConfigError
from fedray.objectives import LinearModelObjective
from fedray.privacy.ledger import CertifiedReleases, ComposedAccountant, Ledger
from fedray.privacy.mechanisms import PhaseGaussianNoise
from fedray.privacy.statement import PrivacyPlan
from fedray.protocols.user_level.deletion import CALIBRATIONS as DELETION_CALIBRATIONS
from fedray.protocols.user_level.deletion import CertifiedPerturbation, enumeration_solves
from fedray.protocols.user_level.planning import (
    ABORT,
    USER,
    UnstableSettings,
    _check_program,
    _levels,
    check_fallback,
    not_dp_release,
    not_private,
    on_unstable_setting,
)

REGULARIZATIONS = ("paper", "balanced")


@dataclass(frozen=True, kw_only=True)
class PhasedOutputPertSettings(UnstableSettings):
    """Phased-ERM / Phased-SCO's section (module docstring)."""

    variant: Literal["erm", "sco", "sco_eq"]
    regularization: float | str | None = None      # a positive number, paper or balanced (``_regularization``)
    radius: Annotated[float, Positive()]
    feature_bound: Annotated[float, Positive()]
    beta: Annotated[float | None, Within(0.0, 1.0, "a probability in (0, 1)")] = None   # None: the paper's
    noise_scale: Annotated[float, Within(0.0, 1.0, "a number in (0, 1] (1: DP; below 1 a non-private diagnostic)",
                                         closed_high=True)] = 1.0
    strong_convexity: Annotated[float | None, Positive()] = None
    split_localization: bool = False


def phase_users(variant: str, n: int, phases: int) -> list[np.ndarray]:
    """Each phase's user ids: all of them (erm); [floor(n / 2^i), floor(n / 2^{i-1})) (sco); T
    equal consecutive batches of floor(n / T) (sco_eq). Disjoint for sco and sco_eq."""
    if variant == "erm":
        return [np.arange(n)] * phases
    if variant == "sco":
        return [np.arange(n // 2**i, n // 2 ** (i - 1)) for i in range(1, phases + 1)]
    size = n // phases
    return [np.arange(i * size, (i + 1) * size) for i in range(phases)]


def certificate_constant(epsilon: float, delta: float, beta: float, lipschitz: float, users: int, items: int,
                         calibration: Calibration = Calibration.PAPER) -> float:
    """c with sigma = c G' / (mu n sqrt(m)) for SCOutputPert's certificate at (eps, delta, beta), G'.
    Under ``calibration="tight"`` the smooth certificate's mu -> infinity limit (its term beta0 r /
    (mu (n - r)) dropped: below 1e-4 of the rest at the presets' lambda_i; lambda and B(lambda) only)."""
    mechanism = CertifiedPerturbation(epsilon, delta, beta, lipschitz, 1.0, users, items, calibration,
                                      0.0 if calibration == Calibration.TIGHT else math.inf)
    return mechanism.noise_std * users * math.sqrt(items) / lipschitz


def oracle_bound(lam: float, constants: list[float], users: list[int], lipschitz: float, diameter: float, dim: int,
                 items: int, statistical: bool) -> float:
    """B(lambda) of the module docstring (G = ``lipschitz``, R = ``diameter``)."""
    phases = len(constants)
    sigma = [c * 2 * lipschitz / (lam * 4**i * n * math.sqrt(items))
             for i, (c, n) in enumerate(zip(constants, users), start=1)]
    bound = 2 * lam * diameter**2 + sum(lam * 4 ** (i + 1) / 2 * dim * sigma[i - 1] ** 2 for i in range(1, phases))
    bound += lipschitz * math.sqrt(dim) * sigma[-1]
    if statistical:
        bound += sum(16 * lipschitz**2 / (lam * 4**i * n * items) for i, n in enumerate(users, start=1))
    return bound


def balanced_regularization(*args) -> float:
    """argmin over lambda > 0 of ``oracle_bound(lambda, *args)`` (convex in log lambda)."""
    found = minimize_scalar(lambda t: math.log(oracle_bound(math.exp(t), *args)), bounds=(-80.0, 80.0),
                            method="bounded", options={"xatol": 1e-10})
    return math.exp(found.x)


@dataclass(frozen=True)
class PhasedPlan(PlannedProtocol):
    """The program resolved against its data (``PlannedProtocol``)."""

    algorithm_class: type[Any]
    objective: LinearModelObjective
    phases: tuple
    noise_scale: float
    radius: float
    shape: Any
    replicas: int
    privacy: PrivacyPlan
    resolved: dict = field(default_factory=dict)
    routing: Routing = Routing.DIRECT
    ridge: float = 0.0
    localization: Any = None
    fallback: tuple = ()
    noise: PhaseGaussianNoise | None = None     # the releases' Gaussian step (``_noise``)

    def build(self, oracle):
        model_shape = (self.shape.dim, self.objective.loss.num_outputs)
        return self.algorithm_class(self.objective, self.phases, self.noise_scale, self.radius, self.shape.num_silos,
                                    model_shape, self.replicas, dict(self.resolved), self.ridge, self.localization,
                                    self.fallback, self.resolved.get("on_unstable", "search"), self.noise)


def _noise(releases: list, scale: float, epsilon, delta: float) -> PhaseGaussianNoise | None:
    """The Gaussian step of every release slot (the phases, the fallback phases, the localization),
    (P, slots): ``scale`` x each mechanism's sigma added, its sigma required; None without privacy."""
    if not releases or releases[0].mechanisms[0] is None:
        return None
    required = np.array([[mech.noise_std for mech in phase.mechanisms] for phase in releases]).T
    added = np.array([[scale * mech.noise_std for mech in phase.mechanisms] for phase in releases]).T
    return PhaseGaussianNoise(added, required, epsilon, delta)


@dataclass(frozen=True)
class PhasedOutputPertRecipe(ProtocolRecipe):
    """Checks as SCOutputPert (central user-level DP or none, every user in the one program run,
    a smooth loss with a bounded derivative, every user the same m, eps <= 1, the paper's
    calibration), then the phases, the refusals (T >= 1; every release's users >= its N0 unless
    ``allow_few_users``; noise_scale in (0, 1]; split_localization only for Alg. 6), whether Alg. 1's
    search is affordable for every release (``on_unstable=search``; else refused, or the NOT DP
    ``abort_not_private``, planned with epsilon = inf) and the ledger."""

    trust_models: tuple[TrustModel, ...] = (TrustModel.CENTRAL, TrustModel.NONE)
    settings: type[AlgorithmSettings] = PhasedOutputPertSettings
    privacy_keys: tuple[str, ...] = ()
    budget_grid: bool = True           # privacy.epsilon_grid: one noise per budget, as replicas
    config_keys: tuple[str, ...] = ()

    def plan(self, algorithm_class: type[Any], config: dict, context: PlanContext) -> PhasedPlan:
        alg, priv, shape, replicas = settings_of(PhasedOutputPertSettings, context.algorithm), context.privacy, \
            context.shape, context.replicas
        _check_program(config, context, alg.feature_bound)
        on_unstable, most_solves = on_unstable_setting(alg)
        variant, radius, few, scale = alg.variant, alg.radius, alg.allow_few_users, alg.noise_scale
        objective = LinearModelObjective(context.loss, alg.feature_bound)
        mu, split = alg.strong_convexity, alg.split_localization
        if split and (mu is None or variant == "erm"):
            raise ConfigError("algorithm.split_localization", split, "false unless algorithm.strong_convexity is set "
                              "and algorithm.variant is sco or sco_eq (Alg. 6's localization on the first n/4 users)")
        items = set(shape.items)
        if len(items) != 1:
            raise ConfigError("data", f"{min(items)}..{max(items)} items per user", f"the same m for every user "
                              f"({alg.name})")
        n, m, dim = shape.num_silos, items.pop(), shape.dim * context.loss.num_outputs
        # G of the item loss on K: with mu it carries (mu/2)||theta||^2, whose gradient is at most mu radius there
        lipschitz = objective.lipschitz + (mu * radius if mu else 0.0)
        diameter = 2.0 * radius
        beta = alg.beta
        if beta is None:
            beta = 1.0 / (2 * n * n * m) if mu else 1.0 / (n * m)        # Alg. 5 / 6's, or Thm 4.1's
        private = priv.private
        calibration = priv.calibration if private else Calibration.PAPER
        smooth = objective.smoothness           # the item loss's Hessians (tight: the smooth certificate)
        if calibration not in DELETION_CALIBRATIONS:
            raise ConfigError("privacy.calibration", calibration, f"one of {DELETION_CALIBRATIONS} for Phased-ERM / SCO "
                              "(paper: Thm 3.3's noise; tight: the same guarantee by its coupling, computed exactly)")
        if not private and scale != 1.0:
            raise ConfigError("algorithm.noise_scale", scale, "1 with privacy=none (the diagnostic scales the noise of "
                              "a privacy budget: keep privacy=central_user)")
        # delta, levels and eps_levels are None exactly when the run is not private
        delta: Any = number_in("privacy.delta", priv.delta, 0.0, 0.5, "a number in (0, 1/2]", closed_high=True) \
            if private else None
        levels: Any = _levels(priv, replicas) if private else None
        if private and np.any(levels > 1):
            raise ConfigError("privacy.epsilon", float(levels.max()), "at most 1 (the paper's range, eps in (0, 1])")
        stages = 2 if mu else 1                           # Alg. 5 / 6: the localization, then the phases
        strictest = (float(levels.min()) if private else 1.0) / stages
        shaping_delta = (delta if private else 1e-5) / stages      # without privacy, the phases of (1, 1e-5)
        offset = n // 4 if split else 0                   # the localizing users come first
        count = self._phase_count(variant, n - offset, m, dim, strictest, shaping_delta, beta)
        if count < 1:
            raise ConfigError("data.spec.num_silos", n, f"more users for {variant}: T = {count} phases (T = floor(log2("
                              "n / N0)) for sco, n / T >= N0 for sco_eq)")
        groups = [g + offset for g in phase_users(variant, n - offset, count)]
        smallest = min(g.size for g in groups)
        share = count if variant == "erm" else 1          # basic composition over phases, or parallel
        beta_phase = beta / count
        floor = CertifiedPerturbation(strictest / share, shaping_delta / share, beta, 1.0, 1.0, 10**9, m).fewest_users
        if smallest < floor and (private or alg.regularization == "balanced"):
            raise ConfigError("data.spec.num_silos", n, f"more users: each phase needs at least 4 kappa + 2 = {floor} "
                              f"(Delta's denominator; allow_few_users lifts only the N0 refusal); a phase has {smallest}")
        reference = [CertifiedPerturbation(strictest / share, shaping_delta / share, beta_phase, 2 * lipschitz, 1.0,
                                           g.size, m, calibration, smooth) for g in groups] if smallest >= floor else []
        fewest = max((c.min_users for c in reference), default=0)
        if private and smallest < fewest and not few:
            raise ConfigError("data.spec.num_silos", n, f"more users: each phase needs N0 = {fewest} (eps, delta) = "
                              f"({strictest:g}, {shaping_delta:g}) over {count} phases; it has {smallest}"
                              " (or algorithm.allow_few_users=true)")
        eps_levels: Any = levels / stages if private else None

        def phases(lam: float) -> tuple:
            made = []
            for i, group in enumerate(groups, start=1):
                lam_i = lam * 4.0**i
                mechanisms = tuple(None for _ in range(replicas.count)) if not private else \
                    tuple(CertifiedPerturbation(float(eps) / share, delta / stages / share, beta_phase, 2 * lipschitz,
                                                lam_i, group.size, m, calibration, smooth) for eps in eps_levels)
                made.append(_phase(group, lam_i, mechanisms))
            return tuple(made)

        def bound(lam: float, span: float) -> float:
            """B(lambda) for the noise actually added (s sigma_i) over a set of diameter ``span``."""
            if not private:
                return float("nan")
            constants = [scale * certificate_constant(c.epsilon, c.delta, c.beta, 2 * lipschitz, c.num_users, m,
                                                      c.calibration)
                         for c in reference]
            return oracle_bound(lam, constants, [g.size for g in groups], lipschitz, span, dim, m, variant != "erm")

        value = alg.regularization
        lam = self._regularization(value, reference, groups, lipschitz, diameter, diameter, dim, m, n - offset, variant,
                                   scale)
        resolved = {"on_unstable": on_unstable, "phases": count, "regularization": lam, "lipschitz": lipschitz,
                    "items_per_user": m,
                    "beta": beta, "min_users": fewest, "phase_users_min": int(smallest),
                    "oracle_bound": bound(lam, diameter)}    # add beta R G for the failure event
        localization, fallback, first = None, (), phases(lam)
        if mu:
            located = offset if split else n
            least = CertifiedPerturbation(strictest, shaping_delta, beta, lipschitz, mu, 10**9, m).fewest_users
            if located < least:
                raise ConfigError("data.spec.num_silos", n, f"more users: the localizing release needs at least 4 kappa"
                                  f" + 2 = {least}; it has {located}")
            local = CertifiedPerturbation(strictest, shaping_delta, beta, lipschitz, mu, located, m, calibration, smooth)
            if private and located < local.min_users and not few:
                raise ConfigError("data.spec.num_silos", n, f"more users: the localizing release needs N0 = "
                                  f"{local.min_users}; it has {located} (or algorithm.allow_few_users=true)")
            # R': theta*(x) (and for SCO theta*(D), Prop. B.1) lies within it of theta0 w.p. >= 1 - 2 beta
            reach = scale * local.noise_std * (math.sqrt(dim) + math.sqrt(2 * math.log(1 / beta)))
            if variant != "erm":
                reach += 30 * lipschitz * math.sqrt(math.log(2 / beta)) / (mu * math.sqrt(located * m))
            span = min(2 * reach, diameter)               # K' lies in K
            # the paper's lambda writes the radius R' where Phased-ERM's has K's diameter: R' capped at K's radius
            local_lam = self._regularization(value, reference, groups, lipschitz, span, min(reach, radius), dim, m,
                                             n - offset, variant, scale)
            mechanisms = tuple(None for _ in range(replicas.count)) if not private else \
                tuple(CertifiedPerturbation(float(eps), delta / stages, beta, lipschitz, mu, located, m, calibration,
                                            smooth) for eps in eps_levels)
            localization = _phase(np.arange(located), 0.0, mechanisms, share)
            fallback, first = first, phases(local_lam)
            resolved.update(regularization=local_lam, oracle_bound=bound(local_lam, span),
                            regularization_fallback=lam, oracle_bound_fallback=resolved["oracle_bound"],
                            localization_radius=reach, localization_users=located,
                            localization_noise_std=scale * local.noise_std)
        cells = (replicas.count, n)
        # one ledger unit is (eps / (stages share), delta / (stages share)): a phase charges 1, the localization share
        noise = _noise([p for p in (*first, *fallback, localization) if p is not None], scale,
                       levels / (stages * share) if private else None, delta / (stages * share) if private else 0.0)
        if not private or scale != 1.0:
            privacy = not_private(cells)
            if scale != 1.0:
                privacy = _diagnostic(privacy, scale)
            return PhasedPlan(algorithm_class, objective, first, scale, radius, shape, replicas.count, privacy,
                              resolved, ridge=mu or 0.0, localization=localization, fallback=fallback, noise=noise)
        opening = localization or first[0]
        sigma_first = np.array([mech.noise_std / mech.sensitivity for mech in opening.mechanisms])
        releases = [p for p in (localization, *first, *fallback) if p is not None]
        # the enumerated search's worst case over every release the run may make, from public sizes
        solves = max(enumeration_solves(p.users.size, mech.deletions) for p in releases for mech in p.mechanisms)
        resolved["fallback_solves"] = float(solves)      # SOLVES_CAP + 1: more than 1e18
        if on_unstable == ABORT:
            privacy = not_dp_release(levels, delta, cells, sigma_first, {"phases": count, "min_users": fewest},
                                     PHASED_NO_RELEASE, calibration)
            return PhasedPlan(algorithm_class, objective, first, scale, radius, shape, replicas.count, privacy,
                              resolved, ridge=mu or 0.0, localization=localization, fallback=fallback, noise=noise)
        check_fallback(solves, most_solves, max(p.users.size for p in releases),
                       max(mech.kappa for p in releases for mech in p.mechanisms), str(alg.name))
        if noise is None:
            raise ValueError("a private Phased-ERM plan needs its releases' Gaussian step; got None")
        rule = CertifiedReleases(noise)      # each unit as the releases' step certifies it (the value they apply)
        phased = "basic" if share > 1 else "parallel (disjoint phases)"
        if mu:
            phased = f"basic (localization + {'phases' if share > 1 else 'disjoint phases'})"
        accountant = ComposedAccountant(rule, phased, releases_per_participation=stages * share)
        privacy = PrivacyPlan(
            trust_model=TrustModel.CENTRAL, calibration=calibration, accountant=accountant.name, unit=USER, relation=Relation.REPLACE_ONE,
            delta=np.full(n, delta), noise_multiplier=np.broadcast_to(sigma_first[:, None], cells).copy(),
            target_epsilon=np.broadcast_to(levels[:, None], cells).copy(), ledger=Ledger(accountant, cells, "user"),
            details={"phases": count, "min_users": fewest})
        return PhasedPlan(algorithm_class, objective, first, scale, radius, shape, replicas.count, privacy, resolved,
                          ridge=mu or 0.0, localization=localization, fallback=fallback, noise=noise)

    @staticmethod
    def _phase_count(variant: str, n: int, m: int, dim: int, eps: float, delta: float, beta: float) -> int:
        if variant == "erm":
            return max(1, math.ceil(math.log2(n * m)))
        fewest = CertifiedPerturbation(eps, delta, beta, 1.0, 1.0, 10**9, m).min_users
        if variant == "sco":
            return int(math.floor(math.log2(n / fewest))) if n >= fewest else 0
        floor = CertifiedPerturbation(eps, delta, beta, 1.0, 1.0, 10**9, m).fewest_users
        for count in range(1, 64):                         # the smallest T with 4^T >= 2 c T sqrt(d m)
            batch = n // count
            if batch < floor:
                return 0
            c = certificate_constant(eps, delta, beta / count, 1.0, batch, m)
            if 4.0**count >= 2 * c * count * math.sqrt(dim * m):
                return count if batch >= fewest else 0
        return 0

    @staticmethod
    def _regularization(value, reference: list, groups: list, lipschitz: float, diameter: float, paper_diameter: float,
                        dim: int, m: int, n: int, variant: str, scale: float) -> float:
        """lambda for a set of diameter R; ``balanced`` for the noise actually added (sigma_i scaled by
        the diagnostic's s); ``paper`` with the paper's R (Alg. 5 / 6 write the radius R' there)."""
        if value == "paper":
            return lipschitz * math.sqrt(dim) / (paper_diameter * n * math.sqrt(m))
        if value == "balanced":
            constants = [scale * certificate_constant(c.epsilon, c.delta, c.beta, 2 * lipschitz, c.num_users, m,
                                                      c.calibration)
                         for c in reference]
            return balanced_regularization(constants, [g.size for g in groups], lipschitz, diameter, dim, m,
                                           variant != "erm")
        if isinstance(value, str):
            raise ConfigError("algorithm.regularization", value, f"a positive number or one of {REGULARIZATIONS}")
        return positive("algorithm.regularization", value)


@dataclass(frozen=True)
class Phase:
    """One release: its users (ids, sorted), lambda_i of its term (lambda_i / 2) ||theta - centre||^2
    (0 for the localizing release), per replica the constants of its release
    (``CertifiedPerturbation``) or None, and what it charges each of its users in the ledger's
    units."""

    users: np.ndarray
    regularization: float
    mechanisms: tuple
    charge: int = 1


# SCOutputPert's caveat (planning.NO_RELEASE) for the whole sequence: an abort steers what follows
PHASED_NO_RELEASE = ("NOT DP (algorithm.on_unstable=abort_not_private), the whole run: each release's failed stability "
                     "check releases nothing instead of running Alg. 1's stable-set search, and one user can flip that "
                     "outcome, which then keeps the previous centre for the next phase (and with strong_convexity "
                     "picks the phases' lambda and start); no finite epsilon holds (the ledger reports inf). The noise "
                     "is calibrated for each release's (eps_i, delta_i), which holds given the earlier releases only "
                     "between neighbouring datasets on which its check passes for both; `phases_without_release` and "
                     "`localized` are diagnostics, not DP outputs")


def _phase(users: np.ndarray, regularization: float, mechanisms: tuple, charge: int = 1) -> Phase:
    return Phase(users, regularization, mechanisms, charge)


def _diagnostic(privacy: PrivacyPlan, scale: float) -> PrivacyPlan:
    return replace(privacy, details={"noise_scale": scale, "diagnostic": f"every phase's sigma scaled by {scale:g}: "
                                     "not DP (the localization analysis checked without the privacy noise)"})
