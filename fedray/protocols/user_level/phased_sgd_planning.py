"""Planning seed 002's Alg. 1 (the ``ProtocolRecipe`` contract of ``fedray.core.planning``).

``resolve`` turns the public inputs (n users of m items, d, eps, delta, L, R = 2 ``radius``, q
and the profile) into the phases (``phased_parameters.phased_sgd_layout``: Thm B.1's formulas,
rounded as spec §5 item 1) and writes them into the config: ``participation=phased`` gets phases
of C N_i users, one round each, and ``num_rounds`` becomes l. ``plan`` checks the rest before any
actor starts (central user-level DP or none, ``privacy.calibration=paper``, one privacy.epsilon,
every user the same m items, every group at least one user) and cuts each phase into its C
groups. ``algorithm.step_size`` multiplies Thm B.1's eta = R / (L sqrt(d m n eps)) (a list runs a
grid as replicas; tau_i and sigma_i follow eta_i, so privacy holds for any multiplier).

Without privacy the run is the private schedule (``privacy.epsilon`` and ``privacy.delta`` are
still required: they set C, eta_i and T_i) without the test, filter and noise.

Profiles (spec §4.1): ``paper`` is the printed constants; ``exploratory`` multiplies the constants
100 (C and sigma_i) and 1000 (tau_i) by ``kappa``, so its eps is nominal and the privacy statement
says so; ``derived`` (with ``privacy.calibration=accountant``) recomputes the test's scale and
margin, C and sigma_i from the proof (``phased_parameters``), so its eps holds modulo the coupling
constant c_Delta = 120. ``algorithm.threshold_constant`` multiplies every tau_i (sigma_i follows: any value
keeps the privacy argument). The statement names every condition of Thm B.1's proof that fails at
the run's size.
"""

from __future__ import annotations

from typing import Any

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from fedray.checks import number_in, positive
from fedray.core.planning import (
    AlgorithmSettings, PlanContext, PlannedAlgorithm, PlannedProtocol, PrivacySettings, ProtocolRecipe, Stepped,
    settings_of,
)
from fedray.core.protocol import Routing
from fedray.core.terms import Accountant, Calibration, Relation, TrustModel
from fedray.errors import ConfigError
from fedray.privacy.ledger import CertifiedReleases, ComposedAccountant, Ledger
from fedray.privacy.mechanisms import PhaseGaussianNoise, PhaseLaplaceTest
from fedray.privacy.statement import PrivacyPlan
from fedray.protocols.user_level.phased_parameters import (
    COUPLING_CONSTANT, PhasedSgdLayout, Problem, coupled_sensitivity, coupling_log_failure, feasibility,
    laplace_test_failure, phased_sgd_layout, phased_sgd_schedule,
)
from fedray.protocols.user_level.phased_planning import (
    PHASED, PhasedFilterSettings, _inputs, curator_privacy, require_phased,
)
from fedray.protocols.user_level.planning import USER, not_private



@dataclass(frozen=True, kw_only=True)
class PhasedSgdSettings(PhasedFilterSettings, Stepped):
    """Alg. 1's section: the step size multiplies Thm B.1's eta (a list runs a grid as replicas)."""


def _problem(alg: PhasedSgdSettings, priv: PrivacySettings, shape, loss) -> tuple[Problem, dict]:
    problem, constants = _inputs(alg, priv, shape, loss, "sgd")
    if not priv.private:
        name = alg.name
        why = f"with privacy=none too for {name}: the schedule (C, eta_i, T_i) is the private run's"
        if priv.epsilon is None:
            raise ConfigError("privacy.epsilon", None, f"a positive number {why}")
        eps = positive("privacy.epsilon", priv.epsilon)
        delta = number_in("privacy.delta", priv.delta, 0.0, 1.0, f"a number in (0, 1) {why}")
        problem = dataclasses.replace(problem, epsilon=eps, delta=delta)
    return problem, {"profile": constants["profile"], "kappa": constants["kappa"], "c_tau": constants["c_tau"]}


def _layout(problem: Problem, constants: dict) -> PhasedSgdLayout:
    layout = phased_sgd_layout(problem, constants["kappa"], constants["profile"], constants["c_tau"])
    empty = [i + 1 for i, users in enumerate(layout.group_users) if users < 1]
    if empty:
        raise ConfigError("data.spec.num_silos", problem.users, f"more users: phase {empty[0]} of "
                          f"{len(layout.group_users)} gets N_i = floor(n_i / C) = 0 users per group (C = "
                          f"{layout.groups} groups; n_i = (1 - 2^-q) n / 2^(i q)); profile exploratory with a "
                          "smaller kappa needs fewer")
    return layout


@dataclass(frozen=True)
class PhasedSgdPlan(PlannedProtocol):
    """Alg. 1 resolved against its data (``PlannedProtocol``): the program is built here already."""

    algorithm: Any
    privacy: PrivacyPlan
    resolved: dict = field(default_factory=dict)
    routing: Routing = Routing.DIRECT          # no client messages: nothing to shuffle

    def build(self, oracle):
        return self.algorithm


