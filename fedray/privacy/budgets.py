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

The budget guard (``check_budget``) charges every silo for the participation schedule the run
will use (drawn before the run from the seed; it does not depend on data) and refuses the plan
if any silo would exceed its target, saying what would fit.
"""

from __future__ import annotations

import numpy as np
from omegaconf import OmegaConf

from fedray.errors import BudgetError, ConfigError
from fedray.privacy.accounting import SiloLedger, calibrate_noise_multiplier


def per_silo(key: str, value, num_silos: int, low: float, high: float, allowed: str) -> np.ndarray:
    """Resolve a scalar / list / {values, fractions} config value into an (N,) array in (low, high)."""
    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value)
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
        if mode == "accountant":
            if parallel_composition:
                out[rows] = calibrate_noise_multiplier(eps_i, delta_i, n_i, n_i, releases, 1, accountant)
            else:
                out[rows] = calibrate_noise_multiplier(eps_i, delta_i, sample_size, n_i, releases, num_rounds,
                                                       accountant)
        else:
            out[rows] = float(formulas[mode](n_i, eps_i, delta_i, num_rounds, batch_size))
    return out


def _largest_affordable_count(ledger: SiloLedger, silo: int, replica: int, target: float, upper: int) -> int:
    """Most participations silo ``silo`` can afford (monotone in the count: bisection)."""
    counts = np.zeros(ledger.noise_multiplier.shape, dtype=np.int64)

    def eps(c: int) -> float:
        counts[replica, silo] = c
        return float(ledger.epsilons(counts)[replica, silo])

    lo, hi = 0, upper
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if eps(mid) <= target else (lo, mid - 1)
    return lo


def check_budget(ledger: SiloLedger, counts: np.ndarray, target: np.ndarray) -> np.ndarray:
    """(P, N) planned epsilons for ``counts``; raises ``BudgetError`` if any exceeds its target.

    ``target`` is (N,) per silo or (P, N) per replica and silo (a grid of budgets as replicas).
    """
    planned = ledger.epsilons(counts)
    target = np.broadcast_to(target, planned.shape)
    excess = planned - target
    if np.all(excess <= 1e-9):
        return planned
    replica, silo = np.unravel_index(int(np.argmax(excess)), excess.shape)
    count = int(counts[replica, silo])
    fits = _largest_affordable_count(ledger, silo, replica, float(target[replica, silo]), count)
    n = int(ledger.dataset_size[silo])
    needed = calibrate_noise_multiplier(float(target[replica, silo]), float(ledger.delta[silo]),
                                        n if ledger.parallel_composition else ledger.sample_size, n,
                                        ledger.releases, 1 if ledger.parallel_composition else count,
                                        ledger.accountant)
    raise BudgetError(
        f"planned epsilon {planned[replica, silo]:.4g} for silo {silo} ({count} participations, "
        f"{ledger.accountant} accountant) exceeds privacy.epsilon = {target[replica, silo]:g}; "
        f"noise multiplier >= {needed:.4g} (planned {ledger.noise_multiplier[replica, silo]:.4g}) "
        f"or at most {fits} participations would fit "
        f"(or privacy.calibration=accountant; privacy.enforce_budget=false runs it anyway)"
    )

