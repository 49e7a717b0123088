"""Composition theorems dp-accounting lacks: pure-DP and (eps, delta)-per-round releases, a filter.

Scope
-----
These are composition theorems, nothing more. They take guarantees that already hold and
return the guarantee of running the mechanisms one after another (adaptively), on disjoint
parts, or under a stopping rule. They assume no trust model. The unit (record, user, silo), the
neighbouring relation and who sees the output all belong to the caller. Every input guarantee
must hold under one relation, and the result holds under that same relation. A guarantee for
one unit says nothing about a different unit.

Symbols
-------
==========  ==================  =================================================================
paper       code                meaning
==========  ==================  =================================================================
k, T        ``count``           number of releases composed (rounds, vertex draws)
eps0, eps'  ``epsilon0``        per-release epsilon
delta0      ``delta0``          per-release delta (0 for pure DP)
delta'      ``delta_slack``     the slack advanced composition (or the filter) adds to delta
delta''     ``delta_budget``    the filter's budget for the sum of per-step deltas
eps_m       ``epsilon``         epsilon of step m of the filter, chosen adaptively
==========  ==================  =================================================================

Count accountants (``PureDpComposition``, ``BoundedRangeComposition``, ``ApproxDpComposition``,
``ParallelComposition``)
share one interface for a per-unit ledger of integer release counts, for example of shape
(P, N): ``epsilons(counts)`` and ``deltas(counts)`` give a valid (epsilon, delta) pair for every
cell (epsilon 0 and delta 0 where the count is 0), and ``describe()`` gives plain values for
logging. Delta is a method because it can depend on the count (k * delta0 + delta').
"""

from __future__ import annotations

import math
from functools import lru_cache
from dataclasses import asdict, dataclass, fields
from typing import Protocol

import numpy as np

from fedray.errors import ConfigError

ROUTES = ("basic", "advanced", "best")
_RANGES = {
    "> 0": lambda a: a > 0,
    ">= 0": lambda a: a >= 0,
    "in (0, 1)": lambda a: (a > 0) & (a < 1),
    "in [0, 1)": lambda a: (a >= 0) & (a < 1),
    "integers >= 0": lambda a: (a >= 0) & (a == np.floor(a)),
    "an integer >= 1": lambda a: (a >= 1) & (a == np.floor(a)),
}


def _check(name: str, value, allowed: str) -> np.ndarray:
    """``value`` as a float array, or a ConfigError naming the first element not ``allowed``."""
    array = np.asarray(value, dtype=np.float64)
    good = _RANGES[allowed](array) & np.isfinite(array)
    if not np.all(good):
        raise ConfigError(name, float(array[~good].flat[0]), allowed)
    return array


def _counts(counts) -> np.ndarray:
    array = np.asarray(counts)
    if array.dtype.kind in "iu":            # integers already: one pass for the sign, no float copy
        if array.size and array.min() < 0:
            raise ConfigError("counts", float(array[array < 0].flat[0]), "integers >= 0")
        return array.astype(np.int64, copy=False)
    return _check("counts", array, "integers >= 0").astype(np.int64)


def _per_count(counts: np.ndarray, price) -> np.ndarray:
    """``price(k)``, an array elementwise in the int64 counts ``k``, for every cell of ``counts``,
    computed once per distinct count and gathered: a plan's (P, N) counts (20 replicas of a million
    users make 2 x 10^7 cells) hold a handful of distinct values, and the pricing then works on a
    handful of numbers instead of arrays of 2 x 10^7. Only for a rule whose parameters are
    scalars (the price of a cell is then a function of its count alone)."""
    if counts.size <= 4096:
        return price(counts)
    distinct = np.flatnonzero(np.bincount(counts.ravel()))    # counts are at most the rounds: a short bincount
    position = np.zeros(distinct[-1] + 1, dtype=np.intp)
    position[distinct] = np.arange(distinct.size)
    return np.broadcast_to(price(distinct), distinct.shape)[position[counts]]


