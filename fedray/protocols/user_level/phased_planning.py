"""Planning seed 002's Alg. 3 (the ``ProtocolRecipe`` contract of ``fedray.core.planning``).

``resolve`` turns the public inputs (n users of m items, d, eps, delta, L, R = 2 ``radius``,
beta, q and the profile) into the phases (``phased_parameters``: Thm C.3's formulas, rounded as
spec §5 item 1) and writes them into the config: ``participation=phased`` gets its phase sizes,
steps and users per step, and ``num_rounds`` becomes sum T_i. ``plan`` checks the rest before any
actor starts (central user-level DP or none, one privacy.epsilon, ``privacy.calibration=paper``,
every user the same m items, every phase at least one user), builds one AC-SA per phase and a
ledger that charges each user of a phase once (``PhaseAccountant``: parallel composition over
disjoint phases of (eps, delta) each).

``algorithm.strong_convexity`` (mu of the risk) plans Remark 3.6's restarts: the runs of
``phased_parameters.restarts``, each planned as above on its n / k users and distance bound D_j,
their phases joined into one list (``participation`` holds them all).

Without privacy the schedule is the eps -> inf limit of the private one (lambda = (L / R) / sqrt(n m),
every user of a phase in every step, no test, filter or noise): the non-private reference.

Profiles (spec §4.1): ``paper`` is the printed constants with K_i capped at n_i; ``exploratory``
multiplies the constants 500 and 1000 by ``kappa``, so its eps is nominal and the privacy
statement says so; ``derived`` (with ``privacy.calibration=accountant``) takes K_i and sigma_i
from the proof's inequalities and the PLD accountant without subsampling credit
(``phased_parameters.derived_batch`` and ``derived_noise``), so its eps holds modulo the coupling
constant c_Delta = 120 where its good event holds (elsewhere the statement names the failure and
eps is nominal). Where Thm 3.1's conditions fail at the run's size (they do at any laptop
scale under ``paper``) the statement names each failed condition: the run is not covered by the
theorem, and its output is what the printed noise gives (the feasibility notes say how large).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import math
from dataclasses import dataclass

import numpy as np

from fedray.acsa import AcSa, Phases
from fedray.checks import number_in, positive
from fedray.core.planning import (
    AlgorithmSettings, Because, CuratorRoundsPlan, PlanContext, Positive, PrivacySettings,
    ProtocolRecipe, Stepped, Within, settings_of,
)
from fedray.core.sampling import AllUnits, UniformParticipation
from fedray.core.terms import Calibration, Relation, TrustModel
from fedray.errors import ConfigError
from fedray.evaluation import linear_models
from fedray.gradient_descent import ProjectedGradient
from fedray.privacy.ledger import CertifiedReleases, Ledger, PhaseAccountant
from fedray.privacy.mechanisms import PhaseGaussianNoise
from fedray.privacy.statement import PrivacyPlan
from fedray.protocols.user_level.planning import USER, not_private
from fedray.protocols.user_level.phased_parameters import (
    COUPLING_CONSTANT, AcceleratedSchedule, PhaseLayout, Problem, accelerated_notes, accelerated_schedule, derived_batch,
    derived_noise, good_event_failures, layout_noise_std, phase_layout, privacy_conditions, restarts, smoothed,
    smoothing_radius, stage_lengths,
)

PHASED = "fedray.core.sampling.PhasedSubsets"


@dataclass(frozen=True, kw_only=True)
class FilterSettings(AlgorithmSettings):
    """What seed 002's filtered-gradient algorithms share: the profile's constants and the item
    loss's L and beta over X, the l2 ball of ``radius`` (R = 2 radius)."""

    profile: Literal["paper", "exploratory", "derived"] = "paper"
    kappa: Annotated[float, Positive()] = 1.0              # exploratory only
    threshold_constant: Annotated[float, Positive()] = 1.0      # c_tau
    lipschitz: Annotated[float, Positive()]
    smoothness: Annotated[float, Positive()]
    radius: Annotated[float, Positive()]


