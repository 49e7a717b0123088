"""Seed-001 Alg. 1: private stochastic mirror descent with vertex sampling for saddle points on
simplices (DP-SSP in expectation, Prop. 3.3 and Thm 3.1).

Problem: min over x in Delta_dx, max over y in Delta_dy of F_D(x, y) = E f(x, y; z), convex-
concave, L0-Lipschitz in the l1 / l_inf pair. The data are n samples; step t reads the disjoint
batch of samples [t B, (t + 1) B) (a public order; the samples are iid), each sample once.

Trust model: central DP, a trusted curator. It computes un-noised gradient sums over its samples
and keeps its state (the scores s_x, s_y, the iterates x^t = softmax(s_x), y^t = softmax(s_y));
it RELEASES only vertex draws: per step, K draws from x^t and K from y^t (the query points
xhat, yhat at which the batch's gradients are taken) and one output draw from each, and at the
end the output (xtilde, ytilde) = the average of the T output draws. Unit and relation: one
sample, replace one (n and every batch size are public).

Guarantee: given the released draws, which fix every evaluation point, replacing one sample moves
one batch gradient by at most 2 L0 / B per coordinate, so each score moves by at most
2 tau L0 / B and each draw, an exponential mechanism, is (4 tau L0 / B)-DP (spec §2.2); the
2 T (K + 1) draws compose by Cor. 3.6 (pure-DP advanced composition), which tau <= tau_priv
keeps within (eps, delta) (``calibration.private_step_size``).

Step t (spec §3.1, with the y-update's sign corrected, §6 item 1):
    i_1..i_K ~ x^t, j_1..j_K ~ y^t; itil ~ x^t, jtil ~ y^t        (released)
    xhat = (1/K) sum e_{i_k}, yhat = (1/K) sum e_{j_k}
    g_x = (1/B) sum_{z in B_t} grad_x f(xhat, yhat; z),  g_y = -(1/B) sum grad_y f(...)
    s_x -= tau g_x,  s_y -= tau g_y                               (descent in x, ascent in y)
The draws of step t are made at the end of step t - 1's server step (step 0's at ``init``), from
the VERTEX stream of the keys each receives, at counter t (replica's row, step), so the query
points travel as the broadcast.

Diagnostic: the average of the iterates (xbar, ybar) (not released; its gap is reported as a
diagnostic, spec §3.7).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np

from fedray.core.protocol import RoundKeys
from fedray.protocols.mirror_descent.planning import VertexSampling
from fedray.protocols.mirror_descent.simplex import VertexDraws, maurey


class SmdState(NamedTuple):
    round: int                  # steps completed, t
    score_x: np.ndarray         # (P, dx) s_x: x^t = softmax(s_x)
    score_y: np.ndarray         # (P, dy)
    query_x: np.ndarray         # (P, K) vertices drawn at x^t for step t's gradient (released)
    query_y: np.ndarray         # (P, K)
    drawn_x: np.ndarray         # (P,) step t's output draw from x^t (released)
    drawn_y: np.ndarray         # (P,)
    output_x: np.ndarray        # (P, dx) counts of the output draws of steps < t... through t
    output_y: np.ndarray        # (P, dy)
    iterate_x: np.ndarray       # (P, dx) sum of x^s over the steps drawn so far (diagnostic)
    iterate_y: np.ndarray       # (P, dy)


@dataclass(frozen=True)
class PrivateSMD:
    """The two halves of Alg. 1 (module docstring) on a game's samples."""

    recipe: ClassVar[VertexSampling] = VertexSampling()

    step_size: np.ndarray         # (P,) tau
    batch_size: int               # B
    num_steps: int                # T
    rows: int                     # dx
    columns: int                  # dy
    vertices: VertexDraws

    @property
    def releases_per_step(self) -> int:
        """2 (K + 1) vertex draws per step (``calibration.draws_per_step``)."""
        return 2 * (self.vertices.draws + 1)

    def releases(self, first: int, steps: int) -> np.ndarray:
        """(P,) draws released for steps [first, first + steps)."""
        return np.full(self.step_size.shape[0], steps * self.releases_per_step, dtype=np.int64)

    def init(self, params0: np.ndarray, keys: RoundKeys) -> SmdState:
        p = params0.shape[0]
        zeros_x, zeros_y = np.zeros((p, self.rows)), np.zeros((p, self.columns))
        none, undrawn = np.zeros((p, 0), dtype=np.int64), np.full(p, -1, dtype=np.int64)    # no draw yet
        state = SmdState(0, zeros_x, zeros_y, none, none, undrawn, undrawn, zeros_x.astype(np.int64),
                         zeros_y.astype(np.int64), zeros_x, zeros_y)
        return self._drawn(state, keys)

    def _drawn(self, state: SmdState, keys: RoundKeys) -> SmdState:
        """Step ``state.round``'s draws at the current scores, recorded in the output counts; none
        after the last step (a draw there would be released and is not counted by Prop. 3.3)."""
        if state.round >= self.num_steps:
            return state
        qx, dx_, qy, dy_, x, y = self.vertices(state.score_x, state.score_y, state.round, keys)
        rows = np.arange(qx.shape[0])
        output_x, output_y = state.output_x.copy(), state.output_y.copy()
        output_x[rows, dx_] += 1
        output_y[rows, dy_] += 1
        return state._replace(query_x=qx, query_y=qy, drawn_x=dx_, drawn_y=dy_, output_x=output_x,
                              output_y=output_y, iterate_x=state.iterate_x + x, iterate_y=state.iterate_y + y)

    def broadcast(self, state: SmdState) -> tuple[np.ndarray, np.ndarray]:
        """The released query vertices of the current step: what the samples' holders evaluate at."""
        return state.query_x, state.query_y

    def silo_step(self, query: tuple, samples, draws) -> np.ndarray:
        """(P, dx + dy) the sums over ``samples`` of grad_x f and grad_y f at the Maurey points."""
        qx, qy = query
        grad_x, grad_y = samples.gradient_sums(maurey(qx, self.rows), maurey(qy, self.columns))
        return np.concatenate([grad_x, grad_y], axis=1)

    def scores_after(self, score_x: np.ndarray, score_y: np.ndarray, summed: np.ndarray) -> tuple:
        """s_x -= tau g_x and s_y -= tau g_y = s_y + tau (1/B) sum grad_y f (ascent for the max player)."""
        tau = self.step_size[:, None] / self.batch_size
        return score_x - tau * summed[:, :self.rows], score_y + tau * summed[:, self.rows:]

    def server_step(self, state: SmdState, summed: np.ndarray, keys: RoundKeys) -> SmdState:
        """The scores' step on the batch's sums, then the next step's draws (from ``keys``)."""
        score_x, score_y = self.scores_after(state.score_x, state.score_y, summed)
        return self._drawn(state._replace(round=state.round + 1, score_x=score_x, score_y=score_y), keys)

    def released(self, state: SmdState) -> np.ndarray:
        """(P, 2 K + 2) what the step that led to ``state`` released next: the query and output draws
        at the new iterate (none, -1, after the last step)."""
        if state.round >= self.num_steps:
            return np.full((state.score_x.shape[0], self.releases_per_step), -1, dtype=np.int64)
        return np.concatenate([state.query_x, state.drawn_x[:, None], state.query_y, state.drawn_y[:, None]], axis=1)

    def output(self, state: SmdState) -> dict[str, np.ndarray]:
        """The released output (xtilde, ytilde) and the diagnostic iterate average, each (P, dx + dy)."""
        drawn = max(min(state.round + 1, self.num_steps), 1)
        return {"output": np.concatenate([state.output_x, state.output_y], axis=1) / drawn,
                "iterate_average": np.concatenate([state.iterate_x, state.iterate_y], axis=1) / drawn}