def _route(route: str) -> str:
    if route not in ROUTES:
        raise ConfigError("route", route, f"one of {ROUTES}")
    return route


def basic_composition(epsilons, deltas) -> tuple[float, float]:
    """Basic composition: (sum eps_i, sum delta_i).

    Dwork & Roth 2014, Thm 3.16 (adaptive choice allowed; Dwork, Rothblum, Vadhan 2010). Each
    mechanism i is (eps_i, delta_i)-DP under the caller's neighbouring relation; the sequence is
    (sum eps_i, sum delta_i)-DP under the same relation.
    """
    return float(np.sum(_check("epsilons", epsilons, ">= 0"))), float(np.sum(_check("deltas", deltas, ">= 0")))


def parallel_composition(epsilons, deltas) -> tuple[float, float]:
    """Parallel composition over disjoint parts: (max eps_i, max delta_i).

    McSherry 2009 (PINQ), parallel composition; seed-000 §1 (c) and seed-001 §2.3 (Alg. 4).
    Mechanism i reads only part i of the data, the parts are disjoint, and the caller's relation
    changes one unit, so only one part differs between neighbours.
    """
    return float(np.max(_check("epsilons", epsilons, ">= 0"))), float(np.max(_check("deltas", deltas, ">= 0")))


def advanced_composition(epsilon0, delta0, count, delta_slack):
    """k-fold adaptive composition of (eps0, delta0)-DP mechanisms (advanced composition).

    eps = sqrt(2 k ln(1/delta')) eps0 + k eps0 (e^eps0 - 1),   delta = k delta0 + delta'.

    Dwork, Rothblum, Vadhan 2010, Thm III.3; Dwork & Roth 2014, Thm 3.20; seed-000 §3.5 (P_GD).
    The relation is the caller's. Arrays broadcast; returns (eps, delta).
    """
    epsilon0, delta0 = _check("epsilon0", epsilon0, ">= 0"), _check("delta0", delta0, "in [0, 1)")
    count, delta_slack = _counts(count), _check("delta_slack", delta_slack, "in (0, 1)")
    epsilon = np.sqrt(2 * count * np.log(1 / delta_slack)) * epsilon0 + count * epsilon0 * np.expm1(epsilon0)
    return epsilon, count * delta0 + delta_slack


def pure_advanced_composition(epsilon0, count, delta_slack):
    """k-fold adaptive composition of eps0-DP (pure) mechanisms: seed-001 §2.3, Corollary 3.6.

    eps = sqrt(2 k ln(1/delta')) eps0 + k eps0^2 / 2,   delta = delta'.

    The quantity behind Cor. 3.6; its per-step rule eps0 <= eps / (2 sqrt(2 k ln(1/delta))), with
    eps <= 8 ln(1/delta), makes it <= eps. The same bound follows from zCDP (Bun & Steinke 2016):
    eps0-DP is eps0^2/2-zCDP (Prop. 1.4), zCDP adds up, and rho-zCDP is (rho + 2 sqrt(rho
    ln(1/delta)), delta)-DP (Prop. 1.3). It is below ``advanced_composition`` for every eps0 > 0
    (eps0/2 < e^eps0 - 1). The relation is the caller's. Arrays broadcast; returns (eps, delta).
    """
    epsilon0, count = _check("epsilon0", epsilon0, ">= 0"), _counts(count)
    delta_slack = _check("delta_slack", delta_slack, "in (0, 1)")
    epsilon = np.sqrt(2 * count * np.log(1 / delta_slack)) * epsilon0 + count * epsilon0**2 / 2
    return epsilon, delta_slack + np.zeros_like(epsilon)


