"""What the generic planner hands a protocol package, and what it expects back.

The planner (``fedray.plan``) validates the keys every run has (seed, rounds, replicas, data,
participation, runtime, tracking), then asks the algorithm class's ``recipe`` (a
``ProtocolRecipe``) to resolve derived config values and to plan the protocol: its fields, its
privacy plan with a ledger, and how to build the protocol once the actors are up. It then checks
the ledger against the sampler's counts (the budget guard). Everything here is plain data:
configs arrive as dicts, never as Hydra objects, and the privacy and algorithm sections each as
one typed, checked value (``PrivacySettings``; the recipe's ``settings``, an ``AlgorithmSettings``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Callable, ClassVar, Mapping, Protocol, Sequence, TypeVar, runtime_checkable

import numpy as np

from fedray.core.oracle import Oracle
from fedray.core.program import CentralProgram
from fedray.core.mechanism import ReportsMetrics
from fedray.core.protocol import CuratorRoundsAlgorithm, CuratorSampledRounds, RoundProtocol, Routing
from fedray.core.terms import Accountant, Calibration, Composition, TrustModel

# ``privacy.epsilon`` or ``privacy.delta`` as written: one number, one per unit, or (epsilon only)
# a {values, fractions} spec of per-silo budgets; null where a protocol has a default.
Budget = float | Sequence[float] | Mapping[str, Any] | None


@dataclass(frozen=True)
class PrivacySettings:
    """A run's ``privacy`` config section as one typed value, built and checked once by the
    planner (``fedray.plan.privacy_settings``) and handed to the recipe (``resolve``'s ``privacy``
    and ``PlanContext.privacy``); recipes read its attributes, never the section's dict.

    The planner has checked: every key is the planner's or one of the recipe's ``privacy_keys``;
    ``trust_model`` is one of the recipe's ``trust_models``; ``epsilon``'s numbers are at most
    ``fedray.plan.MAX_EPSILON``; ``epsilon_grid`` (kept only when private) is set only for a
    recipe with ``budget_grid``, and then distinct positive numbers; ``l2_clip`` is a list only
    for a recipe with ``clip_grid``, and then distinct positive numbers; ``enforce_budget`` is
    true, false or stop. Grids and budgets stay as written (a list, a per-silo spec), so a
    refusal shows the value the user wrote. Each closed-vocabulary word (``fedray.core.terms``)
    is its member; a word outside the vocabulary stays as written, so the recipe's refusal names
    the subset it takes (``checked_term`` types it after that check). The ranges a protocol's
    formulas need (epsilon in (0, 15], delta below 1/2, a clip at most some bound, which
    calibrations) the recipe checks itself, in one line naming its reason. The YAML words stay in
    the config, which is what MLflow and the privacy statement log.
    """

    trust_model: TrustModel
    calibration: Calibration | None = None      # null: the recipe's default, or a theory preset's
    accountant: Accountant | None = None
    epsilon: Budget = None
    epsilon_grid: np.ndarray | None = None       # (E,) budgets carried as replicas; None when not private
    delta: Budget = None
    l2_clip: float | np.ndarray | None = None    # one clip as written, or (C,) a clip grid
    enforce_budget: bool | str = True            # True, False or "stop"
    # the protocols' own keys (a recipe's ``privacy_keys``)
    composition: Composition | None = None       # P_GD's rounds: advanced (the paper's) or pld
    silo_level: Any = None                       # the ISRL-DP hybrid recipe's {epsilon, delta} target, as written

    @property
    def private(self) -> bool:
        return self.trust_model != TrustModel.NONE


Term = TypeVar("Term", bound=StrEnum)


def checked_term(kind: type[Term], value: object) -> Term:
    """``value``, a setting a recipe has already refused unless it is a member of ``kind`` (say
    ``privacy.calibration`` after its allowed subset), as that member; anything else is a bug of
    the recipe (a missing check), raised as ``TypeError``."""
    if not isinstance(value, kind):
        raise TypeError(f"{value!r} is not a {kind.__name__}: the recipe uses a setting it did not check")
    return value


@dataclass(frozen=True, kw_only=True)
class AlgorithmSettings:
    """A run's ``algorithm`` config section as one typed value: each recipe declares its subclass
    (``ProtocolRecipe.settings``), a frozen dataclass whose fields are the section's keys (besides
    ``_target_``, which names the class) with the YAML's defaults. The planner builds and checks it
    once (``fedray.plan.algorithm_settings``) and hands it to the recipe (``resolve``'s
    ``algorithm`` and ``PlanContext.algorithm``); recipes read its attributes, never the dict.

    The planner has checked: every key is a field (a did-you-mean names the closest); a field
    without a default is given; and each given value against its annotation: ``bool`` is true or
    false; ``int`` and ``float`` are numbers of that kind; ``Positive`` (in ``Annotated``) a
    positive one, ``Within`` one in its interval; a ``Literal`` one of its words (``Because``
    adds the refusal's reason); None only where the type allows it. Other types (a number or a
    word, a step-size grid, an interpolated value) are the recipe's to check, as are the checks
    that read other settings, the data or the privacy settings. A ``Positive`` or ``Within``
    number is converted to its field's kind; other values stay as written (words stay the YAML's,
    which MLflow logs).
    """

    name: str | None = None


@dataclass(frozen=True, kw_only=True)
class Stepped(AlgorithmSettings):
    """Settings with ``algorithm.step_size``: one positive number or a non-empty list of them (one
    replica per value; the planner checks it where it builds the replicas). None only before
    ``resolve`` where a rule sets it."""

    step_size: float | list[float] | None = None


@dataclass(frozen=True)
class Positive:
    """``Annotated[int, Positive()]``: a positive number of the field's kind, at most ``largest``
    (``fedray.checks.positive``)."""

    largest: float | None = None


@dataclass(frozen=True)
class Within:
    """``Annotated[float, Within(0, 1, "a number in (0, 1)")]``: a number in (low, high), or
    (low, high] with ``closed_high``; ``allowed`` words the refusal."""

    low: float
    high: float
    allowed: str
    closed_high: bool = False


@dataclass(frozen=True)
class Because:
    """``Annotated[Literal[...], Because("(why)")]``: the reason a refused word's error adds."""

    reason: str


