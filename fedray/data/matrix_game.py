"""Two-player matrix games with stochastic payoffs, generated per sample from a counter-based stream
(seed 001's E1 and its tests): n = 10^6 samples and d = 2^15 strategies need no stored matrix.

Symbols: x in Delta_dx (the row player, who pays), y in Delta_dy (the column player, who receives),
Abar (dx, dy) the population payoff, sample z = (u_z, v_z) with u_z in {+-1}^dx, v_z in {+-1}^dy,
s = ``noise``:

    A_z = Abar + s u_z v_z^T,      E[A_z] = Abar,      f(x, y; z) = x^T A_z y

Lipschitz and smoothness constants in the l1 / l_inf pair: ||grad f||_inf <= max|A_z| <= max|Abar| + s
=: L0 = L1, and L2 = 0 (bilinear). Sample gradients at (x, y) are A_z y and A_z^T x.

Samples: sample i's signs are the first dx + dy bits of the DATA stream of (seed, trial) at
counter i (``fedray.rng.CounterStream``), so any actor builds any sample alone, in any order, and a
neighbouring dataset replaces sample i by an arbitrary payoff matrix (``GameSamples.replace``; the
audit's adversarial neighbour).

Population: the exact duality gap Gap(x, y) = max_j (Abar^T x)_j - min_i (Abar y)_i; it reads the
population (Abar), so a run reports it as a diagnostic.

``PaddedMatrixGame`` (spec §5 E1): a 3 x 3 cyclic base game, value 0, uniform equilibrium, padded to
d x d with strictly dominated strategies (row i >= 3 pays +a against base columns, column j >= 3
receives -a against base rows, 0 elsewhere). Its equilibrium and value do not depend on d; Abar y
and Abar^T x cost O(d) from the block structure, and Abar is never built. ``DenseMatrixGame``: an
explicit Abar (small games, tests against linear programming).
"""

from __future__ import annotations

from typing import Any

from dataclasses import dataclass, field

import numpy as np

from fedray.data._prep import check_held, check_int, check_real, check_units
from fedray.data.federation import FederationShape
from fedray.errors import ConfigError
from fedray.rng import CounterStream, Stream

BASE = 0.25 * np.array([[0.0, 1.0, -1.0], [-1.0, 0.0, 1.0], [1.0, -1.0, 0.0]])


SIGNS = np.array([1.0, -1.0])


