"""Seed 003's baseline B3 (spec §4): item-level DP-SGD made user-level by group privacy.

Trust model: central (a trusted server). Unit: a user (m items); relation: replace one user's
items. Round t: the server draws B of the N m items uniformly without replacement (the MINIBATCH
stream of round t's keys, drawn with the state that round starts from: at ``init`` or at the end of
round t - 1's server step; the sample stays with it), every user sums the gradients of its
sampled items, each clipped to ``l2_clip`` (C), and the server averages them (replace-one-item
sensitivity 2 C / B), adds N(0, sigma^2 I), sigma = z 2 C / B (``ServerGaussianNoise``: sum
sensitivity 2 C, divisor B), and steps w <- Pi_W(w - eta g); the output is the average iterate.

Calibration: z for T rounds of the B-of-N m subsampled Gaussian (sampled without replacement,
replace-one; dp-accounting's Poisson event needs add/remove neighbours, which is why the batch has
a fixed size) at the item level (eps / m, delta / (m e^eps)), priced by fedray's replace-one PLD
accountant (``fedray.privacy.accounting``). The spec names dp-accounting's RDP: with its orders
(up to 1024) the conversion cannot reach item budgets eps / m <= 1/30 at delta / (m e) (at m = 30,
B = 1,000 of 3e5 items, 200 rounds, its calibration returns z ~ 8e5 where the PLD's is 5.9), so it
would make B3 a strawman. Replacing a user replaces m items, a group of m: by group privacy for
approximate DP ((k eps0, k e^{(k-1) eps0} delta0) for k replacements, by induction over them) the
run is user-level (eps, delta e^{-eps/m}), within (eps, delta). The item budget eps / m shrinks as
m grows, so the error does not fall with m (the spec's "no sqrt(m) gain"). Every user is charged
every round (the subsampling credit is ex ante: the samples stay secret). The ledger prices the
event of the very step the server applies, per item (``CentralGaussianAccountant`` over the N m
items), times m (``GroupPrivacyAccountant``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, NamedTuple

import numpy as np

from fedray.checks import number_in
from fedray.core.evaluation import Metric
from fedray.core.planning import (
    AlgorithmSettings, CuratorRoundsPlan, PlanContext, Positive, ProtocolRecipe, Stepped, settings_of,
)
from fedray.core.protocol import RoundKeys
from fedray.core.sampling import AllUnits
from fedray.core.terms import Accountant, Calibration, Relation, TrustModel
from fedray.data.federation import SiloArrays
from fedray.errors import ConfigError
from fedray.evaluation import linear_models
from fedray.gradient_descent import GradientState, ProjectedGradient
from fedray.losses import clipped_weighted_gradients
from fedray.privacy.accounting import calibrate_noise_multiplier, participation_epsilon
from fedray.privacy.ledger import CentralGaussianAccountant, GroupPrivacyAccountant, Ledger
from fedray.privacy.mechanisms import ServerGaussianNoise
from fedray.privacy.statement import PrivacyPlan
from fedray.protocols.user_level.planning import USER, _levels, check_curator_rounds, not_private
from fedray.rng import Stream, generators



@dataclass(frozen=True, kw_only=True)
class ItemDpSgdSettings(Stepped):
    """B3's section: the clip C of each item's gradient, W's radius (None: R^d), B items a round."""

    l2_clip: Annotated[float, Positive()]
    radius: Annotated[float | None, Positive()] = None
    batch_size: Annotated[int, Positive()]


def item_level_budget(epsilon: float, delta: float, items: int) -> tuple[float, float]:
    """(eps0, delta0) per item whose group privacy over m items gives (eps, delta) per user."""
    return epsilon / items, delta / (items * math.exp(epsilon))


def user_level_epsilon(noise_multiplier: float, batch: int, population: int, items: int, item_delta: float,
                       rounds: int) -> float:
    """m times the item-level epsilon (at ``item_delta``) after ``rounds`` releases. Its delta is
    m e^{(m-1) eps_item} item_delta, within the plan's delta while eps_item <= eps / m, which the
    calibration makes hold up to the planned rounds (the ledger's delta is the plan's)."""
    return items * participation_epsilon(noise_multiplier, batch, population, 1, rounds, item_delta, Accountant.PLD)


