"""Planning user-level output perturbation (the ``ProtocolRecipe`` contract of ``fedray.core.planning``).

Checks before any actor starts: central user-level DP or none; every user in the one release
(``participation=all``, ``num_rounds=1``); a loss with a bounded derivative (the sensitivity needs
G); positive lambda, B and tau; the calibration. Then sigma per replica from its budget, and a
ledger charging each user one (eps, delta) release per replica (basic composition of a single
release: exactly (eps, delta)).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import math
from dataclasses import dataclass, field

import numpy as np

from fedray.checks import number_in, positive
from fedray.core.planning import (
    AlgorithmSettings, Because, CuratorRoundsPlan, PlanContext, PlannedProtocol, Positive,
    PrivacySettings, ProtocolRecipe, Stepped, Within, settings_of,
)
from fedray.core.protocol import Routing
from fedray.core.sampling import AllUnits, UniformParticipation
from fedray.core.terms import Accountant, Calibration, Relation, TrustModel
from fedray.errors import ConfigError
from fedray.evaluation import linear_models
from fedray.gradient_descent import ProjectedGradient
from fedray.objectives import LinearModelObjective
from fedray.privacy.accounting import calibrate_noise_multiplier
from fedray.privacy.composition import ApproxDpComposition
from fedray.privacy.gaussian import analytic_sigma, classic_sigma
from fedray.privacy.ledger import (
    CertifiedReleases, ComposedAccountant, Ledger, UnboundedAccountant, central_gaussian_ledger,
)
from fedray.privacy.mechanisms import CalibratedGaussianNoise, NoNoise, PhaseGaussianNoise, ServerGaussianNoise
from fedray.privacy.statement import PrivacyPlan
from fedray.protocols.user_level.deletion import (
    CALIBRATIONS as DELETION_CALIBRATIONS,
    SOLVES_CAP,
    CertifiedPerturbation,
    ExactPerturbation,
    enumeration_solves,
    kappa,
)

USER = "user (all records of one silo)"
CALIBRATIONS = (Calibration.ACCOUNTANT, Calibration.PAPER)


# algorithm.on_unstable: what a release does when S = {} is not certified stable. ``search`` runs
# Alg. 1's stable-set search (DP; the 1-D mean's window search in exact mode, else enumeration,
# refused at planning when it would evaluate more than algorithm.max_fallback_solves sub-datasets);
# ABORT releases nothing instead (spec A16), which is NOT DP: one user can flip whether it releases
ABORT = "abort_not_private"
MAX_FALLBACK_SOLVES = 100_000


@dataclass(frozen=True, kw_only=True)
class OutputPerturbationSettings(AlgorithmSettings):
    """Output perturbation's section: lambda, B (records scaled to norm at most B) and tau."""

    regularization: Annotated[float, Positive()]
    feature_bound: Annotated[float, Positive()]
    gradient_tolerance: Annotated[float, Positive()]


@dataclass(frozen=True, kw_only=True)
class UnstableSettings(AlgorithmSettings):
    """What a release does when its stability certificate fails (``on_unstable_setting``)."""

    on_unstable: Annotated[Literal["search", "abort_not_private"], Because(
        f"(search: Alg. 1's stable-set search, DP; {ABORT}: release nothing, NOT DP)")] = "search"
    max_fallback_solves: Annotated[int, Positive()] = MAX_FALLBACK_SOLVES
    allow_few_users: bool = False       # below N0 (privacy holds; utility void)


@dataclass(frozen=True, kw_only=True)
class CertifiedSettings(UnstableSettings):
    """SCOutputPert's section."""

    strong_convexity: Annotated[float, Positive()]
    feature_bound: Annotated[float, Positive()]
    beta: Annotated[float, Within(0.0, 1.0, "a failure probability in (0, 1)")]
    mode: Literal["certificate", "exact"] = "certificate"


@dataclass(frozen=True, kw_only=True)
class UserDpSgdSettings(Stepped):
    """B1's section: the clip L of each user's mean gradient, W's radius (None: R^d), the ridge."""

    l2_clip: Annotated[float, Positive()]
    radius: Annotated[float | None, Positive()] = None
    regularization: float = 0.0        # 0 or positive (the plan checks: a ridge lambda / 2 ||w||^2)


