"""Privacy steps as values: what they do to arrays and what they mean to an accountant.

Every step here but ``ServerGaussianNoise`` runs inside a silo actor (ISRL-DP: the silo trusts
nobody but itself); neighbouring relation: replace one record of one silo (seed-004 Definition 2,
REPLACE_ONE). ``ServerGaussianNoise`` is the same Gaussian step placed at a trusted server (central
DP), on the sum of the units' clipped messages, its unit and relation the plan's.
A step's ``event`` is what the ledger prices (``fedray.privacy.ledger.SampledGaussianAccountant``
wraps it in the silo's sampling and composes it per charge); ``event_data`` is the same event as
data, for pricing without importing dp-accounting (``fedray.privacy.event_data``).

Each step follows the mechanism contract (``fedray.core.mechanism``). Steps take pre-drawn standard
normals rather than a generator so that the runtime can draw them from per-(replica, silo, round)
streams and the step stays a pure function; the server's step takes the round's per-replica
generators (the server half draws from the round's keys, ``fedray.core.protocol.RoundKeys``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Callable, ClassVar

import numpy as np

from fedray.core.evaluation import Metric
from fedray.core.mechanism import Placement
from fedray.core.terms import Relation
from fedray.privacy import event_data

if TYPE_CHECKING:       # mechanisms run in silo actors, which never build events (see privacy.accounting)
    import dp_accounting


@dataclass(frozen=True)
class GaussianNoise:
    """Add N(0, noise_std^2 I) to each message, noise_std = noise_multiplier x sensitivity.

    ``noise_multiplier`` broadcasts against the leading (replica, unit) axes of the messages, so
    replicas and units may carry different noise levels (per-silo budgets, App. H).
    ``sensitivity`` is the replace-one l2 sensitivity of a message (2 l2_clip / K for a clipped
    mean of K records), so ``event`` is the Gaussian mechanism with that multiplier.
    """

    noise_multiplier: np.ndarray
    sensitivity: float | np.ndarray = 1.0        # or one per replica, (P, 1) (a clip grid)
    placement: ClassVar[Placement] = Placement.CLIENT
    draws_normals: ClassVar[bool] = True      # ``apply`` reads its standard normals

    @property
    def noise_std(self) -> np.ndarray:
        return np.asarray(self.noise_multiplier) * self.sensitivity

    def apply(self, x: np.ndarray, standard_normal: np.ndarray) -> tuple[np.ndarray, dict]:
        """``x`` (P, U, ...) plus the noise; metrics: ``noise_std`` (P, U), the std each cell added."""
        std = np.asarray(self.noise_std, dtype=np.float64)
        std = std.reshape(std.shape + (1,) * (x.ndim - std.ndim))
        return x + std * standard_normal, {"noise_std": np.broadcast_to(std.reshape(std.shape[:2]), x.shape[:2])}

    def round_metrics(self, participation: np.ndarray) -> dict[str, Metric]:
        """The round's report (``fedray.core.mechanism.ReportsMetrics``) for a (P, N) participation
        mask over all units: the least and largest noise std a participating unit added, per replica
        (0 where none took part). Released: functions of the plan's multipliers, the clip and who
        took part, all public (a charge the ledger records in the open)."""
        mask = np.asarray(participation, dtype=bool)
        std = np.broadcast_to(np.asarray(self.noise_std, dtype=np.float64).reshape(
            np.shape(self.noise_std) + (1,) * (2 - np.ndim(self.noise_std))), mask.shape)
        some = mask.any(axis=1)
        return {"noise_std_added_min": Metric(np.where(some, np.where(mask, std, np.inf).min(axis=1), 0.0), True),
                "noise_std_added_max": Metric(np.where(some, np.where(mask, std, -np.inf).max(axis=1), 0.0), True)}

    def select(self, silo_ids: np.ndarray) -> "GaussianNoise":
        """The step restricted to some units, when ``noise_multiplier`` is (P, N) over all units."""
        return GaussianNoise(np.asarray(self.noise_multiplier)[:, np.asarray(silo_ids)], self.sensitivity)

    def scaled(self, sensitivity: float | np.ndarray) -> "GaussianNoise":
        """The same step (the same multipliers, so the same events) for messages of ``sensitivity``:
        the ledger prices the plan's step before the clip is known, the silo applies this one."""
        return replace(self, sensitivity=sensitivity)

    def event_data(self, replica: int, unit: int) -> dict:
        """``event(replica, unit)`` as data (``fedray.privacy.event_data``), without dp-accounting."""
        return event_data.gaussian_step(self.noise_multiplier, replica, unit)

    def event(self, replica: int, unit: int) -> dp_accounting.DpEvent:
        from fedray.privacy.events import event_from_json     # imports dp-accounting (a second): only here

        return event_from_json(self.event_data(replica, unit))


