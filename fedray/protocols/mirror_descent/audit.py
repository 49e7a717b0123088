"""The replay audit of seed 001's vertex sampling (spec §5 E6, §7 test 8): the exact privacy loss
of every released draw on a pair of neighbouring datasets.

Run Alg. 1 on S and, in replay mode, on S' (one sample replaced by an adversarial payoff): S'
follows S's released draws, so both runs evaluate their batches at the same points, and the two
score vectors after each step give the exact log-likelihood ratio of the next draws,
max_j |ln softmax(s)_j - ln softmax(s')_j|. The privacy argument (Prop. 3.3) bounds the score
difference by 2 tau L0 / B per coordinate and each draw's loss by 4 tau L0 / B; the realised
losses, composed as Thm 3.5's quantity sqrt(2 ln(1/delta) sum eps_m^2) + sum eps_m^2 / 2, must
stay within the run's epsilon (with ``privacy.calibration=tight``: the realised spreads of the
score change, each draw's bounded range, composed in zCDP). Deterministic (no sampling of outcomes): it checks the sensitivity
analysis on this pair, not the guarantee over all pairs.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy.special import logsumexp

from fedray.core.protocol import RoundKeys
from fedray.privacy.composition import zcdp_epsilon
from fedray.protocols.mirror_descent.bias_reduction import normaliser


class ReplayAudit(NamedTuple):
    score_gap: np.ndarray         # (T, P) max_j |s(S) - s(S')| over both players after each step
    draw_loss: np.ndarray         # (T, P) exact privacy loss of a draw after each step (the larger player's)
    score_bound: np.ndarray       # (P,) 2 tau L0 / B
    draw_bound: np.ndarray        # (P,) 4 tau L0 / B
    composed: np.ndarray          # (P,) Thm 3.5's quantity of the realised per-draw losses
    draws: int                    # draws composed per replica
    draw_spread: np.ndarray       # (T, P) max_j (s - s')_j - min_j (s - s')_j: a draw's bounded range
    composed_range: np.ndarray    # (P,) epsilon of the realised spreads composed in zCDP (sum spread^2 / 8)


def _spread(score: np.ndarray, other: np.ndarray) -> np.ndarray:
    """(P,) max_j (score - other)_j - min_j (score - other)_j: how far the draw from softmax(score)
    is bounded-range against softmax(other) (the normalisers cancel in the definition)."""
    change = score - other
    return change.max(axis=1) - change.min(axis=1)


def _log_ratio(score: np.ndarray, other: np.ndarray) -> np.ndarray:
    """(P,) max_j |ln softmax(score)_j - ln softmax(other)_j|."""
    shift = logsumexp(score, axis=1) - logsumexp(other, axis=1)
    return np.abs(score - other - shift[:, None]).max(axis=1)


def replay_audit(algorithm, keys: RoundKeys, samples, neighbour, lipschitz: float, delta: float) -> ReplayAudit:
    """Alg. 1 (``PrivateSMD``) on ``samples`` and, replaying its draws, on ``neighbour`` (the same
    samples with one replaced, ``GameSamples.replace``); step t draws from ``keys.at(t)``."""
    state = algorithm.init(np.zeros((algorithm.step_size.shape[0], 1)), keys.at(0))
    other_x, other_y = state.score_x, state.score_y
    batch = algorithm.batch_size
    gaps, losses, spreads = [], [], []
    for t in range(algorithm.num_steps):
        query = algorithm.broadcast(state)
        part = slice(t * batch, (t + 1) * batch)
        mine = algorithm.silo_step(query, samples.select(part), None)
        theirs = algorithm.silo_step(query, neighbour.select(part), None)
        state = algorithm.server_step(state, mine, keys.at(t))
        other_x, other_y = algorithm.scores_after(other_x, other_y, theirs)
        gaps.append(np.maximum(np.abs(state.score_x - other_x).max(axis=1),
                                    np.abs(state.score_y - other_y).max(axis=1)))
        losses.append(np.maximum(_log_ratio(state.score_x, other_x), _log_ratio(state.score_y, other_y)))
        spreads.append(np.maximum(_spread(state.score_x, other_x), _spread(state.score_y, other_y)))
    score_gap, draw_loss, spread = np.array(gaps), np.array(losses), np.array(spreads)
    per_step = algorithm.releases_per_step
    # Draws after the last step are never made; step 0's draws are at the uniform start (loss 0).
    squared = per_step * (draw_loss[:-1] ** 2).sum(axis=0)
    composed = np.sqrt(2 * math.log(1 / delta) * squared) + squared / 2
    rho = per_step * (spread[:-1] ** 2).sum(axis=0) / 8
    composed_range = np.array([zcdp_epsilon(float(r), delta) for r in rho])
    bound = algorithm.step_size * lipschitz / batch
    return ReplayAudit(score_gap, draw_loss, 2 * bound, 4 * bound, composed, per_step * algorithm.num_steps, spread,
                       composed_range)


def replay_bias_reduced(algorithm, keys: RoundKeys, samples, neighbour,
                        lipschitz: float) -> tuple[np.ndarray, np.ndarray]:
    """Alg. 3 (``BiasReducedSMD``) on ``samples`` and, replaying its draws (step t's from
    ``keys.at(t)``), on ``neighbour``:
    ((steps, P) the largest score gap after each step, (steps, P) the bound of spec §6 item 3,
    tau (4 C_M 2^{N_t} + 2) L0 / b_t; 0 and 0 for a replica that has stopped)."""
    state = algorithm.init(np.zeros((algorithm.step_size.shape[0], 1)), keys.at(0))
    other_x, other_y = state.score_x, state.score_y
    n = samples.ids.size
    gaps, bounds = [], []
    while not np.all(algorithm.done(state)):
        step = keys.at(state.round)
        participation = algorithm.sampler.sample(step.seed, step.repetitions, state.round, n)
        query = algorithm.broadcast(state)
        mine = algorithm.silo_step(query, samples, None, participation)
        theirs = algorithm.silo_step(query, neighbour, None, participation)
        running, sizes, level = state.level >= 0, algorithm.batch_sizes(state, step), state.level
        other_x, other_y = algorithm.scores_after(state._replace(score_x=other_x, score_y=other_y), theirs, step)
        state = algorithm.server_step(state, mine, step)
        gaps.append(np.where(running, np.maximum(np.abs(state.score_x - other_x).max(axis=1),
                                                 np.abs(state.score_y - other_y).max(axis=1)), 0.0))
        bound = algorithm.step_size * (4 * normaliser(algorithm.levels) * 2.0 ** level + 2) * lipschitz
        bounds.append(np.where(running, bound / np.maximum(sizes, 1), 0.0))
    return np.array(gaps), np.array(bounds)


def replay_online_to_batch(algorithm, keys: RoundKeys, samples, neighbour,
                           lipschitz: float) -> tuple[np.ndarray, float]:
    """Alg. 5 (``OnlineToBatchSMD``) on ``samples`` and, replaying its draws (step t's from
    ``keys.at(t)``), on ``neighbour``:
    ((T, P) max_j |ln w^t_j - ln w'^t_j| of the running average every draw comes from, the bound
    4 tau L0 / B of spec §3.5's per-coordinate argument, for the largest step size)."""
    state = algorithm.init(np.zeros((algorithm.step_size.shape[0], 1)), keys.at(0))
    other = state
    batch, ratios = algorithm.batch_size, []
    for t in range(algorithm.num_steps - 1):
        part = slice(t * batch, (t + 1) * batch)
        query = algorithm.broadcast(state)
        mine = algorithm.silo_step(query, samples.select(part), None)
        theirs = algorithm.silo_step(query, neighbour.select(part), None)
        state = algorithm.server_step(state, mine, keys.at(t))
        # The neighbour's run: its own scores and averages, the released query replayed.
        other = algorithm.server_step(other, theirs, keys.at(t))._replace(query=state.query)
        ratios.append(np.abs(np.log(state.average) - np.log(other.average)).max(axis=1))
    return np.array(ratios), float(4 * algorithm.step_size.max() * lipschitz / batch)
