"""Planning seed 000's protocols: users with one record each, P_vec per step (the
``ProtocolRecipe`` contract of ``fedray.core.planning``).

Sequential protocols (``PvecSteps``: P_SGD, P_AGD): each step is one P_vec invocation over B users
at (eps, delta); every user is in one batch (``SequentialBatches``), so the run spends
(eps, delta) by parallel composition, for a user anywhere in the population
(``fedray.privacy.ledger.one_pass_ledger``).
Fully interactive protocols (``PvecRounds``: P_GD): all n users every round (``AllUnits``), each
round one P_vec invocation at (eps_0, delta_0), T rounds composed by advanced composition with
slack delta' = delta / (T + 1) (spec §3.5): eps_0 = eps / (2 sqrt(2 T ln(1/delta))), delta_0 =
delta / (T + 1), and eps_0 shrunk by bisection when the composed epsilon would exceed eps (logged
as ``eps0_shrunk``). ``privacy.composition=pld`` composes the same (eps_0, delta_0) rounds by their
privacy loss distribution instead (``ApproxDpPldComposition``), which affords a larger eps_0.
P_vec is calibrated from (eps, delta, d C, users per invocation, L) in the silo actors; the
planner builds the same parameters first, so a budget or dimension P_vec cannot meet is a config
error before any actor starts.

Baselines in the same protocols (``privacy.trust_model``): ``local`` (every user adds Gaussian
noise calibrated alone, ``LocalGaussianSum``) and ``central`` (a trusted server adds it once to
the sum, ``CentralGaussianSum``), each step at the same (eps, delta), or (eps_0, delta_0) for P_GD,
as P_vec, so the ledgers compose exactly as above; ``none`` sums exactly. ``parameters=exact``
gives each its own step size from its own sum error (``hyperparameters``); ``paper`` is P_vec's
formulas and is refused for the Gaussian baselines.

P_vec's calibration (``privacy.calibration``): ``paper`` (the default; seed-000 §2.2's b and p) or
``tight``: p = 1/2 and the fewest trials b whose invocation is (eps, delta)-DP by its exact privacy
loss (sequential protocols, ``fedray.privacy.vector_sum_tight``; parallel composition as above), or,
for P_GD, whose T rounds together are (eps, delta)-DP for a user by the binomial's moments
(``fedray.privacy.vector_sum_rounds``; the ledger's rule is ``BinomialRoundsComposition``, there is
no per-round (eps_0, delta_0), and ``privacy.composition`` is refused: the route composes the rounds
itself).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Annotated, Any, Callable, ClassVar, Literal

import numpy as np

from fedray.checks import number_in, positive
from fedray.core.planning import (
    AlgorithmSettings, PlanContext, PlannedAlgorithm, PlannedProtocol, Positive, PrivacySettings, ProtocolRecipe,
    Replicas, Stepped, checked_term, settings_of, with_algorithm,
)
from fedray.core.protocol import Routing, SampledRounds, SequentialSteps
from fedray.core.sampling import AllUnits, PhasedBatches, PhasedGroups, SequentialBatches
from fedray.core.terms import Accountant, Calibration, Composition, Relation, TrustModel
from fedray.data.federation import SiloArrays
from fedray.errors import ConfigError
from fedray.evaluation import LinearModelEvaluation
from fedray.privacy.composition import (
    ApproxDpComposition, ApproxDpPldComposition, advanced_composition_budget, pld_composition_budget,
)
from fedray.privacy.gaussian_sum import CentralGaussianSum, LocalGaussianSum, pan_private_sigma, release_sigma
from fedray.privacy.ledger import ComposedAccountant, Ledger, one_pass_ledger
from fedray.privacy.statement import PrivacyPlan
from fedray.privacy.vector_sum import ExactSum, SplitVectorSum, vector_sum_parameters
from fedray.privacy.vector_sum_rounds import BinomialRoundsComposition, tight_rounds_parameters
from fedray.privacy.vector_sum_tight import tight_vector_sum_parameters
from fedray.protocols.shuffle_sco.hyperparameters import (
    agd_phase_schedule, gd_num_rounds, gd_phase_schedule, gd_schedule, gd_smoothing_parameter, sgd_schedule,
    smoothing_parameter,
)
from fedray.smoothing import MoreauEnvelope



@dataclass(frozen=True, kw_only=True)
class PvecSettings(Stepped):
    """P_SGD's ``algorithm`` section (the others' add to it): ``parameters`` manual (B, T, eta as
    set), paper or exact (``hyperparameters``); ``radius`` Theta's (None: R^d)."""

    radius: Annotated[float | None, Positive()] = None
    parameters: Literal["manual", "paper", "exact"] = "manual"
    block_steps: Annotated[int, Positive()] = 4096      # steps per Ray call (changes no result)
    trust_model: str | None = None      # accepted and unused, as before (the privacy group is privacy's)


