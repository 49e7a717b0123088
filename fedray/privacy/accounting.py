"""Privacy accounting with dp-accounting: the event of one release, per-silo ledgers, calibration.

What is accounted (ISRL-DP silos)
---------------------------------
A noisy release is a clipped mean of ``sample_size`` records drawn uniformly WITHOUT replacement
from the silo's ``dataset_size`` records, plus Gaussian noise whose std over the replace-one
sensitivity is ``noise_multiplier``. A participation is ``releases`` such releases (1 for MB-SGD,
K single-record steps for Local SGD). Neighbours replace one record of one silo.

Two accountants, selected by ``privacy.accountant``:

``rdp``
    dp-accounting's own event for this sampling: ``SampledWithoutReplacementDpEvent`` under
    REPLACE_ONE (Renyi DP bound of Wang, Balle, Kasiviswanathan 2019, Thm 27). Conservative.
``pld``
    A privacy loss distribution (``fedray.privacy.replace_one_pld``). For sampling without
    replacement under replace-one the pair (q N(1, z^2) + (1 - q) N(0, z^2), N(0, z^2)),
    q = sample_size / dataset_size, dominates one release in one direction (Zhu, Dong, Wang,
    AISTATS 2022), and it is attained (a silo whose other records all equal the replaced one). An
    adaptive analyst can point each round either way, so what composes is the symmetrised profile
    (the max of the two directions per release), not each direction on its own (which is what
    dp-accounting's ``PoissonSampledDpEvent`` under add/remove would do, 3-5% optimistic).

Full-batch releases (sample_size = dataset_size) are the plain Gaussian in both accountants.
Answers (RDP curves, epsilons, calibrated multipliers) are kept on disk (``fedray.privacy.stored``).
Trust model ISRL-DP: one ledger per silo; a silo is charged only for the rounds it took part in
(silo sampling gives no credit, seed-004 §3.1). With ``parallel_composition`` (one-pass
algorithms, where each record enters exactly one release) a silo's spend is that of a single
un-subsampled release, however many it makes: the record is in one of the disjoint batches for
sure, so sampling gives no credit.
"""

from __future__ import annotations

import contextlib
import logging
from functools import lru_cache, wraps
from typing import TYPE_CHECKING

import numpy as np

from fedray.privacy import stored as _store
from fedray.privacy.stored import stored

# dp-accounting (a second of imports: scipy.signal, scipy.stats) is imported by the functions that
# use it: silo actors import this module through the protocols' planning code and never call them.
if TYPE_CHECKING:
    import dp_accounting

ACCOUNTANTS = ("rdp", "pld")
RDP_HORIZON = 64           # participations whose RDP epsilons are found (and stored) together
_BRACKET_STEPS = 40        # doublings / halvings of a calibration bracket (a factor 1e12) before giving up


@contextlib.contextmanager
def _quiet_absl():
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def make_accountant(kind: str):
    """A fresh accountant of the given kind for replace-one neighbours, reading a Gaussian's z
    against the replace-one distance (RDP of the Gaussian does not depend on the relation; the pld
    accountant is fedray's own, module docstring)."""
    import dp_accounting

    from fedray.privacy.replace_one_pld import ReplaceOnePLDAccountant

    if kind == "rdp":
        return dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    if kind == "pld":
        return ReplaceOnePLDAccountant()
    raise ValueError(f"accountant must be one of {ACCOUNTANTS}; got {kind!r}")


def release_event(noise_multiplier: float, sample_size: int, dataset_size: int) -> dp_accounting.DpEvent:
    """The dp-accounting event of one release (the same for both accountants)."""
    import dp_accounting

    if noise_multiplier <= 0:
        return dp_accounting.NonPrivateDpEvent()
    gaussian = dp_accounting.GaussianDpEvent(float(noise_multiplier))
    if sample_size >= dataset_size:
        return gaussian
    return dp_accounting.SampledWithoutReplacementDpEvent(int(dataset_size), int(sample_size), gaussian)


def participation_event(
    noise_multiplier: float, sample_size: int, dataset_size: int, releases: int, count: int
) -> dp_accounting.DpEvent:
    """``count`` participations of ``releases`` releases each, as one self-composed event."""
    import dp_accounting

    event = release_event(noise_multiplier, sample_size, dataset_size)
    total = int(releases) * int(count)
    return event if total == 1 else dp_accounting.SelfComposedDpEvent(event, total)


def epsilon_of(event: dp_accounting.DpEvent, delta: float, accountant: str) -> float:
    """epsilon at ``delta``; an event the accountant does not support is an error naming it."""
    acc = make_accountant(accountant)
    if not acc.supports(event):
        raise ValueError(f"the {accountant} accountant does not support the event {event}")
    acc.compose(event)
    return float(acc.get_epsilon(delta))


accountant_store = _store.accountant_store    # with accountant_store(False): compute every answer here


