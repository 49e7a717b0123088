"""DP-FedAvg with clipped client deltas and Gaussian noise at a trusted server (McMahan et al. 2018).

Trust model: central DP. The server is trusted with the clients' clipped deltas and adds the noise
itself; what it releases (every round's model) is private.
Unit and neighbouring relation: a client (silo) and all its records; neighbours replace one
client's data (REPLACE_ONE), so the sum of deltas clipped to C moves by at most 2C in L2.
Round t: K of the N clients, uniformly without replacement (``participation=uniform``). Each runs
``local_steps`` full-batch gradient steps from the broadcast model w and sends its delta clipped
to C. The server releases S = sum of deltas + N(0, sigma^2 I), sigma = z 2C, and sets
w <- w + server_lr S / K (the server's step is ``fedray.privacy.mechanisms.ServerGaussianNoise``).
With ``participation=poisson`` (each client with probability q) the relation is add/remove one
client (ADD_OR_REMOVE_ONE; the sum moves by C, so sigma = z C) and the step divides by the expected
count q N, a public constant (McMahan et al.'s fixed-denominator estimator).
Calibration: z from dp-accounting's RDP accountant for num_rounds K-of-N subsampled Gaussian
releases (or Poisson-sampled ones) at (privacy.epsilon, privacy.delta) (``privacy.calibration=accountant``). The ledger
prices the event of that same step (the value the server half applies) and charges every client
every round (the sampling credit holds while each round's clients stay secret): each carries the
federation's epsilon.
Randomness: the server's noise comes from the SERVER stream of the round's keys (``RoundKeys``), which
the runtime hands to ``server_step``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Annotated, Any, ClassVar, NamedTuple

import numpy as np

from fedray.checks import number_in, positive
from fedray.core.planning import AlgorithmSettings, PlanContext, Positive, PrivacySettings, ProtocolRecipe, Stepped, settings_of
from fedray.core.protocol import RoundKeys
from fedray.core.sampling import PoissonParticipation, UniformParticipation
from fedray.core.terms import Accountant, Calibration, Relation, TrustModel
from fedray.data.federation import SiloArrays
from fedray.errors import ConfigError
from fedray.losses import loss_residual
from fedray.privacy.accounting import calibrate_noise_multiplier
from fedray.privacy.ledger import PoissonGaussianAccountant, central_gaussian_ledger, poisson_gaussian_ledger
from fedray.privacy.mechanisms import ServerGaussianNoise
from fedray.privacy.statement import PrivacyPlan
from fedray.protocols.user_level.planning import CuratorRoundsPlan
from fedray.rng import Stream

UNIT = "client (all records of one silo)"


class FedAvgState(NamedTuple):
    round: int
    params: np.ndarray           # (P, d, C)
    noisy_sum: np.ndarray        # (P, d, C) the last released sum of deltas (diagnostic for the test kit)


@dataclass(frozen=True, kw_only=True)
class FedAvgSettings(Stepped):
    """The ``algorithm`` section (its YAML); the planner checks each value before ``plan``."""

    local_steps: Annotated[int, Positive()]
    server_lr: Annotated[float, Positive()]
    l2_clip: Annotated[float, Positive()]


@dataclass(frozen=True)
class FedAvgRecipe(ProtocolRecipe):
    trust_models: tuple[TrustModel, ...] = (TrustModel.CENTRAL, TrustModel.NONE)
    settings: type[AlgorithmSettings] = FedAvgSettings
    privacy_keys: tuple[str, ...] = ()
    config_keys: tuple[str, ...] = ()

    def resolve(self, algorithm_class, config: dict, dataset, shape, loss, sampler, privacy: PrivacySettings,
                algorithm: AlgorithmSettings) -> dict:
        return config

    def plan(self, algorithm_class, config: dict, context: PlanContext) -> CuratorRoundsPlan:
        alg, priv, replicas = settings_of(FedAvgSettings, context.algorithm), context.privacy, context.replicas
        poisson = isinstance(context.sampler, PoissonParticipation)
        if not (poisson or isinstance(context.sampler, UniformParticipation)):
            raise ConfigError("participation", type(context.sampler).__name__, "uniform or poisson for dp_fedavg")
        clip, steps, server_lr = alg.l2_clip, alg.local_steps, alg.server_lr
        clients, rounds = context.shape.num_silos, context.num_rounds
        q = float(context.sampler.probability) if poisson else None
        k = q * clients if q is not None else int(context.sampler.silos_per_round)
        cells, relation, sensitivity = (replicas.count, clients), Relation.ADD_REMOVE if poisson else Relation.REPLACE_ONE, (1 if poisson else 2) * clip
        make = partial(algorithm_class, context.loss, replicas.step_sizes, steps, server_lr, clip, k,
                       num_rounds=rounds)
        resolved = {"l2_clip": clip, "clients_per_round": k}

        def planned(noise: ServerGaussianNoise, privacy: PrivacyPlan) -> CuratorRoundsPlan:
            """CuratorSampledRounds from 0 over the silos' records; the server's step reports each round."""
            return CuratorRoundsPlan(make(noise=noise), context.sampler, context.loss, context.shape, replicas, rounds,
                                     privacy, resolved, {"l2_clip": clip, "noise_std": float(noise.noise_std.max())},
                                     server_step_metrics=noise if privacy.private else None)

        if not priv.private:
            privacy = PrivacyPlan(TrustModel.NONE, Calibration.NONE, Accountant.NONE, UNIT, relation, np.zeros(clients), np.zeros(cells), None, None)
            return planned(ServerGaussianNoise(np.zeros(replicas.count), 0.0), privacy)
        if priv.calibration != Calibration.ACCOUNTANT:
            raise ConfigError("privacy.calibration", priv.calibration, "accountant for dp_fedavg")
        delta = number_in("privacy.delta", priv.delta, 0.0, 1.0, "a number in (0, 1)")
        epsilon = positive("privacy.epsilon", priv.epsilon)
        if q is None:
            z = calibrate_noise_multiplier(epsilon, delta, int(k), clients, 1, rounds, Accountant.RDP)
        else:
            z = _poisson_calibration(epsilon, delta, q, rounds)
        noise = ServerGaussianNoise(np.full(replicas.count, z), sensitivity)       # what the server adds and the ledger prices
        ledger = (central_gaussian_ledger(noise, int(k), clients, delta, "client", Accountant.RDP) if q is None
                  else poisson_gaussian_ledger(noise, q, clients, delta, "client"))
        resolved.update(noise_multiplier=z, noise_std=z * sensitivity)
        privacy = PrivacyPlan(TrustModel.CENTRAL, Calibration.ACCOUNTANT, Accountant.RDP, UNIT, relation, np.full(clients, delta),
                              np.full(cells, z), np.full(cells, epsilon), ledger)
        return planned(noise, privacy)


@lru_cache(maxsize=64)          # a pure function of its arguments, seconds each: planned once per process
def _poisson_calibration(epsilon: float, delta: float, q: float, rounds: int) -> float:
    """z at which dp-accounting's RDP accountant (add/remove one) prices the Poisson ledger's own
    event of ``rounds`` rounds at (epsilon, delta)."""
    import dp_accounting
    from dp_accounting import mechanism_calibration

    def event(z: float):
        return PoissonGaussianAccountant(ServerGaussianNoise(np.array([z]), 1.0), q, 1, delta).event(0, 0, rounds)

    def accountant():
        return dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    return float(mechanism_calibration.calibrate_dp_mechanism(accountant, event, epsilon, delta,
                                                              mechanism_calibration.LowerEndpointAndGuess(1e-2, 1.0)))


@dataclass(frozen=True)
class DpFedAvg:
    """The two halves (module docstring); ``noise`` the server's step, std (P,) z times the sum's sensitivity."""

    loss: Any
    step_size: np.ndarray        # (P,) client learning rate
    local_steps: int
    server_lr: float
    l2_clip: float
    expected_clients: float      # K, or q N under Poisson sampling: the step's public denominator
    noise: ServerGaussianNoise   # zero multipliers: no privacy
    num_rounds: int

    recipe: ClassVar[FedAvgRecipe] = FedAvgRecipe()

    def init(self, params0: np.ndarray, keys: RoundKeys) -> FedAvgState:
        return FedAvgState(0, params0.copy(), np.zeros_like(params0))

    def broadcast(self, state: FedAvgState) -> np.ndarray:
        return state.params

    def silo_step(self, params: np.ndarray, silos: SiloArrays, draws, participation: np.ndarray) -> np.ndarray:
        """(P, S, d, C): each sampled client's delta after local steps, clipped to C (zero elsewhere)."""
        weights = (np.arange(silos.x.shape[1])[None, :] < silos.sizes[:, None]) / silos.sizes[:, None]   # (S, n)
        local = np.broadcast_to(params[:, None], participation.shape + params.shape[1:]).copy()         # (P, S, d, C)
        for _ in range(self.local_steps):
            residual = loss_residual(self.loss, np.einsum("snd,psdc->psnc", silos.x, local), silos.y[None],
                                     silos.x_norms[None]) * weights[None, :, :, None]
            local -= self.step_size[:, None, None, None] * np.einsum("snd,psnc->psdc", silos.x, residual)
        delta = local - params[:, None]
        norms = np.sqrt((delta ** 2).sum(axis=(2, 3)))
        factor = np.where(participation, np.minimum(1.0, self.l2_clip / np.maximum(norms, 1e-300)), 0.0)
        return delta * factor[..., None, None]

    def charge(self, state: FedAvgState, participation: np.ndarray) -> np.ndarray:
        return participation            # the rounds accountant charges every client of a round with any

    def server_step(self, state: FedAvgState, values: np.ndarray, mask: np.ndarray, keys: RoundKeys) -> FedAvgState:
        total = np.einsum("ps,ps...->p...", mask.astype(np.float64), values)
        noisy, _ = self.noise.apply(total, keys.generators(Stream.SERVER))
        return FedAvgState(state.round + 1, state.params + self.server_lr * noisy / self.expected_clients, noisy)

    def metrics(self, state: FedAvgState) -> dict:
        return {}

    def done(self, state: FedAvgState) -> np.ndarray:
        return np.full(state.params.shape[0], state.round >= self.num_rounds)

    def output(self, state: FedAvgState) -> dict[str, np.ndarray]:
        return {"last": state.params}