@dataclass(frozen=True, kw_only=True)
class PhasedFilterSettings(FilterSettings):
    """Algorithms of phases of decaying size: n_i = (1 - 2^-q) n / 2^(i q)."""

    decay: Annotated[float, Within(0.0, 1.0, "q in (0, 1)")] = 0.1


@dataclass(frozen=True, kw_only=True)
class AcceleratedErmSettings(PhasedFilterSettings):
    """Alg. 3's section (``accelerated_phased_erm``)."""

    steps_constant: Annotated[float, Positive()] = 1.0     # c_T
    stages: Annotated[Literal["multi", "single"], Because("(GL13's restarts, or one AC-SA run per phase)")] = "multi"
    solver: Literal["acsa", "sgd"] = "acsa"
    smoothing: bool = False
    full_batch: bool = False
    strong_convexity: Annotated[float | None, Positive()] = None


@dataclass(frozen=True, kw_only=True)
class FullBatchSettings(FilterSettings, Stepped):
    """One phase of Alg. 2 (``filtered_gd``, ``filtered_acsa``)."""

    output: Annotated[Literal["average", "last"], Because("(the average iterate, or the last)")] = "average"
    solver: Literal["gd", "acsa"] = "gd"


def _inputs(alg: FilterSettings, priv: PrivacySettings, shape, loss, solver: str) -> tuple[Problem, dict]:
    """The public problem and the profile's constants, every value checked."""
    name = alg.name
    profile, kappa = alg.profile, alg.kappa
    erm = alg if isinstance(alg, AcceleratedErmSettings) else None
    if profile != "exploratory" and kappa != 1.0:
        raise ConfigError("algorithm.kappa", kappa, f"1 with algorithm.profile={profile} (exploratory scales the "
                          "constants)")
    items = set(shape.items)
    if len(items) != 1:
        raise ConfigError("data", f"{min(items)}..{max(items)} items per user", f"the same m for every user ({name})")
    if not priv.private:
        eps, delta = math.inf, 0.5      # the eps -> inf limit: lambda = (L / R) / sqrt(n m), K_i = n_i (delta unused)
    else:
        eps = positive("privacy.epsilon", priv.epsilon)
        delta = number_in("privacy.delta", priv.delta, 0.0, 1.0, "a number in (0, 1)")
    problem = Problem(shape.num_silos, items.pop(), shape.dim * loss.num_outputs, eps, delta, alg.lipschitz,
                      2.0 * alg.radius, alg.smoothness, alg.decay if isinstance(alg, PhasedFilterSettings) else 0.1)
    if problem.users < 2:
        raise ConfigError("data.spec.num_silos", problem.users, f"at least 2 users for {name} (floor(log2 n) phases)")
    constants: dict[str, Any] = {"profile": profile, "kappa": kappa, "solver": solver, "c_tau": alg.threshold_constant,
                                 "c_T": erm.steps_constant if erm else 1.0}
    full_batch = erm.full_batch if erm else False
    constants["full_batch"] = full_batch
    smoothing = erm.smoothing if erm else False
    mu = erm.strong_convexity if erm else None
    if mu is not None:
        constants["strong_convexity"] = mu
        # a beta-smooth, L-Lipschitz risk on a ball of radius r is at most min(beta, L / r)-strongly convex
        most = min(problem.smoothness, problem.lipschitz / (problem.diameter / 2))
        if constants["strong_convexity"] > most:
            raise ConfigError("algorithm.strong_convexity", mu, f"at most min(smoothness, lipschitz / radius) = "
                              f"{most:g}: no smooth Lipschitz risk on X is more strongly convex")
        if smoothing:
            raise ConfigError("algorithm.strong_convexity", mu, f"null with algorithm.smoothing=true for {name} "
                              "(Remark 3.6's restarts are for a smooth loss)")
    if smoothing:
        # Thm D.3: gradients of f at x + y, y uniform in B(0, r), r from eps; beta_r replaces beta
        if loss.num_outputs != 1:
            raise ConfigError("algorithm.smoothing", True, f"false for a loss of {loss.num_outputs} outputs (the "
                              "perturbation is drawn per margin of a single-output linear model)")
        if not math.isfinite(eps):
            raise ConfigError("algorithm.smoothing", True, f"false without privacy for {name} (the radius "
                              "r = sqrt(d) R / (eps n sqrt m) is set by eps)")
        problem = smoothed(problem)[0]
        constants["smoothing_radius"] = smoothing_radius(problem)
    return problem, constants