@dataclass(frozen=True)
class ServerGaussianNoise(GaussianNoise):
    """Gaussian noise a trusted server adds to an aggregate of the units' messages (central DP).

    Trust model: the server (curator) sees the clipped messages and adds the noise itself; what it
    releases is private. Placement: ``SERVER``, applied in the protocol's server half.
    Unit and relation: the plan's (a user or a client; replace one, or add/remove one);
    ``sensitivity`` is the l2 sensitivity of the SUM of the clipped messages under that relation
    (2 L replace-one, L add/remove, for messages clipped to L) and ``divisor`` what the sum is
    divided by before the release (K for a mean of K, 1 for the sum), so the released value gets
    noise std ``noise_multiplier x sensitivity / divisor`` and one application is the Gaussian
    mechanism with ``noise_multiplier`` (``event``, as ``GaussianNoise``'s).
    Calibration: the plan's (the multiplier is the accountant's or the paper's).
    Randomness: ``apply`` takes one generator per replica (the server's stream of the round's keys,
    ``RoundKeys.generator``) and draws that replica's standard normals in the aggregate's shape.

    ``noise_multiplier`` is (P,), one per replica (a replica's noise is the same for every unit).
    """

    divisor: float = 1.0
    placement: ClassVar[Placement] = Placement.SERVER
    draws_normals: ClassVar[bool] = False     # draws from the generators it is given

    @property
    def noise_std(self) -> np.ndarray:
        """(P,) the std added to each replica's released value."""
        return np.asarray(self.noise_multiplier) * self.sensitivity / self.divisor

    def apply(self, x: np.ndarray, generators) -> tuple[np.ndarray, dict]:   # type: ignore[override]
        """``x`` (P, ...) plus each replica's noise, drawn from its generator; metrics: ``noise_std`` (P,)."""
        std = np.asarray(self.noise_std, dtype=np.float64)
        if std.shape != (x.shape[0],):
            raise ValueError(f"ServerGaussianNoise needs one noise multiplier per replica, {x.shape[0]}; "
                             f"got shape {std.shape}")
        normals = np.stack([g.standard_normal(x.shape[1:]) for g in generators])
        return x + std.reshape(std.shape + (1,) * (x.ndim - 1)) * normals, {"noise_std": std}

    def round_metrics(self, participation: np.ndarray) -> dict[str, Metric]:
        """The std the server added to each replica's release this round, (P,), as the silo step's
        ``noise_std_added_min``/``_max`` (equal here: one std per replica), whoever took part (the
        server adds its noise to an empty sum too). Released: the plan's multipliers and clip."""
        std = np.broadcast_to(np.asarray(self.noise_std, dtype=np.float64), (np.shape(participation)[0],))
        return {"noise_std_added_min": Metric(std.copy(), True), "noise_std_added_max": Metric(std.copy(), True)}

    def select(self, silo_ids: np.ndarray) -> "ServerGaussianNoise":
        return self          # one multiplier per replica: the same for every unit


