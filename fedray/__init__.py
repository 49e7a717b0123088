"""fedray: private federated convex optimization experiments on Ray."""

__version__ = "0.1.0"

from fedray._lazy import lazy_exports

# The public API, each name imported from its module on first use (``import fedray`` stays light
# for Ray workers): ``load_output`` reads a finished run's released outputs back.
__getattr__, _exported, __all__ = lazy_exports(__name__, {"fedray.tracking": ("load_output",)})


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_exported()))
