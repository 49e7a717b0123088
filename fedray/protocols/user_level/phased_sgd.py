"""Seed 002's Alg. 1: user-level DP phased SGD with outlier-iterate removal and output perturbation,
at a trusted server, as a driver-side program (``fedray.core.program``).

Trust model: central user-level DP (the server runs the groups' SGD chains on the users' records
and sees their iterates). Unit: a user (m items); relation: replace one user's items.

Phase i = 1..l reads its C N_i fresh users (``PhasedSubsets.members``), cut into C groups of N_i
users (consecutive places of the phase's permutation, ``PhasedSubsets.positions``: a uniform random
partition). Group j runs one pass of projected SGD at eta_i from x_{i-1} over its N_i m items and
returns its average iterate (1/T_i) sum_t y_t. A group visits its users one after another in id
order, each user's items in a random order (MINIBATCH stream, keyed by the replica, the phase and
the user): under the paper's i.i.d. model that is the distribution of a pooled random order, and
the chain can be relayed user to user (spec §2.6 and §5 item 15), so ``Oracle.fold`` carries all C
chains from actor to actor, each advancing them over the users it holds. The actors and the relay
are part of the trusted curator: a partial chain carries its earlier users' records unnoised, so a
relay through the users themselves would not be covered by central DP. The server then:

    s = ConcScore(iterates, tau_i);  halt if s + Lap(20 / eps) < 4 C / 5    (output: the public 0;
                                                      Lap(8 / eps) under profile derived)
    S, mean = OutlierFilter(iterates, 2 tau_i)      (nobody kept: x_{i-1})
    x_i = mean + N(0, sigma_i^2 I)                  (``PhaseGaussianNoise``, the step the ledger prices)

and the output is x_l (also reported projected onto X: free post-processing, spec §5 item 8).

Privacy (App. B, spec §2.1): given x_{i-1}, a phase is (eps, delta)-DP for each of its users: the
score's sensitivity is < 2, so the Laplace test is eps/10-DP; when the Laplace noise is below 2C/15
(probability >= 1 - delta / (10 e^eps) once C >= 150 ln(10 e^eps / delta) / eps) a pass means s >=
2C/3, and then Lemma B.2 couples the filtered means of neighbours within O(tau_i ln(1/zeta) / C),
which sigma_i covers at (eps/4, delta/n). Profile derived (``phased_parameters``) tests at Lap(8 /
eps) with a margin of C / 10 and calibrates sigma_i at (3 eps / 4, delta / 2). Phases read disjoint users, so the run is (eps,
delta)-DP by parallel composition: each user is charged once, per replica that reached its phase.
The argument is the paper's (with Lemma B.2's hidden constant): the plan names the conditions
that fail at the run's size. Released: x_l (the proof covers x_1..x_l), the halting phase, the
gradient count (a function of it). Diagnostic: the scores and how many groups the filter kept.
The group iterates never leave the program. Every server draw comes from the replica's own
stream keyed by the phase; the items' order comes from the run seed (an order, not a privacy draw).

Without privacy the same schedule runs with the plain mean of the C iterates (no test, filter or
noise): what the privacy steps cost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

import numpy as np

from fedray.core.evaluation import Metric
from fedray.core.program import ProgramRun
from fedray.core.protocol import RoundKeys
from fedray.data.federation import SiloArrays
from fedray.evaluation import LinearModelEvaluation
from fedray.geometry import project_l2_ball
from fedray.losses import loss_residual
from fedray.privacy.mechanisms import PhaseGaussianNoise
from fedray.privacy.outliers import concentration_score, outlier_filter
from fedray.protocols.user_level.phased_sgd_planning import PhasedSgdRecipe
from fedray.rng import SiloDraws, Stream

PASS_FRACTION = 0.8          # halt below 4 C / 5


class Chains(NamedTuple):
    """The C SGD chains of a phase, for the replicas still running, as they pass between actors."""

    point: np.ndarray        # (R, C, d, k) each chain's current iterate y_t
    total: np.ndarray        # (R, C, d, k) sum of y_1..y_t
    evaluations: int         # per-item gradients so far (each running replica's count)


def _project(points: np.ndarray, radius: float) -> np.ndarray:
    """Pi_X per (replica, chain) for X = B(0, radius); points (R, G, d, k). The norm is taken of the
    points scaled by their largest entry, so a huge finite point lands on the sphere, not at 0."""
    scale = np.abs(points).max(axis=(2, 3), keepdims=True)
    safe = np.where(scale > 0, scale, 1.0)
    norms = safe[:, :, 0, 0] * np.sqrt(((points / safe) ** 2).sum(axis=(2, 3)))
    factor = np.minimum(1.0, radius / np.maximum(norms, 1e-300))
    return points * factor[:, :, None, None]


def advance_chains(federation, unit_ids: np.ndarray, chains: Chains, loss, group_of: np.ndarray,
                   step: np.ndarray, radius: float, seed: int, streams: np.ndarray, phase: int) -> Chains:
    """One actor's leg of a phase (``Oracle.fold``): every chain takes one SGD step per item of
    each of its users held here, users in id order. ``group_of`` (N,) is each unit's group in this
    phase (-1: not in it); ``step`` (R,) eta_i and ``streams`` (R, k) of the running replicas."""
    local = group_of[unit_ids]
    taken = np.flatnonzero(local >= 0)
    if taken.size == 0:
        return chains
    users = SiloArrays.of(federation, unit_ids).select(taken)
    items = int(users.sizes[0])
    orders = SiloDraws(seed, streams, phase, users.silo_ids, width=users.x.shape[1]).without_replacement(
        users.sizes, items)                                                     # (R, U, m)
    groups = local[taken]
    by_group = np.argsort(groups, kind="stable")
    starts = np.searchsorted(groups[by_group], groups[by_group], side="left")
    rank = np.empty(taken.size, dtype=np.int64)
    rank[by_group] = np.arange(taken.size) - starts                             # place among its group's users here
    point, total = chains.point.copy(), chains.total.copy()     # arrays from the object store are read-only
    gradient_step = step[:, None, None, None]
    with np.errstate(all="ignore"):         # a user's overflowing records must not show in the logs
        _advance(point, total, users, orders, groups, rank, gradient_step, loss, radius)
    return Chains(point, total, chains.evaluations + taken.size * items)


def _advance(point, total, users, orders, groups, rank, gradient_step, loss, radius) -> None:
    """``advance_chains``' loop, in place: the users of rank r in their groups, one item at a time."""
    items = orders.shape[2]
    for r in range(int(rank.max()) + 1):
        users_now = np.flatnonzero(rank == r)                                   # at most one per group
        chain = groups[users_now]
        y, running_sum = point[:, chain], total[:, chain]
        x, labels, norms = users.x[users_now], users.y[users_now], users.x_norms[users_now]
        which = np.arange(users_now.size)[None, :]
        for t in range(items):
            item = orders[:, users_now, t]                                      # (R, G)
            features = x[which, item]                                           # (R, G, d)
            margins = np.matmul(features[:, :, None, :], y)[:, :, 0, :]         # (R, G, k)
            residual = loss_residual(loss, margins, labels[which, item], norms[which, item])
            y = _project(y - gradient_step * features[..., None] * residual[:, :, None, :], radius)
            running_sum = running_sum + y
        point[:, chain], total[:, chain] = y, running_sum