def pure_advanced_composition_budget(target_epsilon: float, count: int, delta_slack: float) -> float:
    """Largest eps0 whose ``pure_advanced_composition`` over ``count`` releases is <= target_epsilon.

    The positive root of (k/2) x^2 + a x - eps = 0 with a = sqrt(2 k ln(1/delta')), written
    x = 2 eps / (a + sqrt(a^2 + 2 k eps)) to avoid cancellation; stepped down by ulps if
    rounding puts it past the target (the result is always on the private side).
    """
    target = float(_check("target_epsilon", target_epsilon, "> 0"))
    k = int(_check("count", count, "an integer >= 1"))
    a = math.sqrt(2 * k * math.log(1 / float(_check("delta_slack", delta_slack, "in (0, 1)"))))
    x = 2 * target / (a + math.sqrt(a * a + 2 * k * target))
    while pure_advanced_composition(x, k, delta_slack)[0] > target:
        x = math.nextafter(x, 0.0)
    return x


def advanced_composition_budget(target_epsilon: float, count: int, delta_slack: float,
                                route: str = "advanced") -> float:
    """Largest per-release eps0 whose composition over ``count`` releases is <= target_epsilon.

    route="advanced": bisection on ``advanced_composition``, which increases in eps0, down to
    adjacent floats; the returned eps0 meets the target. seed-000 §3.5 (P_GD) prescribes the
    paper's eps0 = eps / (2 sqrt(2 T ln(1/delta))) and bisection only if that eps0 fails the
    check; that rule is ``min(paper_eps0, advanced_composition_budget(eps, T, delta / (T + 1)))``,
    and the paper's value was shrunk exactly when the budget is the smaller (log it).

    route="best": the larger of that and basic composition's eps / k. Basic is larger exactly
    when advanced composition of eps / k exceeds eps, always so for k <= 2 ln(1/delta'). The spec
    does not ask for this; a stated delta of k delta0 + delta' stays valid (basic needs k delta0).
    """
    target = float(_check("target_epsilon", target_epsilon, "> 0"))
    k, _ = int(_check("count", count, "an integer >= 1")), _check("delta_slack", delta_slack, "in (0, 1)")
    total = lambda x: float(advanced_composition(x, 0.0, k, delta_slack)[0])  # noqa: E731
    low, high = 0.0, min(target / math.sqrt(2 * k * math.log(1 / delta_slack)), math.sqrt(target / k))
    if total(high) <= target:                  # f(x) >= max(a x, k x^2), so f(high) >= target
        low = high
    while math.nextafter(low, math.inf) < high:
        middle = 0.5 * (low + high)
        low, high = (middle, high) if total(middle) <= target else (low, middle)
    if _route(route) == "best" and target / k > low:
        low = target / k if k * (target / k) <= target else math.nextafter(target / k, 0.0)
    return low


class CompositionRule(Protocol):
    """What a per-unit ledger of release counts needs from a composition rule."""

    def epsilons(self, counts: np.ndarray) -> np.ndarray: ...

    def deltas(self, counts: np.ndarray) -> np.ndarray: ...

    def describe(self) -> dict: ...


class _RoutedComposition:
    """``epsilons``, ``deltas`` and ``describe`` from a subclass's basic and advanced (eps, delta) pairs."""

    NAME = ""

    def _pairs(self, counts):
        basic = self._basic(counts)
        if self.route == "basic":
            return basic
        advanced = self._advanced(counts)
        use_advanced = (advanced[0] < basic[0]) if self.route == "best" else (counts > 0)
        return tuple(np.where(use_advanced, a, b) for a, b in zip(advanced, basic))

    def _priced(self, counts, which: int) -> np.ndarray:
        """Element ``which`` of the (epsilon, delta) pair of every cell of ``counts``."""
        counts = _counts(counts)
        if all(np.ndim(getattr(self, spec.name)) == 0 for spec in fields(self)):
            return _per_count(counts, lambda ks: self._pairs(ks)[which])
        return self._pairs(counts)[which]

    def epsilons(self, counts) -> np.ndarray:
        return self._priced(counts, 0)

    def deltas(self, counts) -> np.ndarray:
        return self._priced(counts, 1)

    def describe(self) -> dict:
        return {"name": self.NAME, **{k: np.asarray(v).tolist() for k, v in asdict(self).items()}}


