"""The contracts every protocol implements; no Ray, MLflow or Hydra, nothing of fedray but
``fedray.rng`` and ``fedray.errors``.

- ``protocol``: the round protocol (configure, client step, aggregate, done, output) and
  ``SampledRounds``, a protocol built from a sampler and an algorithm's two halves;
- ``sampling``: participation samplers drawn lazily round by round;
- ``evaluation``: metrics tagged released or diagnostic;
- ``oracle``: map-reduce over the actors' shards, for what a driver-side program asks of the data;
- ``terms``: the closed vocabularies of a privacy config (trust model, calibration, accountant,
  composition, neighbouring relation) as string enums.
"""

from fedray.core.evaluation import Metric
from fedray.core.oracle import Oracle
from fedray.core.protocol import Aggregated, Messages, RoundKeys, RoundProtocol, RoundSpec, Routing, SampledRounds
from fedray.core.sampling import (
    AllUnits, LeveledBatches, PhasedBatches, PhasedGroups, PhasedSubsets, PoissonParticipation, SequentialBatches,
    UniformParticipation,
)
from fedray.core.terms import Accountant, Calibration, Composition, Relation, TrustModel

__all__ = [
    "Accountant",
    "Aggregated",
    "AllUnits",
    "Calibration",
    "Composition",
    "LeveledBatches",
    "Messages",
    "Metric",
    "Oracle",
    "PhasedBatches",
    "PhasedGroups",
    "PhasedSubsets",
    "PoissonParticipation",
    "Relation",
    "RoundKeys",
    "RoundProtocol",
    "RoundSpec",
    "Routing",
    "SampledRounds",
    "SequentialBatches",
    "TrustModel",
    "UniformParticipation",
]
