"""Per-silo privacy ledgers for ISRL-DP, accounted with dp-accounting.

Trust model ISRL-DP: each silo's transcript must be private on its own, so each silo has its own
ledger, and a silo is charged only for the rounds it actually took part in (silo sampling gives
no credit under ISRL-DP, seed-004 §3.1). One participation is one dp-accounting event (see
``mechanisms.subsampled_gaussian_event``); a silo's spend after c participations is the event
composed c times, at the silo's delta.

Silos with the same (noise multiplier, dataset size, delta, count) have the same epsilon, so
epsilons are cached on that key: a round of bookkeeping costs a dictionary lookup per distinct
key, not an accountant run per silo.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import dp_accounting
import numpy as np
from dp_accounting import rdp

from fedray.privacy.mechanisms import subsampled_gaussian_event

ACCOUNTANTS = ("rdp", "pld")


def make_accountant(kind: str, neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE):
    """A fresh dp-accounting accountant of the given kind."""
    if kind == "rdp":
        return rdp.RdpAccountant(neighboring_relation=neighboring_relation)
    if kind == "pld":
        from dp_accounting import pld

        return pld.PLDAccountant(neighboring_relation=neighboring_relation)
    raise ValueError(f"accountant must be one of {ACCOUNTANTS}; got {kind!r}")


def epsilon_of(event: dp_accounting.DpEvent, delta: float, accountant: str = "rdp") -> float:
    """epsilon at ``delta`` of ``event`` under REPLACE_ONE; unsupported events are an error."""
    acc = make_accountant(accountant)
    if not acc.supports(event):
        raise ValueError(f"the {accountant} accountant does not support the event {event}")
    acc.compose(event)
    return float(acc.get_epsilon(delta))


@lru_cache(maxsize=4096)
def _rdp_curve(noise_multiplier: float, sample_size: int, dataset_size: int, steps: int) -> tuple:
    """RDP orders and values of one participation; a count multiplies the values."""
    acc = rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    acc.compose(subsampled_gaussian_event(noise_multiplier, sample_size, dataset_size, count=steps))
    return acc.orders, acc.rdp


@lru_cache(maxsize=65536)
def _cached_epsilon(
    noise_multiplier: float, sample_size: int, dataset_size: int, steps: int, count: int, delta: float, accountant: str
) -> float:
    if count == 0:
        return 0.0
    if noise_multiplier <= 0:
        return float("inf")
    if accountant == "rdp":
        orders, curve = _rdp_curve(noise_multiplier, sample_size, dataset_size, steps)
        eps, _ = rdp.rdp_privacy_accountant.compute_epsilon(orders, count * curve, delta)
        return float(eps)
    event = subsampled_gaussian_event(noise_multiplier, sample_size, dataset_size, count=steps * count)
    return epsilon_of(event, delta, accountant)


@dataclass
class SiloLedger:
    """Participation counts of every (replica, silo) and the event one participation stands for.

    Parameters
    ----------
    noise_multiplier : (P, N) array, noise std over replace-one sensitivity, per replica and silo.
    sample_size : records per noisy release (K for MB-SGD, 1 for a Local SGD step).
    dataset_size : (N,) records per silo.
    steps_per_participation : noisy releases per participation (1 for MB-SGD, K for Local SGD).
    delta : (N,) per-silo delta.
    """

    noise_multiplier: np.ndarray
    sample_size: int
    dataset_size: np.ndarray
    steps_per_participation: int
    delta: np.ndarray
    accountant: str = "rdp"
    counts: np.ndarray = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        self.noise_multiplier = np.asarray(self.noise_multiplier, dtype=np.float64)
        if self.counts is None:
            self.counts = np.zeros(self.noise_multiplier.shape, dtype=np.int64)

    def record(self, participation: np.ndarray) -> None:
        """Charge every (replica, silo) marked True in the (P, N) mask for one participation."""
        self.counts += participation.astype(np.int64)

    def epsilons(self, counts: np.ndarray | None = None) -> np.ndarray:
        """(P, N) epsilon of every silo at its own delta, for ``counts`` (default: so far)."""
        counts = self.counts if counts is None else counts
        out = np.empty(counts.shape)
        for idx in np.ndindex(*counts.shape):
            silo = idx[-1]
            out[idx] = _cached_epsilon(
                float(self.noise_multiplier[idx]),
                int(self.sample_size),
                int(self.dataset_size[silo]),
                int(self.steps_per_participation),
                int(counts[idx]),
                float(self.delta[silo]),
                self.accountant,
            )
        return out

    def planned_epsilons(self, num_rounds: int) -> np.ndarray:
        """(P, N) epsilon if every silo took part in every one of ``num_rounds`` rounds."""
        return self.epsilons(np.full(self.counts.shape, num_rounds, dtype=np.int64))
