"""Silo-side privacy steps as values: what they do to arrays and what they mean to an accountant.

Every step here runs inside a silo actor (ISRL-DP: the silo trusts nobody but itself), and is
described to dp-accounting by the event of ONE participation of one silo. Neighbouring relation:
replace one record of one silo (seed-004 Definition 2, REPLACE_ONE).

Steps take pre-drawn standard normals rather than a generator so that the runtime can draw them
from per-(repetition, silo, round) streams and the step stays a pure function.
"""

from __future__ import annotations

from dataclasses import dataclass

import dp_accounting
import numpy as np


@dataclass(frozen=True)
class GaussianNoise:
    """Add N(0, noise_std^2 I) to each message.

    ``noise_std`` broadcasts against the leading (replica, silo) axes of the messages, so replicas
    and silos may carry different noise levels (per-silo budgets, App. H).
    """

    noise_std: np.ndarray

    def apply(self, x: np.ndarray, standard_normal: np.ndarray) -> tuple[np.ndarray, dict]:
        std = np.asarray(self.noise_std, dtype=np.float64)
        std = std.reshape(std.shape + (1,) * (x.ndim - std.ndim))
        return x + std * standard_normal, {"noise_std_mean": float(np.mean(self.noise_std))}

    def select(self, silo_ids: np.ndarray) -> "GaussianNoise":
        """The step restricted to some silos, when ``noise_std`` is (P, N) over all silos."""
        return GaussianNoise(np.asarray(self.noise_std)[:, np.asarray(silo_ids)])


@dataclass(frozen=True)
class NoNoise:
    """The non-private step with the same interface (non-private baselines)."""

    def apply(self, x: np.ndarray, standard_normal: np.ndarray | None = None) -> tuple[np.ndarray, dict]:
        return x, {"noise_std_mean": 0.0}

    def select(self, silo_ids: np.ndarray) -> "NoNoise":
        return self


def subsampled_gaussian_event(
    noise_multiplier: float, sample_size: int, dataset_size: int, count: int = 1
) -> dp_accounting.DpEvent:
    """Gaussian on a clipped statistic of ``sample_size`` of ``dataset_size`` records drawn
    uniformly WITHOUT replacement, ``count`` times.

    Under REPLACE_ONE, dp-accounting's RDP accountant amplifies this sampling (Wang, Balle,
    Kasiviswanathan 2019, Thm 27). A single draw with replacement is the same as one without,
    so Local SGD's single-record steps use sample_size = 1. Sampling the whole dataset is the
    plain Gaussian event.
    """
    if noise_multiplier <= 0:
        return dp_accounting.NonPrivateDpEvent()
    event: dp_accounting.DpEvent = dp_accounting.GaussianDpEvent(float(noise_multiplier))
    if sample_size < dataset_size:
        event = dp_accounting.SampledWithoutReplacementDpEvent(int(dataset_size), int(sample_size), event)
    return event if count == 1 else dp_accounting.SelfComposedDpEvent(event, int(count))