@dataclass(frozen=True)
class OutputPerturbationPlan(PlannedProtocol):
    """The program resolved against its data (``PlannedProtocol``)."""

    algorithm_class: type[Any]
    objective: LinearModelObjective
    regularization: float
    gradient_tolerance: float
    noise: CalibratedGaussianNoise | NoNoise
    shape: Any
    privacy: PrivacyPlan
    resolved: dict = field(default_factory=dict)
    routing: Routing = Routing.DIRECT          # no client messages: nothing to shuffle
    num_replicas: int = 1

    def build(self, oracle):
        model_shape = (self.shape.dim, self.objective.loss.num_outputs)
        return self.algorithm_class(self.objective, self.regularization, self.gradient_tolerance, self.noise,
                                    self.num_replicas, self.shape.num_silos, model_shape, {"sensitivity": self.resolved["sensitivity"]})


def sensitivity(lipschitz: float, regularization: float, num_users: int, tolerance: float) -> float:
    """Delta = 2 G / (lambda n) + 2 tau / lambda (``output_perturbation``'s module docstring)."""
    return 2.0 * lipschitz / (regularization * num_users) + 2.0 * tolerance / regularization


@dataclass(frozen=True)
class OutputPerturbationRecipe(ProtocolRecipe):
    trust_models: tuple[TrustModel, ...] = (TrustModel.CENTRAL, TrustModel.NONE)
    settings: type[AlgorithmSettings] = OutputPerturbationSettings
    privacy_keys: tuple[str, ...] = ()
    budget_grid: bool = True           # privacy.epsilon_grid: one noise per budget, as replicas
    config_keys: tuple[str, ...] = ()

    def plan(self, algorithm_class: type[Any], config: dict, context: PlanContext) -> OutputPerturbationPlan:
        alg, priv, shape = settings_of(OutputPerturbationSettings, context.algorithm), context.privacy, context.shape
        _check_program(config, context, alg.feature_bound)
        regularization, tolerance = alg.regularization, alg.gradient_tolerance
        objective = LinearModelObjective(context.loss, alg.feature_bound)
        delta_sens = sensitivity(objective.lipschitz, regularization, shape.num_silos, tolerance)
        replicas, cells = context.replicas, (context.replicas.count, shape.num_silos)
        resolved = {"lipschitz": objective.lipschitz, "smoothness": objective.smoothness, "sensitivity": delta_sens}
        noise: CalibratedGaussianNoise | NoNoise = NoNoise()
        if not priv.private:
            privacy = not_private(cells)
        else:
            calibration = priv.calibration
            if calibration not in CALIBRATIONS:
                raise ConfigError("privacy.calibration", calibration, f"one of {CALIBRATIONS} for {alg.name}")
            delta = number_in("privacy.delta", priv.delta, 0.0, 1.0, "a number in (0, 1)")
            levels = _levels(priv, replicas)
            if calibration == Calibration.PAPER and np.any(levels >= 1):
                raise ConfigError("privacy.epsilon", float(levels.max()), "below 1 with privacy.calibration=paper "
                                  "(the classic Gaussian mechanism); privacy.calibration=accountant serves any epsilon")
            sigma = analytic_sigma if calibration == Calibration.ACCOUNTANT else classic_sigma
            noise_std = np.array([sigma(float(eps), delta, delta_sens) for eps in levels])
            noise = CalibratedGaussianNoise(noise_std, delta_sens, levels, delta, sigma)
            privacy = _one_release(calibration, levels, delta, cells, noise_std / delta_sens,
                                   {"noise_std_max": float(noise_std.max())}, noise=noise)
            resolved["noise_std_max"] = float(noise_std.max())
        return OutputPerturbationPlan(algorithm_class, objective, regularization, tolerance, noise, shape,
                                      privacy, resolved=resolved, num_replicas=replicas.count)


