"""Per-silo privacy budgets, their noise calibration, and the guard that refuses overspending plans.

Heterogeneous budgets (seed-004 App. H, Definition 10): silo i has its own (eps_i, delta_i) and
n_i, and calibrates its own noise from them. ``privacy.epsilon`` (and ``privacy.delta``) may be

- a number: every silo the same;
- a list of N numbers: one per silo, in silo order;
- ``{values: [...], fractions: [...]}``: consecutive groups of silos with these shares.

``privacy.delta: null`` means 1/n_i^2 per silo (the experiments' choice).

Calibration (``privacy.calibration``):

- ``paper``: the algorithm's own formula from its paper (e.g. seed-004 §5), for reproduction;
- ``theory``: the theorem's formula where the algorithm has one (e.g. seed-004 Thm 2.1);
- ``accountant``: the smallest noise multiplier for which the accountant's epsilon, if the silo
  took part in all R rounds, is at most eps_i (dp-accounting's calibration search).

The budget guard is ``fedray.privacy.ledger.check_budget``.
"""

from __future__ import annotations

import numpy as np

from fedray.core.terms import Calibration
from fedray.errors import ConfigError
from fedray.privacy.accounting import calibrate_noise_multiplier


def per_silo(key: str, value, num_silos: int, low: float, high: float, allowed: str) -> np.ndarray:
    """Resolve a scalar / list / {values, fractions} config value into an (N,) array in (low, high)."""
    if isinstance(value, dict):
        values, fractions = value.get("values"), value.get("fractions")
        if not values or not fractions or len(values) != len(fractions) or abs(sum(fractions) - 1) > 1e-9:
            raise ConfigError(key, value, "{values: [...], fractions: [...]} with equal lengths and fractions summing to 1")
        edges = np.round(np.cumsum([0.0] + list(fractions)) * num_silos).astype(int)
        out = np.empty(num_silos)
        for v, a, b in zip(values, edges[:-1], edges[1:]):
            out[a:b] = v
        value = out.tolist()
    if isinstance(value, (list, tuple)):
        if len(value) != num_silos:
            raise ConfigError(key, value, f"a number or a list of {num_silos} numbers (one per silo)")
        array = np.asarray(value, dtype=float)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        array = np.full(num_silos, float(value))
    else:
        raise ConfigError(key, value, allowed)
    inside = (array > low) & (array < high)
    if not np.all(inside):
        raise ConfigError(key, value if np.isscalar(value) else float(array[~inside][0]), allowed)
    return array


def calibrate(mode: str, formulas: dict, epsilon: np.ndarray, delta: np.ndarray, n: np.ndarray,
              num_rounds: int, batch_size: int, sample_size: int, releases: int, accountant: str,
              parallel_composition: bool = False) -> np.ndarray:
    """(N,) noise multipliers, one per silo, from its own (eps_i, delta_i, n_i).

    Under parallel composition the accountant mode targets one un-subsampled release.
    """
    out = np.empty(len(n))
    keys = np.stack([epsilon, delta, n], axis=1)
    for key in np.unique(keys, axis=0):
        eps_i, delta_i, n_i = float(key[0]), float(key[1]), int(key[2])
        rows = np.all(keys == key, axis=1)
        if mode == Calibration.ACCOUNTANT:
            if parallel_composition:
                out[rows] = calibrate_noise_multiplier(eps_i, delta_i, n_i, n_i, releases, 1, accountant)
            else:
                out[rows] = calibrate_noise_multiplier(eps_i, delta_i, sample_size, n_i, releases, num_rounds,
                                                       accountant)
        else:
            out[rows] = float(formulas[mode](n_i, eps_i, delta_i, num_rounds, batch_size))
    return out
