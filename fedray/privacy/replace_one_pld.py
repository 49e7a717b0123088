"""A PLD accountant for replace-one neighbours whose per-release pair can point either way.

Mechanism: a Gaussian release of a clipped mean whose replace-one sensitivity is 1 in units of the
noise std ``z`` (fedray's convention everywhere), optionally of a sample of ``K`` of the unit's
``n`` records drawn without replacement.

Why not dp-accounting's own PLD accountant
------------------------------------------
For one release, sampling without replacement under replace-one is dominated by the pair
A = q N(1, z^2) + (1 - q) N(0, z^2) against B = N(0, z^2), q = K / n (Zhu, Dong, Wang, AISTATS
2022), which is the pair dp-accounting builds for ``PoissonSampledDpEvent`` under add/remove. But
its accountant composes the "remove" curve (A, B) and the "add" curve (B, A) separately and reports
the worse of the two *after* composing. Under replace-one an adaptive analyst can point each round
either way (the gradient of the replaced record can be the large one in one round and the small one
in the next), so the rounds compose as mixtures of (A, B) and (B, A): the separate curves are
optimistic (3.00 reported where an explicit adversary reaches more, and 3.14 is the sound bound, for
z = 1.753, K = 182, n = 1238, 35 rounds, delta = 1/n^2).

What this accountant composes instead is, per release, the symmetrised profile
delta(eps) = max(delta_{A||B}(eps), delta_{B||A}(eps)): the hockey-stick curve of the tradeoff
function min(f, f^-1)** that dominates both directions (Zhu, Dong, Wang, Prop. on symmetrisation).
Its PLD is built by pessimistic connect-the-dots (Doroshenko et al. 2022) from the exact
per-direction curves (closed forms, checked against dp-accounting's) on a grid of step ``value_discretization_interval``: both curves are convex in
e^eps, so is their max, and the connect-the-dots PLD upper-bounds it between grid points. A PLD of a
symmetric profile composes soundly with the plain PLD convolution.

Full-batch releases (q = 1) are the plain Gaussian, whose pair is already symmetric.
"""

from __future__ import annotations

import math
from functools import lru_cache

import dp_accounting
import numpy as np
from dp_accounting.pld import pld_pmf, privacy_loss_distribution, privacy_loss_mechanism
from scipy.special import ndtr

_REPLACE_ONE = dp_accounting.NeighboringRelation.REPLACE_ONE
_Directions = privacy_loss_mechanism.AdjacencyType
DEFAULT_DISCRETIZATION = 1e-4


def sampled_gaussian_deltas(noise_multiplier: float, sampling_prob: float, epsilons: np.ndarray) -> np.ndarray:
    """(2, len(epsilons)) hockey-stick divergences delta_{A||B} and delta_{B||A} of one release.

    In units of the noise std the pair is A = q N(s, 1) + (1 - q) N(0, 1), B = N(0, 1), s = 1/z,
    with privacy loss L(x) = log(1 - q + q exp(s x - s^2/2)), increasing in x; each divergence is
    the mass beyond the point where L crosses eps. Closed forms, vectorised (dp-accounting's
    ``GaussianPrivacyLoss.get_delta_for_epsilon`` computes the same one epsilon at a time).
    """
    s, q = 1.0 / noise_multiplier, sampling_prob
    eps = np.asarray(epsilons, dtype=np.float64)
    e = np.exp(eps)
    with np.errstate(divide="ignore", invalid="ignore"):
        # A against B: L > eps beyond x1 (everywhere when e^eps <= 1 - q).
        x1 = (np.log((e - 1 + q) / q) + s * s / 2) / s
        forward = np.where(e > 1 - q, q * ndtr(s - x1) + (1 - q - e) * ndtr(-x1), -np.expm1(eps))
        # B against A: -L > eps below x2 (nowhere when e^-eps <= 1 - q).
        x2 = (np.log((np.exp(-eps) - 1 + q) / q) + s * s / 2) / s
        backward = np.where(np.exp(-eps) > 1 - q, (1 - e * (1 - q)) * ndtr(x2) - e * q * ndtr(x2 - s), 0.0)
    return np.clip(np.stack([forward, backward]), 0.0, 1.0)