Settings = TypeVar("Settings", bound=AlgorithmSettings)


def settings_of(kind: type[Settings], value: AlgorithmSettings) -> Settings:
    """``value``, the settings the planner built from the recipe's own ``settings`` type, as that
    type; anything else is a bug (a recipe reading another recipe's settings), raised as ``TypeError``."""
    if not isinstance(value, kind):
        raise TypeError(f"{type(value).__name__} is not {kind.__name__}: the recipe reads settings it does not declare")
    return value


def with_algorithm(config: dict, **values: Any) -> dict:
    """A copy of ``config`` whose ``algorithm`` section has ``values`` written in (what a rule in
    ``resolve`` sets: a step size, draws, phases); the planner builds the settings again from it."""
    return {**config, "algorithm": {**config["algorithm"], **values}}


@dataclass(frozen=True)
class Replicas:
    """The runs one job carries, in order budget level (slowest), clip, repetition, step size (fastest).

    Each replica is a simulated deployment of its own: its private draws (noise, minibatches,
    shuffles, server-side randomness) come from streams keyed by its row of ``streams``, which is
    its repetition followed by its settings (step size, budget, and the clip in a job carrying a
    clip grid), so replicas never share noise and a replica draws exactly what a plain run with its
    settings and seed draws (for a clip-grid replica: a run whose grid is its clip alone). With common random
    numbers the row is the repetition alone: replicas of one repetition then share their draws
    (paired comparisons across settings), and their joint release is not private: messages at two
    settings cancel each other's noise. Participation is public and keyed by the repetition. In a
    faithful run (``runtime.faithful``) every row ends with the same secret words of fresh OS
    entropy drawn at planning and never logged (``fedray.plan.secret_words``), so no private draw,
    the curator's included, follows from the logged configuration.
    """

    step_sizes: np.ndarray                 # (P,)
    repetitions: np.ndarray                # (P,) keys the public draws (who takes part)
    epsilon_levels: np.ndarray | None      # (P,) privacy.epsilon_grid value of each replica, or None
    streams: np.ndarray                    # (P, k) keys the private draws (class docstring)
    common_random_numbers: bool = False
    l2_clips: np.ndarray | None = None     # (P,) the clip of each replica where privacy.l2_clip is a list

    @property
    def count(self) -> int:
        return int(self.step_sizes.shape[0])


