"""Multi-task classification with a finite population pool, for seed 001's smooth games and SCO
(E3: the max-loss game min_x max_y sum_i y_i F_i(x); E4; E5 with one task: min_x F(x)).

Symbols: d = ``dim`` features, m = ``tasks``, the population D = uniform over a pool of
N_pop = ``pool`` records z_j = (a_j, b_j), a_j in {+-1}^d, b_j in {+-1}^m, and

    f(x, y; z) = sum_{i<=m} y_i l(b_i <a, x>),   F_i(x) = E_{z~D} l(b_i <a, x>),

with l(u) = ln(1 + e^{-u}) (``link="logistic"``) or max(0, -u)^2 / 2 (``"squared_hinge"``,
first-order smooth only). For x in the simplex |<a, x>| <= 1, so with the l1 / l_inf pair:
logistic l in [ln(1 + e^{-1}), ln(1 + e)], |l'| <= 1, l'' <= 1/4, |l'''| <= 1/(6 sqrt 3), hence
L0 = max(1, ln(1 + e)) = 1.3133, L1 = 1 (the x-y cross term), L2 = 1/4 (spec §5 E3); squared
hinge: l in [0, 1/2], |l'| <= 1, l'' <= 1, so L0 = 1, L1 = 1, no L2.

Generation (counter-based, keyed by (seed, trial)): pool record j's signs a_j are the DATA stream
at counter j; task i's planted x*_i is ``sparsity`` coordinates with Dirichlet weights; b_ij =
sign(<a_j, x*_i>) (+1 at 0) flipped with probability ``label_noise``; training sample k is pool
record j_k uniform (its own counter), so the n samples are iid from D and any actor builds any
sample alone. The population's values and gradients are exact sums over the pool (a diagnostic:
they read D).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from fedray.data._prep import check_held, check_int, check_real, check_units
from fedray.data.federation import FederationShape
from fedray.errors import ConfigError
from fedray.rng import CounterStream, Stream, generator

LINKS = ("logistic", "squared_hinge")
POOL_FEATURES, PLANTED, LABEL_FLIPS, SAMPLE_INDEX = 0, 1, 2, 3       # sub-streams of the data stream
SIGNS = np.array([1.0, -1.0])
CACHED_ENTRIES = 25_000_000        # pool x dim up to which the evaluator keeps the pool in memory (200 MB)


def link_value(link: str, u: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, -u) if link == "logistic" else 0.5 * np.maximum(0.0, -u) ** 2


def link_derivative(link: str, u: np.ndarray) -> np.ndarray:
    return -0.5 * (1.0 - np.tanh(0.5 * u)) if link == "logistic" else -np.maximum(0.0, -u)


@dataclass(frozen=True)
class LogisticTasks:
    """m classification tasks over a finite pool (module docstring)."""

    num_samples: int = 10000
    dim: int = 64
    tasks: int = 8
    pool: int = 100000
    sparsity: int = 4
    label_noise: float = 0.1
    link: str = "logistic"
    shared_support: bool = False
    noise_spread: float = 0.0

    def validate(self) -> None:
        check_units("data.spec.num_samples", self.num_samples)
        check_int("data.spec.dim", self.dim, 2)
        check_int("data.spec.tasks", self.tasks, 1)
        check_int("data.spec.pool", self.pool, 1)
        check_int("data.spec.sparsity", self.sparsity, 1, self.dim)
        check_real("data.spec.label_noise", self.label_noise, 0.0, 0.5)
        check_real("data.spec.noise_spread", self.noise_spread, 0.0, 0.5 - self.label_noise)
        if not isinstance(self.shared_support, bool):
            raise ConfigError("data.spec.shared_support", self.shared_support, "true or false")
        if self.link not in LINKS:
            raise ConfigError("data.spec.link", self.link, f"one of {LINKS}")

    def describe(self) -> FederationShape:
        return FederationShape(num_silos=self.num_samples, n_train=(1,) * self.num_samples, dim=self.dim,
                               num_outputs=1, task="game")

    def source(self) -> str:
        return "generated (fedray.data.LogisticTasks, a finite pool, counter-based per record)"

    @property
    def rows(self) -> int:
        return self.dim

    @property
    def columns(self) -> int:
        return self.tasks

    @property
    def flip_probabilities(self) -> np.ndarray:
        """(m,) task i's label-flip probability: label_noise + noise_spread i / (m - 1)."""
        return self.label_noise + self.noise_spread * np.arange(self.tasks) / max(1, self.tasks - 1)

    @property
    def lipschitz(self) -> float:
        """L0 of f in the l1 / l_inf pair (module docstring)."""
        return float(max(1.0, np.log1p(np.e))) if self.link == "logistic" else 1.0

    @property
    def value_bound(self) -> float:
        """Bf >= |f(x, y; z)| = sum_i y_i l(b_i <a, x>) <= max l (Alg. 4's selection)."""
        return float(np.log1p(np.e)) if self.link == "logistic" else 0.5

    @property
    def smoothness(self) -> float:
        return 1.0

    @property
    def second_order(self) -> float | None:
        """L2, or None for a link that is not second-order smooth."""
        return 0.25 if self.link == "logistic" else None

    def load(self, seed: int, trial: int = 0, silo_ids=None) -> "TaskSamples":
        ids = np.arange(self.num_samples) if silo_ids is None else np.asarray(silo_ids, dtype=np.int64)
        return TaskSamples(self, Population(self, int(seed), int(trial)), ids)

    def population(self, seed: int, trial: int = 0) -> "Population":
        return Population(self, int(seed), int(trial))