@dataclass(frozen=True)
class PhasedSgd:
    """Alg. 1 (module docstring); per-phase arrays are (P, l) (eta_i scales with each replica's
    step multiplier, and tau_i and sigma_i with eta_i)."""

    loss: Any
    groups: int                  # C
    group_users: tuple           # N_i
    step_sizes: np.ndarray       # (P, l) eta_i
    thresholds: np.ndarray       # (P, l) tau_i
    noise: PhaseGaussianNoise    # sigma_i (P, l) and the test's Lap(b), the steps the ledger prices (zeros without privacy):
                                 # b = 20 / eps as printed, 8 / eps in profile derived
    group_of: tuple              # (N,) per phase: each unit's group (-1: not in the phase)
    items: int                   # m
    radius: float                # X = B(0, radius)
    private: bool
    num_units: int
    model_shape: tuple           # (d, k)
    constants: dict = field(default_factory=dict)

    recipe: ClassVar[PhasedSgdRecipe] = PhasedSgdRecipe()

    def phase(self, oracle, x: np.ndarray, running: np.ndarray, phase: int, keys: RoundKeys) -> tuple[np.ndarray, int]:
        """(R, C, d, k) the average iterates of the phase's C groups for the running replicas, and
        each one's gradient evaluations (the chains' item orders keyed by ``keys``)."""
        start = np.broadcast_to(x[running][:, None], (int(running.sum()), self.groups) + self.model_shape)
        chains = Chains(start.copy(), np.zeros(start.shape), 0)
        chains = oracle.fold(advance_chains, chains, self.loss, self.group_of[phase],
                             self.step_sizes[running, phase], self.radius, keys.seed, keys.streams[running], phase)
        return chains.total / (self.group_users[phase] * self.items), chains.evaluations

    def curator(self, iterates: np.ndarray, previous: np.ndarray, replicas: np.ndarray, phase: int, keys: RoundKeys):
        """(halted (R,), released x_i (R, d, k), groups kept (R,), score (R,)) of one phase's test,
        filter and noise for the running ``replicas``, drawn from the SERVER stream of ``keys`` at
        round coordinate ``phase``."""
        r, c = iterates.shape[:2]
        points = iterates.reshape(r, c, -1)
        tau = self.thresholds[replicas, phase]
        rngs = [keys.at(phase).generator(Stream.SERVER, p) for p in replicas]
        score = concentration_score(points, tau)
        if self.noise.test is None:
            raise ValueError("a private PhasedSgd tests with the Laplace step its ledger prices (noise.test); got none")
        noisy, _ = self.noise.test.apply(score, rngs)          # the test's Laplace first from each generator
        halted = noisy < PASS_FRACTION * c
        uniforms = np.stack([rng.random(c) for rng in rngs])
        kept, mean = outlier_filter(points, 2 * tau, uniforms, previous.reshape(r, -1))
        released, _ = self.noise.at(phase, replicas).apply(mean, rngs)        # the same generators, continued
        return halted, released.reshape(previous.shape), kept.sum(axis=1), score

    def run(self, oracle, keys: RoundKeys) -> ProgramRun:
        p, phases = self.step_sizes.shape
        x = np.zeros((p,) + self.model_shape)          # x_0 = Pi_X(0)
        halted, reached = np.zeros(p, dtype=bool), np.zeros(p, dtype=np.int64)
        gradients, kept, score = np.zeros(p), np.full(p, np.nan), np.full(p, np.nan)
        charge = np.zeros((p, self.num_units), dtype=np.int64)
        std_min, std_max = np.full(p, np.inf), np.full(p, -np.inf)       # the Gaussian std each replica added
        for phase in range(phases):
            running = ~halted
            if not running.any():
                break
            replicas = np.flatnonzero(running)
            charge[np.ix_(replicas, self.group_of[phase] >= 0)] += 1     # phases are disjoint: at most 1
            iterates, evaluations = self.phase(oracle, x, running, phase, keys)
            gradients[replicas] += evaluations
            reached[replicas] = phase + 1
            if self.private:
                stop, x[replicas], kept[replicas], score[replicas] = self.curator(iterates, x[replicas], replicas, phase,
                                                                                  keys)
                halted[replicas] = stop
                std = np.asarray(self.noise.noise_std)[replicas, phase]
                std_min[replicas], std_max[replicas] = np.minimum(std_min[replicas], std), np.maximum(std_max[replicas], std)
            else:
                x[replicas], kept[replicas] = iterates.mean(axis=1), self.groups
        last = np.where(halted[:, None, None], 0.0, x)
        projected = project_l2_ball(last, self.radius)
        metrics = {"halted": Metric(halted.astype(np.float64), True),
                   "phases_run": Metric(reached.astype(np.float64), True),
                   "gradient_evaluations": Metric(gradients, True),
                   "kept_fraction": Metric(kept / self.groups, False),
                   "concentration_score": Metric(score / self.groups, False)}
        if self.private:            # released: the plan's sigma_i of the phases each replica ran (0: none)
            metrics["noise_std_added_min"] = Metric(np.where(reached > 0, std_min, 0.0), True)
            metrics["noise_std_added_max"] = Metric(np.where(reached > 0, std_max, 0.0), True)
        return ProgramRun({"last": last, "projected": projected}, charge, metrics)

    def evaluate(self, models: np.ndarray, federation) -> dict:
        return LinearModelEvaluation(self.loss).shard_parts(models, federation)

    def combine(self, parts: list[dict]) -> dict:
        return LinearModelEvaluation(self.loss).combine(parts, self.num_units)