@dataclass(frozen=True, kw_only=True)
class PhasedPvecSettings(PvecSettings):
    """P_GD's section: ``strong_convexity`` (lambda, with paper or exact) plans Thm 4.9's phases,
    which ``resolve`` writes as ``phases`` (never the user)."""

    strong_convexity: Annotated[float | None, Positive()] = None
    phases: dict | None = None


@dataclass(frozen=True, kw_only=True)
class SmoothPvecSettings(PhasedPvecSettings):
    """P_AGD's section: ``smoothness`` beta of the loss (the paper and exact formulas read it)."""

    smoothness: Annotated[float | None, Positive()] = None


# The settings that are constructor fields of the algorithm classes (besides the step size).
OWN_FIELDS = ("radius", "smoothness", "strong_convexity", "phases")
USER = "user (one record) anywhere in the population"
TRUST_MODELS = (TrustModel.SDP, TrustModel.LOCAL, TrustModel.CENTRAL, TrustModel.NONE)
SEQUENTIAL_TRUST_MODELS = TRUST_MODELS + (TrustModel.PAN_PRIVATE,)      # App. C's online curator: sequential protocols only
# P_vec's own calibration (the paper's, the default, or its exact privacy loss); the Gaussian
# baselines' analytic one; App. C's classic Gaussian (Lemma C.5)
CALIBRATION = {TrustModel.SDP: (Calibration.PAPER, Calibration.TIGHT), TrustModel.LOCAL: (Calibration.ANALYTIC,),
               TrustModel.CENTRAL: (Calibration.ANALYTIC,), TrustModel.PAN_PRIVATE: (Calibration.PAPER,)}
PVEC_PARAMETERS = {Calibration.PAPER: vector_sum_parameters, Calibration.TIGHT: tight_vector_sum_parameters}
ROUTING = {TrustModel.SDP: Routing.SHUFFLE_SUM, TrustModel.LOCAL: Routing.DIRECT, TrustModel.CENTRAL: Routing.DIRECT,
           TrustModel.PAN_PRIVATE: Routing.DIRECT, TrustModel.NONE: Routing.SHUFFLE_SUM}


@dataclass(frozen=True)
class PvecStepsPlan(PlannedProtocol):
    """A seed-000 sequential protocol resolved against its data (``PlannedProtocol``)."""

    public_charges: ClassVar[bool] = True      # every round's charge is public (RoundProtocol)

    algorithm: Any
    sampler: SequentialBatches
    loss: Any
    shape: Any
    replicas: Replicas
    num_rounds: int
    block_steps: int
    privacy: PrivacyPlan
    routing: Routing = Routing.SHUFFLE_SUM
    resolved: dict = field(default_factory=dict)

    def build(self, oracle) -> SequentialSteps:
        params0 = np.zeros((self.replicas.count, self.shape.dim, self.loss.num_outputs))
        return SequentialSteps(self.algorithm, self.sampler, LinearModelEvaluation(self.loss), SiloArrays.of,
                               params0, self.num_rounds, self.shape.num_silos, self.block_steps, self.routing,
                               {"l2_clip": float(self.algorithm.l2_clip)})