@dataclass(frozen=True)
class CalibratedGaussianNoise:
    """Gaussian noise whose std a calibration formula set for a target (epsilon, delta), added by
    a trusted server to one release of stated l2 sensitivity (central DP).

    Trust model: the server (curator) computes the exact value and adds the noise itself; what it
    releases is private. Placement: ``SERVER``, applied in the protocol's server half.
    Unit and relation: the plan's (replace one sample, one user, ...); ``sensitivity`` is the l2
    sensitivity of the value the noise is added to under that relation.
    Calibration: ``calibration(epsilon, delta, sensitivity) -> std`` is the formula that set
    ``noise_std`` (``fedray.privacy.gaussian.analytic_sigma``, or a paper's), decreasing in
    epsilon. ``guarantee`` is what the ledger prices: ``(epsilon, delta)`` when the formula at the
    target asks for no more than ``noise_std`` (the same bits: a std computed by the formula
    prices exactly the target), else the smallest epsilon at ``delta`` the formula certifies for
    the std actually added (bisection), so less noise prices more. ``event`` names one
    application as dp-accounting's Gaussian event of multiplier ``noise_std / sensitivity``.
    Randomness: ``apply`` takes the standard normals the server drew for it (from the round's
    keys), (P, ...) in the value's shape, so the same draws give the same bits.
    """

    noise_std: float | np.ndarray      # or (P,), one per replica (a grid of budgets)
    sensitivity: float
    epsilon: float | np.ndarray        # the target the formula calibrated noise_std for (or (P,))
    delta: float
    calibration: Callable[[float, float, float], float]
    placement: ClassVar[Placement] = Placement.SERVER
    draws_normals: ClassVar[bool] = True      # ``apply`` reads its standard normals

    @property
    def noise_multiplier(self) -> float | np.ndarray:
        """``noise_std / sensitivity`` (a float, or (P,) with per-replica stds)."""
        if np.ndim(self.noise_std) == 0:
            return float(self.noise_std) / float(self.sensitivity)
        return np.asarray(self.noise_std, dtype=np.float64) / float(self.sensitivity)

    def _stds(self, replicas: int) -> np.ndarray:
        return np.broadcast_to(np.asarray(self.noise_std, dtype=np.float64), (replicas,)).copy()

    def apply(self, x: np.ndarray, standard_normal: np.ndarray | None) -> tuple[np.ndarray, dict]:
        """``x`` (P, ...) plus each replica's ``noise_std`` times the normals; metrics: ``noise_std`` (P,)."""
        if standard_normal is None or np.shape(standard_normal) != np.shape(x):
            raise ValueError(f"CalibratedGaussianNoise needs standard normals of the value's shape {np.shape(x)}; "
                             f"got {None if standard_normal is None else np.shape(standard_normal)}")
        scale = self.noise_std if np.ndim(self.noise_std) == 0 else \
            np.asarray(self.noise_std, dtype=np.float64).reshape((-1,) + (1,) * (x.ndim - 1))
        return x + scale * standard_normal, {"noise_std": self._stds(x.shape[0])}

    def round_metrics(self, participation: np.ndarray) -> dict[str, Metric]:
        """The std added to each replica's release, (P,), as ``noise_std_added_min``/``_max``
        (equal: one std). Released: a function of the plan's target and sensitivity, public."""
        std = self._stds(np.shape(participation)[0])
        return {"noise_std_added_min": Metric(std, True), "noise_std_added_max": Metric(std.copy(), True)}

    def select(self, silo_ids: np.ndarray) -> "CalibratedGaussianNoise":
        return self

    def guarantee(self) -> tuple[float | np.ndarray, float]:
        """(epsilon, delta) of one application, as the calibration formula certifies it (class
        docstring): a float, or (P, 1) per replica when the std or the target is per replica."""
        if np.ndim(self.noise_std) == 0 and np.ndim(self.epsilon) == 0:
            return _certified_epsilon(self.calibration, float(self.noise_std), float(self.sensitivity),
                                      float(self.epsilon), float(self.delta)), float(self.delta)
        stds, targets = np.broadcast_arrays(np.asarray(self.noise_std, dtype=np.float64),
                                            np.asarray(self.epsilon, dtype=np.float64))
        epsilons = [_certified_epsilon(self.calibration, float(s), float(self.sensitivity), float(e), float(self.delta))
                    for s, e in zip(stds, targets)]
        return np.array(epsilons)[:, None], float(self.delta)

    def event_data(self, replica: int, unit: int) -> dict:
        return event_data.gaussian_step(self.noise_multiplier, replica, unit)

    def event(self, replica: int, unit: int) -> dp_accounting.DpEvent:
        from fedray.privacy.events import event_from_json     # imports dp-accounting (a second): only here

        return event_from_json(self.event_data(replica, unit))