@dataclass(frozen=True)
class PureDpComposition(_RoutedComposition):
    """Identical eps0-DP releases composed per cell of a count array.

    route "basic": (k eps0, 0) (Dwork & Roth Thm 3.16); "advanced": ``pure_advanced_composition``
    (seed-001 Cor. 3.6), (sqrt(2 k ln(1/delta')) eps0 + k eps0^2/2, delta'); "best": per cell the
    pair with the smaller epsilon (both are valid). ``epsilon0`` and ``delta_slack`` may be arrays
    that broadcast against the counts (one per replica, say). The relation is the caller's.
    """

    epsilon0: float | np.ndarray
    delta_slack: float | np.ndarray
    route: str = "best"
    NAME = "pure_dp"

    def __post_init__(self) -> None:
        _check("epsilon0", self.epsilon0, "> 0")
        if _route(self.route) != "basic":
            _check("delta_slack", self.delta_slack, "in (0, 1)")

    def _basic(self, counts):
        epsilon = counts * np.asarray(self.epsilon0, dtype=np.float64)
        return epsilon, np.zeros_like(epsilon)

    def _advanced(self, counts):
        return pure_advanced_composition(self.epsilon0, counts, self.delta_slack)


@lru_cache(maxsize=1)
def _zcdp_orders() -> np.ndarray:
    """Renyi orders for the zCDP-to-(eps, delta) conversion: dp-accounting's defaults and a dense
    grid up to 1e5 (the best order is about 1 + sqrt(ln(1/delta) / rho), ~1e4 for the small rho
    of thousands of tiny draws)."""
    from dp_accounting.rdp import rdp_privacy_accountant     # a second of imports: only when used

    defaults = np.asarray(rdp_privacy_accountant.RdpAccountant().orders, dtype=np.float64)
    return np.unique(np.concatenate([defaults, 1.0 + np.geomspace(1e-3, 1e5, 600)]))


@lru_cache(maxsize=65536)
def zcdp_epsilon(rho: float, delta: float) -> float:
    """epsilon at ``delta`` of a rho-zCDP mechanism: dp-accounting's RDP conversion of the curve
    rho * alpha (Bun & Steinke 2016, Def. 1.1; the conversion is Canonne, Kamath & Steinke 2020,
    Prop. 12's, tighter than rho + 2 sqrt(rho ln(1/delta)))."""
    from dp_accounting.rdp import rdp_privacy_accountant     # a second of imports: only when used

    if rho == 0:
        return 0.0
    orders = _zcdp_orders()
    return float(rdp_privacy_accountant.compute_epsilon(orders, rho * orders, delta)[0])


def bounded_range_composition(epsilon0, count, delta_slack):
    """k-fold adaptive composition of eps0-bounded-range mechanisms (every exponential mechanism
    whose score moves by a spread of at most eps0 between neighbours is one).

    A mechanism is eps0-BR when ln(P[y] / P'[y]) - ln(P[y'] / P'[y']) <= eps0 for all outputs y,
    y' (Durfee & Rogers 2019, Def. 3.1); it is then eps0^2/8-zCDP (Cesar & Rogers 2021, Lemma 3.2),
    zCDP adds up under adaptive composition (Bun & Steinke 2016, Lemma 2.3), so k releases are
    (k eps0^2 / 8)-zCDP, converted by ``zcdp_epsilon``. Against pure-DP advanced composition
    (``pure_advanced_composition``) the leading term drops from eps0 sqrt(2 k ln(1/delta')) to
    about eps0 sqrt(k ln(1/delta') / 2): half. The relation is the caller's. Arrays broadcast;
    returns (eps, delta).
    """
    epsilon0, count = _check("epsilon0", epsilon0, ">= 0"), _counts(count)
    delta_slack = float(_check("delta_slack", delta_slack, "in (0, 1)"))
    rho = count * epsilon0**2 / 8
    values, where = np.unique(rho, return_inverse=True)
    epsilon = np.array([zcdp_epsilon(float(r), delta_slack) for r in values])[where].reshape(rho.shape)
    return epsilon, delta_slack + np.zeros_like(epsilon)


