"""DP-FedAvg with clipped client deltas and Gaussian noise at a trusted server (McMahan et al. 2018).

Trust model: central DP. The server is trusted with the clients' clipped deltas and adds the noise
itself; what it releases (every round's model) is private.
Unit and neighbouring relation: a client (silo) and all its records; neighbours replace one
client's data (REPLACE_ONE), so the sum of deltas clipped to C moves by at most 2C in L2.
Round t: K of the N clients, uniformly without replacement (``participation=uniform``). Each runs
``local_steps`` full-batch gradient steps from the broadcast model w and sends its delta clipped
to C. The server releases S = sum of deltas + N(0, sigma^2 I), sigma = z 2C, and sets
w <- w + server_lr S / K (the clip is ``fedray.privacy.mechanisms.UnitClip``, the server's step
``ServerGaussianNoise``, both planned by ``fedray.privacy.central_rounds.server_gaussian_rounds``).
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
from typing import Annotated, Any, ClassVar, NamedTuple

import numpy as np

from fedray.core.planning import AlgorithmSettings, CuratorRoundsPlan, PlanContext, Positive, ProtocolRecipe, Stepped, settings_of
from fedray.core.protocol import RoundKeys
from fedray.core.terms import TrustModel
from fedray.data.federation import SiloArrays
from fedray.evaluation import linear_models
from fedray.losses import loss_residual
from fedray.privacy.central_rounds import server_gaussian_rounds
from fedray.privacy.mechanisms import ServerGaussianNoise, UnitClip
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

    def plan(self, algorithm_class, config: dict, context: PlanContext) -> CuratorRoundsPlan:
        alg, replicas = settings_of(FedAvgSettings, context.algorithm), context.replicas
        clip = UnitClip(alg.l2_clip)
        # the server's Gaussian on the sum of clipped deltas: calibrated, priced, stated (uniform or poisson)
        rounds = server_gaussian_rounds(context.privacy, context.sampler, clip, context.shape.num_silos,
                                        context.num_rounds, replicas.count, UNIT, "dp_fedavg")
        algorithm = algorithm_class(context.loss, replicas.step_sizes, alg.local_steps, alg.server_lr, clip,
                                    rounds.expected_units, rounds.noise, context.num_rounds)
        resolved = {"l2_clip": alg.l2_clip, "clients_per_round": rounds.expected_units, **rounds.resolved}
        return CuratorRoundsPlan(algorithm, context.sampler, *linear_models(context.loss, context.shape, replicas.count),
                                 context.num_rounds, rounds.privacy, resolved,
                                 {"l2_clip": alg.l2_clip, "noise_std": float(rounds.noise.noise_std.max())},
                                 server_step_metrics=rounds.noise if rounds.privacy.private else None)


@dataclass(frozen=True)
class DpFedAvg:
    """The two halves (module docstring); ``noise`` the server's step, std (P,) z times the sum's sensitivity."""

    loss: Any
    step_size: np.ndarray        # (P,) client learning rate
    local_steps: int
    server_lr: float
    clip: UnitClip               # each client's delta to l2 norm C
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
        return self.clip.apply(local - params[:, None], participation)[0]

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