@dataclass(frozen=True)
class PhaseLaplaceTest:
    """The Laplace noise a trusted server adds to a phase's test statistic before comparing it with
    a threshold (seed 002's Alg. 1: s = ConcScore(iterates, tau_i), halt if s + Lap(b) < 4 C / 5,
    b = 20 / eps as printed, 8 / eps in profile derived).

    Trust model: the server (curator) computes the score and adds the noise itself (central DP);
    placement ``SERVER``. Unit and relation: the plan's (a user; replace one user's items): the
    score's sensitivity is below 2 (App. B), so the test is 2 / b-DP (eps / 10 at b = 20 / eps).
    Calibration: the paper's (or the profile's) ``required_scale``; ``scale`` is the b added. It
    names no dp-accounting event: it is one part of the phase's theorem, priced with the phase's
    Gaussian (``PhaseGaussianNoise.test``), which certifies nothing unless ``scale`` is at least
    ``required_scale``. Randomness: ``apply`` draws one Laplace per replica from that replica's
    generator (the phase's SERVER stream), first: the filter's uniforms and the Gaussian continue it.
    """

    scale: float
    required_scale: float
    placement: ClassVar[Placement] = Placement.SERVER

    def apply(self, x: np.ndarray, generators) -> tuple[np.ndarray, dict]:
        """``x`` (R,), one score per running replica, plus Lap(scale) drawn from its generator."""
        return x + np.array([g.laplace(0.0, self.scale) for g in generators]), {"laplace_scale": self.scale}


@dataclass(frozen=True)
class PhaseGaussianNoise:
    """The Gaussian part of a trusted server's per-phase mechanism whose guarantee is a theorem's
    (seed 002's Alg. 1: a Laplace test, an outlier filter, then N(0, sigma_i^2 I) on the filtered
    mean; seed 003's DelOutputPert: a TDLap deletion budget, a stable set, then the Gaussian, one
    column), for a run of phases x replicas.

    Trust model: the server (curator) sees the groups' iterates and adds the noise itself (central
    DP). Unit and relation: the plan's (a user; replace one user's items). ``noise_std`` (P, l) is
    the std added to replica p's release of phase i; ``required_std`` (P, l) what the theorem's
    formula asks at the plan's target (epsilon, delta) for that phase (the layout's sigma_i), the
    theorem's other parts (the test's scale, the groups) held as the protocol runs them.
    Calibration: the paper's (or the profile's). ``guarantee`` is what the ledger prices: per
    replica, (epsilon, delta) when its noise is at least the required std in every phase (more
    Gaussian noise is post-processing), else no claim (epsilon inf: the theorem covers no smaller
    std). It names no dp-accounting event: the per-phase claim is the theorem's.
    Randomness: ``at(phase, replicas)`` is the phase's step, a ``ServerGaussianNoise`` whose
    multiplier is the std on a unit sensitivity; its ``apply`` continues each replica's generator
    (after the test's Laplace and the filter's uniforms).
    ``test``: the phase's Laplace test where the theorem has one (Alg. 1's ``PhaseLaplaceTest``),
    priced with the Gaussian: the claim needs both at their required scale. None: no test to price.
    """

    noise_std: np.ndarray
    required_std: np.ndarray
    epsilon: float | np.ndarray        # the theorem's target, or (P,) one per replica (a grid of budgets)
    delta: float
    test: PhaseLaplaceTest | None = None
    placement: ClassVar[Placement] = Placement.SERVER

    def at(self, phase: int, replicas: np.ndarray) -> ServerGaussianNoise:
        """The step of phase ``phase`` for the running ``replicas``: std ``noise_std[replicas, phase]``."""
        return ServerGaussianNoise(np.asarray(self.noise_std, dtype=np.float64)[replicas, phase], 1.0)

    def guarantee(self) -> tuple[np.ndarray, float]:
        """((P, 1) epsilon per replica, delta) of one phase (class docstring)."""
        covered = np.all(np.asarray(self.noise_std) >= np.asarray(self.required_std), axis=1)
        covered &= self.test is None or self.test.scale >= self.test.required_scale
        target = np.broadcast_to(np.asarray(self.epsilon, dtype=np.float64), covered.shape)
        return np.where(covered, target, np.inf)[:, None], float(self.delta)


@lru_cache(maxsize=256)
def _certified_epsilon(calibration: Callable, noise_std: float, sensitivity: float, epsilon: float,
                       delta: float) -> float:
    """The target ``epsilon`` if ``calibration`` asks for at most ``noise_std`` there, else the
    smallest epsilon (within a relative 1e-12, rounded up) at which it does; inf if none does."""
    def needs(eps: float) -> float:
        try:
            return calibration(eps, delta, sensitivity)
        except ValueError:          # outside the formula's range (the classic Gaussian past 1): no claim
            return math.inf

    if noise_std <= 0:
        return math.inf
    if needs(epsilon) <= noise_std:
        return epsilon
    low, high = epsilon, 2.0 * epsilon
    while needs(high) > noise_std:
        low, high = high, 2.0 * high
        if high > 1e12:
            return math.inf
    while high - low > 1e-12 * high:            # needs(low) > noise_std >= needs(high)
        mid = 0.5 * (low + high)
        low, high = (low, mid) if needs(mid) <= noise_std else (mid, high)
    return high