@dataclass(frozen=True)
class Population:
    """The pool of (seed, trial): its records on demand, and the population's exact losses."""

    spec: LogisticTasks
    seed: int
    trial: int

    @cached_property
    def planted(self) -> np.ndarray:
        """(m, d) the planted x*_i, each on the simplex with ``sparsity`` nonzeros."""
        rng = generator(self.seed, Stream.DATA, self.trial, PLANTED)
        out = np.zeros((self.spec.tasks, self.spec.dim))
        shared = rng.choice(self.spec.dim, size=self.spec.sparsity, replace=False) if self.spec.shared_support else None
        for i in range(self.spec.tasks):
            support = shared if shared is not None else rng.choice(self.spec.dim, size=self.spec.sparsity, replace=False)
            out[i, support] = rng.dirichlet(np.ones(self.spec.sparsity))
        return out

    @cached_property
    def _streams(self) -> tuple:
        return tuple(CounterStream(self.seed, Stream.DATA, self.trial, sub) for sub in (POOL_FEATURES, LABEL_FLIPS,
                                                                                          SAMPLE_INDEX))

    def records(self, pool_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(a (S, d) +-1.0, b (S, m) +-1.0) of pool records ``pool_ids``."""
        features, flips, _ = self._streams
        words = -(-self.spec.dim // 64)
        raw = np.stack([features.words(int(j), words) for j in pool_ids]) if len(pool_ids) else \
            np.zeros((0, words), dtype=np.uint64)
        a = SIGNS[np.unpackbits(raw.view(np.uint8), axis=1, count=self.spec.dim)]
        clean = np.where(a @ self.planted.T >= 0, 1.0, -1.0)
        noise = np.stack([flips.uniforms(int(j), self.spec.tasks) for j in pool_ids]) if len(pool_ids) else \
            np.zeros((0, self.spec.tasks))
        return a, np.where(noise < self.spec.flip_probabilities, -clean, clean)

    def sample_records(self, sample_ids: np.ndarray) -> np.ndarray:
        """(S,) the pool record of each training sample (iid uniform over the pool)."""
        _, _, index = self._streams
        return np.array([int(index.words(int(k), 1)[0] % np.uint64(self.spec.pool)) for k in sample_ids], dtype=np.int64)

    @cached_property
    def cached(self) -> tuple | None:
        """The whole pool as arrays when it is small enough (CACHED_ENTRIES), else None (chunks are
        regenerated on every pass)."""
        if self.spec.pool * self.spec.dim > CACHED_ENTRIES:
            return None
        return self.records(np.arange(self.spec.pool))

    def _chunks(self, chunk: int = 8192):
        if self.cached is not None:
            yield self.cached
            return
        for lo in range(0, self.spec.pool, chunk):
            yield self.records(np.arange(lo, min(lo + chunk, self.spec.pool)))

    def losses(self, x: np.ndarray) -> np.ndarray:
        """(P, m) F_i(x) for (P, d) x, exactly over the pool."""
        total = np.zeros((x.shape[0], self.spec.tasks))
        for a, b in self._chunks():
            total += link_value(self.spec.link, b[:, None, :] * (a @ x.T)[:, :, None]).sum(axis=0)
        return total / self.spec.pool

    def weighted_gradient(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """(P, d) grad_x sum_i y_i F_i(x), exactly over the pool."""
        total = np.zeros_like(x)
        for a, b in self._chunks():
            slope = (y[None] * b[:, None, :] * link_derivative(self.spec.link, b[:, None, :] * (a @ x.T)[:, :, None]))
            total += slope.sum(axis=2).T @ a
        return total / self.spec.pool


@dataclass(frozen=True)
class TaskSamples:
    """The training samples ``ids`` (generated on demand, no stored matrix); ``replaced`` maps a
    sample id to an arbitrary record (a (d,), b (m,)) with entries in [-1, 1] (an audit's neighbour)."""

    spec: LogisticTasks
    population: Population
    ids: np.ndarray
    replaced: dict = field(default_factory=dict)

    @property
    def game(self) -> "TaskGame":
        return TaskGame(self.population)

    def select(self, positions) -> "TaskSamples":
        ids = self.ids[positions]
        if ids.size == self.ids.size and np.array_equal(ids, self.ids):
            return self                          # all of them: keep the records already built
        child = TaskSamples(self.spec, self.population, ids, self.replaced)
        child.__dict__["pool_index"] = self.pool_index[positions]      # a batch needs no new draws
        return child

    def replace(self, sample_id: int, a: np.ndarray, b: np.ndarray) -> "TaskSamples":
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        if a.shape != (self.spec.dim,) or b.shape != (self.spec.tasks,) or np.abs(a).max() > 1 or np.abs(b).max() > 1:
            raise ConfigError("record", (a.shape, b.shape), f"a ({self.spec.dim},) and b ({self.spec.tasks},) with "
                              "entries in [-1, 1]")
        check_held(sample_id, self.ids)
        return TaskSamples(self.spec, self.population, self.ids, {**self.replaced, int(sample_id): (a, b)})

    @cached_property
    def pool_index(self) -> np.ndarray:
        """(S,) the pool record behind each sample."""
        return self.population.sample_records(self.ids)

    def records(self) -> tuple[np.ndarray, np.ndarray]:
        """(a (S, d), b (S, m)): rows of the cached pool when it is cached, else built here, kept
        once per object when small (full-batch protocols read them every round)."""
        if self.population.cached is not None or self.ids.size * self.spec.dim <= CACHED_ENTRIES:
            return self._built
        return self._build()

    @cached_property
    def _built(self) -> tuple[np.ndarray, np.ndarray]:
        return self._build()

    def _build(self) -> tuple[np.ndarray, np.ndarray]:
        pool = self.population.cached
        a, b = (pool[0][self.pool_index], pool[1][self.pool_index]) if pool is not None else \
            self.population.records(self.pool_index)
        if self.replaced:
            for row, i in enumerate(self.ids.tolist()):
                if i in self.replaced:
                    a[row], b[row] = self.replaced[i]
        return a, b

    def gradient_sums(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """sum_z grad_x f and sum_z grad_y f at (x, y) (P, d), (P, m) over these samples:
        grad_x f = sum_i y_i l'(b_i <a, x>) b_i a and grad_y f = (l(b_i <a, x>))_i."""
        a, b = self.records()
        margins = b[:, None, :] * (a @ x.T)[:, :, None]                                    # (S, P, m)
        slope = (y[None] * b[:, None, :] * link_derivative(self.spec.link, margins)).sum(axis=2)   # (S, P)
        return slope.T @ a, link_value(self.spec.link, margins).sum(axis=0)


def project_simplex(v: np.ndarray) -> np.ndarray:
    """Rows of ``v`` projected onto the simplex in l2 (sort-based; Held, Wolfe, Crowder 1974)."""
    u = -np.sort(-v, axis=1)
    cumulative = np.cumsum(u, axis=1) - 1.0
    index = np.arange(1, v.shape[1] + 1)
    rho = (u - cumulative / index > 0).sum(axis=1)
    theta = cumulative[np.arange(v.shape[0]), rho - 1] / rho
    return np.maximum(v - theta[:, None], 0.0)


@dataclass(frozen=True)
class TaskGame:
    """The max-loss game's population side: the duality gap, certified by a Frank-Wolfe gap.

    Gap(x, y) = max_i F_i(x) - min_{v in Delta} G(v), G(v) = sum_i y_i F_i(v), convex and smooth.
    Accelerated projected gradient on the pool (FISTA, step 1 / L with L = l''_max d, a bound on
    G's Hessian in l2) gives v_k; its Frank-Wolfe gap g_k = max_u <grad G(v_k), v_k - u> certifies
    min G in [G(v_k) - g_k, G(v_k)], so Gap is in [upper - g_k, upper] with upper = max_i F_i(x) -
    G(v_k) + g_k (``gap`` returns the upper end, ``gap_interval`` both)."""

    population: Population
    tolerance: float = 1e-5
    max_iterations: int = 500

    @property
    def rows(self) -> int:
        return self.population.spec.dim

    def gap_interval(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        outer = self.population.losses(x).max(axis=1)
        inner, fw_gap = self.inner_minimum(y)
        return outer - inner, outer - inner + fw_gap

    def gap(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return self.gap_interval(x, y)[1]

    def inner_minimum(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(G(v_k), the FW gap g_k) per replica (class docstring); replicas with the same y (every
        replica of a one-task problem: min F) share one solve."""
        unique, inverse = np.unique(y, axis=0, return_inverse=True)
        values, gaps = self._solve(unique)
        return values[inverse.reshape(-1)], gaps[inverse.reshape(-1)]

    def _solve(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        population, d = self.population, self.population.spec.dim
        curvature = 0.25 if population.spec.link == "logistic" else 1.0
        step = 1.0 / (curvature * d * y.sum(axis=1, keepdims=True).clip(min=1e-12))
        v = previous = np.full((y.shape[0], d), 1.0 / d)
        momentum = 1.0
        for _ in range(self.max_iterations):
            nxt = (1 + np.sqrt(1 + 4 * momentum**2)) / 2
            probe = v + ((momentum - 1) / nxt) * (v - previous)
            grad = population.weighted_gradient(probe, y)
            previous, v, momentum = v, project_simplex(probe - step * grad), nxt
            if _ % 25 == 24 and np.all(_fw_gap(population.weighted_gradient(v, y), v) <= self.tolerance):
                break
        return (population.losses(v) * y).sum(axis=1), _fw_gap(population.weighted_gradient(v, y), v)


def _fw_gap(grad: np.ndarray, v: np.ndarray) -> np.ndarray:
    """max over vertices u of <grad, v - u> = <grad, v> - min_j grad_j (>= 0 up to rounding)."""
    return np.maximum((grad * v).sum(axis=1) - grad.min(axis=1), 0.0)
