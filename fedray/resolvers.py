"""OmegaConf resolvers the experiment configs use, registered explicitly by ``register()`` (the
command line does it before Hydra composes; so does the tests' ``compose``).

- ``${fedray_grid:lo,hi,num}`` is ``exp(linspace(lo, hi, num))``; ``${fedray_grid:lo,hi,num,scale}``
  multiplies it by ``scale`` (step-size grids; the seed-004 MB-SGD grids are scaled by M because
  fedray averages the silo messages where the authors' code sums them, seed-004 §5);
- ``${fedray_authors_k:records,N,eps_max,R}``: the seed-004 insurance code's batch size
  (``fedray.protocols.isrl_dp.calibration.authors_batch_size``).
"""

from __future__ import annotations

import numpy as np
from omegaconf import ListConfig, OmegaConf


def step_grid(lo: float, hi: float, num: int, scale: float = 1.0) -> list[float]:
    """exp(linspace(lo, hi, num)) * scale, rounded to 6 significant digits for readable params."""
    values = np.exp(np.linspace(float(lo), float(hi), int(num))) * float(scale)
    return [float(f"{v:.6g}") for v in values]


def _authors_k(num_records: int, num_silos: int, epsilon_max: float, num_rounds: int) -> int:
    from fedray.protocols.isrl_dp.calibration import authors_batch_size     # a protocol package: only if a config asks

    return authors_batch_size(num_records, num_silos, epsilon_max, num_rounds)


def _grid(*args) -> ListConfig:
    # A ListConfig, not a list: Hydra's `--cfg job --resolve` resolves the config in place, which
    # OmegaConf refuses for a resolver's plain list.
    return ListConfig(step_grid(*args))


RESOLVERS = {"fedray_grid": _grid, "fedray_authors_k": _authors_k}


def register() -> None:
    """Register every resolver once (idempotent)."""
    for name, resolver in RESOLVERS.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, resolver)