@dataclass(frozen=True)
class NoNoise:
    """The non-private step with the same interface (non-private baselines)."""

    placement: ClassVar[Placement] = Placement.CLIENT
    draws_normals: ClassVar[bool] = False     # nothing to draw: a baseline's noise stream stays unread

    def apply(self, x: np.ndarray, standard_normal: np.ndarray | None = None) -> tuple[np.ndarray, dict]:
        return x, {"noise_std": np.zeros(x.shape[:2])}

    def round_metrics(self, participation: np.ndarray) -> dict[str, Metric]:
        """Nothing to report: a baseline adds no noise (its rounds log no noise metric)."""
        return {}

    def select(self, silo_ids: np.ndarray) -> "NoNoise":
        return self

    def event_data(self, replica: int, unit: int) -> dict:
        return event_data.non_private()

    def event(self, replica: int, unit: int) -> dp_accounting.DpEvent:
        from fedray.privacy.events import event_from_json     # imports dp-accounting (a second): only here

        return event_from_json(self.event_data(replica, unit))


@dataclass(frozen=True)
class PerExampleClip:
    """Scale each example's gradient to l2 norm at most ``l2_clip`` before averaging K of them.

    Sensitivity of the clipped mean of a fixed number K of records: replace one record and the
    mean moves by at most 2 l2_clip / K (REPLACE_ONE, ISRL-DP); add or remove one and, with the
    divisor K fixed, by l2_clip / K (ADD_OR_REMOVE_ONE). The clipping itself is fused into the
    batched gradient (``fedray.losses.clipped_weighted_gradients``), which needs per-example
    residuals, so it always runs before any averaging.
    """

    l2_clip: float

    def sensitivity(self, records: int, relation: Relation = Relation.REPLACE_ONE) -> float:
        if relation == Relation.REPLACE_ONE:
            return 2.0 * self.l2_clip / records
        if relation == Relation.ADD_REMOVE:
            return self.l2_clip / records
        raise ValueError(f"relation must be one of {tuple(Relation)}; got {relation!r}")


@dataclass(frozen=True)
class UnitClip:
    """Scale each unit's whole message (a client's model delta, a user's mean gradient) to l2 norm
    at most ``l2_clip``, before a trusted server sums the messages and adds its noise.

    Placement: ``CLIENT`` (each unit clips its own message in its actor). Unit and relation: the
    plan's unit is the unit whose message this is (a client and all its records). Sensitivity of
    the SUM of the clipped messages of the units taking part: replace one unit's data and the sum
    moves by at most 2 l2_clip (REPLACE_ONE); add or remove one unit (Poisson sampling) and by
    l2_clip (ADD_OR_REMOVE_ONE). A zero message stays zero (no division by its norm).
    """

    l2_clip: float
    placement: ClassVar[Placement] = Placement.CLIENT

    def sum_sensitivity(self, relation: Relation) -> float:
        """The l2 sensitivity of the sum of the clipped messages under ``relation`` (class docstring)."""
        if relation == Relation.REPLACE_ONE:
            return 2.0 * self.l2_clip
        if relation == Relation.ADD_REMOVE:
            return 1.0 * self.l2_clip
        raise ValueError(f"relation must be one of {tuple(Relation)}; got {relation!r}")

    def apply(self, x: np.ndarray, participation: np.ndarray) -> tuple[np.ndarray, dict]:
        """``x`` (P, U, ...) with each (replica, unit) message clipped, and zero where
        ``participation`` (P, U) is False; metrics: ``fraction_clipped`` (P,), over the taking part."""
        norms = np.sqrt((x ** 2).sum(axis=tuple(range(2, x.ndim))))
        factor = np.where(participation, np.minimum(1.0, self.l2_clip / np.maximum(norms, 1e-300)), 0.0)
        clipped = participation & (norms > self.l2_clip)
        fraction = clipped.sum(axis=1) / np.maximum(participation.sum(axis=1), 1)
        return x * factor.reshape(factor.shape + (1,) * (x.ndim - 2)), {"fraction_clipped": fraction}
