"""Users of m items each, held as their sufficient statistic: the user's mean item.

Symbols: n = ``num_silos`` users, m = ``items_per_user``, d = ``dim``, p_k the coordinate biases.

Model (seed-003 spec §4 E0a / E1): every item is a vector of {-1/sqrt(d), +1/sqrt(d)}^d whose
coordinate k is +1/sqrt(d) with probability p_k, p_k ~ U(``bias_low``, ``bias_high``) drawn once
per (seed, trial). A user's m items are i.i.d., so its mean item has coordinates

    abar_ik = (2 B_ik - m) / (m sqrt(d)),   B_ik ~ Binomial(m, p_k),

drawn exactly (no per-item loop), which makes m up to 10^15 cost O(n d). With a finite
``concentration`` c, users differ (spec §4 E5's heterogeneity stress): user i's biases are
p_ik ~ Beta(c p_k, c (1 - p_k)) (mean p_k; c -> infinity gives back i.i.d. users) and its items
are i.i.d. given them, so the random-permutation assumption of the utility analysis fails. Every silo holds one
record, abar_i (||abar_i|| <= 1), with label 1, and stands for m items
(``FederationShape.summarised_items``). A loss linear in the record (``fedray.losses.Linear``)
has, on abar_i, exactly the user's average item loss, so a user-level mechanism sees the same
gradients it would on the m items; the planner refuses any other loss on these records.
The population mean is E z = (2 p - 1) / sqrt(d) (``population_mean``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedray.data._prep import check_int, check_real, check_units, check_volume
from fedray.data.federation import Federation, FederationShape
from fedray.rng import BLOCK, Stream, data_generator, generator

MAX_ITEMS = 10**15          # (2 B - m) / m stays exact to float64's resolution below 2^53


@dataclass(frozen=True)
class BinomialUserMeans:
    """n users of m binary-coordinate items, each held as its exact mean; see the module docstring."""

    num_silos: int = 1000
    items_per_user: int = 100
    dim: int = 1
    bias_low: float = 0.3
    bias_high: float = 0.7
    concentration: float | None = None

    def validate(self) -> None:
        check_units("data.num_silos", self.num_silos)
        check_int("data.items_per_user", self.items_per_user, 1, MAX_ITEMS)
        check_int("data.dim", self.dim, 1)
        check_volume({"data.num_silos": self.num_silos, "data.dim": self.dim})
        check_real("data.bias_low", self.bias_low, 0.0, 1.0)
        check_real("data.bias_high", self.bias_high, self.bias_low, 1.0)
        if self.concentration is not None:
            check_real("data.concentration", self.concentration, 0.0, float("inf"), low_open=True, high_open=True)

    def describe(self) -> FederationShape:
        return FederationShape(num_silos=self.num_silos, n_train=(1,) * self.num_silos, dim=self.dim, num_outputs=1,
                               task="regression", summarised_items=self.items_per_user)

    def source(self) -> str:
        return "generated (fedray.data.BinomialUserMeans, keyed by seed and trial)"

    def biases(self, seed: int, trial: int = 0) -> np.ndarray:
        return data_generator(seed, trial).uniform(self.bias_low, self.bias_high, self.dim)

    def population_mean(self, seed: int, trial: int = 0) -> np.ndarray:
        return (2.0 * self.biases(seed, trial) - 1.0) / np.sqrt(self.dim)

    def load(self, seed: int, trial: int = 0, silo_ids=None) -> Federation:
        ids = np.arange(self.num_silos) if silo_ids is None else np.asarray(silo_ids, dtype=np.int64)
        biases = self.biases(seed, trial)
        blocks = {b: self._block(seed, trial, b, biases) for b in np.unique(ids // BLOCK)}
        means = np.stack([blocks[i // BLOCK][i % BLOCK] for i in ids]) if ids.size else np.zeros((0, self.dim))
        count = len(ids)
        return Federation(x_train=means[:, None, :], y_train=np.ones((count, 1)), n_train=np.ones(count, dtype=np.int64),
                          x_test=np.zeros((count, 1, self.dim)), y_test=np.zeros((count, 1)),
                          n_test=np.zeros(count, dtype=np.int64), task="regression", num_outputs=1,
                          summarised_items=self.items_per_user)

    def _block(self, seed: int, trial: int, block: int, biases: np.ndarray) -> np.ndarray:
        """The mean items of block ``block``'s users, (size, d)."""
        rng = generator(seed, Stream.DATA, trial, block)
        size = min(BLOCK, self.num_silos - block * BLOCK)
        m = self.items_per_user
        biases = np.broadcast_to(biases, (size, self.dim))
        if self.concentration is not None:
            biases = rng.beta(self.concentration * biases, self.concentration * (1.0 - biases))
        heads = rng.binomial(m, biases).astype(np.float64)
        return (2.0 * heads - m) / (m * np.sqrt(self.dim))
