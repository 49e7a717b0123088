"""Seed-001 Alg. 5: DP-SCO on the simplex by anytime online-to-batch with vertex sampling
(Thm 4.2, Prop. 4.3).

Problem: min over x in Delta_d of F(x) = E f(x; z) (a game with one task: ``LogisticTasks`` with
tasks = 1), convex, L0-Lipschitz and L1-smooth (optionally L2). Trust model, unit and relation as
Alg. 1: a trusted curator releases only vertex draws; one sample, replace one.

Step t = 1..T reads the disjoint batch [(t - 1) B, t B) (spec §3.5, with "t = 0 mod q" read as
t mod q == 0, spec §6 item 9):
    x^t = softmax(s);  w^t = ((t - 1) w^{t-1} + x^t) / t          (anytime online-to-batch)
    if t <= q or t mod q == 0: what = (1/K) sum_k e_{i_k}, i_k ~ P_{w^t}   (K released draws)
    g = (1/B) sum_{z in B_t} grad f(what; z);  s -= tau g          (the gradient at the sparsified average)
and the output is K fresh draws from P_{w^T}, averaged (released).

Guarantee: every iterate x^i is a softmax whose score moves by at most 2 tau L0 / B per
coordinate when a sample is replaced (given the released draws), so x^i_j / x'^i_j and therefore
the mixture w^t's ratios lie in [e^{-4 tau L0 / B}, e^{4 tau L0 / B}]: each draw is
(4 tau L0 / B)-DP (spec §3.5's argument, which fixes the proof's dropped normalisers), and the
k = K (q + floor(T / q)) draws compose by Cor. 3.6 within (eps, delta) for tau <= tau_priv.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np

from fedray.core.protocol import RoundKeys
from fedray.protocols.mirror_descent.planning import OnlineToBatch
from fedray.protocols.mirror_descent.simplex import draw_vertices, maurey, softmax
from fedray.rng import Stream


class OnlineToBatchState(NamedTuple):
    round: int                  # steps completed
    score: np.ndarray           # (P, d) s
    average: np.ndarray         # (P, d) w^t of the pending step t = round + 1 (diagnostic)
    query: np.ndarray           # (P, K) the vertices of what (released when drawn)
    drawn: bool                 # whether the last server step drew (refresh or output)
    output: np.ndarray          # (P, K) the output's draws (-1 until the last step)


@dataclass(frozen=True)
class OnlineToBatchSMD:
    """The two halves of Alg. 5 (module docstring)."""

    step_size: np.ndarray         # (P,) tau
    batch_size: int               # B
    num_steps: int                # T
    refresh: int                  # q
    draws: int                    # K
    rows: int                     # d

    recipe: ClassVar[OnlineToBatch] = OnlineToBatch()

    def refreshes(self, step: int) -> bool:
        """Whether 1-based step t = ``step`` + 1 draws a new sparsified average."""
        t = step + 1
        return t <= self.refresh or t % self.refresh == 0

    def releases(self, first: int, steps: int) -> np.ndarray:
        """Draws released for steps [first, first + steps): K per refresh, K more with the last step."""
        count = self.draws * sum(self.refreshes(t) for t in range(first, first + steps))
        if first + steps == self.num_steps:
            count += self.draws
        return np.full(self.step_size.shape[0], count, dtype=np.int64)

    def _draw(self, average: np.ndarray, counter: int, keys: RoundKeys) -> np.ndarray:
        """(P, K) vertices from ``average``, uniforms from the VERTEX stream of ``keys`` at ``counter``."""
        uniforms = np.stack([stream.uniforms(counter, self.draws) for stream in keys.counters(Stream.VERTEX)])
        return draw_vertices(average, uniforms)

    def init(self, params0: np.ndarray, keys: RoundKeys) -> OnlineToBatchState:
        p = params0.shape[0]
        score = np.zeros((p, self.rows))
        average = softmax(score)                                    # w^1 = x^1
        return OnlineToBatchState(0, score, average, self._draw(average, 0, keys), True, np.full((p, self.draws), -1))

    def broadcast(self, state: OnlineToBatchState) -> np.ndarray:
        return state.query

    def silo_step(self, query: np.ndarray, samples, draws) -> np.ndarray:
        """(P, d) the sum over ``samples`` of grad f at the sparsified average."""
        grad_x, _ = samples.gradient_sums(maurey(query, self.rows), np.ones((query.shape[0], 1)))
        return grad_x

    def server_step(self, state: OnlineToBatchState, summed: np.ndarray, keys: RoundKeys) -> OnlineToBatchState:
        score = state.score - self.step_size[:, None] * summed / self.batch_size
        done = state.round + 1
        if done == self.num_steps:           # the output: K fresh draws from P_{w^T} (counter T, after the steps')
            return state._replace(round=done, score=score, drawn=True, output=self._draw(state.average, done, keys))
        t = done + 1                          # the next step, 1-based
        average = ((t - 1) * state.average + softmax(score)) / t
        refresh = self.refreshes(done)
        query = self._draw(average, done, keys) if refresh else state.query
        return state._replace(round=done, score=score, average=average, query=query, drawn=refresh)

    def released(self, state: OnlineToBatchState) -> np.ndarray:
        """(P, K) the draws the step that led to ``state`` released (the output's at the end), -1 if none."""
        if state.round == self.num_steps:
            return state.output
        return state.query if state.drawn else np.full(state.query.shape, -1)

    def output(self, state: OnlineToBatchState) -> dict[str, np.ndarray]:
        """The released output (the average of the K output draws; until the end, of the current query)
        and the diagnostic w^t, each packed with the one-task y = 1: (P, d + 1)."""
        drawn = state.output if state.round == self.num_steps else state.query
        ones = np.ones((drawn.shape[0], 1))
        return {"output": np.concatenate([maurey(drawn, self.rows), ones], axis=1),
                "average": np.concatenate([state.average, ones], axis=1)}