@dataclass(frozen=True)
class CertifiedPlan(PlannedProtocol):
    """SCOutputPert resolved against its data (``PlannedProtocol``)."""

    algorithm_class: type[Any]
    objective: LinearModelObjective
    strong_convexity: float
    mechanisms: tuple
    tolerance: float
    shape: Any
    privacy: PrivacyPlan
    resolved: dict = field(default_factory=dict)
    routing: Routing = Routing.DIRECT
    noise: PhaseGaussianNoise | None = None      # the mechanisms' Gaussian step (None without privacy)

    def build(self, oracle):
        model_shape = (self.shape.dim, self.objective.loss.num_outputs)
        return self.algorithm_class(self.objective, self.strong_convexity, self.mechanisms, self.tolerance,
                                    self.shape.num_silos, model_shape,
                                    {k: v for k, v in self.resolved.items() if k not in ("mode", "on_unstable")},
                                    self.resolved["mode"], self.resolved["on_unstable"], self.noise)


@dataclass(frozen=True)
class CertifiedPerturbationRecipe(ProtocolRecipe):
    """SCOutputPert (certificate mode): checks as output perturbation, plus every user holding the
    same m items, beta in (0, 1), eps <= 1 (the paper's range; refused above), and n >= N0 =
    8 kappa + 2 unless ``algorithm.allow_few_users`` (then the utility guarantee is void; privacy
    is not affected, Thm 3.3 holds for every n >= 4 kappa + 2, a floor always refused below).
    ``on_unstable=search`` (DP) needs Alg. 1's search to be affordable: free in exact mode (the
    window search), at most ``max_fallback_solves`` sub-datasets in certificate mode, else the plan
    is refused; ``abort_not_private`` is planned with an infinite epsilon and a NOT DP statement."""

    trust_models: tuple[TrustModel, ...] = (TrustModel.CENTRAL, TrustModel.NONE)
    settings: type[AlgorithmSettings] = CertifiedSettings
    privacy_keys: tuple[str, ...] = ()
    budget_grid: bool = True           # privacy.epsilon_grid: one noise per budget, as replicas
    config_keys: tuple[str, ...] = ()

    def plan(self, algorithm_class: type[Any], config: dict, context: PlanContext) -> CertifiedPlan:
        alg, priv, shape, replicas = settings_of(CertifiedSettings, context.algorithm), context.privacy, context.shape, \
            context.replicas
        _check_program(config, context, alg.feature_bound)
        mu = alg.strong_convexity
        objective = LinearModelObjective(context.loss, alg.feature_bound)
        beta, few, mode = alg.beta, alg.allow_few_users, alg.mode
        if mode == "exact" and not (context.loss.linear_in_record
                                    and shape.dim * context.loss.num_outputs == 1):
            raise ConfigError("algorithm.mode", mode, "certificate, unless the loss is Linear in one dimension (a "
                              f"1-D mean, whose deletion sensitivity has an exact formula); here {type(context.loss).__name__}"
                              f" in {shape.dim * context.loss.num_outputs} dimensions")
        items = set(shape.items)
        if len(items) != 1:
            raise ConfigError("data", f"{min(items)}..{max(items)} items per user",
                              f"the same number of items for every user ({alg.name})")
        lipschitz = 2.0 * objective.lipschitz          # item loss + (mu/2)||theta||^2 on K = B(0, G_item/mu)
        cells, n, m = (replicas.count, shape.num_silos), shape.num_silos, items.pop()
        on_unstable, most_solves = on_unstable_setting(alg)
        resolved = {"lipschitz": lipschitz, "items_per_user": m, "mode": mode, "on_unstable": on_unstable}
        if not priv.private:
            return CertifiedPlan(algorithm_class, objective, mu, (None,) * replicas.count, 1e-9 * lipschitz, shape,
                                 not_private(cells), resolved)
        calibration = priv.calibration
        if calibration not in DELETION_CALIBRATIONS:
            raise ConfigError("privacy.calibration", calibration, f"one of {DELETION_CALIBRATIONS} for SCOutputPert "
                              "(paper: Thm 3.3's noise; tight: the same guarantee by its coupling, computed exactly)")
        delta = number_in("privacy.delta", priv.delta, 0.0, 0.5, "a number in (0, 1/2]", closed_high=True)
        levels = _levels(priv, replicas)
        if np.any(levels > 1):
            raise ConfigError("privacy.epsilon", float(levels.max()), "at most 1 (the paper's range, eps in (0, 1])")
        constants = ExactPerturbation if mode == "exact" else CertifiedPerturbation
        floor = 4 * kappa(float(levels.min()) / 2, delta / (math.exp(float(levels.min())) + 2)) + 2
        if n < floor:
            raise ConfigError("data.spec.num_silos", n, f"at least 4 kappa + 2 = {floor} users for (eps, delta) = "
                              f"({float(levels.min()):g}, {delta:g}) (Delta's denominator n - 4 kappa - 1; "
                              "allow_few_users lifts only the N0 refusal)")
        # tight: the certificate may also take the smooth route (Hessians of the item loss <= its smoothness)
        extra = {"smoothness": objective.smoothness} if constants is CertifiedPerturbation else {}
        mechanisms = tuple(constants(float(eps), delta, beta, lipschitz, mu, n, m, calibration, **extra)
                           for eps in levels)
        fewest = max(mech.min_users for mech in mechanisms)
        if n < fewest and not few:
            raise ConfigError("data.spec.num_silos", n, f"at least N0 = {fewest} users for (eps, delta) = "
                              f"({float(levels.min()):g}, {delta:g}) (or algorithm.allow_few_users=true)")
        sigma = np.array([mech.noise_std for mech in mechanisms])
        sensitivity = np.array([mech.sensitivity for mech in mechanisms])
        # the fallback's cost, before any data: the 1-D mean's window search is polynomial; the
        # enumeration evaluates the solver on up to this many sub-datasets
        solves = 0 if mode == "exact" else max(enumeration_solves(n, mech.deletions) for mech in mechanisms)
        resolved.update(kappa=max(mech.kappa for mech in mechanisms), min_users=fewest,
                        sensitivity_max=float(sensitivity.max()), noise_std_max=float(sigma.max()),
                        fallback_solves=float(solves))
        details = {"noise_std_max": float(sigma.max()), "min_users": fewest}
        # Thm 3.3's sigma at each replica's target, added as computed (one release: one column)
        noise = PhaseGaussianNoise(sigma[:, None], sigma[:, None].copy(), levels, delta)
        if on_unstable == ABORT:
            privacy = not_dp_release(levels, delta, cells, sigma / sensitivity, details, NO_RELEASE, calibration)
        else:
            check_fallback(solves, most_solves, n, max(mech.kappa for mech in mechanisms), str(alg.name))
            privacy = _one_release(calibration, levels, delta, cells, sigma / sensitivity, details, noise=noise)
        tolerance = min(mech.strong_convexity * getattr(mech, "tolerance", math.inf) for mech in mechanisms)
        return CertifiedPlan(algorithm_class, objective, mu, mechanisms, tolerance, shape, privacy, resolved,
                             noise=noise)


