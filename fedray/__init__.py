"""fedray: private federated convex optimization experiments on Ray.

The public API (`fedray.api`): `config`, `make_plan`, `run`, `run_sweep` and `Run`, imported on
first use so that ``import fedray`` (and every Ray worker's import of a submodule) stays cheap.
"""

from fedray._lazy import lazy_exports

__version__ = "0.1.0"

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "fedray.api": ("Run", "config", "make_plan", "run", "run_sweep"),
})