def _runs(problem: Problem,
          constants: dict) -> tuple[list[tuple[Problem, AcceleratedSchedule, PhaseLayout]], float | None]:
    """Alg. 3's runs: one, or Remark 3.6's restarts (``phased_parameters.restarts``) for a
    strongly convex risk; each run's problem, schedule and layout, and the restarts' D* (None
    without them)."""
    mu = constants.get("strong_convexity")
    problems, fixed_point = restarts(problem, mu) if mu is not None else ((problem,), None)
    return [(p, *_schedule(p, constants)) for p in problems], fixed_point


def _joined(layouts) -> PhaseLayout:
    """The runs' phases one after another (disjoint users: ``PhasedSubsets`` assigns them)."""
    return PhaseLayout(*(tuple(v for layout in layouts for v in getattr(layout, f)) for f in ("users", "steps", "batch")))


def _schedule(problem: Problem, constants: dict) -> tuple[AcceleratedSchedule, PhaseLayout]:
    schedule = accelerated_schedule(problem, constants["c_tau"], constants["c_T"], constants["kappa"],
                                    accelerated=constants["solver"] == "acsa")
    if constants["profile"] == "derived":
        schedule = derived_batch(problem, schedule)
    layout = phase_layout(schedule)
    if constants.get("full_batch"):         # ablation A1: every user of a phase in every step (sigma_i does not read K_i)
        layout = PhaseLayout(layout.users, layout.steps, layout.users)
    empty = [i + 1 for i, users in enumerate(layout.users) if users < 1]
    if empty:
        raise ConfigError("data.spec.num_silos", problem.users, f"more users: phase {empty[0]} of {len(layout.users)} "
                          f"gets n_i = {schedule.phase_users[empty[0] - 1]:.3g} < 1 (n_i = (1 - 2^-q) n / 2^(i q))")
    return schedule, layout


def require_phased(config: dict, alg: AlgorithmSettings) -> None:
    """An algorithm that sets participation=phased's lists needs participation=phased."""
    if config["participation"].get("_target_") != PHASED:
        raise ConfigError("participation", config["participation"].get("_target_"),
                          f"participation=phased for {alg.name} (it sets the phases)")


def curator_privacy(alg: FilterSettings, priv: PrivacySettings, calibration_why: str = "") -> bool:
    """Whether the run is private: the trust model one of the recipe's, and a private run's
    calibration ``paper`` (the printed noise) under the profiles paper and exploratory, ``accountant``
    (the smallest noise for the derived sensitivity) under profile derived."""
    name, profile = alg.name, alg.profile
    private = priv.private
    expected = Calibration.ACCOUNTANT if profile == "derived" else Calibration.PAPER
    if private and priv.calibration != expected:
        why = " (the noise calibrated to the derived sensitivity)" if profile == "derived" else calibration_why
        raise ConfigError("privacy.calibration", priv.calibration,
                          f"{expected} for {name} with algorithm.profile={profile}{why}")
    return private


def phase_solvers(regularizations, smoothness: float, radius: float | None, stages: list, replicas: int) -> tuple:
    """One AC-SA per phase: mu = lambda_i (the regulariser's), step 1 / (beta + lambda_i), restarted
    after each of the phase's ``stages`` lengths (GL13)."""
    out = []
    for lam, lengths in zip(regularizations, stages):
        step = 1.0 / (smoothness + float(lam))
        out.append(AcSa(np.full(replicas, step), 0.0, float(lam), radius,
                        stages=Phases((step,) * len(lengths), tuple(lengths))))
    return tuple(out)


