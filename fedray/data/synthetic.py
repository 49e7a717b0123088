"""Synthetic linear-model federations for tests and benchmarks, generated without per-silo loops.

Symbols: N = ``num_silos``, n = ``samples_per_silo``, m = ``test_samples_per_silo``,
d = ``dim``, h = ``heterogeneity``, B = ``feature_norm``.

Model, for silo i (w0 from ``data_generator(seed, trial)``, the rest per block of silos)
------------------------------------------------------------------------------------
    w0 ~ N(0, I_d)                               shared true weight
    a_i ~ N(0, I_d / d),  b_i ~ N(0, I_d)        per-silo offsets, scaled by h below
    mean_i = h a_i      (if ``shift`` is "features" or "both"; else 0)
    w_i    = w0 + h b_i (if ``shift`` is "weights" or "both"; else w0)
    x = mean_i + z,  z ~ N(0, I_d / d)           then rescaled to ||x|| <= B if longer
    s = <w_i, x> + noise * xi
    regression: y = s, xi ~ N(0, 1)
    binary:     y = 1[s > 0], xi ~ standard logistic, i.e. y ~ Bernoulli(sigmoid(<w_i, x> / noise))
                (noise = 0 gives separable labels)

h = 0 makes the silos i.i.d. draws from one distribution. Rows are rescaled, not dropped, so
every record satisfies ||x|| <= B and a loss that is G-Lipschitz in <w, x> is G B-Lipschitz in w.
Silo offsets and records come from one generator per block of ``BLOCK`` consecutive silo ids, so
an actor generates only the blocks of its own silos (at N = 100,000 a whole federation would be
every actor's memory), and a silo's records do not depend on which actor holds it. Train and
test records of a silo share its mean and weight.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedray.data._prep import check_choice, check_int, check_real, check_units, check_volume
from fedray.data.federation import Federation, FederationShape
from fedray.rng import BLOCK, Stream, data_generator, generator

TASKS = ("binary", "regression")
POPULATION = 2**32 - 1       # the block coordinate of population draws: no silo block reaches it
SHIFTS = ("both", "features", "weights")


@dataclass(frozen=True)
class SyntheticLinear:
    """Linear-model silos with a tunable per-silo shift; see the module docstring for the model.

    Parameters
    ----------
    num_silos, samples_per_silo, test_samples_per_silo, dim:
        N, n, m, d.
    task:
        ``binary`` (logistic labels in {0, 1}) or ``regression``.
    heterogeneity:
        h >= 0, the scale of the per-silo offsets (0 = i.i.d. silos).
    shift:
        What the offsets move: ``both``, ``features`` (means) or ``weights``.
    noise:
        Label noise scale (std of Gaussian noise, or the logistic temperature).
    feature_norm:
        B > 0; every row has ||x|| <= B.
    """

    num_silos: int = 10
    samples_per_silo: int = 100
    test_samples_per_silo: int = 20
    dim: int = 10
    task: str = "binary"
    heterogeneity: float = 0.0
    shift: str = "both"
    noise: float = 0.1
    feature_norm: float = 1.0

    def validate(self) -> None:
        check_units("data.num_silos", self.num_silos)
        check_int("data.samples_per_silo", self.samples_per_silo, 1)
        check_int("data.test_samples_per_silo", self.test_samples_per_silo, 0)
        check_int("data.dim", self.dim, 1)
        check_volume({"data.num_silos": self.num_silos,
                      "data.samples_per_silo": self.samples_per_silo + self.test_samples_per_silo, "data.dim": self.dim})
        check_choice("data.task", self.task, TASKS)
        check_real("data.heterogeneity", self.heterogeneity, 0.0, float("inf"), high_open=True)
        check_choice("data.shift", self.shift, SHIFTS)
        check_real("data.noise", self.noise, 0.0, float("inf"), high_open=True)
        check_real("data.feature_norm", self.feature_norm, 0.0, float("inf"), low_open=True, high_open=True)

    def describe(self) -> FederationShape:
        return FederationShape(
            num_silos=self.num_silos,
            n_train=(self.samples_per_silo,) * self.num_silos,
            dim=self.dim,
            num_outputs=1,
            task=self.task,
        )

    def source(self) -> str:
        """Where the records come from (logged with the run): generated from the run seed."""
        return "generated (fedray.data.SyntheticLinear, keyed by seed and trial)"

    def load(self, seed: int, trial: int = 0, silo_ids=None) -> Federation:
        """The federation of (seed, trial), or only the silos ``silo_ids`` in that order."""
        ids = np.arange(self.num_silos) if silo_ids is None else np.asarray(silo_ids, dtype=np.int64)
        w0 = data_generator(seed, trial).standard_normal(self.dim)
        # One block generated at a time and copied into place: a million silos are a few GB, and a
        # second copy (or a Python loop over the silos) would cost as much again.
        block_of = ids // BLOCK
        order = np.argsort(block_of, kind="stable")
        blocks, starts = np.unique(block_of[order], return_index=True)
        parts = None
        for block, members in zip(blocks, np.split(order, starts[1:])):
            arrays = self._block(seed, trial, int(block), w0)
            if parts is None:
                parts = [np.empty((len(ids),) + a.shape[1:], dtype=a.dtype) for a in arrays]
            for part, array in zip(parts, arrays):
                part[members] = array[ids[members] % BLOCK]
        x_train, y_train, x_test, y_test = parts
        return Federation(
            x_train=x_train,
            y_train=y_train,
            n_train=np.full(len(ids), self.samples_per_silo, dtype=np.int64),
            x_test=x_test,
            y_test=y_test,
            n_test=np.full(len(ids), self.test_samples_per_silo, dtype=np.int64),
            task=self.task,
            num_outputs=1,
        )

    def population_sample(self, seed: int, trial: int, count: int, part: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """``count`` fresh records (x (count, d), y (count,)) from D, the distribution every silo of
        (seed, trial) draws from when h = 0 (population risk; no silo reads them); ``part`` numbers
        independent draws, for a large sample taken in pieces."""
        if self.heterogeneity != 0:
            raise ValueError(f"heterogeneity {self.heterogeneity}: the silos share no one distribution (needs 0)")
        w0 = data_generator(seed, trial).standard_normal(self.dim)
        x, y = self._records(generator(seed, Stream.DATA, trial, POPULATION, part), np.zeros((1, self.dim)), w0[None],
                             count)
        return x[0], y[0]

    def _block(self, seed: int, trial: int, block: int, w0: np.ndarray) -> tuple[np.ndarray, ...]:
        """(x_train, y_train, x_test, y_test) of every silo of block ``block``."""
        rng = generator(seed, Stream.DATA, trial, block)
        size = min(BLOCK, self.num_silos - block * BLOCK)
        dim, h = self.dim, float(self.heterogeneity)
        offsets_x = rng.standard_normal((size, dim)) / np.sqrt(dim)
        offsets_w = rng.standard_normal((size, dim))
        means = h * offsets_x if self.shift in ("both", "features") else np.zeros((size, dim))
        weights = w0 + h * offsets_w if self.shift in ("both", "weights") else np.broadcast_to(w0, (size, dim))
        x_train, y_train = self._records(rng, means, weights, self.samples_per_silo)
        x_test, y_test = self._records(rng, means, weights, self.test_samples_per_silo)
        return x_train, y_train, x_test, y_test

    def _records(
        self, rng: np.random.Generator, means: np.ndarray, weights: np.ndarray, count: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(x (N, count, d), y (N, count)) drawn in place to keep peak memory near one copy of x."""
        num_silos, dim = means.shape
        x = np.empty((num_silos, count, dim))
        rng.standard_normal(out=x)
        x *= 1.0 / np.sqrt(dim)
        x += means[:, None, :]
        norms = np.sqrt(np.einsum("snd,snd->sn", x, x))
        x *= (self.feature_norm / np.maximum(norms, self.feature_norm))[:, :, None]
        scores = np.einsum("snd,sd->sn", x, weights)
        if self.task == "regression":
            return x, scores + self.noise * rng.standard_normal(scores.shape)
        return x, (scores + self.noise * rng.logistic(size=scores.shape) > 0).astype(np.float64)