@lru_cache(maxsize=1024)
def zcdp_budget(target_epsilon: float, delta: float) -> float:
    """Largest rho with ``zcdp_epsilon(rho, delta) <= target_epsilon``, to adjacent floats.
    ``zcdp_epsilon`` increases in rho (each order's term does) and is at least rho."""
    low, high = 0.0, float(target_epsilon)
    while math.nextafter(low, math.inf) < high:
        middle = 0.5 * (low + high)
        low, high = (middle, high) if zcdp_epsilon(middle, delta) <= target_epsilon else (low, middle)
    return low


def bounded_range_budget(target_epsilon: float, count: int, delta_slack: float) -> float:
    """Largest eps0 whose k-fold composition is <= target_epsilon by ``bounded_range_composition``
    or by basic composition (k eps0), whichever allows more; both are valid.

    eps0 = sqrt(8 rho* / k) with rho* = ``zcdp_budget`` (one search per (eps, delta), whatever k),
    stepped down by ulps if rounding crosses the target.
    """
    target = float(_check("target_epsilon", target_epsilon, "> 0"))
    k = int(_check("count", count, "an integer >= 1"))
    delta = float(_check("delta_slack", delta_slack, "in (0, 1)"))
    x = math.sqrt(8 * zcdp_budget(target, delta) / k)
    while x > 0 and bounded_range_composition(x, k, delta)[0] > target:
        x = math.nextafter(x, 0.0)
    basic = target / k if k * (target / k) <= target else math.nextafter(target / k, 0.0)
    return max(x, basic)


@dataclass(frozen=True)
class BoundedRangeComposition:
    """Identical eps0-bounded-range releases (exponential-mechanism draws) composed per cell of a
    count array: per cell the smaller epsilon of ``bounded_range_composition`` (zCDP) and basic
    composition (k eps0, delta 0 reported as delta' for one delta per plan). ``epsilon0`` may be
    an array that broadcasts against the counts. The relation is the caller's."""

    epsilon0: float | np.ndarray
    delta_slack: float

    def __post_init__(self) -> None:
        _check("epsilon0", self.epsilon0, "> 0")
        _check("delta_slack", self.delta_slack, "in (0, 1)")

    def epsilons(self, counts) -> np.ndarray:
        counts = _counts(counts)
        basic = counts * np.asarray(self.epsilon0, dtype=np.float64)
        return np.minimum(bounded_range_composition(self.epsilon0, counts, self.delta_slack)[0], basic)

    def deltas(self, counts) -> np.ndarray:
        counts = _counts(counts)
        return np.zeros(np.broadcast_shapes(counts.shape, np.shape(self.epsilon0))) + self.delta_slack

    def describe(self) -> dict:
        return {"name": "bounded_range", "epsilon0": np.asarray(self.epsilon0).tolist(),
                "delta_slack": self.delta_slack}


@dataclass(frozen=True)
class ApproxDpComposition(_RoutedComposition):
    """Identical (eps0, delta0)-DP releases (one per round, say) composed per cell of a count array.

    route "basic": (k eps0, k delta0) (Dwork & Roth Thm 3.16); "advanced": ``advanced_composition``
    (DRV 2010; Dwork & Roth Thm 3.20; seed-000 §3.5), (sqrt(2 k ln(1/delta')) eps0 + k eps0
    (e^eps0 - 1), k delta0 + delta'); "best": per cell the pair with the smaller epsilon. The
    relation is the caller's. Parameters may be arrays that broadcast against the counts.
    """

    epsilon0: float | np.ndarray
    delta0: float | np.ndarray
    delta_slack: float | np.ndarray
    route: str = "best"
    NAME = "approx_dp"

    def __post_init__(self) -> None:
        _check("epsilon0", self.epsilon0, "> 0")
        _check("delta0", self.delta0, "in [0, 1)")
        if _route(self.route) != "basic":
            _check("delta_slack", self.delta_slack, "in (0, 1)")

    def _basic(self, counts):
        epsilon = counts * np.asarray(self.epsilon0, dtype=np.float64)
        return epsilon, counts * np.asarray(self.delta0, dtype=np.float64) + np.zeros_like(epsilon)

    def _advanced(self, counts):
        return advanced_composition(self.epsilon0, self.delta0, counts, self.delta_slack)


