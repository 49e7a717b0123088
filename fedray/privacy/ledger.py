"""One privacy ledger per run, keyed by privacy unit, over a pluggable accountant.

The ledger counts charges: ``counts[p, u]`` is how many releases replica p has charged to unit u
(a silo, a user, or the whole federation). What one release costs, and how releases compose, is
the accountant's business (``epsilons(counts) -> (P, N)``): the ledger itself knows no mechanism.
Protocols emit a (P, N) charge every round (``fedray.core.protocol.Aggregated``); the planner
builds the same ledger before the run and asks it for the spend of the sampler's counts, which is
the budget guard. Accountants:

- ``SampledGaussianAccountant``: each charge is ``releases`` Gaussian releases of a clipped mean of
  ``sample_size`` records sampled without replacement from the unit's ``dataset_size`` (RDP or
  PLD through dp-accounting, ``fedray.privacy.accounting``), or with ``parallel_composition`` one
  un-subsampled release however many charges (disjoint batches). It holds the Gaussian step the
  silos apply and prices that step's own ``event`` (``EventAccountant``: it names the event of a
  cell's charges, which ``privacy_event.json`` records).
- ``CentralGaussianAccountant``: the same pricing of a trusted server's Gaussian step
  (``ServerGaussianNoise``) on the sum of K of the N units sampled without replacement, charged
  federation-wide (every unit, every round anybody took part); ``PoissonGaussianAccountant`` the
  same step over Poisson-sampled units under add/remove one; ``GroupPrivacyAccountant`` a user-level
  epsilon as m times a per-item accountant's (group privacy over a user's m items).
- ``RoundsAccountant``: a guarantee of the whole federation known as a function of the number of
  rounds run (a solved shuffle chain, P_vec's parallel composition); a round charges every unit
  when anybody took part.
- ``ComposedAccountant``: releases with a guarantee of their own (a pure-DP draw, an
  (eps, delta) round) composed by a theorem of ``fedray.privacy.composition`` (basic, advanced,
  parallel); its delta can grow with the count (k delta0 + delta'), so the guard checks delta too.
  With a ``CertifiedReleases`` rule the per-release guarantee is read from the calibrated
  Gaussian step the protocol applies (``CalibratedGaussianNoise.guarantee``), the same value.

Every accountant gives ``epsilons(counts)`` and ``deltas(counts)``, both (P, N).

An accountant's ``advice(replica, unit, count, target)`` says what would fit when a plan overspends
(``check_budget``), or nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Callable, Protocol, runtime_checkable

import numpy as np

from fedray.errors import BudgetError
from fedray.privacy import event_data
from fedray.privacy.accounting import calibrate_noise_multiplier
from fedray.privacy.mechanisms import CalibratedGaussianNoise, GaussianNoise, PhaseGaussianNoise, ServerGaussianNoise

if TYPE_CHECKING:
    import dp_accounting
from fedray.privacy.composition import ApproxDpComposition, ParallelComposition


@runtime_checkable
class CountAccountant(Protocol):
    @property
    def name(self) -> str: ...     # read-only: accountants are frozen dataclasses

    def epsilons(self, counts: np.ndarray) -> np.ndarray: ...

    def deltas(self, counts: np.ndarray) -> np.ndarray: ...

    def charge(self, charge: np.ndarray) -> np.ndarray: ...

    def planned(self, counts: np.ndarray, num_rounds: int) -> np.ndarray: ...

    def advice(self, replica: int, unit: int, count: int, target: float, shape: tuple) -> str: ...


@runtime_checkable
class PlansWithoutCounts(Protocol):
    """An accountant whose plan does not read how often units take part (a phase accountant: each
    unit of a phase that starts is charged once): ``planned_without_counts(shape, num_rounds)`` is
    ``planned(counts, num_rounds)`` for any (P, N) ``counts``, so the planner replays no sampler
    draws (10^5 rounds of them) for it."""

    def planned_without_counts(self, shape: tuple[int, int], num_rounds: int) -> np.ndarray: ...


@runtime_checkable
class EventAccountant(Protocol):
    """An accountant whose price of a cell is dp-accounting's epsilon of an event it can name."""

    def event(self, replica: int, unit: int, count: int) -> object: ...


