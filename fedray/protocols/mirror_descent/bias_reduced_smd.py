"""Seed-001 Alg. 3: private stochastic mirror descent with bias-reduced vertex sampling (Thm 3.14,
constant probability), with Alg. 2's multilevel estimator at every step.

Trust model, unit and relation as Alg. 1 (``smd``): a trusted curator releases only vertex draws;
one sample, replace one. Step t (spec §3.3): level N_t ~ TG(1/2, M) and the next
b_t = ceil(max(1, 2^{N_t} / alpha)) samples (``fedray.core.sampling.LeveledBatches``: public,
data-independent), 2^{N_t + 1} vertex draws per player at the current iterates and one output
draw each (released), the batch's gradients at the three MLMC points (x+, y+), (x-, y-),
(xhat^1, yhat^1) (``bias_reduction``), the estimate g = C_M 2^N (Phi(+) - Phi(-)) + Phi(1), and
s_x -= tau g_x, s_y -= tau g_y (the y-update sign corrected, spec §6 item 1). Steps run while
sum 2^{N_s} <= U - 2^M; the output is the average of the executed steps' output draws (spec §6
item 5).

Guarantee (Prop. 3.17, with the re-derived sensitivity of spec §6 item 3): given the released
draws, one replaced sample moves every score by at most tau (4 C_M 2^N + 2) L0 / b_t <=
tau alpha L0 (4 C_M + 2^{1 - N}), so each draw is (c_v tau alpha L0)-DP with c_v = 20
(``safe``, at least ``calibration.vertex_constant(M)`` = 2 (4 C_M + 2) for every M; the paper's
9 is refused: it under-states every draw's epsilon about 2x); a run releases at most
sum_t 2 (2^{N_t + 1} + 1) <= 6 U draws, and U <= eps^2 / (48 ln(1/delta) (c_v tau alpha L0)^2) keeps their Cor. 3.6 composition within
(eps, delta). The ledger charges the realised draws of every step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np

from fedray.core.protocol import RoundKeys
from fedray.protocols.mirror_descent.bias_reduction import combine, level_points
from fedray.protocols.mirror_descent.planning import BiasReduced
from fedray.protocols.mirror_descent.simplex import draw_vertices
from fedray.rng import Stream


class BiasReducedState(NamedTuple):
    round: int
    score_x: np.ndarray         # (P, dx)
    score_y: np.ndarray         # (P, dy)
    level: np.ndarray           # (P,) N_t of the pending step, -1 once the replica has stopped
    points_x: np.ndarray        # (P, 3, dx) x+, x-, xhat^1 of the pending step
    points_y: np.ndarray        # (P, 3, dy)
    output_x: np.ndarray        # (P, dx) counts of the output draws so far
    output_y: np.ndarray
    steps: np.ndarray           # (P,) output draws so far (steps drawn)


@dataclass(frozen=True)
class BiasReducedSMD:
    """The two halves of Alg. 3 (module docstring) on a game's samples."""

    step_size: np.ndarray         # (P,) tau
    levels: int                   # M
    rows: int
    columns: int
    sampler: Any               # LeveledBatches (levels and batches of every repetition)
    num_rounds: int               # a cap on the steps (num_rounds; U's own rule stops first by default)

    recipe: ClassVar[BiasReduced] = BiasReduced()

    def init(self, params0: np.ndarray, keys: RoundKeys) -> BiasReducedState:
        p = params0.shape[0]
        zeros_x, zeros_y = np.zeros((p, self.rows)), np.zeros((p, self.columns))
        state = BiasReducedState(0, zeros_x, zeros_y, np.full(p, -1), np.zeros((p, 3, self.rows)),
                                 np.zeros((p, 3, self.columns)), zeros_x.astype(np.int64), zeros_y.astype(np.int64),
                                 np.zeros(p, dtype=np.int64))
        return self._drawn(state, keys)

    def _drawn(self, state: BiasReducedState, keys: RoundKeys) -> BiasReducedState:
        """The pending step's level (public: ``keys.seed`` and ``keys.repetitions``), MLMC points and
        output draw (the VERTEX stream of ``keys``, counter = step) for every replica still running."""
        # No draw for a step that will not run: it would be released (in the output) and not charged.
        level = self.sampler.levels_of(keys.seed, keys.repetitions, state.round) if state.round < self.num_rounds \
            else np.full(state.level.shape, -1)
        vertices = keys.counters(Stream.VERTEX)
        points_x, points_y = np.zeros_like(state.points_x), np.zeros_like(state.points_y)
        output_x, output_y, steps = state.output_x.copy(), state.output_y.copy(), state.steps.copy()
        for r in np.flatnonzero(level >= 0):
            count = 2 ** (int(level[r]) + 1)
            uniforms = vertices[r].uniforms(state.round, 2 * (count + 1))
            wx = np.exp(state.score_x[r] - state.score_x[r].max())[None]
            wy = np.exp(state.score_y[r] - state.score_y[r].max())[None]
            vx, vy = draw_vertices(wx, uniforms[None, :count + 1])[0], draw_vertices(wy, uniforms[None, count + 1:])[0]
            points_x[r], points_y[r] = level_points(vx[:count], int(level[r]), self.rows), \
                level_points(vy[:count], int(level[r]), self.columns)
            output_x[r, vx[count]] += 1
            output_y[r, vy[count]] += 1
            steps[r] += 1
        return state._replace(level=level, points_x=points_x, points_y=points_y, output_x=output_x,
                              output_y=output_y, steps=steps)

    def releases(self, state: BiasReducedState) -> np.ndarray:
        """(P,) draws the pending step released: 2 (2^{N+1} + 1), 0 once stopped."""
        return np.where(state.level >= 0, 2 * (2 ** (state.level + 1) + 1), 0)

    def done(self, state: BiasReducedState) -> np.ndarray:
        return state.level < 0

    def broadcast(self, state: BiasReducedState) -> tuple[np.ndarray, np.ndarray]:
        return state.points_x, state.points_y

    def silo_step(self, points: tuple, samples, draws, participation: np.ndarray) -> np.ndarray:
        """(P, 3 (dx + dy)): per replica, the sums over its units here of grad_x f and grad_y f at
        its three MLMC points."""
        px, py = points
        out = np.zeros((px.shape[0], 3 * (self.rows + self.columns)))
        for r in np.flatnonzero(participation.any(axis=1)):
            grad_x, grad_y = samples.select(np.flatnonzero(participation[r])).gradient_sums(px[r], py[r])
            out[r] = np.concatenate([grad_x.reshape(-1), grad_y.reshape(-1)])
        return out

    def batch_sizes(self, state: BiasReducedState, keys: RoundKeys) -> np.ndarray:
        """(P,) b_t of the pending step (0 once stopped): the public schedule of ``keys``' repetitions."""
        sizes = np.zeros(state.level.shape, dtype=np.int64)
        for r in np.flatnonzero(state.level >= 0):
            _, starts = self.sampler.schedule(keys.seed, int(keys.repetitions[r]))
            sizes[r] = starts[state.round + 1] - starts[state.round]
        return sizes

    def scores_after(self, state: BiasReducedState, summed: np.ndarray,
                     keys: RoundKeys) -> tuple[np.ndarray, np.ndarray]:
        """The scores after the pending step on the batch's sums at the three MLMC points:
        s_x -= tau g_x / b_t, s_y += tau (the MLMC combination of grad_y) / b_t."""
        score_x, score_y = state.score_x.copy(), state.score_y.copy()
        sizes = self.batch_sizes(state, keys)
        for r in np.flatnonzero(state.level >= 0):
            level = int(state.level[r])
            at_x = summed[r, :3 * self.rows].reshape(3, self.rows)
            at_y = summed[r, 3 * self.rows:].reshape(3, self.columns)
            score_x[r] -= self.step_size[r] * combine(at_x, level, self.levels) / sizes[r]
            score_y[r] += self.step_size[r] * combine(at_y, level, self.levels) / sizes[r]
        return score_x, score_y

    def server_step(self, state: BiasReducedState, summed: np.ndarray, keys: RoundKeys) -> BiasReducedState:
        score_x, score_y = self.scores_after(state, summed, keys)
        return self._drawn(state._replace(round=state.round + 1, score_x=score_x, score_y=score_y), keys)

    def output(self, state: BiasReducedState) -> dict[str, np.ndarray]:
        """The released output: the average of the executed steps' output draws (P, dx + dy)."""
        steps = np.maximum(state.steps, 1)[:, None]
        return {"output": np.concatenate([state.output_x, state.output_y], axis=1) / steps}