@dataclass(frozen=True)
class ParallelComposition:
    """Releases on disjoint parts of a unit's data: charged as one release of ``inner``.

    Parallel composition (McSherry 2009; seed-001 Alg. 4, seed-000 §3.1/§3.4): counts are
    clipped to 1. Valid only if each release reads a part no other release of that unit reads
    (single pass over disjoint batches); the caller asserts that.
    """

    inner: CompositionRule

    def epsilons(self, counts) -> np.ndarray:
        return self.inner.epsilons(np.minimum(_counts(counts), 1))

    def deltas(self, counts) -> np.ndarray:
        return self.inner.deltas(np.minimum(_counts(counts), 1))

    def describe(self) -> dict:
        return {"name": "parallel", "inner": self.inner.describe()}


@lru_cache(maxsize=4096)
def pld_composition_epsilon(epsilon0: float, delta0: float, count: int, delta: float) -> float:
    """Epsilon at ``delta`` of ``count`` identical (eps0, delta0)-DP releases composed by their privacy
    loss distribution: dp-accounting's PLD of the worst-case (eps0, delta0)-DP pair (every such
    mechanism is a post-processing of it; Kairouz, Oh, Viswanath 2015), self-composed ``count``
    times with pessimistic discretization (interval 1e-4), read at ``delta``. Never above advanced
    composition at the same total delta (tested)."""
    from dp_accounting.pld import common, privacy_loss_distribution     # a second of imports: only when used

    if count == 0:
        return 0.0
    base = privacy_loss_distribution.from_privacy_parameters(
        common.DifferentialPrivacyParameters(float(epsilon0), float(delta0)), value_discretization_interval=1e-4)
    return float(base.self_compose(int(count)).get_epsilon_for_delta(float(delta)))


@lru_cache(maxsize=256)
def pld_composition_budget(target_epsilon: float, count: int, delta0: float, delta: float) -> float:
    """Largest eps0 whose PLD composition over ``count`` releases is <= target_epsilon at ``delta``
    (bisection to a relative 1e-6, on the safe side). Cached: planning asks for the same budget when
    it sets the step size, the noise and each phase's schedule."""
    low, high = 0.0, float(target_epsilon)
    while high - low > 1e-6 * high:
        middle = 0.5 * (low + high)
        low, high = (middle, high) if pld_composition_epsilon(middle, delta0, count, delta) <= target_epsilon else (low, middle)
    return low


@dataclass(frozen=True)
class ApproxDpPldComposition:
    """Identical (eps0, delta0)-DP releases composed per cell by ``pld_composition_epsilon`` at the
    total ``delta`` (k delta0 of it is the releases' own); a tighter alternative to
    ``ApproxDpComposition``'s advanced composition (seed-000 P_GD, ``privacy.composition=pld``)."""

    epsilon0: float
    delta0: float
    delta: float
    NAME = "approx_dp_pld"

    def epsilons(self, counts) -> np.ndarray:
        price = lambda ks: np.array([pld_composition_epsilon(self.epsilon0, self.delta0, int(k), self.delta)  # noqa: E731
                                     for k in np.ravel(ks)]).reshape(np.shape(ks))
        return _per_count(_counts(counts), price)

    def deltas(self, counts) -> np.ndarray:
        return np.where(_counts(counts) > 0, self.delta, 0.0)

    def describe(self) -> dict:
        return {"name": self.NAME, "epsilon0": self.epsilon0, "delta0": self.delta0, "delta": self.delta}