def _connect_dots(noise_multiplier: float, sampling_prob: float, directions: tuple[bool, bool],
                  discretization: float) -> privacy_loss_distribution.PrivacyLossDistribution:
    """Pessimistic connect-the-dots PLD of the max of the chosen directions' delta curves."""
    bounds = [privacy_loss_mechanism.GaussianPrivacyLoss(
        noise_multiplier, sensitivity=1.0, sampling_prob=sampling_prob, adjacency_type=direction,
    ).connect_dots_bounds() for direction in (_Directions.REMOVE, _Directions.ADD)]
    lower = math.floor(min(b.epsilon_lower for b in bounds) / discretization)
    upper = math.ceil(max(b.epsilon_upper for b in bounds) / discretization)
    grid = np.arange(lower, upper + 1)
    deltas = sampled_gaussian_deltas(noise_multiplier, sampling_prob, grid * discretization)[list(directions)]
    return privacy_loss_distribution.PrivacyLossDistribution(
        pld_pmf.create_pmf_pessimistic_connect_dots(discretization, grid, deltas.max(axis=0)))


@lru_cache(maxsize=256)
def release_pld(noise_multiplier: float, sampling_prob: float = 1.0,
                discretization: float = DEFAULT_DISCRETIZATION) -> privacy_loss_distribution.PrivacyLossDistribution:
    """Symmetric PLD of one release dominating both directions of the replace-one pair."""
    if sampling_prob >= 1.0:
        return privacy_loss_distribution.from_gaussian_mechanism(
            noise_multiplier, sensitivity=1.0, value_discretization_interval=discretization)
    return _connect_dots(noise_multiplier, sampling_prob, (True, True), discretization)


def one_direction_pld(noise_multiplier: float, sampling_prob: float, remove: bool,
                      discretization: float = DEFAULT_DISCRETIZATION):
    """PLD of one direction only: (A, B) if ``remove`` else (B, A); what an analyst fixing it faces."""
    return _connect_dots(noise_multiplier, sampling_prob, (remove, not remove), discretization)


class ReplaceOnePLDAccountant(dp_accounting.PrivacyAccountant):
    """PLD accountant (REPLACE_ONE) of Gaussian releases, plain or sampled without replacement.

    Supported events: ``GaussianDpEvent(z)`` with z relative to the replace-one sensitivity,
    ``SampledWithoutReplacementDpEvent(n, K, GaussianDpEvent(z))``, and their self-compositions and
    compositions (plus no-op and non-private events).
    """

    def __init__(self, value_discretization_interval: float = DEFAULT_DISCRETIZATION):
        super().__init__(_REPLACE_ONE)
        self._discretization = value_discretization_interval
        self._pld = privacy_loss_distribution.identity(value_discretization_interval)
        self._non_private = False

    def _maybe_compose(self, event, count: int, do_compose: bool):
        if isinstance(event, dp_accounting.NoOpDpEvent):
            return None
        if isinstance(event, dp_accounting.NonPrivateDpEvent):
            self._non_private |= do_compose
            return None
        if isinstance(event, dp_accounting.SelfComposedDpEvent):
            return self._maybe_compose(event.event, event.count * count, do_compose)
        if isinstance(event, dp_accounting.ComposedDpEvent):
            for inner in event.events:
                error = self._maybe_compose(inner, count, do_compose)
                if error is not None:
                    return error
            return None
        sampling_prob, inner = 1.0, event
        if isinstance(event, dp_accounting.SampledWithoutReplacementDpEvent):
            sampling_prob = event.sample_size / event.source_dataset_size
            inner = event.event
        if not isinstance(inner, dp_accounting.GaussianDpEvent):
            return self.CompositionErrorDetails(
                invalid_event=event, error_message="only Gaussian releases, plain or sampled without replacement")
        if do_compose:
            if inner.noise_multiplier <= 0:
                self._non_private = True
            else:
                one = release_pld(float(inner.noise_multiplier), float(min(sampling_prob, 1.0)), self._discretization)
                self._pld = self._pld.compose(one.self_compose(count) if count > 1 else one)
        return None

    def get_epsilon(self, target_delta: float) -> float:
        return math.inf if self._non_private else float(self._pld.get_epsilon_for_delta(target_delta))

    def get_delta(self, target_epsilon: float) -> float:
        return 1.0 if self._non_private else float(self._pld.get_delta_for_epsilon(target_epsilon))