@dataclass(frozen=True)
class ItemSampledGaussian(ProtocolRecipe):
    """B3's plan: every user every round (``participation=all``), B items a round (at most N m),
    the same m per user, z calibrated by the PLD accountant at the item-level budget
    (``privacy.calibration=accountant``), a ledger pricing user-level epsilon as m times the
    item-level epsilon of the server's step."""

    trust_models: tuple[TrustModel, ...] = (TrustModel.CENTRAL, TrustModel.NONE)
    settings: type[AlgorithmSettings] = ItemDpSgdSettings
    privacy_keys: tuple[str, ...] = ()
    config_keys: tuple[str, ...] = ()

    def plan(self, algorithm_class: type[Any], config: dict, context: PlanContext):
        alg, priv, shape, replicas = settings_of(ItemDpSgdSettings, context.algorithm), context.privacy, context.shape, \
            context.replicas
        name = alg.name
        m = check_curator_rounds(context, AllUnits, "every user (participation=all): the server samples items, not users")
        users, rounds = shape.num_silos, context.num_rounds
        population = users * m
        batch = alg.batch_size
        if batch > population:
            raise ConfigError("algorithm.batch_size", batch, f"at most the N m = {population} items")
        clip, radius = alg.l2_clip, alg.radius
        cells = (replicas.count, users)
        solver = ProjectedGradient(replicas.step_sizes, 0.0, radius)
        resolved = {"batch_size": batch, "l2_clip": clip, "items_per_user": m}

        def build(noise: ServerGaussianNoise):
            return algorithm_class(context.loss, solver, clip, noise, rounds, m, users, batch)

        if not priv.private:
            return CuratorRoundsPlan(build(ServerGaussianNoise(np.zeros(replicas.count), 0.0)), context.sampler,
                                     *linear_models(context.loss, shape, replicas.count), rounds, not_private(cells), resolved)
        if priv.calibration != Calibration.ACCOUNTANT:
            raise ConfigError("privacy.calibration", priv.calibration, f"accountant for {name} (the PLD "
                              "accountant's noise for the subsampled Gaussian)")
        delta = number_in("privacy.delta", priv.delta, 0.0, 1.0, "a number in (0, 1)")
        epsilon = float(_levels(priv, replicas)[0])
        item_epsilon, item_delta = item_level_budget(epsilon, delta, m)
        z = calibrate_noise_multiplier(item_epsilon, item_delta, batch, population, 1, rounds, Accountant.PLD)
        noise = ServerGaussianNoise(np.full(replicas.count, z), 2 * clip, divisor=batch)    # std z 2 C / B
        # A user's column prices B of the N m items drawn without replacement, at the item-level delta.
        per_item = CentralGaussianAccountant(noise, batch, np.full(users, population), 1, np.full(users, item_delta),
                                             Accountant.PLD)
        accountant = GroupPrivacyAccountant(per_item, m, delta, f"pld per item (B of N m, replace-one) x m "
                                                                f"(group privacy over {m} items)")
        noise_std = noise.noise_std
        resolved.update(noise_multiplier=z, noise_std=float(noise_std[0]), item_epsilon=item_epsilon,
                        item_delta=item_delta)
        privacy = PrivacyPlan(
            trust_model=TrustModel.CENTRAL, calibration=Calibration.ACCOUNTANT, accountant=Accountant.PLD, unit=USER, relation=Relation.REPLACE_ONE,
            delta=np.full(users, delta), noise_multiplier=np.full(cells, z),
            target_epsilon=np.full(cells, epsilon), ledger=Ledger(accountant, cells, "user"),
            details={"noise_multiplier": z, "item_epsilon": item_epsilon, "item_delta": item_delta},
            non_private_inputs=("the subsampling credit needs each round's items to stay secret (a simulation keys "
                                "them by the run seed)",))
        return CuratorRoundsPlan(build(noise), context.sampler, *linear_models(context.loss, shape, replicas.count), rounds, privacy,
                                 resolved, {"l2_clip": clip, "noise_std_max": float(noise_std.max())},
                                 server_step_metrics=noise)