def _memo(maxsize: int):
    """An in-memory cache (``functools.lru_cache``) per store setting: an answer that may have been
    read from the store is never returned inside ``accountant_store(False)`` (a faithful run)."""

    def wrap(fn):
        caches = {True: lru_cache(maxsize=maxsize)(fn), False: lru_cache(maxsize=maxsize)(fn)}

        @wraps(fn)
        def cached(*args, **kwargs):
            return caches[_store.store_enabled()](*args, **kwargs)

        def cache_clear() -> None:
            for cache in caches.values():
                cache.cache_clear()

        cached.cache_clear = cache_clear     # type: ignore[attr-defined]
        cached.cache_info = lambda: caches[_store.store_enabled()].cache_info()   # type: ignore[attr-defined]
        return cached

    return wrap


@_memo(maxsize=4096)
@stored
def _rdp_curve(noise_multiplier: float, sample_size: int, dataset_size: int, releases: int) -> tuple:
    """RDP orders and values of one participation; c participations multiply the values by c."""
    acc = make_accountant("rdp")
    acc.compose(participation_event(noise_multiplier, sample_size, dataset_size, releases, 1))
    return acc.orders, acc.rdp


@_memo(maxsize=4096)
@stored
def _rdp_epsilons(noise_multiplier: float, sample_size: int, dataset_size: int, releases: int, horizon: int,
                  delta: float) -> tuple:
    """(horizon,) RDP epsilons at ``delta`` after 1, ..., ``horizon`` participations."""
    from dp_accounting.rdp import rdp_privacy_accountant

    orders, curve = _rdp_curve(noise_multiplier, sample_size, dataset_size, releases)
    return (np.array([rdp_privacy_accountant.compute_epsilon(orders, count * curve, delta)[0]
                      for count in range(1, horizon + 1)]),)


@stored
def _epsilon_after(
    noise_multiplier: float, sample_size: int, dataset_size: int, releases: int, count: int, delta: float, accountant: str
) -> float:
    return epsilon_of(participation_event(noise_multiplier, sample_size, dataset_size, releases, count), delta,
                      accountant)


@_memo(maxsize=65536)
def participation_epsilon(
    noise_multiplier: float, sample_size: int, dataset_size: int, releases: int, count: int, delta: float, accountant: str
) -> float:
    """epsilon at ``delta`` after ``count`` participations (cached: many silos share a key).

    RDP answers come in runs of counts 1..H (H = RDP_HORIZON or the next power of two above
    ``count``): a ledger asks for a new count every round, and one stored answer per run instead
    of one per round keeps a small federation's round off the store (a lookup costs about 1 ms).
    """
    if count == 0:
        return 0.0
    if noise_multiplier <= 0:
        return float("inf")
    if accountant == "rdp":
        horizon = max(RDP_HORIZON, 1 << (int(count) - 1).bit_length())
        epsilons, = _rdp_epsilons(float(noise_multiplier), int(sample_size), int(dataset_size), int(releases),
                                  horizon, float(delta))
        return float(epsilons[count - 1])
    return _epsilon_after(noise_multiplier, sample_size, dataset_size, releases, count, delta, accountant)


@stored
def calibrate_noise_multiplier(
    target_epsilon: float, delta: float, sample_size: int, dataset_size: int, releases: int,
    participations: int, accountant: str,
) -> float:
    """Smallest noise multiplier whose ``participations`` participations spend at most the target.

    dp-accounting's search (fresh accountant, event from a noise value); it returns a value on
    the private side of the target.
    """
    from dp_accounting import mechanism_calibration

    def event_of(z: float) -> dp_accounting.DpEvent:
        return participation_event(z, sample_size, dataset_size, releases, participations)

    if accountant == "rdp":
        bracket = mechanism_calibration.LowerEndpointAndGuess(1e-2, 1.0)
    else:
        # PLDs of very small noise are huge; bracket from above with the RDP of the same releases
        # without sampling (an upper bound on their PLD epsilon: sampling only lowers it, so the PLD
        # answer lies below; the full-batch Gaussian's RDP is closed form, the sampled one's is a
        # slow series), and from below by halving.
        def unsampled(z: float) -> dp_accounting.DpEvent:
            return participation_event(z, dataset_size, dataset_size, releases, participations)

        with _quiet_absl():  # the bracket search visits tiny noise where some RDP orders do not converge
            upper = float(mechanism_calibration.calibrate_dp_mechanism(
                lambda: make_accountant("rdp"), unsampled, target_epsilon, delta,
                bracket_interval=mechanism_calibration.LowerEndpointAndGuess(1e-2, 1.0), tol=1e-4))
        for _ in range(_BRACKET_STEPS):
            if epsilon_of(event_of(upper), delta, accountant) <= target_epsilon:
                break
            upper *= 2.0        # far out (eps ~ 50) the discretised PLD can sit above the RDP bound
        else:
            raise ValueError(f"no noise multiplier up to {upper:.3g} meets epsilon {target_epsilon} at delta {delta}")
        lower = 0.5 * upper
        for _ in range(_BRACKET_STEPS):
            if epsilon_of(event_of(lower), delta, accountant) > target_epsilon:
                break
            lower *= 0.5
        else:
            raise ValueError(f"noise multipliers down to {lower:.3g} all meet epsilon {target_epsilon} at delta {delta}")
        bracket = mechanism_calibration.ExplicitBracketInterval(lower, upper)
    return float(
        mechanism_calibration.calibrate_dp_mechanism(
            lambda: make_accountant(accountant), event_of, target_epsilon, delta,
            bracket_interval=bracket, tol=1e-4,
        )
    )
