"""Planning the seed-004 protocols: each algorithm class declares one ``recipe`` (its privacy),
and ``plan`` resolves an algorithm config against the data's shape.

Recipes (the ``ProtocolRecipe`` contract of ``fedray.core.planning``):

- ``SiloGaussian``: ISRL-DP (or no privacy). A participating silo makes ``releases`` Gaussian
  releases of a clipped mean of ``sample_size`` of its records, sampled without replacement;
  one ledger per silo (``SampledGaussianAccountant``), paper / theory / accountant calibration,
  per-silo budgets (App. H) and budgets as replicas. One-pass variants use disjoint batches,
  which the ledger composes in parallel.
- ``ShuffledGaussian``: shuffle DP for K = 1 reports behind a shuffler; one federation-wide
  (eps, delta) from the amplification-by-shuffling chain (``shuffle_calibration``).
- ``ShuffledVectorSum``: shuffle DP through P_vec (§3.8); one invocation per round, each record
  in one invocation, so the run spends P_vec's (eps, delta) (parallel composition).

Defaults of the paper's experiments (seed-004 §5) live here and nowhere else: K = n sqrt(eps/4R)
when ``algorithm.batch_size`` is null, delta = 1/n^2 per silo (1/(N n)^2 for shuffle DP).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping

import numpy as np

from fedray.checks import MAX_CLIP, positive
from fedray.core.planning import (
    AlgorithmSettings, PlanContext, PlannedAlgorithm, PlannedProtocol, PrivacySettings, ProtocolRecipe, Replicas,
    checked_term, settings_of,
)
from fedray.core.protocol import Routing, SampledRounds
from fedray.core.terms import Accountant, Calibration, Composition, Relation, TrustModel
from fedray.data.federation import SiloArrays
from fedray.errors import ConfigError
from fedray.evaluation import LinearModelEvaluation
from fedray.privacy.accounting import ACCOUNTANTS
from fedray.privacy.budgets import calibrate, per_silo
from fedray.privacy.ledger import Ledger, RoundsAccountant, SampledGaussianAccountant, one_pass_ledger
from fedray.privacy.mechanisms import GaussianNoise, NoNoise, PerExampleClip
from fedray.privacy.statement import GroupGuarantee, PrivacyPlan
from fedray.protocols.isrl_dp import calibration as cal
from fedray.protocols.isrl_dp import theory
from fedray.protocols.isrl_dp.settings import (
    AcSaSettings, LocalSettings, SiloSettings, StageSettings, VectorSumSettings,
)
from fedray.protocols.isrl_dp.shuffle_calibration import calibrate_shuffled_sgd

RECORD = "record of one silo"
FEDERATION_RECORD = "record anywhere in the federation"


__all__ = ["AcSaSettings", "LocalSettings", "SiloSettings", "StageSettings", "VectorSumSettings"]  # re-exported

# Settings the planner resolves itself; the others are constructor fields of the algorithm class.
RESOLVED_SETTINGS = ("name", "step_size", "batch_size", "trust_model")


def _max_feature_norm(fed) -> float:
    return fed.max_feature_norm()


@dataclass(frozen=True)
class IsrlDpPlan(PlannedProtocol):
    """A seed-004 algorithm resolved against its data (the ``PlannedProtocol`` contract)."""

    public_charges: ClassVar[bool] = True      # every round's charge is public (RoundProtocol)

    name: str
    algorithm_class: type[Any]
    algorithm_fields: dict          # resolved constructor values except loss, l2_clip and noise
    batch_size: int
    l2_clip: float | np.ndarray | None   # (P,) for a clip grid; None: estimated from the data (as the paper)
    loss: Any
    sampler: Any
    num_rounds: int
    shape: Any
    replicas: Replicas
    privacy: PrivacyPlan
    routing: Routing
    resolved: dict = field(default_factory=dict)

    def build_algorithm(self, l2_clip):
        """The algorithm with the clip known (a number, or one per replica); noise std = multiplier *
        replace-one sensitivity, so each replica's noise follows its own clip."""
        l2_clip = float(l2_clip) if np.ndim(l2_clip) == 0 else np.asarray(l2_clip, dtype=np.float64)
        if self.privacy.private:
            sensitivity: float | np.ndarray = PerExampleClip(l2_clip).sensitivity(self.privacy_sample_size,
                                                                                  Relation.REPLACE_ONE)
            if np.ndim(sensitivity):                # one per replica: (P, 1) against the (P, N) multipliers
                sensitivity = np.asarray(sensitivity)[:, None]
            # The step the ledger prices (the same multipliers, so the same events), at this clip's scale.
            accountant = self.privacy.ledger.accountant if self.privacy.ledger is not None else None
            priced = accountant.noise if isinstance(accountant, SampledGaussianAccountant) \
                else GaussianNoise(self.privacy.noise_multiplier)       # a shuffle chain prices these rounds
            noise: GaussianNoise | NoNoise = priced.scaled(sensitivity)
        else:
            noise = NoNoise()
        return self.algorithm_class(loss=self.loss, l2_clip=l2_clip, noise=noise, **self.algorithm_fields)

    @property
    def privacy_sample_size(self) -> int:
        return self.algorithm_class.recipe.releases(self.batch_size)[0]

    def build(self, oracle) -> SampledRounds:
        # l2_clip null is the paper's non-private estimate L = max ||x|| (a data-dependent
        # constant the driver learns; the run's privacy statement names it).
        l2_clip = self.l2_clip if self.l2_clip is not None else max(oracle.map(_max_feature_norm))
        params0 = np.zeros((self.replicas.count, self.shape.dim, self.loss.num_outputs))
        algorithm = self.build_algorithm(l2_clip)
        # The smallest and largest noise std some silo adds (per-silo budgets differ): a mean over
        # silos would be a value no silo used.
        constants = {"l2_clip": algorithm.l2_clip, "final_noise_std_min": 0.0, "final_noise_std_max": 0.0}
        per_round = {}
        if self.privacy.private:
            noise_std = np.asarray(algorithm.noise.noise_std)                   # (P, N)
            per_round = {"noise_std_min": noise_std.min(axis=1), "noise_std_max": noise_std.max(axis=1)}
            constants.update(final_noise_std_min=float(noise_std.min()), final_noise_std_max=float(noise_std.max()))
        return SampledRounds(algorithm, self.sampler, LinearModelEvaluation(self.loss), SiloArrays.of, params0,
                             self.num_rounds, self.shape.num_silos, self.routing, constants, per_round,
                             algorithm.noise if self.routing is Routing.DIRECT else None)


