"""Planning seed 001's protocols on a game (the ``ProtocolRecipe`` contract of ``fedray.core.planning``).

Alg. 1 (``PrivateSMD``): ``algorithm.parameters=paper`` sets T (``num_rounds``), K
(``algorithm.draws``), B = floor(n / T) (``participation.batch_size``) and tau = min(tau_util,
tau_priv) from Thm 3.1's ``algorithm.regime`` (``calibration.sgd_schedule``); ``bound`` picks
(T, K) minimising the spec's explicit bound (``calibration.bound_schedule``); ``manual`` takes
them as set and refuses a step size above tau_priv(B, T, K). Without privacy
(``privacy=none``), ``paper`` runs T = n, K = 1, tau = tau_util (spec §3.6).

Privacy plan: central DP; unit = one sample, replace one; each of the 2 T (K + 1) vertex draws is
(4 tau L0 / B)-DP, composed by pure-DP advanced composition (Cor. 3.6) at delta' = delta; every
draw reads every sample, so a population ledger (one column for all samples,
``PopulationAccountant``) prices them, with one draw epsilon per replica (its step size).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal

import numpy as np

from fedray.checks import positive
from fedray.core.mechanism import ReportsMetrics
from fedray.core.planning import (
    AlgorithmSettings, Because, PlanContext, PlannedAlgorithm, PlannedProtocol, Positive, PrivacySettings,
    ProtocolRecipe, Replicas, Stepped, Within, checked_term, settings_of, with_algorithm,
)
from fedray.core.protocol import CuratorRounds, CuratorSteps, Routing
from fedray.core.sampling import AllUnits, LeveledBatches, SequentialBatches
from fedray.core.terms import Accountant, Calibration, Relation, TrustModel
from fedray.errors import ConfigError
from fedray.privacy.composition import (
    ApproxDpComposition,
    BoundedRangeComposition,
    ParallelComposition,
    PureDpComposition,
)
from fedray.privacy.gaussian import analytic_sigma
from fedray.privacy.ledger import CertifiedReleases, Ledger, PopulationAccountant
from fedray.privacy.mechanisms import CalibratedGaussianNoise, NoNoise
from fedray.privacy.statement import PrivacyPlan
from fedray.protocols.mirror_descent.calibration import (
    CALIBRATIONS,
    PAPER_VERTEX_CONSTANT,
    VERTEX_CONSTANTS,
    bias_reduced_draw_epsilon,
    bias_reduced_most_draws,
    bias_reduced_parameters,
    bias_reduced_stop_limit,
    boosting_counts,
    boosting_split,
    bound_schedule,
    check_privacy_range,
    draw_epsilon,
    draws_per_step,
    frank_wolfe_round_epsilon,
    frank_wolfe_rounds,
    gaussian_schedule,
    gaussian_sensitivity,
    log_dimensions,
    private_step_size,
    sco_draws,
    sco_private_step,
    sco_schedule,
    sgd_schedule,
)
from fedray.protocols.mirror_descent.evaluation import GapEvaluation
from fedray.protocols.mirror_descent.simplex import VertexDraws

UNIT = "sample (one record; every sample alike)"


@dataclass(frozen=True, kw_only=True)
class FrankWolfeSettings(AlgorithmSettings):
    """``parameters``: paper (the rule sets T, and tau where there is one) or manual (as set)."""

    parameters: Literal["paper", "manual"] = "paper"


@dataclass(frozen=True, kw_only=True)
class BiasReducedSettings(FrankWolfeSettings, Stepped):
    """Alg. 3's section: tau (manual; None where the rule sets it) and the per-draw constant c_v
    (``_vertex_constant`` refuses the paper's 9 and names the accepted ones)."""

    vertex_constant: str = "safe"


@dataclass(frozen=True, kw_only=True)
class GaussianSmdSettings(FrankWolfeSettings, Stepped):
    block_steps: Annotated[int, Positive()] = 4096      # steps per Ray call (changes no result)


@dataclass(frozen=True, kw_only=True)
class SmdSettings(Stepped):
    """Alg. 1's section: Thm 3.1's regime, ``parameters`` paper, bound or manual, K (manual)."""

    block_steps: Annotated[int, Positive()] = 4096
    regime: Annotated[Literal["first_order", "second_order", "bilinear"], Because("(Thm 3.1 (5), (6), (7))")] = \
        "bilinear"
    parameters: Literal["paper", "bound", "manual"] = "paper"
    draws: Annotated[int | None, Positive()] = 1       # None only where the rule sets it


@dataclass(frozen=True, kw_only=True)
class OnlineToBatchSettings(GaussianSmdSettings):
    """Alg. 5's section: Thm 4.2's regime, K and q (manual)."""

    regime: Annotated[Literal["first_order", "second_order"], Because("(Thm 4.2 (a), (b))")] = "second_order"
    draws: Annotated[int | None, Positive()] = 1
    refresh: Annotated[int | None, Positive()] = 1


@dataclass(frozen=True, kw_only=True)
class BoostedSettings(AlgorithmSettings):
    """Alg. 4's section: beta, and Alg. 3's c_v."""

    failure_probability: Annotated[float, Within(0.0, 1.0, "a number in (0, 1)")] = 0.1
    vertex_constant: str = "safe"


def _samples(federation, unit_ids):
    """A game's samples are their own shard view (generated on demand in the actor)."""
    return federation


def _game(config: dict, dataset, name: str):
    if not all(hasattr(dataset, attr) for attr in ("rows", "columns", "lipschitz", "smoothness", "second_order")):
        raise ConfigError("data", config["data"].get("name"),
                          f"a game (data=padded_game, dense_game or logistic_tasks) for {name}")
    return dataset


def _regime(alg: SmdSettings, game) -> str:
    """Thm 3.1's regime, checked against what the game's objective satisfies."""
    regime = alg.regime
    if regime == "bilinear" and game.second_order != 0:
        raise ConfigError("algorithm.regime", regime, "first_order or second_order for an objective with L2 > 0 "
                          "(regime (7) needs L2 = 0: a bilinear or quadratic game)")
    if regime == "second_order" and game.second_order is None:
        raise ConfigError("algorithm.regime", regime, "first_order for an objective that is not second-order smooth")
    return regime


def _budget(priv: PrivacySettings, calibration: Calibration | tuple = Calibration.PAPER, what: str = "tau_priv of Prop. 3.3") -> tuple[float, float]:
    allowed = (calibration,) if isinstance(calibration, str) else calibration
    if priv.calibration not in allowed:
        raise ConfigError("privacy.calibration", priv.calibration, f"{' or '.join(allowed)} ({what})")
    epsilon: Any = priv.epsilon      # checked here: numbers in range, or a ConfigError
    delta: Any = priv.delta
    check_privacy_range(epsilon, delta)
    return float(epsilon), float(delta)


def _mode(alg: FrankWolfeSettings | SmdSettings) -> str:
    mode = alg.parameters
    step_size = alg.step_size if isinstance(alg, Stepped) else None
    if mode != "manual" and step_size is not None:
        raise ConfigError("algorithm.step_size", step_size,
                          f"null with algorithm.parameters={mode} (the rule sets tau; manual takes yours)")
    return mode


def _checked(config: dict, context: PlanContext, sampler: type = SequentialBatches,
             participation: str = "sequential") -> tuple[str, Any]:
    """The checks the recipes share; (the algorithm's name, the game)."""
    name = str(context.algorithm.name)
    game = _game(config, context.dataset, name)
    if not isinstance(context.sampler, sampler):
        raise ConfigError("participation", type(context.sampler).__name__,
                          f"{sampler.__name__} (participation={participation}) for {name}")
    return name, game


def _central(accountant: PopulationAccountant, eps: float, delta: float, replicas: Replicas, details: dict,
             calibration: Calibration = Calibration.PAPER, noise_multiplier: float = 0.0) -> PrivacyPlan:
    """Central DP for one sample (replace one), every sample priced alike by ``accountant``."""
    cells = (replicas.count, 1)
    return PrivacyPlan(trust_model=TrustModel.CENTRAL, calibration=calibration, accountant=accountant.name, unit=UNIT,
                       relation=Relation.REPLACE_ONE, delta=np.full(1, delta), noise_multiplier=np.full(cells, noise_multiplier),
                       target_epsilon=np.full(cells, eps), ledger=Ledger(accountant, cells, UNIT), details=details)


def _pure_draws(per_draw, delta: float, **planned) -> PopulationAccountant:
    """Pure-DP draws of per-draw epsilon ``per_draw`` (per replica), composed by Cor. 3.6 at delta."""
    return PopulationAccountant(PureDpComposition(per_draw, delta, route="advanced"), "advanced (pure DP, Cor. 3.6)",
                                **planned)


def _bounded_range_draws(per_draw, delta: float, **planned) -> PopulationAccountant:
    """Draws that are each ``per_draw``-bounded-range (an exponential mechanism's score spread),
    composed in zCDP at delta (``calibration.private_step_size``, calibration ``tight``)."""
    return PopulationAccountant(BoundedRangeComposition(per_draw, delta), "bounded range (zCDP, eps0^2/8 per draw)",
                                **planned)


_TAU_PRIV = "tau_priv of Prop. 3.3, or of bounded-range draws composed in zCDP"
_ALG3_LIMIT = "U of Prop. 3.17, or of bounded-range draws composed in zCDP"


def _refuse_above(limit: float, replicas: Replicas, where: str) -> None:
    """A step size above tau_priv is a config error, before anything runs."""
    too_large = replicas.step_sizes > limit * (1 + 1e-12)
    if np.any(too_large):
        raise ConfigError("algorithm.step_size", float(replicas.step_sizes[too_large][0]),
                          f"at most tau_priv = {limit:.6g} ({where})")


def _not_private(replicas: Replicas) -> PrivacyPlan:
    return PrivacyPlan(trust_model=TrustModel.NONE, calibration=Calibration.NONE, accountant=Accountant.NONE, unit=UNIT, relation=Relation.REPLACE_ONE,
                       delta=np.zeros(1), noise_multiplier=np.zeros((replicas.count, 1)), target_epsilon=None,
                       ledger=None)


@dataclass(frozen=True)
class GamePlan(PlannedProtocol):
    """A seed-001 protocol resolved against its game (``PlannedProtocol``). The sampler decides the
    runtime shape: fixed disjoint batches run as a curator's sequential steps, in blocks of
    ``block_steps`` (``CuratorSteps``); batches that differ between replicas, or every sample
    every round, run as rounds (``CuratorRounds``)."""

    public_charges: ClassVar[bool] = True      # every round's charge is public (RoundProtocol)

    algorithm: Any
    sampler: Any
    replicas: Replicas
    num_rounds: int
    num_units: int
    privacy: PrivacyPlan
    block_steps: int = 4096
    routing: Routing = Routing.DIRECT
    resolved: dict = field(default_factory=dict)
    constants: dict = field(default_factory=dict)
    noise: ReportsMetrics = NoNoise()      # the server's noise step (a Gaussian baseline's), reported each round

    def build(self, oracle) -> CuratorSteps | CuratorRounds:
        parts = (self.algorithm, self.sampler, GapEvaluation(self.algorithm.rows), _samples,
                 np.zeros((self.replicas.count, 1)), self.num_rounds, self.num_units)
        # The step's report is the same every round (one std per replica): logged with each round.
        report = {name: metric.value for name, metric in
                  self.noise.round_metrics(np.ones((self.replicas.count, self.num_units), dtype=bool)).items()}
        if isinstance(self.sampler, SequentialBatches):
            return CuratorSteps(*parts, self.block_steps, self.routing, dict(self.constants), report)
        return CuratorRounds(*parts, self.routing, dict(self.constants), report)


@dataclass(frozen=True)
class VertexSampling(ProtocolRecipe):
    """The recipe of seed 001's Alg. 1 (module docstring)."""

    trust_models: tuple[TrustModel, ...] = (TrustModel.CENTRAL, TrustModel.NONE)
    settings: type[AlgorithmSettings] = SmdSettings
    privacy_keys: tuple[str, ...] = ()
    config_keys: tuple[str, ...] = ()
    needs_loss: bool = False

    def resolve(self, algorithm_class: type[Any], config: dict, dataset, shape, loss, sampler, privacy: PrivacySettings,
                algorithm: AlgorithmSettings) -> dict:
        alg, priv = settings_of(SmdSettings, algorithm), privacy
        game = _game(config, dataset, str(alg.name))
        regime = _regime(alg, game)
        mode = _mode(alg)
        if mode == "manual":
            return config
        private = priv.private
        budget = _budget(priv, CALIBRATIONS, _TAU_PRIV) if private else None
        calibration = checked_term(Calibration, priv.calibration) if private else Calibration.PAPER
        if mode == "bound" and budget is not None:
            schedule = bound_schedule(regime, shape.num_silos, *budget, game.rows, game.columns, game.lipschitz,
                                      game.smoothness, game.second_order or 0.0, calibration)
        else:
            eps, delta = budget if budget is not None else (None, None)
            schedule = sgd_schedule(regime, shape.num_silos, eps, delta, game.rows, game.columns, game.lipschitz,
                                    calibration)
        return {**with_algorithm(config, step_size=schedule.step_size, draws=schedule.draws),
                "num_rounds": schedule.num_steps,
                "participation": {**config["participation"], "batch_size": schedule.batch_size}}

    def plan(self, algorithm_class: type[Any], config: dict, context: PlanContext) -> GamePlan:
        alg, priv = settings_of(SmdSettings, context.algorithm), context.privacy
        _, game = _checked(config, context)
        draws = positive("algorithm.draws", alg.draws, int)
        block_steps = alg.block_steps
        batch, steps, replicas = int(context.sampler.batch_size), context.num_rounds, context.replicas
        lipschitz = game.lipschitz
        vertices = VertexDraws(draws)
        algorithm = algorithm_class(step_size=replicas.step_sizes, batch_size=batch, num_steps=steps, rows=game.rows,
                                    columns=game.columns, vertices=vertices)
        constants = {"batch_size": float(batch), "draws": float(draws), "lipschitz": lipschitz}
        if not priv.private:
            privacy = _not_private(replicas)
        else:
            eps, delta = _budget(priv, CALIBRATIONS, _TAU_PRIV)
            calibration = checked_term(Calibration, priv.calibration)      # a member: _budget checked it
            limit = private_step_size(batch, steps, draws, eps, delta, lipschitz, calibration)
            route = "Prop. 3.3" if calibration == Calibration.PAPER else "bounded-range draws composed in zCDP"
            _refuse_above(limit, replicas, f"{route} at B = {batch}, T = {steps}, K = {draws}, eps = {eps:g}, "
                                           f"delta = {delta:g}, L0 = {lipschitz:g}")
            per_draw = np.asarray(draw_epsilon(replicas.step_sizes, lipschitz, batch))[:, None]          # (P, 1)
            draws_accountant = (_pure_draws if calibration == Calibration.PAPER else _bounded_range_draws)
            privacy = _central(
                draws_accountant(per_draw, delta, releases_per_round=draws_per_step(draws)), eps, delta, replicas,
                calibration=calibration,
                details={"tau_priv": limit, "draw_epsilon_max": float(per_draw.max()),
                         "releases": steps * draws_per_step(draws),
                         "released": "vertex draws only (K + 1 per player per step) and their average; the "
                                     "iterate average's gap is a diagnostic, never released"})
            constants["tau_priv"] = limit
        resolved = {"num_rounds": steps, "batch_size": batch, "draws": draws, "regime": alg.regime,
                    "parameters": alg.parameters, "block_steps": block_steps, **privacy.details}
        return GamePlan(algorithm, context.sampler, replicas, steps, context.shape.num_silos, privacy, block_steps,
                        resolved=resolved, constants=constants)


@dataclass(frozen=True)
class GaussianNoise(ProtocolRecipe):
    """The recipe of the Gaussian-noise SMD baseline (``gaussian_smd``): ``paper`` sets T, B and
    tau by ``calibration.gaussian_schedule``; the run is (eps, delta)-DP by parallel composition of
    one analytic-Gaussian release per disjoint batch."""

    trust_models: tuple[TrustModel, ...] = (TrustModel.CENTRAL, TrustModel.NONE)
    settings: type[AlgorithmSettings] = GaussianSmdSettings
    privacy_keys: tuple[str, ...] = ()
    config_keys: tuple[str, ...] = ()
    needs_loss: bool = False

    def _budget(self, priv: PrivacySettings) -> tuple[float, float]:
        if priv.l2_clip is not None:
            raise ConfigError("privacy.l2_clip", priv.l2_clip, "null (the game's L0 bounds every gradient "
                              "coordinate; the sensitivity is 2 L0 sqrt(dx + dy) / B, no clipping)")
        return _budget(priv, Calibration.ANALYTIC, "the analytic Gaussian at the batch mean's l2 sensitivity")

    def resolve(self, algorithm_class: type[Any], config: dict, dataset, shape, loss, sampler, privacy: PrivacySettings,
                algorithm: AlgorithmSettings) -> dict:
        alg, priv = settings_of(GaussianSmdSettings, algorithm), privacy
        game = _game(config, dataset, str(alg.name))
        if _mode(alg) == "manual":
            return config
        budget = self._budget(priv) if priv.private else None
        eps, delta = budget if budget is not None else (None, None)

        def noise_std(sensitivity: float) -> float:
            if budget is None:
                raise ValueError("a noise std without a privacy budget")
            return analytic_sigma(*budget, sensitivity)
        schedule = gaussian_schedule(shape.num_silos, eps, delta, game.rows, game.columns, game.lipschitz, noise_std)
        return {**with_algorithm(config, step_size=schedule.step_size), "num_rounds": schedule.num_steps,
                "participation": {**config["participation"], "batch_size": schedule.batch_size}}

    def plan(self, algorithm_class: type[Any], config: dict, context: PlanContext) -> GamePlan:
        alg, priv = settings_of(GaussianSmdSettings, context.algorithm), context.privacy
        _, game = _checked(config, context)
        block_steps = alg.block_steps
        batch, steps, replicas = int(context.sampler.batch_size), context.num_rounds, context.replicas
        noise: CalibratedGaussianNoise | NoNoise = NoNoise()
        if not priv.private:
            sigma, privacy = 0.0, _not_private(replicas)
        else:
            eps, delta = self._budget(priv)
            sensitivity = gaussian_sensitivity(game.lipschitz, game.rows, game.columns, batch)
            sigma = analytic_sigma(eps, delta, sensitivity)
            noise = CalibratedGaussianNoise(sigma, sensitivity, eps, delta, analytic_sigma)
            rule = CertifiedReleases(noise, parallel=True)       # the step the server applies, priced
            privacy = _central(PopulationAccountant(rule, "parallel", 1), eps, delta, replicas,
                               {"noise_std": sigma, "l2_sensitivity": sensitivity,
                                "released": "every step's noisy mean gradient and the iterates (post-processing)"},
                               calibration=Calibration.ANALYTIC, noise_multiplier=sigma / sensitivity)
        algorithm = algorithm_class(step_size=replicas.step_sizes, batch_size=batch, num_steps=steps, rows=game.rows,
                                    columns=game.columns, noise=noise)
        constants = {"batch_size": float(batch), "noise_std": sigma, "lipschitz": game.lipschitz}
        resolved = {"num_rounds": steps, "batch_size": batch, "parameters": alg.parameters,
                    "block_steps": block_steps, **privacy.details}
        return GamePlan(algorithm, context.sampler, replicas, steps, context.shape.num_silos, privacy, block_steps,
                        resolved=resolved, constants=constants, noise=noise)


@dataclass(frozen=True)
class BiasReduced(ProtocolRecipe):
    """The recipe of seed 001's Alg. 3: ``paper`` sets (M, U, tau, alpha) by Thm 3.14's fixed point
    with the game's L0 = L1 and L2 = 0 and the per-draw constant ``algorithm.vertex_constant``
    (safe: c_v = 20, spec §6 item 3 and ``calibration.vertex_constant``; the paper's 9 is refused),
    as the participation (``LeveledBatches``) and the
    step size; ``manual`` takes them as set and refuses a U above Prop. 3.17's privacy bound.
    ``privacy.calibration=tight``: the draws are bounded-range and compose in zCDP
    (``calibration.bias_reduced_privacy_constant``), so the same formulas run with the smaller
    constant and the ledger prices the draws by ``BoundedRangeComposition``."""

    trust_models: tuple[TrustModel, ...] = (TrustModel.CENTRAL, TrustModel.NONE)
    settings: type[AlgorithmSettings] = BiasReducedSettings
    privacy_keys: tuple[str, ...] = ()
    config_keys: tuple[str, ...] = ()
    needs_loss: bool = False

    def resolve(self, algorithm_class: type[Any], config: dict, dataset, shape, loss, sampler, privacy: PrivacySettings,
                algorithm: AlgorithmSettings) -> dict:
        alg, priv = settings_of(BiasReducedSettings, algorithm), privacy
        game = _game(config, dataset, str(alg.name))
        constant = _vertex_constant(alg)
        if _mode(alg) == "manual":
            # The stopping rule decides; num_rounds is its most steps (each adds 2^N >= 1 to a sum <= U).
            stop = config["participation"].get("stop")
            return {**config, "num_rounds": int(stop)} if isinstance(stop, (int, float)) and stop >= 1 else config
        if not priv.private:
            raise ConfigError("algorithm.parameters", "paper", "manual with privacy=none (Thm 3.14's M, U, alpha "
                              "and tau are set by eps)")
        eps, delta = _budget(priv, CALIBRATIONS, _ALG3_LIMIT)
        if game.second_order is None:
            raise ConfigError("data.spec.link", getattr(dataset, "link", None),
                              "a second-order smooth objective for Alg. 3 (Thm 3.14 needs L2)")
        params = bias_reduced_parameters(shape.num_silos, eps, delta, log_dimensions(game.rows, game.columns),
                                         game.lipschitz, game.smoothness, game.second_order, constant,
                                         checked_term(Calibration, priv.calibration))
        participation = {"_target_": "fedray.core.sampling.LeveledBatches", "levels": params.levels,
                         "batch_factor": params.batch_factor, "stop": params.stop}
        return {**with_algorithm(config, step_size=params.step_size), "num_rounds": int(params.stop),
                "participation": participation}

    def plan(self, algorithm_class: type[Any], config: dict, context: PlanContext) -> GamePlan:
        alg, priv = settings_of(BiasReducedSettings, context.algorithm), context.privacy
        _, game = _checked(config, context, LeveledBatches, "leveled")
        sampler, replicas = context.sampler, context.replicas
        algorithm = algorithm_class(step_size=replicas.step_sizes, levels=sampler.levels, rows=game.rows,
                                    columns=game.columns, sampler=sampler, num_rounds=context.num_rounds)
        constants = {"levels": float(sampler.levels), "stop": float(sampler.stop), "batch_factor": sampler.batch_factor,
                     "lipschitz": game.lipschitz}
        resolved = {"levels": sampler.levels, "stop": sampler.stop, "batch_factor": sampler.batch_factor,
                    "parameters": alg.parameters}
        if not priv.private:
            return GamePlan(algorithm, sampler, replicas, context.num_rounds, context.shape.num_silos,
                            _not_private(replicas), resolved=resolved, constants=constants)
        eps, delta = _budget(priv, CALIBRATIONS, _ALG3_LIMIT)
        calibration = checked_term(Calibration, priv.calibration)      # a member: _budget checked it
        constant = _vertex_constant(alg)
        per_draw = bias_reduced_draw_epsilon(constant, replicas.step_sizes, sampler.batch_factor, game.lipschitz)
        limit = bias_reduced_stop_limit(eps, delta, per_draw, calibration)
        if np.any(sampler.stop > limit * (1 + 1e-12)):
            route = "Prop. 3.17's U" if calibration == Calibration.PAPER else "the U of bounded-range draws composed in zCDP"
            raise ConfigError("participation.stop", sampler.stop, f"at most {float(limit.min()):.6g} ({route} "
                              f"for tau = {float(replicas.step_sizes.max()):.6g}, alpha = {sampler.batch_factor:g}, "
                              f"c_v = {constant:g})")
        most = bias_reduced_most_draws(sampler.stop)
        draws_accountant = _pure_draws if calibration == Calibration.PAPER else _bounded_range_draws
        privacy = _central(
            draws_accountant(per_draw[:, None], delta, most_releases=most), eps, delta, replicas,
            calibration=calibration,
            details={"draw_epsilon_max": float(per_draw.max()), "vertex_constant": constant, "most_releases": most,
                     "released": "vertex draws only (2^(N+1) + 1 per player per step) and their average"})
        return GamePlan(algorithm, sampler, replicas, context.num_rounds, context.shape.num_silos, privacy,
                        resolved={**resolved, **privacy.details}, constants=constants)


def _vertex_constant(alg: BiasReducedSettings | BoostedSettings) -> float:
    name = alg.vertex_constant
    if name == "paper":
        raise ConfigError("algorithm.vertex_constant", name, f"safe (c_v = 20): the paper's c_v = "
                          f"{PAPER_VERTEX_CONSTANT:g} under-states each draw's epsilon, which the estimator's "
                          "range puts at 2 (4 C_M + 2) = 20 - 2^(3 - M) tau alpha L0 (19.75 at M = 5; "
                          "calibration.vertex_constant)")
    if name not in VERTEX_CONSTANTS:
        raise ConfigError("algorithm.vertex_constant", name, f"one of {tuple(VERTEX_CONSTANTS)} (c_v = 20, re-derived "
                          "from the estimator's range: calibration.vertex_constant)")
    return VERTEX_CONSTANTS[name]


@dataclass(frozen=True)
class OnlineToBatch(ProtocolRecipe):
    """The recipe of seed 001's Alg. 5 (DP-SCO): ``paper`` sets T, q, K, B and tau by Thm 4.2 (a)
    (``regime=first_order``) or (b) (``second_order``) and the default rule tau = min(utility,
    1 / (4 L0 q), tau_priv); ``manual`` takes them as set and refuses tau above tau_priv(B, k).
    The k = K (q + floor(T / q)) draws, each (4 tau L0 / B)-DP, compose by Cor. 3.6."""

    trust_models: tuple[TrustModel, ...] = (TrustModel.CENTRAL, TrustModel.NONE)
    settings: type[AlgorithmSettings] = OnlineToBatchSettings
    privacy_keys: tuple[str, ...] = ()
    config_keys: tuple[str, ...] = ()
    needs_loss: bool = False

    def resolve(self, algorithm_class: type[Any], config: dict, dataset, shape, loss, sampler, privacy: PrivacySettings,
                algorithm: AlgorithmSettings) -> dict:
        alg, priv = settings_of(OnlineToBatchSettings, algorithm), privacy
        game = _one_loss(config, dataset, str(alg.name))
        regime = alg.regime
        if regime == "second_order" and game.second_order is None:
            raise ConfigError("algorithm.regime", regime, "first_order, or second_order for a second-order smooth "
                              "loss (Thm 4.2 (a), (b))")
        if _mode(alg) == "manual":
            return config
        if not priv.private:
            raise ConfigError("algorithm.parameters", "paper", "manual with privacy=none (Thm 4.2's T, q, K are set by eps)")
        eps, delta = _budget(priv)
        schedule = sco_schedule(regime, shape.num_silos, eps, delta, game.rows, game.lipschitz, game.smoothness,
                                game.second_order or 0.0)
        return {**with_algorithm(config, step_size=schedule.step_size, draws=schedule.draws, refresh=schedule.refresh),
                "num_rounds": schedule.num_steps,
                "participation": {**config["participation"], "batch_size": schedule.batch_size}}

    def plan(self, algorithm_class: type[Any], config: dict, context: PlanContext) -> GamePlan:
        alg, priv = settings_of(OnlineToBatchSettings, context.algorithm), context.privacy
        name, _ = _checked(config, context)
        game = _one_loss(config, context.dataset, name)
        draws = positive("algorithm.draws", alg.draws, int)
        refresh = positive("algorithm.refresh", alg.refresh, int)
        block_steps = alg.block_steps
        batch, steps, replicas = int(context.sampler.batch_size), context.num_rounds, context.replicas
        releases = sco_draws(steps, refresh, draws)
        algorithm = algorithm_class(step_size=replicas.step_sizes, batch_size=batch, num_steps=steps, refresh=refresh,
                                    draws=draws, rows=game.rows)
        constants = {"batch_size": float(batch), "draws": float(draws), "refresh": float(refresh),
                     "lipschitz": game.lipschitz}
        if not priv.private:
            privacy = _not_private(replicas)
        else:
            eps, delta = _budget(priv)
            limit = sco_private_step(batch, releases, eps, delta, game.lipschitz)
            _refuse_above(limit, replicas, f"Prop. 4.3 at B = {batch}, k = {releases} draws, eps = {eps:g}, "
                                           f"delta = {delta:g}, L0 = {game.lipschitz:g}")
            per_draw = np.asarray(draw_epsilon(replicas.step_sizes, game.lipschitz, batch))[:, None]
            privacy = _central(
                _pure_draws(per_draw, delta, most_releases=releases), eps, delta, replicas,
                details={"tau_priv": limit, "draw_epsilon_max": float(per_draw.max()), "releases": releases,
                         "released": "vertex draws from the running average (K per refresh) and the output's K"})
            constants["tau_priv"] = limit
        resolved = {"num_rounds": steps, "batch_size": batch, "draws": draws, "refresh": refresh,
                    "regime": alg.regime, "parameters": alg.parameters,
                    "block_steps": block_steps, **privacy.details}
        return GamePlan(algorithm, context.sampler, replicas, steps, context.shape.num_silos, privacy, block_steps,
                        resolved=resolved, constants=constants)


def _one_loss(config: dict, dataset, name: str):
    game = _game(config, dataset, name)
    if game.columns != 1:
        raise ConfigError("data.spec.tasks", game.columns, f"1 for {name} (DP-SCO minimises one loss)")
    return game


@dataclass(frozen=True)
class FrankWolfeRecipe(ProtocolRecipe):
    """The recipe of the DP Frank-Wolfe baseline (``frank_wolfe``): every sample every round
    (``participation=all``), ``paper`` sets T = floor((n eps)^{2/3}) (``num_rounds``; ``manual``
    keeps it); eps0 = eps / (2 sqrt(2 T ln(1/delta))) per draw, composed by Cor. 3.6."""

    trust_models: tuple[TrustModel, ...] = (TrustModel.CENTRAL, TrustModel.NONE)
    settings: type[AlgorithmSettings] = FrankWolfeSettings
    privacy_keys: tuple[str, ...] = ()
    config_keys: tuple[str, ...] = ()
    needs_loss: bool = False

    def resolve(self, algorithm_class: type[Any], config: dict, dataset, shape, loss, sampler, privacy: PrivacySettings,
                algorithm: AlgorithmSettings) -> dict:
        alg, priv = settings_of(FrankWolfeSettings, algorithm), privacy
        _one_loss(config, dataset, str(alg.name))
        if _mode(alg) == "manual" or not priv.private:
            return config
        eps, _ = _budget(priv)
        return {**config, "num_rounds": frank_wolfe_rounds(shape.num_silos, eps)}

    def plan(self, algorithm_class: type[Any], config: dict, context: PlanContext) -> GamePlan:
        alg, priv = settings_of(FrankWolfeSettings, context.algorithm), context.privacy
        name, _ = _checked(config, context, AllUnits, "all")
        game = _one_loss(config, context.dataset, name)
        replicas, steps, n = context.replicas, context.num_rounds, context.shape.num_silos
        constants = {"lipschitz": game.lipschitz}
        if not priv.private:
            round_epsilon, privacy = float("inf"), _not_private(replicas)
        else:
            eps, delta = _budget(priv)
            round_epsilon = frank_wolfe_round_epsilon(steps, eps, delta)
            privacy = _central(
                _pure_draws(round_epsilon, delta), eps, delta, replicas,
                details={"round_epsilon": round_epsilon, "released": "one vertex per round (exponential mechanism "
                         "on the full-data gradient); the iterate is post-processing"})
            constants["round_epsilon"] = round_epsilon
        algorithm = algorithm_class(round_epsilon=round_epsilon, num_samples=n, num_steps=steps, rows=game.rows,
                                    lipschitz=game.lipschitz)
        resolved = {"num_rounds": steps, "parameters": alg.parameters, **privacy.details}
        return GamePlan(algorithm, context.sampler, replicas, steps, n, privacy, resolved=resolved,
                               constants=constants)


@dataclass(frozen=True)
class ProgramPlan(PlannedProtocol):
    """A driver-side program resolved against its data (``PlannedProtocol``): built at planning."""

    program: Any
    privacy: PrivacyPlan
    resolved: dict = field(default_factory=dict)
    routing: Routing = Routing.DIRECT

    def build(self, oracle):
        return self.program


@dataclass(frozen=True)
class Boosted(ProtocolRecipe):
    """The recipe of seed 001's Alg. 4 (``boosted_smd``, ``boosting``): I and J from
    ``algorithm.failure_probability`` (beta), Alg. 3's Thm 3.14 parameters for a part of S1, the
    Frank-Wolfe stand-in's T = floor((n' eps)^{2/3}) rounds and Cor. 3.6 per-draw epsilon for a
    part of S2 or S3; each part's run is checked to compose within (eps, delta), and the program is
    charged one (eps, delta) release by parallel composition. One program, one release:
    participation=all, num_rounds=1."""

    trust_models: tuple[TrustModel, ...] = (TrustModel.CENTRAL,)
    settings: type[AlgorithmSettings] = BoostedSettings
    privacy_keys: tuple[str, ...] = ()
    config_keys: tuple[str, ...] = ()
    needs_loss: bool = False

    def plan(self, algorithm_class: type[Any], config: dict, context: PlanContext) -> ProgramPlan:
        alg, priv = settings_of(BoostedSettings, context.algorithm), context.privacy
        name, game = _checked(config, context, AllUnits, "all")
        if context.num_rounds != 1:
            raise ConfigError("num_rounds", context.num_rounds, f"1 for {name} (one program, one release)")
        if game.second_order is None:
            raise ConfigError("data.spec.link", getattr(context.dataset, "link", None),
                              f"a second-order smooth objective for {name} (Thm 3.20 needs L2)")
        beta = alg.failure_probability
        eps, delta = _budget(priv)
        runs, checks = boosting_counts(beta)
        n, replicas, constant = context.shape.num_silos, context.replicas, _vertex_constant(alg)
        quarter, ssp_part, sco_part = boosting_split(n, runs, checks)
        try:
            params = bias_reduced_parameters(ssp_part, eps, delta, log_dimensions(game.rows, game.columns),
                                             game.lipschitz, game.smoothness, game.second_order, constant,
                                         checked_term(Calibration, priv.calibration))
        except ConfigError:
            params = None
        if sco_part < 1 or params is None:
            raise ConfigError("data.spec.num_samples", n, f"more samples for {name} at beta = {beta:g} (I = {runs}, "
                              f"J = {checks}): Alg. 3 on n / (4 I) = {ssp_part} samples needs U >= 4, and each of "
                              f"the 2 I J stand-in runs at least one sample")
        per_draw = bias_reduced_draw_epsilon(constant, params.step_size, params.batch_factor, game.lipschitz)
        sco_rounds = frank_wolfe_rounds(sco_part, eps)
        sco_epsilon = frank_wolfe_round_epsilon(sco_rounds, eps, delta)
        parts = {"alg3": float(PureDpComposition(per_draw, delta, route="advanced").epsilons(
                     bias_reduced_most_draws(params.stop))),
                 "frank_wolfe": float(PureDpComposition(sco_epsilon, delta, route="advanced").epsilons(sco_rounds)),
                 "selection": eps}
        over = {part: value for part, value in parts.items() if value > eps * (1 + 1e-9)}
        if over:                          # the formulas keep every part within (eps, delta); a check, not a rule
            raise ConfigError("privacy.epsilon", eps, f"a budget every part meets (planned {over})")
        sampler = LeveledBatches(levels=params.levels, batch_factor=params.batch_factor, stop=params.stop)
        details = {"runs": runs, "checks": checks, "quarter": quarter, "alg3_part": ssp_part, "sco_part": sco_part,
                   "vertex_constant": constant,
                   "alg3_stop": params.stop, "alg3_levels": params.levels, "alg3_step_size": params.step_size,
                   "alg3_draw_epsilon": per_draw, "sco_rounds": sco_rounds, "sco_round_epsilon": sco_epsilon,
                   **{f"epsilon_{part}": value for part, value in parts.items()},
                   "deviation": "the DP-SCO subroutine is DP Frank-Wolfe, not Asi et al. 2021 Alg. 3 (Thm 3.20's "
                                "C1, C2 change; spec §6 item 15)",
                   "released": "the chosen candidate (x_i*, y_i*) and i*; every sub-run's draws stay at the curator"}
        rule = ParallelComposition(ApproxDpComposition(eps, delta, 0.0, route="basic"))
        privacy = _central(PopulationAccountant(rule, "parallel (Alg. 4's disjoint parts)", 1), eps, delta, replicas,
                           details=details)
        constants = {"runs": float(runs), "checks": float(checks), "lipschitz": game.lipschitz,
                     "value_bound": game.value_bound}
        program = algorithm_class(epsilon=eps, num_units=n, runs=runs, checks=checks, rows=game.rows,
                                  columns=game.columns, value_bound=game.value_bound, lipschitz=game.lipschitz,
                                  ssp_step_size=params.step_size, ssp_levels=params.levels, ssp_sampler=sampler,
                                  sco_rounds=sco_rounds, sco_epsilon=sco_epsilon, constants=constants)
        return ProgramPlan(program, privacy, resolved={"failure_probability": beta, **details})
