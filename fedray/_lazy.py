"""Package re-exports resolved on first use (PEP 562).

A package ``__init__`` that imported every submodule would make any import of one of them pay for
all: a Ray worker unpickling one dataset class would import every dataset, scipy.stats and
dp-accounting before its first call. With ``lazy_exports`` the public names stay importable from
the package, and each is imported from its own module when first asked for.
"""

from __future__ import annotations

import importlib


def lazy_exports(package: str, exports: dict[str, tuple[str, ...]]):
    """``(__getattr__, __dir__, __all__)`` for ``package``, whose public names live in the
    submodules ``exports`` maps to them (module path -> names)."""
    where = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str):
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(where[name]), name)

    def __dir__() -> list[str]:
        return sorted(where)

    return __getattr__, __dir__, sorted(where)