@dataclass
class Ledger:
    """Charges per (replica, unit) and the accountant that prices them."""

    accountant: CountAccountant
    shape: tuple[int, int]
    unit: str = "silo"
    counts: np.ndarray = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.counts is None:
            self.counts = np.zeros(self.shape, dtype=np.int64)

    def record(self, charge: np.ndarray) -> None:
        """Add one round's (P, N) charge (bool or counts)."""
        self.counts = self.after(charge)

    def after(self, charge: np.ndarray, counts: np.ndarray | None = None) -> np.ndarray:
        """The counts once ``charge`` is recorded on top of ``counts`` (default: what was charged)."""
        counts = self.counts if counts is None else counts
        return counts + self.accountant.charge(np.asarray(charge)).astype(np.int64)

    def epsilons(self, counts: np.ndarray | None = None) -> np.ndarray:
        """(P, N) epsilon of every (replica, unit) for ``counts`` (default: what was charged so far)."""
        return self.accountant.epsilons(self.counts if counts is None else np.asarray(counts))

    def deltas(self, counts: np.ndarray | None = None) -> np.ndarray:
        """(P, N) delta of every (replica, unit) for ``counts`` (default: what was charged so far)."""
        return self.accountant.deltas(self.counts if counts is None else np.asarray(counts))

    def fresh(self) -> "Ledger":
        return Ledger(self.accountant, self.shape, self.unit)

    def state(self) -> dict:
        """What a checkpoint needs to resume the ledger."""
        return {"counts": self.counts.copy()}

    def restore(self, state: dict) -> None:
        self.counts = np.asarray(state["counts"], dtype=np.int64).copy()