@dataclass(frozen=True)
class AcceleratedErm(ProtocolRecipe):
    trust_models: tuple[TrustModel, ...] = (TrustModel.CENTRAL, TrustModel.NONE)
    settings: type[AlgorithmSettings] = AcceleratedErmSettings
    sets_participation: bool = True           # participation=phased's lists come from the schedule
    privacy_keys: tuple[str, ...] = ()
    config_keys: tuple[str, ...] = ()

    def resolve(self, algorithm_class: type[Any], config: dict, dataset, shape, loss, sampler, privacy: PrivacySettings,
                algorithm: AlgorithmSettings) -> dict:
        """The phases as ``participation`` and sum T_i as ``num_rounds``."""
        alg = settings_of(AcceleratedErmSettings, algorithm)
        require_phased(config, alg)
        problem, constants = _inputs(alg, privacy, shape, loss, alg.solver)
        layout = _joined([layout for _, _, layout in _runs(problem, constants)[0]])
        participation = {"_target_": PHASED, "phase_units": list(layout.users), "steps": list(layout.steps),
                         "batch_sizes": list(layout.batch)}
        return {**config, "participation": participation, "num_rounds": int(sum(layout.steps))}

    def plan(self, algorithm_class: type[Any], config: dict, context: PlanContext) -> CuratorRoundsPlan:
        alg, shape, replicas = settings_of(AcceleratedErmSettings, context.algorithm), context.shape, context.replicas
        private = curator_privacy(alg, context.privacy, " (Alg. 2's printed sigma_i; algorithm.profile "
                                  "chooses the constants)")
        problem, constants = _inputs(alg, context.privacy, shape, context.loss, alg.solver)
        runs, fixed_point = _runs(problem, constants)
        stages = alg.stages
        derived = constants["profile"] == "derived"
        phases = [_run_phases(run, constants, private, stages) for run in runs]
        layout = _joined([run[2] for run in runs])
        sigma, multiplier, lam, tau = (np.concatenate([p[f] for p in phases]) for f in ("sigma", "multiplier", "lambda",
                                                                                         "tau"))
        lengths = [x for p in phases for x in p["lengths"]]
        beta = problem.smoothness
        starts = tuple(int(v) for v in np.concatenate([[0], np.cumsum(layout.steps)[:-1]]))
        unit_phase = context.sampler.members(context.seed, shape.num_silos)
        solvers = phase_solvers(lam, beta, problem.diameter / 2, lengths, replicas.count) \
            if constants["solver"] == "acsa" else \
            tuple(ProjectedGradient(np.full(replicas.count, 1.0 / (beta + lam_i)), float(lam_i), problem.diameter / 2)
                  for lam_i in lam)
        algorithm = algorithm_class(
            context.loss, solvers, layout.steps,
            layout.batch, starts, unit_phase, problem.items,
            tuple(map(float, tau)), _noise(sigma, replicas.count, problem), problem.epsilon, private,
            constants.get("smoothing_radius", 0.0))
        several = len(runs) > 1
        failed = [f"run {j + 1} of {len(runs)}: {why}" if several else why
                  for j, (p, schedule, run_layout) in enumerate(runs)
                  for why in privacy_conditions(p, schedule, run_layout, constants["profile"])]
        schedule = runs[0][1]
        notes = accelerated_notes(schedule, problem.dim) if not derived else \
            [f"Alg. 3 (profile derived): K_i = n_i in {sum(k == n for k, n in zip(layout.batch, layout.users))} of "
             f"{len(layout.users)} phases; the first phase's gradient noise has norm ~ "
             f"{sigma[0] * math.sqrt(problem.dim):.3g} (tau = {schedule.threshold:.3g})"]
        if "smoothing_radius" in constants:
            notes.append(f"randomized smoothing (Thm D.3): r = {constants['smoothing_radius']:.3g} (costs at most L r = "
                         f"{problem.lipschitz * constants['smoothing_radius']:.3g} in risk), beta_r = "
                         f"{problem.smoothness:.4g}, {sum(layout.steps)} steps")
        if fixed_point is not None:
            reached = runs[-1][0].diameter <= 2 * fixed_point
            notes.append(f"Remark 3.6: {len(runs)} run(s) of Alg. 3, each on {runs[0][0].users} users (its phases take "
                         f"{sum(runs[0][2].users)}), distance bounds D_j = "
                         f"{', '.join(f'{p.diameter:.3g}' for p, _, _ in runs)} against D* = {fixed_point:.3g} (mu = "
                         f"{constants['strong_convexity']:g}; Thm 3.2 read with constant 1: where the noise makes a run "
                         "worse than L D rho, the later D_j understate the distance)"
                         + ("" if reached else "; D_k > 2 D*: too few users for the reduction's target, so its "
                            "(L^2 / mu) rho^2 bound does not hold here"))
        resolved = {**constants, "users": problem.users, "items": problem.items, "phases": len(layout.users),
                    "regularization": float(schedule.regularization), "exponent": float(schedule.exponent),
                    "threshold": float(schedule.threshold), "phase_users": list(layout.users),
                    "phase_steps": list(layout.steps), "phase_batch": list(layout.batch),
                    "noise_std": [float(s) for s in sigma], "stages": [list(x) for x in lengths],
                    "gradients_no_halt": layout.gradients_per_item * problem.items,
                    "notes": notes, "privacy_conditions_failed": failed}
        if fixed_point is not None:
            resolved.update(runs=len(runs), run_users=runs[0][0].users, run_radii=[p.diameter for p, _, _ in runs],
                            restart_target_reached=reached, restart_fixed_point=fixed_point,
                            run_phases=[len(run_layout.users) for _, _, run_layout in runs],
                            phase_thresholds=[float(t) for t in tau])
        cells = (replicas.count, shape.num_silos)
        privacy = _phase_privacy(problem, layout, unit_phase, multiplier, cells, constants,
                                 failed, algorithm.noise) if private else not_private(cells)
        return CuratorRoundsPlan(algorithm, context.sampler, *linear_models(context.loss, shape, replicas.count), context.num_rounds,
                                 privacy, resolved, _constants(algorithm))