def replica_epsilons(priv: PrivacySettings, num_silos: int, levels: np.ndarray | None) -> np.ndarray:
    """(P, N) per-replica, per-silo targets: the grid level of each replica, else privacy.epsilon."""
    if levels is not None:
        return np.broadcast_to(levels[:, None], (len(levels), num_silos)).copy()
    epsilon = per_silo("privacy.epsilon", priv.epsilon, num_silos, 0.0, math.inf,
                       "a positive number, a list of one per silo, or {values, fractions}")
    return epsilon[None, :]


def _not_private(priv: PrivacySettings, shape, num_replicas: int) -> PrivacyPlan:
    return PrivacyPlan(trust_model=TrustModel.NONE, calibration=Calibration.NONE, accountant=checked_term(Accountant, priv.accountant), unit=RECORD,
                       relation=Relation.REPLACE_ONE, delta=cal.default_delta(np.asarray(shape.n_train)),
                       noise_multiplier=np.zeros((num_replicas, shape.num_silos)), target_epsilon=None, ledger=None)


@dataclass(frozen=True)
class SiloGaussian(ProtocolRecipe):
    """ISRL-DP Gaussian releases inside each silo (module docstring).

    ``calibrations`` maps a ``privacy.calibration`` mode to a multiplier formula
    (n, eps, delta, R, K) -> noise multiplier; ``local_steps``: a participation is K releases of
    one record each (Local SGD), else one release of K records; ``one_pass``: disjoint batches,
    at most floor(n / K) rounds, parallel composition; ``theorem``: the theorem of
    ``fedray.protocols.isrl_dp.theory`` a ``theory`` preset may name for this algorithm (None: none).
    """

    calibrations: Mapping[Calibration, Callable]
    settings: type[AlgorithmSettings] = SiloSettings
    local_steps: bool = False
    one_pass: bool = False
    trust_models: tuple[TrustModel, ...] = (TrustModel.ISRL_DP, TrustModel.NONE)
    routing: Routing = Routing.DIRECT
    clip_grid: bool = True          # privacy.l2_clip may be a list: one clip per block of replicas
    budget_grid: bool = True        # privacy.epsilon_grid: one calibration per budget
    privacy_keys: tuple[str, ...] = ("silo_level",)     # the hybrid recipe's target (§3.10)
    config_keys: tuple[str, ...] = ("theory",)          # the theorem presets' inputs (theory.py)
    theorem: Callable[[theory.Problem], theory.TheoryValues] | None = None    # the theory preset it takes

    def releases(self, batch_size: int) -> tuple[int, int]:
        """(records per noisy release, noisy releases per participation)."""
        return (1, batch_size) if self.local_steps else (batch_size, 1)

    def check_fields(self, fields: dict, config: dict, privacy: PrivacySettings) -> None:
        """Algorithm fields the privacy plan depends on (none here)."""

    def resolve(self, algorithm_class: type[Any], config: dict, dataset, shape, loss, sampler, privacy: PrivacySettings,
                algorithm: AlgorithmSettings) -> dict:
        return theory.resolve(config, algorithm_class, dataset, shape, loss, sampler, privacy,
                              settings_of(LocalSettings, algorithm))

    def plan(self, algorithm_class: type[Any], config: dict, context: PlanContext) -> IsrlDpPlan:
        return plan(algorithm_class, config, context)

    def privacy(self, priv: PrivacySettings, name: str, context: PlanContext, batch_size: int) -> PrivacyPlan:
        shape, replicas = context.shape, context.replicas
        n = np.asarray(shape.n_train, dtype=np.int64)
        num_silos, num_replicas = shape.num_silos, replicas.count
        if priv.delta is None:
            delta = cal.default_delta(n)
        else:
            delta = per_silo("privacy.delta", priv.delta, num_silos, 0.0, 1.0,
                             "in (0, 1) or null (= 1/n^2 per silo), or one such value per silo")
        epsilon = replica_epsilons(priv, num_silos, replicas.epsilon_levels)          # (P, N)
        modes = tuple(self.calibrations) + (Calibration.ACCOUNTANT,)
        if priv.calibration not in modes:
            raise ConfigError("privacy.calibration", priv.calibration, f"one of {modes} for {name}")
        sample_size, releases = self.releases(batch_size)
        rounds_charged = 1 if self.one_pass else context.num_rounds
        # One calibration per distinct budget row: a grid of E levels costs E solves, not P.
        rows, inverse = np.unique(epsilon, axis=0, return_inverse=True)
        multipliers = np.stack([calibrate(priv.calibration, dict(self.calibrations), row, delta, n, rounds_charged,
                                          batch_size, sample_size, releases, checked_term(Accountant, priv.accountant), self.one_pass)
                                for row in rows])
        noise_multiplier = np.broadcast_to(multipliers[inverse.reshape(-1)], (num_replicas, num_silos)).copy()
        nominal = None
        if Calibration.PAPER in self.calibrations:
            # Every paper formula is proportional to 1/eps, so the claimed eps of a multiplier z is z(1)/z.
            formula = self.calibrations[Calibration.PAPER]
            unit = np.array([formula(n_i, 1.0, d_i, rounds_charged, batch_size) for n_i, d_i in zip(n, delta)])
            nominal = unit[None, :] / noise_multiplier
        priced = SampledGaussianAccountant(GaussianNoise(noise_multiplier), sample_size, n, releases, delta,
                                           checked_term(Accountant, priv.accountant), self.one_pass)
        # The hybrid recipe (privacy.silo_level, seed-004 §3.10): the silo-level guarantee follows from
        # each silo's record-level one by group privacy over its n_i records.
        group = None if priv.silo_level is None else GroupGuarantee(
            "silo (all of its records)", "replace one silo's whole dataset", n)
        return PrivacyPlan(trust_model=priv.trust_model, calibration=priv.calibration,
                           accountant=checked_term(Accountant, priv.accountant), unit=RECORD, relation=Relation.REPLACE_ONE, delta=delta,
                           noise_multiplier=noise_multiplier,
                           target_epsilon=np.broadcast_to(epsilon, (num_replicas, num_silos)).copy(),
                           ledger=Ledger(priced, noise_multiplier.shape), nominal_epsilon=nominal, group=group)