@dataclass(frozen=True)
class PvecSteps(ProtocolRecipe):
    """The recipe of a sequential P_vec protocol; ``schedule`` gives its (B, T, step size) in the
    ``paper`` and ``exact`` modes (``hyperparameters``), from beta too when ``needs_smoothness``."""

    schedule: Callable = sgd_schedule
    needs_smoothness: bool = False
    settings: type[AlgorithmSettings] = PvecSettings
    trust_models: tuple[TrustModel, ...] = SEQUENTIAL_TRUST_MODELS
    privacy_keys: tuple[str, ...] = ()
    config_keys: tuple[str, ...] = ()

    def resolve(self, algorithm_class: type[Any], config: dict, dataset, shape, loss, sampler, privacy: PrivacySettings,
                algorithm: AlgorithmSettings) -> dict:
        """``algorithm.parameters`` paper or exact: B, T and eta from the paper's formulas
        (``hyperparameters``), replacing participation.batch_size, num_rounds and step_size."""
        alg, priv = settings_of(PvecSettings, algorithm), privacy
        mode = alg.parameters
        if mode == "manual":
            _refuse_manual_phases(alg)
            return config
        eps, delta, lipschitz, diameter = _formula_inputs(alg, priv, mode)
        sum_mse = _sum_mse(priv, mode)
        n, dim, data = shape.num_silos, shape.dim * loss.num_outputs, config["data"]
        envelope = self.needs_smoothness and isinstance(loss, MoreauEnvelope) and loss.smoothing is None
        lam = _strong_convexity(alg)
        if lam is not None:
            # Thm 4.8: 4.8a (an envelope of null smoothing: smoothed P_AGD per phase) or 4.8b.
            smoothness = None if envelope else positive("algorithm.smoothness", _smoothness(alg))
            return _phased(config, mode, n, dim, eps, delta, lipschitz, diameter, smoothness, lam, loss, sum_mse)
        smoothness = None
        if envelope:
            # Smoothed P_AGD (Thm 4.7): the envelope's beta from the formula; B and sigma with
            # L_eff = 2L (A7: the constrained envelope is 2L-Lipschitz; fedray's is over R^d and
            # L-Lipschitz, so clipping at L stays a no-op).
            smoothness = smoothing_parameter(n, dim, eps, delta, lipschitz, diameter)
            lipschitz = 2.0 * lipschitz
            data = {**data, "loss": {**data["loss"], "smoothing": smoothness}}
        elif self.needs_smoothness:
            smoothness = positive("algorithm.smoothness", _smoothness(alg))
        schedule = self.schedule(mode, n, dim, eps, delta, lipschitz, diameter, smoothness, sum_mse)
        written = {"step_size": schedule.step_size} if smoothness is None else \
            {"step_size": schedule.step_size, "smoothness": smoothness}
        return {**with_algorithm(config, **written), "num_rounds": schedule.num_steps, "data": data,
                "participation": {**config["participation"], "batch_size": schedule.batch_size}}

    def plan(self, algorithm_class: type[Any], config: dict, context: PlanContext) -> PvecStepsPlan:
        alg, priv, shape, sampler = settings_of(PvecSettings, context.algorithm), context.privacy, context.shape, \
            context.sampler
        own = _check_users(alg, context, (SequentialBatches, PhasedBatches),
                           "sequential disjoint batches of users (participation=sequential)")
        block_steps = alg.block_steps
        phased = isinstance(sampler, PhasedBatches)
        if phased != (own.get("phases") is not None):
            raise ConfigError("algorithm.phases", own.get("phases"), "set only by algorithm.parameters=paper|exact "
                              "with algorithm.strong_convexity (with the matching phased participation)")
        batches = list(sampler.batch_sizes) if phased else [sampler.batch_size]
        batch = batches[0]
        if not priv.private:
            vector_sums, privacy = [ExactSum()] * len(batches), _not_private(priv, context)
        else:
            eps, delta = _budget(priv)
            dim = shape.dim * context.loss.num_outputs
            steps = [_private_sum(priv, context, eps, delta, dim, b, "participation.batch_size", b) for b in batches]
            vector_sums = [step for step, _ in steps]
            cells = (context.replicas.count, shape.num_silos)
            privacy = PrivacyPlan(
                trust_model=priv.trust_model, calibration=checked_term(Calibration, priv.calibration), accountant=Accountant.PARALLEL, unit=USER,
                relation=Relation.REPLACE_ONE, delta=np.full(shape.num_silos, delta), noise_multiplier=np.zeros(cells),
                target_epsilon=np.full(cells, eps),
                ledger=Ledger(one_pass_ledger(eps, delta), cells, "population"),
                details={"users_per_invocation": batch, **steps[0][1]})
        if phased:
            own["phases"] = {**own["phases"], "vector_sums": vector_sums}
        algorithm = algorithm_class(loss=context.loss, step_size=context.replicas.step_sizes, batch_size=batch,
                                    l2_clip=_clip(priv), vector_sum=vector_sums[0], **own)
        resolved = {"batch_size": batch, "block_steps": block_steps, "num_rounds": context.num_rounds,
                    "parameters": alg.parameters, **privacy.details}
        if phased:
            resolved["phases"] = {k: v for k, v in own["phases"].items() if k != "vector_sums"}
        return PvecStepsPlan(algorithm, sampler, context.loss, shape, context.replicas, context.num_rounds,
                             block_steps, privacy, ROUTING[priv.trust_model], resolved=resolved)


