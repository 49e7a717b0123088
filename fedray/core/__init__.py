"""The contracts every protocol implements; no Ray, MLflow or Hydra, nothing of fedray but
``fedray.rng`` and ``fedray.errors``.

- ``protocol``: the round protocol (configure, client step, aggregate, done, output) and
  ``SampledRounds``, a protocol built from a sampler and an algorithm's two halves;
- ``sampling``: participation samplers drawn lazily round by round;
- ``evaluation``: metrics tagged released or diagnostic;
- ``oracle``: map-reduce over the actors' shards, for what a driver-side program asks of the data.
"""

from fedray.core.evaluation import Metric
from fedray.core.oracle import Oracle
from fedray.core.protocol import Aggregated, Messages, RoundKeys, RoundProtocol, RoundSpec, Routing, SampledRounds
from fedray.core.sampling import (
    AllUnits, LeveledBatches, PhasedBatches, PhasedGroups, PhasedSubsets, PoissonParticipation, SequentialBatches,
    UniformParticipation,
)

__all__ = [
    "Aggregated",
    "AllUnits",
    "LeveledBatches",
    "Messages",
    "Metric",
    "Oracle",
    "PhasedBatches",
    "PhasedGroups",
    "PhasedSubsets",
    "PoissonParticipation",
    "RoundKeys",
    "RoundProtocol",
    "RoundSpec",
    "Routing",
    "SampledRounds",
    "SequentialBatches",
    "UniformParticipation",
]