NO_RELEASE = ("NOT DP (algorithm.on_unstable=abort_not_private): a failed stability check releases nothing instead "
              "of running Alg. 1's stable-set search, and one user can flip whether it releases, so no finite "
              "epsilon holds for the run (the ledger reports inf); the noise is calibrated for (eps, delta), which "
              "holds for the output only between neighbouring datasets on which the check passes for both; "
              "`released` is a diagnostic, not a DP output")


def on_unstable_setting(alg: UnstableSettings) -> tuple[str, int]:
    """``algorithm.on_unstable`` (default search) and ``algorithm.max_fallback_solves``."""
    return alg.on_unstable, alg.max_fallback_solves


def check_fallback(solves: int, most: int, users: int, kappa_: int, name: str) -> None:
    """Refuse a DP plan whose stable-set search could not run: enumerating Alg. 1's search may
    evaluate ``solves`` sub-datasets (``deletion.enumeration_solves``), more than ``most``."""
    if solves > most:
        raise ConfigError("algorithm.on_unstable", "search", f"{ABORT} for {name} (NOT DP) or a smaller problem: when "
                          f"the certificate fails, Alg. 1's stable-set search may solve {_count(solves)} sub-datasets"
                          f" (n = {users} users, up to 4 kappa + 1 = {4 * kappa_ + 1} deleted), more than "
                          f"algorithm.max_fallback_solves = {most}; exact mode (a 1-D mean) searches in polynomial time")


def _count(solves: int) -> str:
    return "more than 1e18" if solves > SOLVES_CAP else f"{solves:,}"