@dataclass(frozen=True)
class PvecRoundsPlan(PlannedProtocol):
    """A seed-000 fully interactive protocol resolved against its data (``PlannedProtocol``)."""

    public_charges: ClassVar[bool] = True      # every round's charge is public (RoundProtocol)

    algorithm: Any
    sampler: AllUnits
    loss: Any
    shape: Any
    replicas: Replicas
    num_rounds: int
    privacy: PrivacyPlan
    routing: Routing = Routing.SHUFFLE_SUM
    resolved: dict = field(default_factory=dict)

    def build(self, oracle) -> SampledRounds:
        params0 = np.zeros((self.replicas.count, self.shape.dim, self.loss.num_outputs))
        return SampledRounds(self.algorithm, self.sampler, LinearModelEvaluation(self.loss), SiloArrays.of, params0,
                             self.num_rounds, self.shape.num_silos, self.routing,
                             {"l2_clip": float(self.algorithm.l2_clip)})


def per_round_budget(epsilon: float, delta: float, num_rounds: int) -> tuple[float, float, float, bool]:
    """(eps_0, delta_0, delta', shrunk) of P_GD (spec §3.5): the paper's eps_0, or the largest that
    advanced composition over T rounds keeps within eps when the paper's would not."""
    slack = delta / (num_rounds + 1)
    paper = epsilon / (2.0 * math.sqrt(2.0 * num_rounds * math.log(1.0 / delta)))
    fits = advanced_composition_budget(epsilon, num_rounds, slack)
    return min(paper, fits), slack, slack, fits < paper