def _run_phases(run: tuple, constants: dict, private: bool, stages: str) -> dict:
    """One run's per-phase sigma_i, noise multiplier, lambda_i, GL13 stage lengths and tau."""
    problem, schedule, layout = run
    if private and constants["profile"] == "derived":
        sigma, multiplier = derived_noise(problem, float(schedule.threshold), layout)
    else:
        sigma = layout_noise_std(schedule, layout) if private else np.zeros(len(layout.users))
        multiplier = sigma / (2 * schedule.threshold)
    lam, beta, lip = schedule.regularizations, problem.smoothness, problem.lipschitz
    log_ndm = math.log(problem.users * problem.dim * problem.items)
    lengths = [stage_lengths(t, beta + lam_i, lam_i, problem.dim * s**2 + lip**2 * log_ndm / (k * problem.items),
                             lip * problem.diameter) if stages == "multi" else (t,)
               for t, k, lam_i, s in zip(layout.steps, layout.batch, lam, sigma)] if constants["solver"] == "acsa" \
        else [(t,) for t in layout.steps]
    return {"sigma": np.asarray(sigma, dtype=np.float64), "multiplier": np.asarray(multiplier, dtype=np.float64),
            "lambda": np.asarray(lam, dtype=np.float64), "lengths": lengths,
            "tau": np.full(len(layout.users), float(schedule.threshold))}


def _noise(sigma, replicas: int, problem: Problem) -> PhaseGaussianNoise:
    """The phases' Gaussian step: sigma_i (the same for every replica) as added and as required."""
    std = np.tile(np.array([float(s) for s in sigma]), (replicas, 1))
    return PhaseGaussianNoise(std, std.copy(), problem.epsilon, problem.delta)