@dataclass
class SampledGaussianAccountant:
    """Gaussian releases of clipped means of records sampled without replacement (module docstring).

    What it prices is the mechanism's own event: a cell's release is ``noise.event(replica, unit)``
    inside ``SampledWithoutReplacementDpEvent(dataset_size, sample_size, .)`` (the plain event for
    a full batch or with ``parallel_composition``), composed ``releases`` x count times. So the
    step the silos apply (``noise.scaled(sensitivity)``, the same multipliers) and the step priced
    are one value; ``fedray.privacy.event_data`` reads the event's parameters for the stored answers.

    Parameters
    ----------
    noise : the Gaussian step (``fedray.privacy.mechanisms.GaussianNoise``) with (P, N) noise
        multipliers (noise std over replace-one sensitivity) per replica and unit.
    sample_size : records per noisy release (K for MB-SGD, 1 for a Local SGD step).
    dataset_size : (N,) records per unit.
    releases : noisy releases per charge (1 for MB-SGD, K for Local SGD).
    delta : (N,) per-unit delta.
    kind : "rdp" or "pld" (``fedray.privacy.accounting``).
    parallel_composition : each record is used in one release only (disjoint batches).
    """

    noise: GaussianNoise
    sample_size: int
    dataset_size: np.ndarray
    releases: int
    delta: np.ndarray
    kind: str = "rdp"
    parallel_composition: bool = False
    _groups: np.ndarray | None = field(default=None, repr=False)
    _group_values: np.ndarray | None = field(default=None, repr=False)
    _group_releases: list[dict] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self.dataset_size = np.asarray(self.dataset_size, dtype=np.int64)
        self.delta = np.asarray(self.delta, dtype=np.float64)

    @property
    def name(self) -> str:
        return self.kind

    @property
    def noise_multiplier(self) -> np.ndarray:
        """(P, N) the step's multipliers (what groups the cells; the events carry them)."""
        return np.asarray(self.noise.noise_multiplier, dtype=np.float64)

    def charge(self, charge: np.ndarray) -> np.ndarray:
        return charge

    def planned(self, counts: np.ndarray, num_rounds: int) -> np.ndarray:
        """The ledger counts of a run whose units participate ``counts`` times."""
        return counts

    def release(self, replica: int, unit: int) -> dict:
        """One release of a cell, as event data: the step's event inside the sampling the silo does."""
        n = int(self.dataset_size[unit])
        sample_size = n if self.parallel_composition else min(self.sample_size, n)
        return event_data.sampled_without_replacement(n, sample_size, self.noise.event_data(replica, unit))

    def _charged(self, count: int) -> int:
        # Each record is in exactly one release for sure: one plain Gaussian, no sampling credit.
        return min(count, 1) if self.parallel_composition else count

    def epsilons(self, counts: np.ndarray) -> np.ndarray:
        # Cells with one (multiplier, n, delta) have one release event: price a representative
        # cell's event once per group, then key each call by (group, count).
        if self._groups is None:
            static = np.stack([np.broadcast_to(self.noise_multiplier, counts.shape),
                               np.broadcast_to(self.dataset_size, counts.shape),
                               np.broadcast_to(self.delta, counts.shape)], axis=-1).reshape(-1, 3)
            self._group_values, first, self._groups = np.unique(static, axis=0, return_index=True,
                                                                return_inverse=True)
            self._group_releases = [self.release(int(r), int(u)) for r, u in zip(*np.unravel_index(first, counts.shape))]
        base = int(counts.max()) + 1
        unique, inverse = np.unique(self._groups.reshape(-1).astype(np.int64) * base + counts.reshape(-1),
                                    return_inverse=True)
        values = np.array([
            event_data.sampled_gaussian_epsilon(self._group_releases[g], self.releases, self._charged(int(c)),
                                                float(self._group_values[g, 2]), self.kind)
            for g, c in zip(unique // base, unique % base)
        ])
        return values[inverse.reshape(-1)].reshape(counts.shape)

    def deltas(self, counts: np.ndarray) -> np.ndarray:
        return _fixed_delta(self.delta, counts)

    def event(self, replica: int, unit: int, count: int) -> dp_accounting.DpEvent:
        """The dp-accounting event ``epsilons`` prices for ``count`` charges of one cell."""
        from fedray.privacy.events import event_from_json     # imports dp-accounting (a second): only here

        total = int(self.releases) * self._charged(int(count))
        return event_from_json(event_data.self_composed(self.release(replica, unit), total))

    def advice(self, replica: int, unit: int, count: int, target: float, shape: tuple) -> str:
        """The noise multiplier that would meet ``target`` and the participations that fit."""
        fits = _largest_affordable_count(self, shape, replica, unit, target, count)
        n = int(self.dataset_size[unit])
        needed = calibrate_noise_multiplier(target, float(self.delta[unit]),
                                            n if self.parallel_composition else self.sample_size, n,
                                            self.releases, 1 if self.parallel_composition else count, self.kind)
        return (f"noise multiplier >= {needed:.4g} (planned {self.noise_multiplier[replica, unit]:.4g}) "
                f"or at most {fits} participations would fit")


class _FederationWide:
    """Charges of a guarantee of the whole federation: a round in which anybody of a replica took
    part charges every unit of that replica once, so a plan of R rounds charges every unit R times
    (a round with nobody in it costs nothing)."""

    def charge(self, charge: np.ndarray) -> np.ndarray:
        return np.broadcast_to(charge.any(axis=1, keepdims=True), charge.shape)

    def planned(self, counts: np.ndarray, num_rounds: int) -> np.ndarray:
        return np.full_like(counts, num_rounds)


@dataclass
class CentralGaussianAccountant(_FederationWide, SampledGaussianAccountant):
    """Rounds of a trusted server that adds Gaussian noise to the sum of K units' clipped messages,
    the K drawn uniformly without replacement from all N units (central DP, user or client level).

    What it prices is the server's step itself (``fedray.privacy.mechanisms.ServerGaussianNoise``,
    the value the protocol's server half applies): a round is ``noise.event(replica, unit)`` inside
    ``SampledWithoutReplacementDpEvent(N, K, .)`` (the plain event when K = N), composed once per
    round that ran (``releases`` = 1). Federation-wide: a round in which anybody took part charges
    every unit of that replica once (the sampling credit holds while each round's units stay
    secret), so every unit carries the federation's epsilon, and a plan of R rounds charges R.

    Build it with ``central_gaussian_ledger``.
    """

    @property
    def noise_multiplier(self) -> np.ndarray:
        """(P, N) the step's multipliers: one per replica, the same for every unit."""
        z = np.asarray(self.noise.noise_multiplier, dtype=np.float64).reshape(-1, 1)
        return np.broadcast_to(z, (z.shape[0], self.dataset_size.shape[0]))


@dataclass(frozen=True)
class GroupPrivacyAccountant:
    """A user-level guarantee from a per-item one by group privacy: a user holds ``group_size`` (m)
    items, and replacing a user replaces m items, so m item-level (eps0, delta0) gives the user
    (m eps0, m e^{(m-1) eps0} delta0) (by induction over the m replacements). ``per_item`` prices
    the item-level releases (e.g. a ``CentralGaussianAccountant`` over the items, holding the step
    the server applies, at delta0); this accountant reports m times its epsilon, at ``delta`` (the
    plan's user-level delta, which the calibration keeps above m e^{(m-1) eps0} delta0). It names
    no event: the user-level claim is a theorem's, not a dp-accounting event's."""

    per_item: CentralGaussianAccountant
    group_size: int
    delta: float
    name: str = "group privacy over the per-item accountant"

    def charge(self, charge: np.ndarray) -> np.ndarray:
        return self.per_item.charge(charge)

    def planned(self, counts: np.ndarray, num_rounds: int) -> np.ndarray:
        return self.per_item.planned(counts, num_rounds)

    def epsilons(self, counts: np.ndarray) -> np.ndarray:
        return self.group_size * self.per_item.epsilons(counts)

    def deltas(self, counts: np.ndarray) -> np.ndarray:
        return _fixed_delta(self.delta, counts)

    def advice(self, replica: int, unit: int, count: int, target: float, shape: tuple) -> str:
        return ""


@dataclass(frozen=True)
class PoissonGaussianAccountant(_FederationWide):
    """Rounds of a trusted server that adds Gaussian noise to the sum of the units' clipped
    messages, each unit taking part with probability ``sampling_probability`` independently
    (Poisson sampling), under ADD_OR_REMOVE_ONE (a unit present or absent: the sum moves by L).

    What it prices is the server's step itself (``ServerGaussianNoise``, the value the server half
    applies): a round is ``PoissonSampledDpEvent(q, noise.event(replica, unit))``, R rounds its
    R-fold self-composition, priced by dp-accounting's RDP accountant built with the add/remove
    relation. Federation-wide charges, as ``CentralGaussianAccountant``'s (a round with anybody in
    it charges every unit; a plan of R rounds charges R: a round with nobody still releases noise,
    but its charge is 0 only when no unit at all took part, which the Poisson event covers anyway).
    """

    noise: ServerGaussianNoise
    sampling_probability: float
    num_units: int
    delta: float
    name: str = "rdp (Poisson units, add/remove, every round)"

    def event_data(self, replica: int, unit: int, count: int) -> dict:
        release = event_data.poisson_sampled(self.sampling_probability, self.noise.event_data(replica, unit))
        return event_data.self_composed(release, int(count))

    def event(self, replica: int, unit: int, count: int) -> dp_accounting.DpEvent:
        from fedray.privacy.events import event_from_json     # imports dp-accounting (a second): only here

        return event_from_json(self.event_data(replica, unit, count))

    def epsilons(self, counts: np.ndarray) -> np.ndarray:
        z = np.broadcast_to(np.asarray(self.noise.noise_multiplier, dtype=np.float64).reshape(-1, 1), counts.shape)
        keys = np.stack([z, counts.astype(np.float64)], axis=-1).reshape(-1, 2)
        unique, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
        cells = zip(*np.unravel_index(first, counts.shape))
        values = np.array([_add_remove_rdp_epsilon(json.dumps(self.event_data(int(r), int(u), int(c)), sort_keys=True),
                                                     self.delta)
                           if c > 0 else 0.0 for (r, u), c in zip(cells, unique[:, 1])])
        return values[inverse.reshape(-1)].reshape(counts.shape)

    def deltas(self, counts: np.ndarray) -> np.ndarray:
        return _fixed_delta(self.delta, counts)

    def advice(self, replica: int, unit: int, count: int, target: float, shape: tuple) -> str:
        fits = _largest_affordable_count(self, shape, replica, unit, target, count)
        return f"at most {fits} rounds would fit"


@lru_cache(maxsize=4096)
def _add_remove_rdp_epsilon(event_json: str, delta: float) -> float:
    """epsilon at ``delta`` of an event (its data as JSON) by dp-accounting's RDP under add/remove one.

    The accountant composes c rounds of an event as c times that event's RDP curve, so the curve of
    one round is found once and every count reuses it (the same bits: a ledger asks for a new
    count every round, and a Poisson-sampled curve costs a second of fractional orders)."""
    from dp_accounting.rdp import compute_epsilon     # a second of imports: only where a Poisson plan is priced

    event, count = json.loads(event_json), 1
    if event.get("class_name") == "SelfComposedDpEvent":
        event, count = event["event"], int(event["count"])
    orders, curve = _add_remove_rdp_curve(json.dumps(event, sort_keys=True))
    return float(compute_epsilon(orders, count * curve, delta)[0])


@lru_cache(maxsize=256)
def _add_remove_rdp_curve(event_json: str) -> tuple[np.ndarray, np.ndarray]:
    """dp-accounting's RDP orders and curve of one event (its data as JSON) under add/remove one."""
    import dp_accounting

    from fedray.privacy.events import event_from_json

    accountant = dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    accountant.compose(event_from_json(json.loads(event_json)))
    orders, curve = accountant.orders, accountant.rdp        # copies, shared by every count: read-only
    orders.flags.writeable = curve.flags.writeable = False
    return orders, curve


def _fixed_delta(delta, counts: np.ndarray) -> np.ndarray:
    """The delta of a guarantee whose delta does not grow with the count: 0 where nothing was charged."""
    return np.where(counts > 0, np.broadcast_to(delta, counts.shape), 0.0)


def _largest_affordable_count(accountant, shape: tuple, replica: int, unit: int, target: float, upper: int) -> int:
    """Most charges one unit can afford (monotone in the count: bisection)."""
    counts = np.zeros(shape, dtype=np.int64)

    def eps(c: int) -> float:
        counts[replica, unit] = c
        return float(accountant.epsilons(counts)[replica, unit])

    lo, hi = 0, upper
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if eps(mid) <= target else (lo, mid - 1)
    return lo


@dataclass(frozen=True)
class RoundsAccountant:
    """A guarantee known per number of rounds: ``epsilon_after(rounds)``.

    Federation-wide (``per_unit=False``): a round in which anybody took part charges every unit of
    that replica once, and every unit carries the federation's epsilon. Per unit (``per_unit=True``):
    a round charges the units that took part, for guarantees whose exposure of a record is the
    rounds its own silo joined (the server knows who took part, so no credit for sampling silos).
    """

    epsilon_after: Callable[[int], float]
    name: str
    delta: float | np.ndarray          # the delta epsilon_after is computed at, (N,) or a scalar
    per_unit: bool = False

    def charge(self, charge: np.ndarray) -> np.ndarray:
        return charge if self.per_unit else _FederationWide.charge(self, charge)

    def planned(self, counts: np.ndarray, num_rounds: int) -> np.ndarray:
        return counts if self.per_unit else _FederationWide.planned(self, counts, num_rounds)

    def epsilons(self, counts: np.ndarray) -> np.ndarray:
        unique, inverse = np.unique(counts, return_inverse=True)
        values = np.array([self.epsilon_after(int(c)) for c in unique])
        return values[inverse.reshape(-1)].reshape(counts.shape)

    def deltas(self, counts: np.ndarray) -> np.ndarray:
        return _fixed_delta(self.delta, counts)

    def advice(self, replica: int, unit: int, count: int, target: float, shape: tuple) -> str:
        return ""


@dataclass(frozen=True)
class CertifiedReleases:
    """Releases of one calibrated Gaussian step (``CalibratedGaussianNoise``, or a theorem's
    per-phase ``PhaseGaussianNoise``: the value the protocol's server half applies), each
    ``noise.guarantee()``-DP, composed basic ((k eps, k delta), Dwork & Roth Thm 3.16) or, with
    ``parallel``, as one release (each release reads a disjoint part of the data,
    ``ParallelComposition``). The guarantee is read from the step at every pricing, so a ledger
    holding less noise prices more; a step as calibrated prices its target to the bit."""

    noise: CalibratedGaussianNoise | PhaseGaussianNoise
    parallel: bool = False

    def rule(self) -> ApproxDpComposition | ParallelComposition:
        """The composition of the step's guarantee (an infinite epsilon, no claim, stands as 1 here:
        ``epsilons`` prices those cells at inf)."""
        epsilon, delta = self.noise.guarantee()
        inner = ApproxDpComposition(np.where(np.isfinite(epsilon), epsilon, 1.0), delta, 0.0, route="basic")
        return ParallelComposition(inner) if self.parallel else inner

    def epsilons(self, counts) -> np.ndarray:
        claimed = np.isfinite(self.noise.guarantee()[0]) | (np.asarray(counts) == 0)
        return np.where(claimed, self.rule().epsilons(counts), np.inf)

    def deltas(self, counts) -> np.ndarray:
        return self.rule().deltas(counts)

    def describe(self) -> dict:
        return {"name": "certified", "noise_std": np.asarray(self.noise.noise_std).tolist(),
                "inner": self.rule().describe()}


@dataclass(frozen=True)
class ComposedAccountant:
    """Charges priced by a composition rule (``fedray.privacy.composition.CompositionRule``).

    ``rule.epsilons(counts)`` and ``rule.deltas(counts)`` give each cell's guarantee after its
    count of releases; the rule carries the per-release guarantee and the theorem (pure-DP or
    (eps, delta) releases under basic or advanced composition, or parallel composition over
    disjoint parts). The unit and relation are the plan's. ``releases_per_participation``: how many
    releases one participation makes (a program's phases over the same users), for the plan's count.
    """

    rule: object
    name: str
    releases_per_participation: int = 1

    def charge(self, charge: np.ndarray) -> np.ndarray:
        return charge

    def planned(self, counts: np.ndarray, num_rounds: int) -> np.ndarray:
        return counts if self.releases_per_participation == 1 else counts * self.releases_per_participation

    def epsilons(self, counts: np.ndarray) -> np.ndarray:
        return np.asarray(self.rule.epsilons(counts), dtype=np.float64)

    def priced_noise(self) -> CalibratedGaussianNoise | PhaseGaussianNoise | None:
        """The Gaussian step this accountant prices (a ``CertifiedReleases`` rule's), else None."""
        return self.rule.noise if isinstance(self.rule, CertifiedReleases) else None

    def deltas(self, counts: np.ndarray) -> np.ndarray:
        return np.broadcast_to(np.asarray(self.rule.deltas(counts), dtype=np.float64), np.shape(counts))

    def advice(self, replica: int, unit: int, count: int, target: float, shape: tuple) -> str:
        fits = _largest_affordable_count(self, shape, replica, unit, target, count)
        return f"at most {fits} releases would fit"


@dataclass(frozen=True)
class PopulationAccountant(ComposedAccountant):
    """Releases that each read every unit, priced by ``rule`` (a curator's draw from a state built
    on all the samples used so far, seed 001): one ledger column stands for every unit alike, a
    round's charge is its (P, 1) count of releases, and a plan of R rounds charges
    R x ``releases_per_round``, or ``most_releases`` when given (a stopping rule's bound on the
    releases of a random number of rounds); the sampler's participations do not price such releases."""

    releases_per_round: int = 1
    most_releases: int | None = None     # a bound on a run's releases when rounds release unequal counts

    def planned(self, counts: np.ndarray, num_rounds: int) -> np.ndarray:
        planned = num_rounds * self.releases_per_round if self.most_releases is None else self.most_releases
        return np.full((counts.shape[0], 1), planned, dtype=np.int64)

    def advice(self, replica: int, unit: int, count: int, target: float, shape: tuple) -> str:
        fits = _largest_affordable_count(self, shape, replica, unit, target, count)
        return f"at most {fits} releases ({fits // self.releases_per_round} rounds) would fit"


@dataclass(frozen=True)
class PhaseAccountant(ComposedAccountant):
    """Phases of fresh units, each phase ONE release over all of its units, priced by ``rule``
    (seed 002's Alg. 3: by the paper's argument a phase is (eps, delta)-DP for every one of its
    users, sampled in some step or not; phases read disjoint users). The protocol charges each
    unit of a phase once, at the phase's first round, for each replica still running; a plan of
    R rounds charges once every unit of the phases that start before round R (halting can only
    charge less). ``unit_phase`` (N,) is each unit's phase (-1: none), ``phase_starts`` each
    phase's first round."""

    unit_phase: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    phase_starts: tuple = ()

    def planned(self, counts: np.ndarray, num_rounds: int) -> np.ndarray:
        return self.planned_without_counts(counts.shape, num_rounds).astype(counts.dtype)

    def planned_without_counts(self, shape: tuple[int, int], num_rounds: int) -> np.ndarray:
        """(P, N) charges of a plan of ``num_rounds`` rounds: the phases it starts, not how often
        units take part (``PlansWithoutCounts``)."""
        started = np.flatnonzero(np.asarray(self.phase_starts) < num_rounds)
        charged = np.isin(self.unit_phase, started)
        return np.broadcast_to(charged, shape).astype(np.int64)

    def advice(self, replica: int, unit: int, count: int, target: float, shape: tuple) -> str:
        return "each phase is one release at the run's (eps, delta)"


@dataclass(frozen=True)
class UnboundedAccountant:
    """Releases with no finite guarantee (a mechanism whose output leaks beyond any (eps, delta),
    e.g. seed 003's SCOutputPert with ``on_unstable=abort_not_private``): a unit charged once or
    more has spent epsilon = inf (delta 1), an uncharged unit 0. Its plans set an infinite target,
    which ``check_budget`` admits (for epsilon and delta alike)."""

    name: str = "none (not DP)"

    def charge(self, charge: np.ndarray) -> np.ndarray:
        return charge

    def planned(self, counts: np.ndarray, num_rounds: int) -> np.ndarray:
        return counts

    def epsilons(self, counts: np.ndarray) -> np.ndarray:
        return np.where(np.asarray(counts) > 0, np.inf, 0.0)

    def deltas(self, counts: np.ndarray) -> np.ndarray:
        return np.where(np.asarray(counts) > 0, 1.0, 0.0)

    def advice(self, replica: int, unit: int, count: int, target: float, shape: tuple) -> str:
        return ""


def check_budget(ledger: Ledger, counts: np.ndarray, target: np.ndarray,
                 target_delta: np.ndarray | None = None) -> np.ndarray:
    """(P, N) planned epsilons for ``counts``; raises ``BudgetError`` if any exceeds its target, or
    if a delta that grows with the count exceeds ``target_delta``.

    ``target`` is (N,) per unit or (P, N) per replica and unit (a grid of budgets as replicas).
    """
    planned = ledger.epsilons(counts)
    if target_delta is not None:
        deltas = ledger.deltas(counts)
        target_delta = np.broadcast_to(target_delta, deltas.shape)
        with np.errstate(invalid="ignore"):
            over = np.where(np.isposinf(np.broadcast_to(target, deltas.shape)), 0.0, deltas - target_delta)
        if np.any(over > 1e-15):
            replica, unit = np.unravel_index(int(np.argmax(over)), over.shape)
            raise BudgetError(
                f"planned delta {deltas[replica, unit]:.4g} for {ledger.unit} {unit} ({int(counts[replica, unit])} "
                f"releases, {ledger.accountant.name} accountant) exceeds privacy.delta = "
                f"{target_delta[replica, unit]:.4g}")
    target = np.broadcast_to(target, planned.shape)
    with np.errstate(invalid="ignore"):         # inf - inf where an infinite target claims nothing
        excess = np.where(np.isposinf(target), 0.0, planned - target)
    if np.all(excess <= 1e-9):
        return planned
    replica, unit = np.unravel_index(int(np.argmax(excess)), excess.shape)
    count = int(counts[replica, unit])
    hint = ledger.accountant.advice(int(replica), int(unit), count, float(target[replica, unit]), planned.shape)
    hint = f"{hint} " if hint else ""
    raise BudgetError(
        f"planned epsilon {planned[replica, unit]:.4g} for {ledger.unit} {unit} ({count} participations, "
        f"{ledger.accountant.name} accountant) exceeds privacy.epsilon = {target[replica, unit]:g}; "
        f"{hint}(or privacy.calibration=accountant; privacy.enforce_budget=false runs it anyway)"
    )


def one_pass_ledger(epsilon: float, delta: float) -> ComposedAccountant:
    """Releases that are each (epsilon, delta)-DP and read disjoint records, e.g. P_vec invocations
    over disjoint batches (seed-004 §3.8, seed 000): a unit is charged one release however many.

    Parallel composition (seed-004 §2, PC): an invocation whose inputs do not contain the replaced
    record has the same law on both neighbours given the earlier outputs (its inputs are computed
    at a query point that is post-processing of them), so the run is (epsilon, delta)-DP, like one
    invocation. No credit for subsampling.
    """
    return ComposedAccountant(ParallelComposition(ApproxDpComposition(epsilon, delta, 0.0, route="basic")), "parallel")


def silo_ledger(noise_multiplier, sample_size, dataset_size, releases, delta, accountant: str = "rdp",
                parallel_composition: bool = False) -> Ledger:
    """A per-silo ledger of Gaussian releases (ISRL-DP: one ledger row per replica, a column per silo)."""
    priced = SampledGaussianAccountant(GaussianNoise(np.asarray(noise_multiplier, dtype=np.float64)), sample_size,
                                       dataset_size, releases, delta, accountant, parallel_composition)
    return Ledger(priced, priced.noise_multiplier.shape)


def central_gaussian_ledger(noise: ServerGaussianNoise, sample_size: int, num_units: int, delta: float,
                            unit: str, accountant: str = "rdp") -> Ledger:
    """The ledger of a trusted server's Gaussian rounds (``CentralGaussianAccountant``): ``noise``
    is the step its server half applies ((P,) multipliers), ``sample_size`` the K of the
    ``num_units`` units each round draws without replacement, ``delta`` the federation's."""
    priced = CentralGaussianAccountant(noise, int(sample_size), np.full(num_units, num_units, dtype=np.int64), 1,
                                       np.full(num_units, float(delta)), accountant)
    return Ledger(priced, priced.noise_multiplier.shape, unit)


def poisson_gaussian_ledger(noise: ServerGaussianNoise, sampling_probability: float, num_units: int, delta: float,
                            unit: str) -> Ledger:
    """The ledger of a trusted server's Gaussian rounds over Poisson-sampled units, add/remove one
    (``PoissonGaussianAccountant``): ``noise`` is the step its server half applies ((P,) multipliers)."""
    priced = PoissonGaussianAccountant(noise, float(sampling_probability), int(num_units), float(delta))
    return Ledger(priced, (np.asarray(noise.noise_multiplier).reshape(-1).shape[0], int(num_units)), unit)
