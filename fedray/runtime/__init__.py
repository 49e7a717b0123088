"""Ray runtime: silo-group actors, participation sampling, the driver loop."""

from fedray.runtime.driver import RunResult, run
from fedray.runtime.participation import PoissonParticipation, UniformParticipation
from fedray.runtime.silo_group import SiloGroup, SiloGroupActor

__all__ = ["PoissonParticipation", "RunResult", "SiloGroup", "SiloGroupActor", "UniformParticipation", "run"]