def _phase_privacy(problem: Problem, layout, unit_phase: np.ndarray, multiplier: np.ndarray, cells: tuple,
                   constants: dict, failed: list, noise: PhaseGaussianNoise) -> PrivacyPlan:
    """Each phase one (eps, delta) release to its users (parallel composition over phases), priced
    by what ``noise`` (the step the server applies) certifies (``CertifiedReleases``). Under
    profiles paper and exploratory the statement's noise multiplier is sigma_i / (2 tau): the
    sensitivity itself is the paper's O(tau log(1 / zeta) / K_i) with a hidden constant, so the
    noise is stated against the closeness threshold instead (recorded under ``details``); under
    profile derived it is z_i, sigma_i over the coupled sensitivity with c_Delta = 120."""
    eps, delta = problem.epsilon, problem.delta
    derived = constants["profile"] == "derived"
    starts = tuple(int(v) for v in np.concatenate([[0], np.cumsum(layout.steps)[:-1]]))
    accountant = PhaseAccountant(CertifiedReleases(noise), "phases",
                                 unit_phase=unit_phase, phase_starts=starts)
    per_unit = np.where(unit_phase >= 0, np.asarray(multiplier)[np.maximum(unit_phase, 0)], 0.0)
    caveats = [f"profile derived: sigma_i = z_i Delta_i for the coupled sensitivity c_Delta tau (7 + 3 ln(1 / "
               f"zeta_i)) / K_i with c_Delta = {COUPLING_CONSTANT:g} (spec §5 item 12's derivation of Lemma C.2's "
               "unspecified constant, probed empirically, not proved) and z_i from the PLD accountant for T_i "
               "Gaussian releases at (eps / 2, delta / 2) (no credit for sampling K_i of n_i), so the (eps, delta) "
               "claim holds modulo that constant" + (" and the conditions below: eps is nominal" if failed else "")
               if derived else
               "the (eps, delta) claim is Thm 3.1's, whose filtered-mean sensitivity (Lemma C.2) has an "
               "unspecified constant, so eps is nominal"]
    if constants["profile"] == "exploratory":
        caveats.append(f"algorithm.profile=exploratory: the constants 500 and 1000 are scaled by kappa = "
                       f"{constants['kappa']:g}, so eps = {eps:g} is nominal (no formal guarantee)")
    if not derived and any(k < n for k, n in zip(layout.batch, layout.users)):
        caveats.append("K_i < n_i: the subsampling credit needs each step's users to stay secret (a simulation "
                       "keys them by the run seed)")
    if failed:
        caveats.append(("profile derived's" if derived else "Thm 3.1's")
                       + " conditions fail at this size, so the proof does not cover the run: " + "; ".join(failed))
    return PrivacyPlan(
        trust_model=TrustModel.CENTRAL, calibration=Calibration.ACCOUNTANT if derived else Calibration.PAPER, accountant="phases", unit=USER,
        relation=Relation.REPLACE_ONE,
        delta=np.full(cells[1], delta), noise_multiplier=np.broadcast_to(per_unit, cells).copy(),
        target_epsilon=np.full(cells, eps), ledger=Ledger(accountant, cells, "user"),
        nominal_epsilon=np.full(cells, eps),
        details={"profile": constants["profile"], "kappa": constants["kappa"],
                 "noise_multiplier": "z_i = sigma_i / Delta_i (c_Delta = 120)" if derived else
                 "sigma_i / (2 tau), noise over the closeness threshold",
                 **({"restarts": "Remark 3.6: runs of Alg. 3 on disjoint users, each from the previous run's released "
                                 "output; parallel composition over runs and phases; mu and the distance bounds are "
                                 "public, fixed before the data (privacy does not rely on mu, utility does)"}
                    if "strong_convexity" in constants else {})},
        non_private_inputs=tuple(caveats))