SHUFFLE_COMPOSITIONS = {Calibration.PAPER: Composition.ADVANCED, Calibration.ACCOUNTANT: Composition.PLD}


@dataclass(frozen=True)
class ShuffledGaussian(SiloGaussian):
    """Shuffle DP: K = 1 Gaussian reports behind a shuffler; one federation-wide (eps, delta) over
    records anywhere in the federation, from the amplification-by-shuffling chain."""

    calibrations: Mapping[Calibration, Callable] = field(default_factory=dict)
    trust_models: tuple[TrustModel, ...] = (TrustModel.SDP, TrustModel.NONE)
    routing: Routing = Routing.SHUFFLE
    clip_grid: bool = False         # the shuffler's calibration takes one L
    budget_grid: bool = False       # and one federation-wide budget

    def releases(self, batch_size: int) -> tuple[int, int]:
        if isinstance(batch_size, bool) or batch_size != 1:
            raise ConfigError("algorithm.batch_size", batch_size, "1 for shuffled MB-SGD (K = 1, seed-004 §3.7)")
        return 1, 1

    def privacy(self, priv: PrivacySettings, name: str, context: PlanContext, batch_size: int) -> PrivacyPlan:
        self.releases(batch_size)
        if priv.calibration not in SHUFFLE_COMPOSITIONS:
            raise ConfigError("privacy.calibration", priv.calibration,
                              f"one of {tuple(SHUFFLE_COMPOSITIONS)} for shuffled algorithms (advanced or PLD "
                              "composition)")
        eps = priv.epsilon
        if not isinstance(eps, (int, float)) or isinstance(eps, bool) or eps <= 0:
            raise ConfigError("privacy.epsilon", eps, "one positive number under shuffle DP (a federation-wide budget)")
        shape, num_replicas = context.shape, context.replicas.count
        n_min, num_silos = shape.min_train_size, shape.num_silos
        delta = 1.0 / (num_silos * n_min) ** 2 if priv.delta is None else priv.delta
        if not isinstance(delta, (int, float)) or not 0.0 < delta < 1.0:
            raise ConfigError("privacy.delta", priv.delta, "in (0, 1), or null (= 1/(N n)^2)")
        try:
            solved = calibrate_shuffled_sgd(float(eps), float(delta), num_silos=num_silos, records_per_silo=n_min,
                                            num_rounds=context.num_rounds,
                                            silos_per_round=context.sampler.per_round(num_silos),
                                            composition=SHUFFLE_COMPOSITIONS[priv.calibration])
        except ValueError as err:
            raise ConfigError("privacy.epsilon", eps, f"a budget the shuffle chain can meet here ({err})") from err
        cells = (num_replicas, num_silos)
        return PrivacyPlan(trust_model=priv.trust_model, calibration=priv.calibration,
                           accountant=SHUFFLE_COMPOSITIONS[priv.calibration], unit=FEDERATION_RECORD,
                           # calibrated for a silo in every round; the ledger charges each silo's rounds
                           relation=Relation.REPLACE_ONE, delta=np.full(num_silos, float(delta)),
                           noise_multiplier=np.full(cells, solved.noise_multiplier),
                           target_epsilon=np.full(cells, float(eps)),
                           # A record is exposed in the rounds its silo joined, which the server sees.
                           ledger=Ledger(RoundsAccountant(solved.epsilon_after, checked_term(Accountant, priv.accountant), float(delta),
                                                          per_unit=True), cells, "silo"),
                           details={"randomizer_epsilon": solved.round.randomizer_epsilon,
                                    "randomizer_delta": solved.round.randomizer_delta})