@dataclass(frozen=True)
class PhasedSgdRecipe(ProtocolRecipe):
    trust_models: tuple[TrustModel, ...] = (TrustModel.CENTRAL, TrustModel.NONE)
    settings: type[AlgorithmSettings] = PhasedSgdSettings
    sets_participation: bool = True           # participation=phased's lists come from the layout
    privacy_keys: tuple[str, ...] = ()
    config_keys: tuple[str, ...] = ()

    def resolve(self, algorithm_class: type[Any], config: dict, dataset, shape, loss, sampler, privacy: PrivacySettings,
                algorithm: AlgorithmSettings) -> dict:
        """The phases as ``participation`` (C N_i users, one round each) and l as ``num_rounds``."""
        alg = settings_of(PhasedSgdSettings, algorithm)
        require_phased(config, alg)
        problem, constants = _problem(alg, privacy, shape, loss)
        users = list(_layout(problem, constants).phase_users)
        participation = {"_target_": PHASED, "phase_units": users, "steps": [1] * len(users), "batch_sizes": users}
        return {**config, "participation": participation, "num_rounds": len(users)}

    def plan(self, algorithm_class: type[Any], config: dict, context: PlanContext) -> PhasedSgdPlan:
        alg, shape, replicas = settings_of(PhasedSgdSettings, context.algorithm), context.shape, context.replicas
        private = curator_privacy(alg, context.privacy, " (Alg. 1's printed sigma_i; algorithm.profile "
                                  "chooses the constants)")
        problem, constants = _problem(alg, context.privacy, shape, context.loss)
        layout = _layout(problem, constants)
        multiplier = replicas.step_sizes[:, None]
        unit_phase = context.sampler.members(context.seed, shape.num_silos)
        places = context.sampler.positions(context.seed, shape.num_silos)
        group_of = tuple(np.where(unit_phase == i, places // max(n, 1), -1) for i, n in enumerate(layout.group_users))
        # sigma_i scales with eta_i (as tau_i): the formula asks multiplier x the layout's sigma_i.
        required = multiplier * layout.noise_std
        test_scale = layout.test_scale / problem.epsilon          # the score's Lap(b): b = test_scale / eps
        noise = PhaseGaussianNoise(required * private, required, problem.epsilon, problem.delta,
                                   PhaseLaplaceTest(test_scale * private, test_scale))
        algorithm = algorithm_class(
            context.loss, layout.groups, layout.group_users, multiplier * layout.step_sizes,
            multiplier * layout.thresholds, noise,
            group_of, problem.items, problem.diameter / 2, private,
            shape.num_silos, (shape.dim, context.loss.num_outputs),
            {"groups": layout.groups, "noise_std_first_phase": float(layout.noise_std[0] * multiplier.max())})
        failed = conditions(problem, layout, constants["profile"]) if private else []
        notes = feasibility(problem, constants["kappa"], algorithms=(1,)) if constants["profile"] != "derived" else \
            [f"Alg. 1 (profile derived): {len(layout.steps)} phases of C = {layout.groups} groups; the first phase's "
             f"output noise has norm ~ {layout.noise_std[0] * math.sqrt(problem.dim) / problem.diameter:.3g} R"]
        smooth = layout.step_sizes[0] * float(multiplier.max()) * problem.smoothness
        if smooth > 1:
            notes.append(f"eta_1 beta = {smooth:.3g} > 1: Lemma 2.3's stability (and so the accuracy bound) needs "
                         "eta_i <= 1 / beta")
        resolved = {**constants, "users": problem.users, "items": problem.items, "phases": len(layout.group_users),
                    "groups": layout.groups, "group_users": list(layout.group_users),
                    "phase_users": list(layout.phase_users), "phase_steps": list(layout.steps),
                    "step_size": float(phased_sgd_schedule(problem, constants["kappa"]).step_size),
                    "thresholds": [float(t) for t in layout.thresholds], "test_scale": layout.test_scale,
                    "noise_std": [float(s) for s in layout.noise_std] if private else [0.0] * len(layout.steps),
                    "gradients_no_halt": layout.gradients, "notes": notes, "privacy_conditions_failed": failed}
        cells = (replicas.count, shape.num_silos)
        privacy = _privacy(problem, layout, cells, constants, failed, noise) if private else not_private(cells)
        return PhasedSgdPlan(algorithm, privacy, resolved)


def conditions(problem: Problem, layout: PhasedSgdLayout, profile: str = "paper") -> list[str]:
    """Thm B.1's conditions that fail at this size, in words (profile derived meets the test's and
    the Gaussian's by construction)."""
    eps, delta, failed = problem.epsilon, problem.delta, []
    bound = delta / (10 * math.exp(min(eps, 700.0)))
    failure = laplace_test_failure(layout.groups, eps, layout.test_scale, layout.test_margin)
    if failure > bound:
        failed.append(f"P(|Lap({layout.test_scale:g} / eps)| >= {layout.test_margin:.3g} C) = {failure:.3g} > delta / "
                      f"(10 e^eps) = {bound:.3g} (C = {layout.groups} < {layout.test_scale / layout.test_margin:g} "
                      "ln(10 e^eps / delta) / eps)")
    if profile == "derived":
        return failed
    if eps / 4 > 1:
        failed.append(f"eps / 4 = {eps / 4:g} > 1: the classic Gaussian calibration (Def. A.5) holds for budgets "
                      "<= 1 (spec §5 item 13)")
    users, needed = problem.users ** (1 - problem.decay), \
        100 / (1 - 2 ** -problem.decay) * math.log(problem.users / delta) / eps
    if users < needed:
        failed.append(f"n^(1-q) = {users:.4g} < {needed:.4g} (Thm B.1's users)")
    return failed


def coupling_coverage(problem: Problem, layout: PhasedSgdLayout) -> float:
    """sigma_i over the classic Gaussian's sigma (Def. A.5) at (eps / 4, delta / n) for the coupled
    sensitivity Delta_i = c_Delta tau_i (7 + 3 ln(1 / zeta)) / C, zeta = delta / (10 e^eps) (spec §5
    item 12's conservative constant; the paper's Lemma B.2 leaves it unspecified). The same for every
    phase: both scale with tau_i. Below 1 the printed noise would not cover that sensitivity."""
    eps, delta, n = problem.epsilon, problem.delta, problem.users
    sensitivity = coupled_sensitivity(1.0, layout.groups, coupling_log_failure(problem))      # per unit of tau_i
    needed = sensitivity * math.sqrt(2 * math.log(2 * n / delta)) / (eps / 4)
    return float(layout.noise_std[0] / layout.thresholds[0] / needed)


def _privacy(problem: Problem, layout: PhasedSgdLayout, cells: tuple, constants: dict, failed: list,
             noise: PhaseGaussianNoise) -> PrivacyPlan:
    """Each phase one (eps, delta) release to its users, each user charged once (parallel
    composition over disjoint phases), priced by what ``noise`` (the step the curator applies)
    certifies (``CertifiedReleases``). The eps is nominal whatever the profile: the proof's
    sensitivity has Lemma B.2's unspecified constant (``coupling_coverage`` says how the printed
    noise compares with the spec's conservative one)."""
    eps, delta = problem.epsilon, problem.delta
    if constants["profile"] == "derived":
        caveats = [f"profile derived: the test at Lap(8 / eps) and sigma_i the analytic Gaussian's at (3 eps / 4, "
                   f"delta / 2) for the coupled sensitivity c_Delta tau_i (7 + 3 ln(1 / zeta)) / C with c_Delta = "
                   f"{COUPLING_CONSTANT:g} (spec §5 item 12's derivation of Lemma B.2's unspecified constant, probed "
                   "empirically, not proved), so the (eps, delta) claim holds modulo that constant"
                   + (" and the conditions below: eps is nominal" if failed else "")]
    else:
        caveats = [f"the (eps, delta) claim is Thm B.1's, whose coupling (Lemma B.2) has an unspecified constant: "
                   f"with the spec's conservative c_Delta = {COUPLING_CONSTANT:g} the printed sigma_i is "
                   f"{coupling_coverage(problem, layout):.2g} of what the classic Gaussian needs at (eps / 4, delta / "
                   "n), so eps is nominal"]
    if constants["profile"] == "exploratory":
        caveats.append(f"algorithm.profile=exploratory: the constants 100 and 1000 are scaled by kappa = "
                       f"{constants['kappa']:g}, so eps = {eps:g} is nominal (no formal guarantee)")
    if failed:
        caveats.append(("profile derived's" if constants["profile"] == "derived" else "Thm B.1's")
                       + " conditions fail at this size, so the proof does not cover the run: " + "; ".join(failed))
    multiplier = float(layout.noise_std[0] / layout.thresholds[0])
    accountant = ComposedAccountant(CertifiedReleases(noise), "basic")
    return PrivacyPlan(
        trust_model=TrustModel.CENTRAL, calibration=Calibration.ACCOUNTANT if constants["profile"] == "derived" else Calibration.PAPER,
        accountant=Accountant.BASIC, unit=USER, relation=Relation.REPLACE_ONE,
        delta=np.full(cells[1], delta), noise_multiplier=np.full(cells, multiplier),
        target_epsilon=np.full(cells, eps), ledger=Ledger(accountant, cells, "user"),
        nominal_epsilon=np.full(cells, eps),
        details={"profile": constants["profile"], "kappa": constants["kappa"],
                 "noise_multiplier": "sigma_i / tau_i, noise over the closeness threshold (not a calibrated multiplier)",
                 **({"coupling_constant": COUPLING_CONSTANT, "test_scale": layout.test_scale,
                     "test_margin": layout.test_margin}
                    if constants["profile"] == "derived" else {"coupling_coverage": coupling_coverage(problem, layout)})},
        non_private_inputs=tuple(caveats))
