"""Ray runtime: silo-group actors, the shuffler, the driver loop, checkpoints. Names no paper."""

from fedray.runtime.driver import RunResult, run
from fedray.runtime.silo_group import SiloGroup, SiloGroupActor

__all__ = ["RunResult", "SiloGroup", "SiloGroupActor", "run"]