@dataclass(frozen=True)
class PvecRounds(ProtocolRecipe):
    """The recipe of a fully interactive P_vec protocol (module docstring); ``paper`` / ``exact``
    set T and eta (``hyperparameters.gd_schedule``)."""

    trust_models: tuple[TrustModel, ...] = TRUST_MODELS
    privacy_keys: tuple[str, ...] = ("composition",)      # advanced (default, the paper's) | pld
    config_keys: tuple[str, ...] = ()
    settings: type[AlgorithmSettings] = PhasedPvecSettings

    def resolve(self, algorithm_class: type[Any], config: dict, dataset, shape, loss, sampler, privacy: PrivacySettings,
                algorithm: AlgorithmSettings) -> dict:
        """``algorithm.parameters`` paper or exact: T and eta from spec §3.5, replacing num_rounds
        and step_size; with a Moreau-envelope loss of null smoothing, smoothed P_GD (Thm 4.9 part 1):
        beta from ``gd_smoothing_parameter`` and L_eff = 2 L in eta (A7, as smoothed P_AGD)."""
        alg, priv = settings_of(PhasedPvecSettings, algorithm), privacy
        mode = alg.parameters
        if mode == "manual":
            _refuse_manual_phases(alg)
            return config
        eps, delta, lipschitz, diameter = _formula_inputs(alg, priv, mode)
        n, dim, data = shape.num_silos, shape.dim * loss.num_outputs, config["data"]
        envelope = isinstance(loss, MoreauEnvelope) and loss.smoothing is None
        if alg.strong_convexity is not None:
            if envelope:
                raise ConfigError("data.loss.smoothing", None, "a number with algorithm.strong_convexity for p_gd "
                                  "(Thm 4.9's phases are built for a given loss; smoothed phases are not)")
            return _gd_phased(config, mode, n, dim, eps, delta, lipschitz, diameter, alg.strong_convexity,
                              _rounds_sum_mse(priv, mode, eps, delta), _round_budget(priv))
        if envelope:
            smoothness = gd_smoothing_parameter(n, dim, eps, delta, lipschitz, diameter)
            lipschitz = 2.0 * lipschitz
            data = {**data, "loss": {**data["loss"], "smoothing": smoothness}}
        schedule = gd_schedule(mode, n, dim, eps, delta, lipschitz, diameter, _round_budget(priv),
                               _rounds_sum_mse(priv, mode, eps, delta))
        return {**with_algorithm(config, step_size=schedule.step_size), "num_rounds": schedule.num_steps, "data": data}

    def plan(self, algorithm_class: type[Any], config: dict, context: PlanContext) -> PvecRoundsPlan:
        alg, priv, shape = settings_of(PhasedPvecSettings, context.algorithm), context.privacy, context.shape
        own = _check_users(alg, context, (AllUnits, PhasedGroups), "every user (participation=all)")
        phased = isinstance(context.sampler, PhasedGroups)
        if phased != (own.get("phases") is not None):
            raise ConfigError("algorithm.phases", own.get("phases"), "set only by algorithm.parameters=paper|exact "
                              "with algorithm.strong_convexity (with the matching phased participation)")
        # Phased (Thm 4.9b): a user takes part in the T rounds of its own phase, with its group.
        users, rounds = shape.num_silos, context.num_rounds
        per_invocation, per_user = (context.sampler.group_size, context.sampler.rounds) if phased else (users, rounds)
        if not priv.private:
            vector_sum, privacy = ExactSum(), _not_private(priv, context)
        else:
            eps, delta = _budget(priv)
            dim = shape.dim * context.loss.num_outputs
            rule: Any
            if _rounds_tight(priv):
                # The T rounds calibrated together (vector_sum_rounds): no per-round budget.
                vector_sum, details = _tight_rounds_sum(priv, eps, delta, dim, per_invocation, per_user)
                composition, rule = BinomialRoundsComposition.NAME, BinomialRoundsComposition(vector_sum.params)
            else:
                composition = Composition.ADVANCED if priv.composition is None else priv.composition
                eps0, delta0, slack, shrunk = _round_budget(priv)(eps, delta, per_user)
                rule = (ApproxDpPldComposition(eps0, delta0, delta) if composition == Composition.PLD   # the rounds' PLD at delta
                        else ApproxDpComposition(eps0, delta0, slack, route="advanced"))
                vector_sum, details = _private_sum(priv, context, eps0, delta0, dim, per_invocation, "num_rounds",
                                                   rounds)
                details = {"eps0": eps0, "delta0": delta0, "delta_slack": slack, "eps0_shrunk": shrunk, **details}
            cells = (context.replicas.count, users)
            privacy = PrivacyPlan(
                trust_model=priv.trust_model, calibration=checked_term(Calibration, priv.calibration), accountant=composition, unit=USER,
                relation=Relation.REPLACE_ONE, delta=np.full(users, delta), noise_multiplier=np.zeros(cells),
                target_epsilon=np.full(cells, eps), ledger=Ledger(ComposedAccountant(rule, composition), cells, "user"),
                details=details)
        algorithm = algorithm_class(loss=context.loss, step_size=context.replicas.step_sizes, batch_size=per_invocation,
                                    l2_clip=_clip(priv), vector_sum=vector_sum, **own)
        resolved = {"num_rounds": rounds, "parameters": alg.parameters, **privacy.details}
        if phased:
            resolved["phases"] = own["phases"]
        return PvecRoundsPlan(algorithm, context.sampler, context.loss, shape, context.replicas, rounds, privacy,
                              ROUTING[priv.trust_model], resolved=resolved)