def not_dp_release(levels: np.ndarray, delta: float, cells: tuple, multiplier: np.ndarray, details: dict,
                   caveat: str, calibration: Calibration = Calibration.PAPER) -> PrivacyPlan:
    """The abort variant's plan: noise calibrated for (eps, delta) (``nominal_epsilon``), a ledger
    that prices every release at epsilon = inf (no finite guarantee), targets inf, and the caveat."""
    return PrivacyPlan(
        trust_model=TrustModel.CENTRAL, calibration=calibration, accountant="none (not DP)", unit=USER, relation=Relation.REPLACE_ONE,
        delta=np.full(cells[1], delta), noise_multiplier=np.broadcast_to(multiplier[:, None], cells).copy(),
        target_epsilon=np.full(cells, np.inf), ledger=Ledger(UnboundedAccountant(), cells, "user"),
        nominal_epsilon=np.broadcast_to(levels[:, None], cells).copy(), details={**details, "guarantee": "none"},
        non_private_inputs=(caveat,))


def _check_program(config: dict, context: PlanContext, feature_bound: float) -> None:
    """What every driver-side user-level program needs: one release over every user, a smooth loss
    with a bounded derivative, and a feature bound B the data's records allow."""
    name = str(context.algorithm.name)
    if not isinstance(context.sampler, AllUnits):
        raise ConfigError("participation", type(context.sampler).__name__,
                          f"every user (participation=all) for {name}: one release reads all of them")
    if context.num_rounds != 1:
        raise ConfigError("num_rounds", context.num_rounds, f"1 for {name} (one release)")
    if context.shape.summarised_items is not None and isinstance(feature_bound, (int, float)) and feature_bound < 1:
        raise ConfigError("algorithm.feature_bound", feature_bound, f"at least 1 for data={config['data'].get('name')}: "
                          "its records are means of items of norm <= 1, and scaling a mean is not scaling its items")
    bound = getattr(context.loss, "residual_bound", math.inf)
    if not math.isfinite(bound) or not hasattr(context.loss, "curvature"):
        raise ConfigError("data.loss", type(context.loss).__name__,
                          f"a smooth loss with a bounded derivative (Logistic, Softmax) for {name}")


def _levels(priv: PrivacySettings, replicas) -> np.ndarray:
    if replicas.epsilon_levels is not None:
        return replicas.epsilon_levels
    return np.full(replicas.count, positive("privacy.epsilon", priv.epsilon))


def _one_release(calibration: Calibration, levels: np.ndarray, delta: float, cells: tuple, multiplier: np.ndarray,
                 details: dict, outside: tuple = (),
                 noise: CalibratedGaussianNoise | PhaseGaussianNoise | None = None) -> PrivacyPlan:
    """Each user is charged one (eps, delta) release per replica (basic composition of one);
    ``outside``: what the run shows that the guarantee does not cover. Given ``noise`` (the step
    the program applies), the release's (eps, delta) is what that step certifies."""
    rule = ApproxDpComposition(levels[:, None], delta, 0.0, route="basic") if noise is None else CertifiedReleases(noise)
    return PrivacyPlan(
        trust_model=TrustModel.CENTRAL, calibration=calibration, accountant=Accountant.BASIC, unit=USER, relation=Relation.REPLACE_ONE,
        delta=np.full(cells[1], delta), noise_multiplier=np.broadcast_to(multiplier[:, None], cells).copy(),
        target_epsilon=np.broadcast_to(levels[:, None], cells).copy(),
        ledger=Ledger(ComposedAccountant(rule, "basic"), cells, "user"), details=details, non_private_inputs=outside)


def not_private(cells: tuple) -> PrivacyPlan:
    return PrivacyPlan(trust_model=TrustModel.NONE, calibration=Calibration.NONE, accountant=Accountant.NONE, unit=USER, relation=Relation.REPLACE_ONE,
                       delta=np.zeros(cells[1]), noise_multiplier=np.zeros(cells), target_epsilon=None, ledger=None)


def check_curator_rounds(context: PlanContext, sampler: type, needs: str) -> int:
    """What a user-level round protocol at a trusted server checks first: its participation (a
    ``sampler``, described by ``needs``), the same m for every user; m."""
    name = context.algorithm.name
    if not isinstance(context.sampler, sampler):
        raise ConfigError("participation", type(context.sampler).__name__, f"{needs} for {name}")
    items = set(context.shape.items)
    if len(items) != 1:
        raise ConfigError("data", f"{min(items)}..{max(items)} items per user", f"the same m for every user ({name})")
    return items.pop()