@dataclass(frozen=True)
class FullBatchFiltered(ProtocolRecipe):
    """One phase of Alg. 2's test, filter and noise over all n users, T = ``num_rounds`` steps,
    sigma = c tau sqrt(T) ln(n d e^eps / delta) / (eps n), c = 1000 kappa (profile derived: the
    accountant's sigma for the coupled sensitivity, ``phased_parameters.derived_noise``), no
    regularizer, step ``algorithm.step_size`` (a list runs a grid as replicas); each user charged once.

    - ``solver=gd`` with ``participation=all``: baseline B2 (spec §4.3, an AL24-style
      reconstruction), projected DP gradient descent, the average (or last) iterate; T n m
      gradients.
    - ``solver=acsa`` with ``participation=uniform`` (K of the n users per step): Alg. 2 on its own
      (accelerated minibatch SGD with outlier-gradient removal, AC-SA at prox scale 1 / step);
      T K m gradients. Lemma D.2's K >= 500 ln(n^2 m^2 e^eps / delta) (1 / eps + n eps /
      sqrt(T ln(1 / delta))) is checked and a shortfall named in the privacy statement."""

    trust_models: tuple[TrustModel, ...] = (TrustModel.CENTRAL, TrustModel.NONE)
    settings: type[AlgorithmSettings] = FullBatchSettings
    privacy_keys: tuple[str, ...] = ()
    config_keys: tuple[str, ...] = ()

    def plan(self, algorithm_class: type[Any], config: dict, context: PlanContext) -> CuratorRoundsPlan:
        alg, shape, replicas = settings_of(FullBatchSettings, context.algorithm), context.shape, context.replicas
        name = alg.name
        private = curator_privacy(alg, context.privacy)
        if not isinstance(context.sampler, (AllUnits, UniformParticipation)):
            raise ConfigError("participation", type(context.sampler).__name__, f"all (every user every step) or "
                              f"uniform (K of them) for {name}")
        problem, constants = _inputs(alg, context.privacy, shape, context.loss, alg.solver)
        output = alg.output
        n, m, d, eps, delta, steps = problem.users, problem.items, problem.dim, problem.epsilon, problem.delta, \
            context.num_rounds
        tau = constants["c_tau"] * problem.lipschitz * math.log(n * d * m) / math.sqrt(m)
        batch = n if isinstance(context.sampler, AllUnits) else int(context.sampler.silos_per_round)
        layout = PhaseLayout((n,), (steps,), (batch,))
        derived = private and constants["profile"] == "derived"
        if derived:
            noise, multiplier = derived_noise(problem, tau, layout)
            sigma = float(noise[0])
        else:
            sigma = constants["kappa"] * 1000 * tau * math.sqrt(steps) * (math.log(n * d / delta) / eps + 1) / n \
                if private else 0.0
            multiplier = np.array([sigma / (2 * tau)])
        solver = ProjectedGradient(replicas.step_sizes, 0.0, problem.diameter / 2, output == "average") \
            if constants["solver"] == "gd" else AcSa(replicas.step_sizes, 0.0, 0.0, problem.diameter / 2)
        algorithm = algorithm_class(
            context.loss, (solver,), layout.steps, layout.batch, (0,), np.zeros(n, dtype=np.int64), m, (float(tau),),
            _noise((sigma,), replicas.count, problem), eps, private)
        failed = []
        if private and not derived:
            if eps > 10:
                failed.append(f"eps = {eps:g} > 10")
            if eps > 2:
                failed.append(f"eps / 2 = {eps / 2:g} > 1: the classic Gaussian calibration (Def. A.5) holds for "
                              "budgets <= 1 (spec §5 item 13)")
            log_users = math.log(n**2 * m**2 / delta) + eps
            needed = 500 * log_users * (1 / eps + (n * eps / math.sqrt(steps * math.log(1 / delta)) if batch < n else 0))
            if batch < needed:
                failed.append(f"K = {batch} < {needed:.4g} (Lemma D.2's users per step)")
        if private:
            failed += good_event_failures(problem, layout)
        resolved = {**constants, "users": n, "items": m, "threshold": float(tau), "noise_std": [float(sigma)],
                    "users_per_step": batch, "gradients_no_halt": steps * batch * m, "privacy_conditions_failed": failed,
                    "notes": [f"one phase of {steps} steps on {batch} of the {n} users each; the gradient noise has "
                              f"norm ~ {sigma * math.sqrt(d):.3g} (tau = {tau:.3g})"]}
        cells = (replicas.count, shape.num_silos)
        privacy = _phase_privacy(problem, layout, algorithm.unit_phase, multiplier, cells,
                                 constants, failed, algorithm.noise) if private else not_private(cells)
        return CuratorRoundsPlan(algorithm, context.sampler, *linear_models(context.loss, shape, replicas.count), steps, privacy, resolved,
                                 _constants(algorithm))



def _constants(algorithm) -> dict:
    return {"threshold": algorithm.thresholds[0], "noise_std_first_phase": float(algorithm.noise.noise_std[0, 0])}
