"""What the generic planner hands a protocol package, and what it expects back.

The planner (``fedray.plan``) validates the keys every run has (seed, rounds, replicas, data,
participation, runtime, tracking), then asks the algorithm class's ``recipe`` (a
``ProtocolRecipe``) to resolve derived config values and to plan the protocol: its fields, its
privacy plan with a ledger, and how to build the protocol once the actors are up. It then checks
the ledger against the sampler's counts (the budget guard). Everything here is plain data:
configs arrive as dicts, never as Hydra objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from fedray.core.oracle import Oracle
from fedray.core.program import CentralProgram
from fedray.core.protocol import RoundProtocol, Routing


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

    trust_models: tuple[str, ...]
    privacy_keys: tuple[str, ...]      # privacy config keys of its own, beyond the planner's
    config_keys: tuple[str, ...]       # top-level config keys of its own (a theorem preset's inputs)
    clip_grid: bool = False            # privacy.l2_clip may be a list (one clip per block of replicas)
    sets_participation: bool = False   # ``resolve`` writes the participation group (checked after it)
    needs_loss: bool = True            # the data must name a loss (a game defines its own objective)

    def resolve(self, algorithm_class: type[PlannedAlgorithm], config: dict, dataset: Any, shape: Any, loss: Any,
                sampler: Any) -> dict: ...

    def plan(self, algorithm_class: type[PlannedAlgorithm], config: dict, context: PlanContext) -> PlannedProtocol: ...


@runtime_checkable
class PlannedAlgorithm(Protocol):
    """What ``algorithm._target_`` names: a class carrying its package's ``recipe``."""

    recipe: ClassVar[ProtocolRecipe]