def _phased(config: dict, mode: str, n: int, dim: int, eps: float, delta: float, lipschitz: float,
            diameter: float, smoothness: float | None, strong_convexity, loss, sum_mse) -> dict:
    """Thm 4.8's phases (``hyperparameters.agd_phase_schedule``) as the config: a ``PhasedBatches``
    participation, num_rounds = sum T_j, and the phases' B_j, T_j, step sizes and (4.8a, smoothness
    None: the loss is a Moreau envelope) envelope smoothness beta_j; the loss carries beta_1."""
    lam = positive("algorithm.strong_convexity", strong_convexity)
    phases = agd_phase_schedule(mode, n, dim, eps, delta, lipschitz, diameter, smoothness, lam, sum_mse)
    written = {"step_size": phases.step_sizes[0], "smoothness": phases.smoothings[0],
               "phases": {"batch_sizes": list(phases.batch_sizes), "steps": list(phases.steps),
                          "step_sizes": list(phases.step_sizes), "radii": list(phases.radii),
                          "smoothings": list(phases.smoothings), "envelope": smoothness is None}}
    participation = {"_target_": "fedray.core.sampling.PhasedBatches", "batch_sizes": list(phases.batch_sizes),
                     "steps": list(phases.steps)}
    data = config["data"]
    if smoothness is None:
        data = {**data, "loss": {**data["loss"], "smoothing": phases.smoothings[0]}}
    return {**with_algorithm(config, **written), "num_rounds": int(sum(phases.steps)), "participation": participation,
            "data": data}


def _gd_phased(config: dict, mode: str, n: int, dim: int, eps: float, delta: float, lipschitz: float,
               diameter: float, strong_convexity, sum_mse, round_budget) -> dict:
    """Thm 4.9b's phases (``hyperparameters.gd_phase_schedule``) as the config: a ``PhasedGroups``
    participation, num_rounds = k T, and the phases' step sizes and radii."""
    lam = positive("algorithm.strong_convexity", strong_convexity)
    phases = gd_phase_schedule(mode, n, dim, eps, delta, lipschitz, diameter, lam, round_budget, sum_mse)
    k = len(phases.step_sizes)
    written = {"step_size": phases.step_sizes[0],
               "phases": {"group_size": phases.group_size, "rounds": phases.rounds,
                          "step_sizes": list(phases.step_sizes), "radii": list(phases.radii)}}
    participation = {"_target_": "fedray.core.sampling.PhasedGroups", "group_size": phases.group_size,
                     "rounds": phases.rounds, "phases": k}
    return {**with_algorithm(config, **written), "num_rounds": phases.rounds * k, "participation": participation}


def _round_budget(priv: PrivacySettings):
    """P_GD's per-round (eps_0, delta_0, delta', shrunk) for ``privacy.composition``; NaN under the
    tight calibration, which has no per-round budget (``_rounds_sum_mse`` ignores it)."""
    if _rounds_tight(priv):
        return lambda eps, delta, rounds: (math.nan, math.nan, math.nan, False)
    composition = Composition.ADVANCED if priv.composition is None else priv.composition
    if composition == Composition.ADVANCED:
        return per_round_budget
    if composition == Composition.PLD:
        return lambda eps, delta, rounds: (pld_composition_budget(eps, rounds, delta / (rounds + 1), delta),
                                           delta / (rounds + 1), delta / (rounds + 1), False)
    raise ConfigError("privacy.composition", composition, "advanced (the paper's) or pld")


def _rounds_tight(priv: PrivacySettings) -> bool:
    """True for P_GD's rounds calibrated together (trust_model=sdp, calibration=tight); refuses
    ``privacy.composition`` with it, in one line."""
    if priv.trust_model != TrustModel.SDP or priv.calibration != Calibration.TIGHT:
        return False
    if priv.composition is not None:
        raise ConfigError("privacy.composition", priv.composition, "unset with privacy.calibration=tight for p_gd "
                          "(the tight route composes the rounds' binomial moments itself; advanced and pld compose "
                          "the paper calibration's per-round (eps_0, delta_0))")
    return True


def _tight_rounds_sum(priv: PrivacySettings, eps: float, delta: float, dim: int, users: int, rounds: int) -> tuple[Any, dict]:
    """P_vec for ``rounds`` invocations over ``users`` users, calibrated together, and the values to log."""
    try:
        params = tight_rounds_parameters(eps, delta, dim, users, _clip(priv), rounds)
    except ConfigError as err:
        raise ConfigError("num_rounds", rounds, f"a value whose P_vec rounds can be served ({err})") from err
    return SplitVectorSum(params), {"messages_per_user": params.messages_per_user, "noise_bits": params.noise_bits,
                                    "bit_probability": params.bit_probability, "tight_route": params.route,
                                    "rounds_delta_bound": params.certified_delta}