@dataclass(frozen=True)
class PlanContext:
    seed: int
    num_rounds: int
    dataset: Any          # the data spec (describes and loads; records are loaded in the actors)
    shape: Any            # its FederationShape
    loss: Any
    sampler: Any
    replicas: Replicas
    privacy: PrivacySettings
    algorithm: AlgorithmSettings    # the recipe's ``settings``, built after ``resolve``


@runtime_checkable
class PlannedProtocol(Protocol):
    """A protocol resolved against its data's shape: its privacy plan, values worth logging, and
    ``build(oracle)``, which may ask the data for constants (named in the privacy statement).

    Implementations subclass this class, so the declared defaults below hold where they say nothing.
    """

    privacy: Any             # its ``fedray.privacy.statement.PrivacyPlan`` (a layer above core)
    resolved: dict
    routing: Routing         # how client messages reach the server (a shuffler is started for SHUFFLE*)
    # Every round's charge is public (``RoundProtocol.public_charges``), so a run may stop at its
    # budget (``privacy.enforce_budget=stop``). False for a driver-side program or a halting curator.
    public_charges: ClassVar[bool] = False
    __dataclass_fields__: ClassVar[dict[str, Any]]     # a frozen dataclass: the planner ``replace``s its privacy

    def build(self, oracle: Oracle) -> RoundProtocol | CentralProgram: ...


@runtime_checkable
class ProtocolRecipe(Protocol):
    """How a protocol package plans its algorithm class (the class's ``recipe``). Implementations
    subclass this class, so the declared defaults below hold where they say nothing."""

    trust_models: tuple[TrustModel, ...]
    settings: type[AlgorithmSettings]      # its algorithm section's type (``AlgorithmSettings``)
    privacy_keys: tuple[str, ...] = ()     # privacy config keys of its own, beyond the planner's
    config_keys: tuple[str, ...] = ()      # top-level config keys of its own (a theorem preset's inputs)
    clip_grid: bool = False            # privacy.l2_clip may be a list (one clip per block of replicas)
    budget_grid: bool = False          # privacy.epsilon_grid may be a list (one budget per block of replicas)
    sets_participation: bool = False   # ``resolve`` writes the participation group (checked after it)
    needs_loss: bool = True            # the data must name a loss (a game defines its own objective)

    def resolve(self, algorithm_class: type[PlannedAlgorithm], config: dict, dataset: Any, shape: Any, loss: Any,
                sampler: Any, privacy: PrivacySettings, algorithm: AlgorithmSettings) -> dict:
        """The config with the values the recipe derives filled in (a rule's step size, a theory
        preset's budget and calibration, the phases as participation); by default the config as
        written."""
        return config

    def plan(self, algorithm_class: type[PlannedAlgorithm], config: dict, context: PlanContext) -> PlannedProtocol: ...


@runtime_checkable
class PlannedAlgorithm(Protocol):
    """What ``algorithm._target_`` names: a class carrying its package's ``recipe``."""

    recipe: ClassVar[ProtocolRecipe]


@dataclass(frozen=True)
class CuratorRoundsPlan(PlannedProtocol):
    """Sampled rounds at a trusted server (``CuratorSampledRounds``) resolved against their data,
    for any protocol package: the algorithm's halves (a ``CuratorRoundsAlgorithm``), the sampler,
    the evaluation, shard view and start (``params0``, (P, ...)) of its models over ``num_units``
    units (``fedray.evaluation.linear_models`` gives the last four for linear models on the
    silos' records), and the privacy plan whose ledger prices the server's step.
    ``server_step_metrics``: the server-placed step the algorithm applies (the same value), whose
    report of each round is logged with the round's metrics (None: no report)."""

    algorithm: CuratorRoundsAlgorithm
    sampler: Any
    evaluation: Any
    shard_view: Callable[[Any, np.ndarray], Any]
    params0: np.ndarray
    num_units: int
    num_rounds: int
    privacy: Any
    resolved: dict = field(default_factory=dict)
    constants: dict = field(default_factory=dict)
    routing: Routing = Routing.DIRECT
    server_step_metrics: ReportsMetrics | None = None

    def build(self, oracle: Oracle) -> CuratorSampledRounds:
        return CuratorSampledRounds(self.algorithm, self.sampler, self.evaluation, self.shard_view, self.params0,
                                    self.num_rounds, self.num_units, self.routing, dict(self.constants),
                                    server_step_metrics=self.server_step_metrics)