def sample_signs(stream: CounterStream, ids: np.ndarray, width: int) -> np.ndarray:
    """(S, width) +-1.0 of samples ``ids``: the first ``width`` bits of the data stream at counter id."""
    words = -(-width // 64)
    out = np.empty((len(ids), words), dtype=np.uint64)
    for row, i in enumerate(ids):
        out[row] = stream.words(int(i), words)
    return SIGNS[np.unpackbits(out.view(np.uint8), axis=1, count=width)]


class _Game:
    """What both games share: the shape, the samples, the gap; a subclass gives Abar's products."""

    def validate(self) -> None:
        check_units("data.spec.num_samples", self.num_samples)
        check_real("data.spec.noise", self.noise, 0.0, float("inf"), high_open=True)

    def describe(self) -> FederationShape:
        # Each sample is a unit (the privacy unit is one sample); ``dim`` is the row player's.
        return FederationShape(num_silos=self.num_samples, n_train=(1,) * self.num_samples, dim=self.rows,
                               num_outputs=1, task="game")

    @property
    def lipschitz(self) -> float:
        """L0 = L1 = max|A_z| = max|Abar| + noise (module docstring)."""
        return self.payoff_bound + float(self.noise)

    @property
    def value_bound(self) -> float:
        """Bf >= |f(x, y; z)| = |x^T A_z y| <= max|A_z| for x, y on the simplices (Alg. 4's selection)."""
        return self.lipschitz

    @property
    def smoothness(self) -> float:
        """L1 (= L0 for a bilinear payoff)."""
        return self.lipschitz

    @property
    def second_order(self) -> float:
        """L2 = 0: the payoff is bilinear."""
        return 0.0

    def load(self, seed: int, trial: int = 0, silo_ids=None) -> "GameSamples":
        ids = np.arange(self.num_samples) if silo_ids is None else np.asarray(silo_ids, dtype=np.int64)
        return GameSamples(self, CounterStream(seed, Stream.DATA, trial), ids)

    def gap(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """(P,) exact duality gap of (x, y) (P, dx), (P, dy): max_j (Abar^T x)_j - min_i (Abar y)_i."""
        return self.transpose_times(x).max(axis=-1) - self.times(y).min(axis=-1)


@dataclass(frozen=True)
class PaddedMatrixGame(_Game):
    """The padded cyclic game of seed-001 E1 (module docstring); d = ``dim`` strategies each."""

    num_samples: int = 10000
    dim: int = 64
    padding: float = 0.5          # a
    noise: float = 0.5            # s; max|A_z| = max(a, 0.25) + s

    def validate(self) -> None:
        super().validate()
        check_int("data.spec.dim", self.dim, 3)
        check_real("data.spec.padding", self.padding, 0.25, float("inf"), high_open=True)

    @property
    def rows(self) -> int:
        return self.dim

    @property
    def columns(self) -> int:
        return self.dim

    @property
    def payoff_bound(self) -> float:
        """max|Abar|: the padding's a (when there is padding) or the base's 0.25."""
        return max(float(self.padding), 0.25) if self.dim > 3 else 0.25

    def source(self) -> str:
        return "generated (fedray.data.PaddedMatrixGame, counter-based per sample)"

    def times(self, y: np.ndarray) -> np.ndarray:
        """Abar y for (P, d) y, in O(P d)."""
        out = np.empty_like(y)
        out[..., 3:] = self.padding * y[..., :3].sum(axis=-1, keepdims=True)
        out[..., :3] = y[..., :3] @ BASE.T - self.padding * y[..., 3:].sum(axis=-1, keepdims=True)
        return out

    def transpose_times(self, x: np.ndarray) -> np.ndarray:
        """Abar^T x for (P, d) x, in O(P d)."""
        out = np.empty_like(x)
        out[..., 3:] = -self.padding * x[..., :3].sum(axis=-1, keepdims=True)
        out[..., :3] = x[..., :3] @ BASE + self.padding * x[..., 3:].sum(axis=-1, keepdims=True)
        return out

    def matrix(self) -> np.ndarray:
        """Abar itself (tests at small d only)."""
        return self.times(np.eye(self.dim)).T


@dataclass(frozen=True)
class DenseMatrixGame(_Game):
    """A game with an explicit population payoff ``payoff`` (dx x dy, a nested list in configs)."""

    payoff: tuple = ((0.5, -0.5), (-0.25, 0.25))
    num_samples: int = 10000
    noise: float = 0.5

    def validate(self) -> None:
        super().validate()
        matrix = np.asarray(self.payoff, dtype=np.float64) if _rectangular(self.payoff) else None
        if matrix is None or matrix.ndim != 2 or min(matrix.shape) < 1 or not np.all(np.isfinite(matrix)):
            raise ConfigError("data.spec.payoff", self.payoff, "a non-empty rectangular matrix of finite numbers")

    @property
    def _abar(self) -> np.ndarray:
        return np.asarray(self.payoff, dtype=np.float64)

    @property
    def rows(self) -> int:
        return self._abar.shape[0]

    @property
    def columns(self) -> int:
        return self._abar.shape[1]

    @property
    def payoff_bound(self) -> float:
        return float(np.abs(self._abar).max())

    def source(self) -> str:
        return "generated (fedray.data.DenseMatrixGame, counter-based per sample)"

    def times(self, y: np.ndarray) -> np.ndarray:
        return y @ self._abar.T

    def transpose_times(self, x: np.ndarray) -> np.ndarray:
        return x @ self._abar

    def matrix(self) -> np.ndarray:
        return self._abar


def _rectangular(value) -> bool:
    try:
        return len({len(row) for row in value}) == 1
    except TypeError:
        return False


@dataclass(frozen=True)
class GameSamples:
    """The samples ``ids`` of a game, generated on demand (what a silo actor holds: no matrix).

    ``replaced`` maps a sample id to an arbitrary payoff matrix (dx, dy) with entries in
    [-L0, L0]: the neighbouring dataset of an audit (replace-one).
    """

    game: Any
    stream: CounterStream
    ids: np.ndarray
    replaced: dict = field(default_factory=dict)

    @property
    def num_units(self) -> int:
        return int(self.ids.size)

    def select(self, positions) -> "GameSamples":
        return GameSamples(self.game, self.stream, self.ids[positions], self.replaced)

    def replace(self, sample_id: int, payoff: np.ndarray) -> "GameSamples":
        payoff = np.asarray(payoff, dtype=np.float64)
        if payoff.shape != (self.game.rows, self.game.columns) or np.abs(payoff).max() > self.game.lipschitz:
            raise ConfigError("payoff", payoff.shape, f"a {self.game.rows} x {self.game.columns} matrix with entries "
                              f"in [-{self.game.lipschitz}, {self.game.lipschitz}]")
        check_held(sample_id, self.ids)
        return GameSamples(self.game, self.stream, self.ids, {**self.replaced, int(sample_id): payoff})

    def gradient_sums(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """sum_z A_z y and sum_z A_z^T x over these samples, for (P, dx) x and (P, dy) y: the sums of
        grad_x f and grad_y f at (x, y). Costs O(S (dx + dy) + P S (dx + dy)); no matrix is built."""
        game = self.game
        plain = np.array([i not in self.replaced for i in self.ids.tolist()], dtype=bool)
        ids = self.ids[plain]
        signs = sample_signs(self.stream, ids, game.rows + game.columns)
        u, v = signs[:, :game.rows], signs[:, game.rows:]
        grad_x = ids.size * game.times(y) + game.noise * (y @ v.T) @ u           # (P, dx)
        grad_y = ids.size * game.transpose_times(x) + game.noise * (x @ u.T) @ v  # (P, dy)
        for i in self.ids[~plain].tolist():
            grad_x += y @ self.replaced[i].T
            grad_y += x @ self.replaced[i]
        return grad_x, grad_y