def _rounds_sum_mse(priv: PrivacySettings, mode: str, eps: float, delta: float):
    """P_GD's step-sum error for ``exact``: under the tight calibration, P_vec's for the rounds
    calibrated together at the run's (eps, delta), T from the users per invocation
    (``gd_num_rounds``, as ``gd_schedule`` sets it); otherwise ``_sum_mse``'s at (eps_0, delta_0)."""
    if not _rounds_tight(priv):
        return _sum_mse(priv, mode)

    def sum_mse(eps0, delta0, dim, batch, l2):
        params = tight_rounds_parameters(eps, delta, dim, batch, l2, gd_num_rounds(batch, dim, eps, delta))
        return SplitVectorSum(params).sum_mse(batch, dim)

    return sum_mse


def _strong_convexity(alg: PvecSettings) -> float | None:
    """lambda of P_GD's and P_AGD's settings (P_SGD has none)."""
    return alg.strong_convexity if isinstance(alg, PhasedPvecSettings) else None


def _smoothness(alg: PvecSettings) -> float | None:
    """beta of P_AGD's settings (the others have none)."""
    return alg.smoothness if isinstance(alg, SmoothPvecSettings) else None


def _refuse_manual_phases(alg: PvecSettings) -> None:
    lam = _strong_convexity(alg)
    if lam is not None:
        raise ConfigError("algorithm.strong_convexity", lam, "null with algorithm.parameters="
                          "manual (the strongly convex phases come from the formulas: paper or exact)")


def _formula_inputs(alg: PvecSettings, priv: PrivacySettings, mode: str) -> tuple[float, float, float, float]:
    """(eps, delta, L, D) the paper's formulas read, each refused with the key that is missing."""
    needs = f"for algorithm.parameters={mode} (the formulas' input)"
    eps = number_in("privacy.epsilon", priv.epsilon, 0.0, 15.0, f"a number in (0, 15] {needs}",
                    closed_high=True)
    delta = number_in("privacy.delta", priv.delta, 0.0, 0.5, f"a number in (0, 1/2) {needs}")
    lipschitz = positive("privacy.l2_clip", priv.l2_clip)
    radius = alg.radius
    if radius is None:
        raise ConfigError("algorithm.radius", radius, f"a positive number (Theta's radius, D = 2 radius) {needs}")
    return eps, delta, lipschitz, 2.0 * positive("algorithm.radius", radius)


def _check_users(alg: PvecSettings, context: PlanContext, sampler_class: tuple[type, ...], participation: str) -> dict:
    """The checks every seed-000 protocol shares; returns the algorithm's own fields (radius, ...)."""
    shape = context.shape
    name = str(alg.name)
    if not isinstance(context.sampler, sampler_class):
        raise ConfigError("participation", type(context.sampler).__name__, f"{participation} for {name}")
    if set(shape.n_train) != {1}:
        raise ConfigError("data", f"{min(shape.n_train)}..{max(shape.n_train)} records per unit",
                          f"one record per user for {name} (e.g. data.spec.samples_per_silo=1)")
    return {f.name: getattr(alg, f.name) for f in dataclasses.fields(alg) if f.name in OWN_FIELDS}


def _clip(priv: PrivacySettings) -> float:
    return positive("privacy.l2_clip", priv.l2_clip, allow_none=not priv.private) or float("inf")


def _budget(priv: PrivacySettings) -> tuple[float, float]:
    trust, calibrations = priv.trust_model, CALIBRATION[priv.trust_model]
    if priv.calibration not in calibrations:
        raise ConfigError("privacy.calibration", priv.calibration, f"{' or '.join(calibrations)} for "
                          f"trust_model={trust} (P_vec: seed-000 §2.2, or tight: its exact privacy loss; "
                          "the Gaussian baselines: the analytic Gaussian)")
    eps = number_in("privacy.epsilon", priv.epsilon, 0.0, 15.0, "a number in (0, 15] (seed 000's range)",
                    closed_high=True)
    delta = number_in("privacy.delta", priv.delta, 0.0, 0.5, "an explicit number in (0, 1/2)")
    return eps, delta