@dataclass(frozen=True)
class UserSampledGaussian(ProtocolRecipe):
    """B1 (``user_dp_sgd``): K users per round (``participation=uniform``), each user's mean
    gradient clipped to L, the mean's Gaussian noise z 2 L / K with z calibrated by the RDP
    accountant for num_rounds K-of-N subsampled releases at (eps, delta) (``privacy.calibration=
    accountant``), every user charged every round; the ledger (``central_gaussian_ledger``) prices
    the event of the ``ServerGaussianNoise`` the server half applies (one value)."""

    trust_models: tuple[TrustModel, ...] = (TrustModel.CENTRAL, TrustModel.NONE)
    settings: type[AlgorithmSettings] = UserDpSgdSettings
    privacy_keys: tuple[str, ...] = ()
    config_keys: tuple[str, ...] = ()

    def plan(self, algorithm_class: type[Any], config: dict, context: PlanContext) -> CuratorRoundsPlan:
        alg, priv, shape, replicas = settings_of(UserDpSgdSettings, context.algorithm), context.privacy, context.shape, \
            context.replicas
        name = alg.name
        items = check_curator_rounds(context, UniformParticipation,
                                     "uniform (K of the N users each round, without replacement)")
        clip, radius = alg.l2_clip, alg.radius
        users, rounds, batch = shape.num_silos, context.num_rounds, int(context.sampler.silos_per_round)
        cells = (replicas.count, users)
        ridge: float = alg.regularization
        if ridge != 0 or isinstance(ridge, bool):
            ridge = number_in("algorithm.regularization", ridge, 0.0, 1e12, "0 or a positive number (the ridge "
                              "lambda / 2 ||w||^2, data independent)")
        solver = ProjectedGradient(replicas.step_sizes, ridge, radius)
        resolved = {"users_per_round": batch, "l2_clip": clip}
        if not priv.private:
            algorithm = algorithm_class(context.loss, solver, math.inf, ServerGaussianNoise(np.zeros(replicas.count), 0.0),
                                        rounds, items)
            return CuratorRoundsPlan(algorithm, context.sampler, *linear_models(context.loss, shape, replicas.count), rounds,
                                     not_private(cells), resolved)
        if priv.calibration != Calibration.ACCOUNTANT:
            raise ConfigError("privacy.calibration", priv.calibration, f"accountant for {name} (the RDP "
                              "accountant's noise for the subsampled Gaussian)")
        delta = number_in("privacy.delta", priv.delta, 0.0, 1.0, "a number in (0, 1)")
        levels = _levels(priv, replicas)
        multipliers = {float(eps): calibrate_noise_multiplier(float(eps), delta, batch, users, 1, rounds, Accountant.RDP)
                       for eps in np.unique(levels)}
        z = np.array([multipliers[float(eps)] for eps in levels])
        noise = ServerGaussianNoise(z, 2 * clip, divisor=batch)      # std z 2 L / K on the mean of K
        algorithm = algorithm_class(context.loss, solver, clip, noise, rounds, items)
        first = z[0]
        ledger = central_gaussian_ledger(noise, batch, users, delta, "user", Accountant.RDP)
        resolved.update(noise_multiplier=float(first), noise_std=float(first * 2 * clip / batch))
        privacy = PrivacyPlan(
            trust_model=TrustModel.CENTRAL, calibration=Calibration.ACCOUNTANT, accountant=Accountant.RDP, unit=USER, relation=Relation.REPLACE_ONE,
            delta=np.full(users, delta), noise_multiplier=np.broadcast_to(z[:, None], cells).copy(),
            target_epsilon=np.broadcast_to(levels[:, None], cells).copy(), ledger=ledger,
            details={"noise_multiplier": float(first)},
            non_private_inputs=("the subsampling credit needs each round's users to stay secret (a simulation keys "
                                "them by the run seed)",))
        return CuratorRoundsPlan(algorithm, context.sampler, *linear_models(context.loss, shape, replicas.count), rounds, privacy, resolved,
                                 {"l2_clip": clip, "noise_std_max": float(noise.noise_std.max())},
                                 server_step_metrics=noise)