@dataclass(frozen=True)
class ShuffledVectorSum(SiloGaussian):
    """Shuffle DP through P_vec (seed-004 §3.8): one invocation per round over its M K record
    gradients, each record in at most one (one pass), so the run spends (epsilon, delta) by
    parallel composition. The silos calibrate P_vec from the same privacy.epsilon, privacy.delta
    and M (``fedray/conf/algorithm/sdp_one_pass_accelerated.yaml``); the planner refuses other inputs."""

    calibrations: Mapping[Calibration, Callable] = field(default_factory=dict)
    one_pass: bool = True
    trust_models: tuple[TrustModel, ...] = (TrustModel.SDP, TrustModel.NONE)
    routing: Routing = Routing.SHUFFLE_SUM
    clip_grid: bool = False         # P_vec's silos calibrate for one L
    budget_grid: bool = False       # and one federation-wide budget

    def privacy(self, priv: PrivacySettings, name: str, context: PlanContext, batch_size: int) -> PrivacyPlan:
        if priv.calibration != Calibration.PAPER:
            raise ConfigError("privacy.calibration", priv.calibration, "paper for P_vec (seed-000 §2.2 parameters)")
        eps, delta = priv.epsilon, priv.delta
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps <= 15:
            raise ConfigError("privacy.epsilon", eps, "one number in (0, 15] for P_vec (seed-000 Theorem 3.2)")
        if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 < delta < 0.5:
            raise ConfigError("privacy.delta", delta, "an explicit number in (0, 1/2) for P_vec (seed-000 Theorem 3.2)")
        num_silos = context.shape.num_silos
        per_round = context.sampler.per_round(num_silos)
        if per_round is None:
            raise ConfigError("participation", type(context.sampler).__name__, "a fixed number M >= 1 of silos "
                              "every round (participation=uniform): P_vec is calibrated for M K users")
        eps, delta, cells = float(eps), float(delta), (context.replicas.count, num_silos)
        return PrivacyPlan(trust_model=priv.trust_model, calibration=Calibration.PAPER, accountant=Accountant.PARALLEL,
                           unit=FEDERATION_RECORD, relation=Relation.REPLACE_ONE, delta=np.full(num_silos, delta),
                           noise_multiplier=np.zeros(cells), target_epsilon=np.full(cells, eps),
                           ledger=Ledger(one_pass_ledger(eps, delta), cells, "federation"),
                           details={"users_per_invocation": per_round * batch_size})

    def check_fields(self, fields: dict, config: dict, privacy: PrivacySettings) -> None:
        """The silos calibrate P_vec themselves: refuse inputs other than what the ledger accounts."""
        accounted = {"target_epsilon": ("privacy.epsilon", privacy.epsilon),
                     "target_delta": ("privacy.delta", privacy.delta),
                     "silos_per_round": ("participation.silos_per_round",
                                         config["participation"].get("silos_per_round"))}
        for key, (source, value) in accounted.items():
            if fields.get(key) != value:
                raise ConfigError(f"algorithm.{key}", fields.get(key),
                                  f"{value!r} (= {source}, which the privacy ledger accounts)")


