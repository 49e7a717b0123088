"""Ray runtime: silo-group actors, the shuffler, the driver loop, checkpoints. Names no paper."""

from fedray._lazy import lazy_exports

# an actor process imports silo_group alone, not the driver and its planner
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "fedray.runtime.driver": ("RunResult", "run"),
    "fedray.runtime.silo_group": ("SiloGroup", "SiloGroupActor"),
})
