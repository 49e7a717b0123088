"""The privacy plan of sampled rounds at a trusted server that adds Gaussian noise to a sum.

Trust model: central DP. The server is trusted with the units' clipped messages (``UnitClip``),
sums those of the units taking part and adds N(0, sigma^2 I) itself (``ServerGaussianNoise``,
placed at the server); every round's noisy sum is released.
Unit and neighbouring relation: the unit whose message is clipped (a client and all its
records), by the sampling: K of the N units each round, uniformly without replacement
(``UniformParticipation``): replace one unit (REPLACE_ONE), the sum moves by 2C; each unit with
probability q (``PoissonParticipation``): add or remove one unit (ADD_OR_REMOVE_ONE), the sum
moves by C.
Guarantee: (privacy.epsilon, privacy.delta)-DP for every unit over ``num_rounds`` rounds, while
each round's participants stay secret (the sampling credit).
Calibration: ``accountant`` only: z from dp-accounting's RDP accountant for ``num_rounds``
K-of-N subsampled Gaussian releases (``calibrate_noise_multiplier``), or for the Poisson ledger's
own event of ``num_rounds`` Poisson-sampled releases under add/remove (``poisson_noise_multiplier``);
sigma = z times the sum's sensitivity. The ledger prices the event of that same step value.
Randomness: none here; the server half draws the noise from the round's keys.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from fedray.checks import number_in, positive
from fedray.core.planning import PrivacySettings
from fedray.core.sampling import PoissonParticipation, UniformParticipation
from fedray.core.terms import Accountant, Calibration, Relation, TrustModel
from fedray.errors import ConfigError
from fedray.privacy.accounting import calibrate_noise_multiplier
from fedray.privacy.ledger import PoissonGaussianAccountant, central_gaussian_ledger, poisson_gaussian_ledger
from fedray.privacy.mechanisms import ServerGaussianNoise, UnitClip
from fedray.privacy.statement import PrivacyPlan


class ServerGaussianRounds(NamedTuple):
    """What ``server_gaussian_rounds`` plans."""

    noise: ServerGaussianNoise     # the step the server half applies and the ledger prices ((P,) multipliers)
    privacy: PrivacyPlan
    expected_units: float          # K, or q N under Poisson sampling: the public number a step divides by
    resolved: dict                 # worth logging: noise_multiplier and noise_std when private


def server_gaussian_rounds(privacy: PrivacySettings, sampler: Any, clip: UnitClip, num_units: int, num_rounds: int,
                           num_replicas: int, unit: str, name: str) -> ServerGaussianRounds:
    """The noise and privacy plan of ``num_rounds`` rounds of ``sampler`` (module docstring) for a
    protocol called ``name`` whose units are described by ``unit``; raises ``ConfigError`` naming
    the participation, calibration, epsilon or delta a run cannot have."""
    poisson = isinstance(sampler, PoissonParticipation)
    if not (poisson or isinstance(sampler, UniformParticipation)):
        raise ConfigError("participation", type(sampler).__name__, f"uniform or poisson for {name}")
    relation = Relation.ADD_REMOVE if poisson else Relation.REPLACE_ONE
    expected = float(sampler.probability) * num_units if poisson else int(sampler.silos_per_round)
    cells = (num_replicas, num_units)
    if not privacy.private:
        plan = PrivacyPlan(TrustModel.NONE, Calibration.NONE, Accountant.NONE, unit, relation, np.zeros(num_units),
                           np.zeros(cells), None, None)
        return ServerGaussianRounds(ServerGaussianNoise(np.zeros(num_replicas), 0.0), plan, expected, {})
    if privacy.calibration != Calibration.ACCOUNTANT:
        raise ConfigError("privacy.calibration", privacy.calibration, f"accountant for {name}")
    delta = number_in("privacy.delta", privacy.delta, 0.0, 1.0, "a number in (0, 1)")
    epsilon = positive("privacy.epsilon", privacy.epsilon)
    sensitivity = clip.sum_sensitivity(relation)
    if poisson:
        z = poisson_noise_multiplier(epsilon, delta, float(sampler.probability), num_rounds)
    else:
        z = calibrate_noise_multiplier(epsilon, delta, int(expected), num_units, 1, num_rounds, Accountant.RDP)
    noise = ServerGaussianNoise(np.full(num_replicas, z), sensitivity)
    ledger = (poisson_gaussian_ledger(noise, float(sampler.probability), num_units, delta, unit) if poisson
              else central_gaussian_ledger(noise, int(expected), num_units, delta, unit, Accountant.RDP))
    plan = PrivacyPlan(TrustModel.CENTRAL, Calibration.ACCOUNTANT, Accountant.RDP, unit, relation,
                       np.full(num_units, delta), np.full(cells, z), np.full(cells, epsilon), ledger)
    return ServerGaussianRounds(noise, plan, expected, {"noise_multiplier": z, "noise_std": z * sensitivity})


@lru_cache(maxsize=64)          # a pure function of its arguments, seconds each: planned once per process
def poisson_noise_multiplier(epsilon: float, delta: float, sampling_probability: float, num_rounds: int) -> float:
    """z at which dp-accounting's RDP accountant (add/remove one) prices the Poisson ledger's own
    event of ``num_rounds`` rounds (``PoissonGaussianAccountant.event``) at (epsilon, delta): its
    calibration search, from the bracket [0.01, 1] upward."""
    import dp_accounting
    from dp_accounting import mechanism_calibration

    def event(z: float):
        return PoissonGaussianAccountant(ServerGaussianNoise(np.array([z]), 1.0), sampling_probability, 1,
                                         delta).event(0, 0, num_rounds)

    def accountant():
        return dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    return float(mechanism_calibration.calibrate_dp_mechanism(accountant, event, epsilon, delta,
                                                              mechanism_calibration.LowerEndpointAndGuess(1e-2, 1.0)))