def _fields(algorithm_class: type[Any], alg: LocalSettings, step_sizes: np.ndarray, batch_size: int) -> dict:
    """The algorithm class's constructor values but the loss, clip and noise."""
    fields = {"step_size": step_sizes, "batch_size": batch_size,
              **{f.name: getattr(alg, f.name) for f in dataclasses.fields(alg) if f.name not in RESOLVED_SETTINGS}}
    if alg.average_last is None:        # null is for a theory preset to fill
        positive("algorithm.average_last", alg.average_last, int)
    algorithm_class.check_fields(fields)
    return fields


def plan(algorithm_class: type[Any], config: dict, context: PlanContext) -> IsrlDpPlan:
    """Resolve a seed-004 algorithm config (module docstring); ``ConfigError`` on a bad value."""
    recipe, alg, priv = algorithm_class.recipe, settings_of(LocalSettings, context.algorithm), context.privacy
    name = str(alg.name)
    if priv.accountant not in ACCOUNTANTS:       # so ``checked_term(Accountant, priv.accountant)`` below is the member itself
        raise ConfigError("privacy.accountant", priv.accountant, f"one of {ACCOUNTANTS}")
    pinned = alg.trust_model
    if pinned is not None and pinned != priv.trust_model:
        raise ConfigError("privacy.trust_model", priv.trust_model, f"{pinned!r} for algorithm={name} (privacy={pinned})")
    private = priv.private
    n_min = context.shape.min_train_size
    if alg.batch_size is None:
        if not private:
            raise ConfigError("algorithm.batch_size", None, "an integer in [1, n] when privacy is off")
        # K >= n sqrt(eps / (4R)) must hold for the largest budget (the paper's code uses eps_max).
        eps_max = float(np.max(replica_epsilons(priv, context.shape.num_silos, context.replicas.epsilon_levels)))
        batch_size = cal.paper_batch_size(n_min, eps_max, context.num_rounds)
    else:
        batch_size = alg.batch_size
    if batch_size > n_min:
        raise ConfigError("algorithm.batch_size", batch_size, f"at most the smallest silo's training size n = {n_min}")
    if recipe.one_pass and context.num_rounds * batch_size > n_min:
        raise ConfigError("num_rounds", context.num_rounds,
                          f"at most floor(n / K) = {n_min // batch_size} for {name}, which uses each record once")
    fields = _fields(algorithm_class, alg, context.replicas.step_sizes, batch_size)
    # 1e32 is the authors' "no clipping" (seed-004 §6 item 14d); a list is a clip grid (the replicas').
    l2_clip: float | np.ndarray | None = context.replicas.l2_clips
    if l2_clip is None:
        l2_clip = positive("privacy.l2_clip", priv.l2_clip, allow_none=True, largest=MAX_CLIP)
    if private:
        privacy = recipe.privacy(priv, name, context, batch_size)
        recipe.check_fields(fields, config, priv)
        if l2_clip is None:   # the paper's L = max ||x||, read off the silos' records (seed-004 §5)
            privacy = dataclasses.replace(privacy, non_private_inputs=(
                "privacy.l2_clip = null: the clip is the largest feature norm of the silos' records, sent to "
                "the driver unprivatised",))
    else:
        recipe.releases(batch_size)
        privacy = _not_private(priv, context.shape, context.replicas.count)
        l2_clip = math.inf if l2_clip is None else l2_clip
    resolved = {"batch_size": batch_size, "noise_multiplier_min": float(np.min(privacy.noise_multiplier)),
                "noise_multiplier_max": float(np.max(privacy.noise_multiplier)), **privacy.details}
    return IsrlDpPlan(name, algorithm_class, fields, batch_size, l2_clip, context.loss, context.sampler,
                      context.num_rounds, context.shape, context.replicas, privacy, recipe.routing, resolved)
