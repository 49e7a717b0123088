"""fedray: private federated convex optimization experiments on Ray.

The public API: `config`, `make_plan`, `run`, `run_sweep` and `Run` (`fedray.api`), and
`load_output`, which reads a finished run's released outputs back (`fedray.tracking`). Each name is
imported from its module on first use, so that ``import fedray`` (and every Ray worker's import of a
submodule) stays light.
"""

from fedray._lazy import lazy_exports

__version__ = "0.1.0"

__getattr__, _exported, __all__ = lazy_exports(__name__, {
    "fedray.api": ("Run", "config", "make_plan", "run", "run_sweep"),
    "fedray.tracking": ("load_output",),
})


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_exported()))
