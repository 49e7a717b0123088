"""The in-memory form of a federation: every silo's records as stacked, padded arrays.

Silos may hold different numbers of records (insurance's last silo, App. H budgets), so
arrays are padded to the largest silo and carry the true sizes next to them. Padding rows
are zeros and are never sampled or evaluated: everything that reads a silo honours
``n_train`` / ``n_test``.

Shapes (N silos, d features, C model outputs: 1 for binary/regression, #classes for softmax)::

    x_train (N, n_max, d) float64     y_train (N, n_max)   float64 labels/targets
    n_train (N,) int64                x_test  (N, m_max, d), y_test (N, m_max), n_test (N,)

A ``Federation`` is built inside silo actors from a dataset spec (see ``fedray.data``); the
driver only ever sees a ``FederationShape``, which holds sizes and no records. What the planner
and the runtime read of a spec is declared here (``DataSpec``, and the optional capabilities
``KnownPopulation`` and ``PreparedFiles``, checked with ``isinstance``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

TASKS = ("binary", "regression", "multiclass")


@dataclass(frozen=True)
class SiloArrays:
    """The training records of the S silos a client step works on (padded; see Federation)."""

    silo_ids: np.ndarray  # (S,) global silo ids, used to pick per-silo noise levels
    x: np.ndarray         # (S, n_max, d)
    y: np.ndarray         # (S, n_max)
    sizes: np.ndarray     # (S,)
    x_norms: np.ndarray   # (S, n_max), cached ||x|| for per-example clipping

    @classmethod
    def of(cls, fed: "Federation", silo_ids: np.ndarray) -> "SiloArrays":
        """The training view of ``fed``, whose silos have the global ids ``silo_ids``."""
        return cls(np.asarray(silo_ids, dtype=np.int64), fed.x_train, fed.y_train, fed.n_train,
                   np.linalg.norm(fed.x_train, axis=2))

    def select(self, positions: np.ndarray | slice) -> "SiloArrays":
        """The silos at ``positions``: sorted distinct indices (a copy of their records; all of them:
        no copy) or a slice (views, no copy)."""
        if not isinstance(positions, slice) and positions.size == self.silo_ids.size:
            return self
        return SiloArrays(self.silo_ids[positions], self.x[positions], self.y[positions], self.sizes[positions],
                          self.x_norms[positions])


@dataclass(frozen=True)
class FederationShape:
    """What the planner may know about a federation before any record is loaded."""

    num_silos: int
    n_train: tuple[int, ...]
    dim: int
    num_outputs: int
    task: str
    summarised_items: int | None = None
    # Preprocessing that reads the records of many units at once (a PCA basis fitted on pooled
    # private records, say): it shapes every release, and no unit-level guarantee covers it. A fact
    # about how the records were made, not their shape: loaded arrays compare equal without it.
    preprocessing_outside_guarantee: tuple[str, ...] = field(default=(), compare=False)

    @property
    def min_train_size(self) -> int:
        return min(self.n_train)

    @property
    def items(self) -> tuple[int, ...]:
        """The items each silo's records stand for: ``n_train``, or, where every silo holds a
        sufficient statistic of m items (``summarised_items`` = m), m per silo."""
        if self.summarised_items is None:
            return self.n_train
        return (self.summarised_items,) * self.num_silos


@dataclass(frozen=True)
class Federation:
    """Stacked silo datasets; see the module docstring for shapes."""

    x_train: np.ndarray
    y_train: np.ndarray
    n_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    n_test: np.ndarray
    task: str
    num_outputs: int
    summarised_items: int | None = None     # see FederationShape.items

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}; got {self.task!r}")
        num_silos = self.x_train.shape[0]
        for name in ("y_train", "n_train", "x_test", "y_test", "n_test"):
            if getattr(self, name).shape[0] != num_silos:
                raise ValueError(
                    f"{name} has {getattr(self, name).shape[0]} silos; x_train has {num_silos}"
                )

    @property
    def num_silos(self) -> int:
        return self.x_train.shape[0]

    @property
    def dim(self) -> int:
        return self.x_train.shape[2]

    @property
    def shape(self) -> FederationShape:
        return FederationShape(
            num_silos=self.num_silos,
            n_train=tuple(int(n) for n in self.n_train),
            dim=self.dim,
            num_outputs=self.num_outputs,
            task=self.task,
            summarised_items=self.summarised_items,
        )

    def select(self, silo_ids: np.ndarray) -> "Federation":
        """The sub-federation of the given silos, in the given order."""
        ids = np.asarray(silo_ids, dtype=np.int64)
        return Federation(
            x_train=self.x_train[ids],
            y_train=self.y_train[ids],
            n_train=self.n_train[ids],
            x_test=self.x_test[ids],
            y_test=self.y_test[ids],
            n_test=self.n_test[ids],
            task=self.task,
            num_outputs=self.num_outputs,
            summarised_items=self.summarised_items,
        )

    def train_mask(self) -> np.ndarray:
        """(N, n_max) bool: which training rows are real records."""
        return np.arange(self.x_train.shape[1])[None, :] < self.n_train[:, None]

    def test_mask(self) -> np.ndarray:
        return np.arange(self.x_test.shape[1])[None, :] < self.n_test[:, None]

    def max_feature_norm(self) -> float:
        """max ||x|| over real training records (the paper's L = 2 * this for logistic loss)."""
        norms = np.linalg.norm(self.x_train, axis=2)
        return float(norms[self.train_mask()].max())


def stack_silos(
    train: list[tuple[np.ndarray, np.ndarray]],
    test: list[tuple[np.ndarray, np.ndarray]],
    task: str,
    num_outputs: int,
) -> Federation:
    """Pad per-silo (x, y) lists into a ``Federation``."""

    def _stack(parts: list[tuple[np.ndarray, np.ndarray]]):
        sizes = np.array([len(y) for _, y in parts], dtype=np.int64)
        dim = parts[0][0].shape[1]
        x = np.zeros((len(parts), max(int(sizes.max()), 1), dim))
        y = np.zeros((len(parts), max(int(sizes.max()), 1)))
        for i, (xi, yi) in enumerate(parts):
            x[i, : len(yi)] = xi
            y[i, : len(yi)] = yi
        return x, y, sizes

    x_tr, y_tr, n_tr = _stack(train)
    x_te, y_te, n_te = _stack(test)
    return Federation(x_tr, y_tr, n_tr, x_te, y_te, n_te, task=task, num_outputs=num_outputs)


@runtime_checkable
class DataSpec(Protocol):
    """What the planner and the runtime read of a data spec (``data.spec``): it checks its own
    settings (``validate``, one line naming the bad value), says what the planner may know before
    any record is loaded (``describe``), and builds the records of some units inside the actor that
    holds them (``load``: a ``Federation``, or generated samples a protocol's shard view reads)."""

    def validate(self) -> None: ...

    def describe(self) -> FederationShape: ...

    def load(self, seed: int, trial: int = 0, silo_ids: Any = None) -> Any: ...


@runtime_checkable
class KnownPopulation(Protocol):
    """A data spec whose population risk is known in closed form: each released output's excess
    risk over the population optimum ((P,), or None where it does not apply to the run's loss), a
    diagnostic (no server knows the population's optimum)."""

    def population_excess_risk(self, params: np.ndarray, seed: int, trial: int, loss: Any) -> np.ndarray | None: ...


@runtime_checkable
class PreparedFiles(Protocol):
    """A data spec read from public files it fetches (and checks) once, before any actor starts."""

    def prepare(self) -> Any: ...