def _sum_step(trust: TrustModel, eps: float, delta: float, dim: int, users: int, l2_clip: float, calibration: Calibration = Calibration.PAPER):
    """The step's sum for the trust model, each release (eps, delta)-DP for a user (a server's
    draws, central or pan-private, come from the step's keys); ``calibration`` picks P_vec's b and p."""
    if trust == TrustModel.SDP:
        return SplitVectorSum(PVEC_PARAMETERS[calibration](eps, delta, dim, users, l2_clip))
    if trust == TrustModel.PAN_PRIVATE:
        return CentralGaussianSum(pan_private_sigma(_below_one(eps), delta, l2_clip), draws=2)
    if trust == TrustModel.LOCAL:
        return LocalGaussianSum(release_sigma(eps, delta, l2_clip))
    if trust == TrustModel.CENTRAL:
        return CentralGaussianSum(release_sigma(eps, delta, l2_clip))
    return ExactSum()


PLACEMENT = {TrustModel.LOCAL: "each user", TrustModel.CENTRAL: "trusted server, once per sum",
             TrustModel.PAN_PRIVATE: "curator: one draw before the batch's data, one after"}


def _private_sum(priv: PrivacySettings, context: PlanContext, eps: float, delta: float, dim: int, users: int, key: str,
                 value) -> tuple[Any, dict]:
    """``_sum_step`` for the run, and the values to log; a ConfigError on ``key`` (what the user
    would change) if P_vec cannot serve it."""
    trust = priv.trust_model
    try:
        step = _sum_step(trust, eps, delta, dim, users, _clip(priv), checked_term(Calibration, priv.calibration))   # checked by _budget
    except ConfigError as err:
        if trust != TrustModel.SDP:
            raise
        raise ConfigError(key, value, f"a value whose P_vec invocations can be served ({err})") from err
    if trust == TrustModel.SDP:
        params = step.params
        details = {"messages_per_user": params.messages_per_user, "noise_bits": params.noise_bits,
                   "bit_probability": params.bit_probability}
        if priv.calibration == Calibration.TIGHT:        # the bound computed at these b, p: <= the invocation's delta
            details |= {"invocation_delta_bound": params.certified_delta, "tight_route": params.route}
        return step, details
    return step, {"noise_std": step.sigma, "noise_placement": PLACEMENT[trust]}


def _below_one(eps: float) -> float:
    if not eps < 1:
        raise ConfigError("privacy.epsilon", eps, "a number in (0, 1) for trust_model=pan_private (Lemma C.5)")
    return eps


def _sum_mse(priv: PrivacySettings, mode: str):
    """The step-sum error ``exact`` calibrates the step size for (``hyperparameters``): the trust
    model's sum's own ``sum_mse``."""
    trust = priv.trust_model
    if trust in (TrustModel.LOCAL, TrustModel.CENTRAL, TrustModel.PAN_PRIVATE) and mode == "paper":
        raise ConfigError("algorithm.parameters", mode, f"exact or manual for trust_model={trust} (the paper's "
                          "formulas are P_vec's)")
    calibration: Any = Calibration.PAPER
    if trust == TrustModel.SDP:
        calibration = priv.calibration       # checked next: one of CALIBRATION[TrustModel.SDP]
        if calibration not in CALIBRATION[TrustModel.SDP]:
            raise ConfigError("privacy.calibration", calibration, "paper or tight for trust_model=sdp (P_vec)")
    return lambda eps, delta, dim, batch, l2: _sum_step(trust, eps, delta, dim, batch, l2,
                                                        calibration=calibration).sum_mse(batch, dim)


def _not_private(priv: PrivacySettings, context: PlanContext) -> PrivacyPlan:
    cells = (context.replicas.count, context.shape.num_silos)
    accountant = Accountant.NONE if priv.accountant is None else priv.accountant      # the words, unused without privacy
    return PrivacyPlan(trust_model=TrustModel.NONE, calibration=Calibration.NONE, accountant=accountant, unit=USER,
                       relation=Relation.REPLACE_ONE, delta=np.zeros(context.shape.num_silos),
                       noise_multiplier=np.zeros(cells), target_epsilon=None, ledger=None)