class ItemSgdState(NamedTuple):
    round: int
    solver: GradientState
    gradients: np.ndarray        # (P,) item gradient evaluations so far (B per round)
    picked: np.ndarray           # (P, B) each replica's items of round ``round`` (global ids u m + j; none after the last)


@dataclass(frozen=True)
class ItemDpSgd:
    """B3 (module docstring); ``noise`` the server's Gaussian step, std (P,) = z 2 C / B."""

    loss: Any
    solver: ProjectedGradient
    l2_clip: float
    noise: ServerGaussianNoise
    num_rounds: int
    items: int                   # m (the same for every user)
    num_users: int
    batch_size: int              # B items per round

    recipe: ClassVar[ItemSampledGaussian] = ItemSampledGaussian()

    def init(self, params0: np.ndarray, keys: RoundKeys) -> ItemSgdState:
        return ItemSgdState(0, self.solver.init(params0), np.zeros(params0.shape[0], dtype=np.int64),
                            self.sample(keys.at(0)))

    def sample(self, keys: RoundKeys) -> np.ndarray:
        """(P, B) each replica's items of round ``keys.round`` (global ids u m + j), from the
        MINIBATCH stream of its row of the keys; (P, 0) after the last round (none is drawn)."""
        if keys.round >= self.num_rounds:
            return np.zeros((keys.streams.shape[0], 0), dtype=np.int64)
        return np.stack([rng.choice(self.num_users * self.items, self.batch_size, replace=False)
                         for rng in generators(keys.seed, Stream.MINIBATCH, keys.streams, keys.round)])

    def broadcast(self, state: ItemSgdState) -> tuple:
        return self.solver.broadcast(state.solver), state.picked

    def silo_step(self, broadcast: tuple, users: SiloArrays, draws, participation: np.ndarray) -> np.ndarray:
        """(P, U, d, C) each user's sum of its sampled items' clipped gradients."""
        query, picked = broadcast
        order = np.argsort(users.silo_ids)
        ids = users.silo_ids[order]
        out = np.zeros(participation.shape + query.shape[1:])
        for r in range(participation.shape[0]):
            owner, item = np.divmod(picked[r], self.items)
            at = np.minimum(np.searchsorted(ids, owner), ids.size - 1)
            mine = ids[at] == owner
            local = order[at[mine]]
            taken = np.unique(local)
            weights = np.zeros((users.x.shape[0], users.x.shape[1]))
            weights[local, item[mine]] = 1.0                   # without replacement: each item at most once
            out[r, taken] = clipped_weighted_gradients(self.loss, query[r:r + 1], users.x[taken], users.y[taken],
                                                       weights[None, taken], self.l2_clip, users.x_norms[taken])[0]
        return out * participation[:, :, None, None]

    def charge(self, state: ItemSgdState, participation: np.ndarray) -> np.ndarray:
        return participation

    def server_step(self, state: ItemSgdState, values: np.ndarray, mask: np.ndarray, keys: RoundKeys) -> ItemSgdState:
        """The noisy mean step (SERVER stream of the round's ``keys``), then the next round's items."""
        p = values.shape[0]
        total = np.where(mask[..., None, None], values, 0.0).sum(axis=1)
        gradient, _ = self.noise.apply(total / self.batch_size, generators(keys.seed, Stream.SERVER, keys.streams,
                                                                             keys.round))
        moved = np.ones(p, dtype=np.int64)
        return ItemSgdState(state.round + 1, self.solver.step(state.solver, gradient, moved),
                            state.gradients + self.batch_size, self.sample(keys.at(state.round + 1)))

    def metrics(self, state: ItemSgdState) -> dict:
        return {"gradient_evaluations": Metric(state.gradients.astype(np.float64), True)}

    def done(self, state: ItemSgdState) -> np.ndarray:
        return np.full(state.solver.params.shape[0], state.round >= self.num_rounds)

    def output(self, state: ItemSgdState) -> dict[str, np.ndarray]:
        return {"avg": state.solver.params, "last": state.solver.iterate}
