"""A baseline for seed 001's DP-SCO, not from the paper (spec §3.6): private Frank-Wolfe on the
empirical risk over the simplex, in the style of Talwar, Thakurta and Zhang (2015).

Trust model: central DP (a trusted curator); unit and relation: one sample, replace one. Round
t = 1..T: the curator computes the full-data gradient g = grad L_S(theta_t) (every sample, every
round), draws a vertex j with the exponential mechanism on the score -g_j, P[j] proportional to
exp(-eps0 g_j / (2 Delta)) with Delta = 2 L0 / n (replacing one sample moves each coordinate of
the mean gradient by at most 2 L0 / n), releases j and steps theta <- (1 - mu_t) theta + mu_t e_j,
mu_t = 2 / (t + 2). Each draw is eps0-DP; the T draws compose by Cor. 3.6 with eps0 =
eps / (2 sqrt(2 T ln(1/delta))); theta is post-processing of the draws. T = (n eps)^{2/3} by
default (rounded down).

The same run optimises one player of a game against a fixed opponent (Alg. 4's DP-SCO stand-in,
``boosting``): ``player="x"`` minimises F(., y), ``"y"`` maximises F(x, .) (FW on -F); every
coordinate of either gradient is at most L0, so the sensitivity is the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np

from fedray.core.protocol import RoundKeys
from fedray.protocols.mirror_descent.planning import FrankWolfeRecipe
from fedray.protocols.mirror_descent.simplex import draw_vertices
from fedray.rng import Stream


class FrankWolfeState(NamedTuple):
    round: int
    theta: np.ndarray           # (P, d)
    vertex: np.ndarray          # (P,) the last released vertex (-1 before the first)


@dataclass(frozen=True)
class PrivateFrankWolfe:
    """The two halves of DP Frank-Wolfe (module docstring) over a one-loss game's samples."""

    round_epsilon: float          # eps0 (inf: the exact argmin, non-private)
    num_samples: int              # n
    num_steps: int                # T
    rows: int                     # d
    lipschitz: float              # L0
    player: str = "x"                     # "x": min over the rows' simplex; "y": max over the columns'
    opponent: np.ndarray | None = None    # (P, d_other) the other player's fixed strategy; None: one loss

    recipe: ClassVar[FrankWolfeRecipe] = FrankWolfeRecipe()

    def init(self, params0: np.ndarray, keys: RoundKeys) -> FrankWolfeState:
        p = params0.shape[0]
        return FrankWolfeState(0, np.full((p, self.rows), 1.0 / self.rows), np.full(p, -1))

    def broadcast(self, state: FrankWolfeState) -> tuple[np.ndarray, np.ndarray]:
        opponent = np.ones((state.theta.shape[0], 1)) if self.opponent is None else self.opponent
        return state.theta, opponent

    def silo_step(self, point: tuple, samples, draws, participation: np.ndarray) -> np.ndarray:
        """(P, d) the sum over these samples of the gradient of the minimised objective at theta
        (every replica takes every sample)."""
        theta, opponent = point
        if self.player == "x":
            return samples.gradient_sums(theta, opponent)[0]
        return -samples.gradient_sums(opponent, theta)[1]

    def server_step(self, state: FrankWolfeState, summed: np.ndarray, keys: RoundKeys) -> FrankWolfeState:
        gradient = summed / self.num_samples
        if np.isinf(self.round_epsilon):
            vertex = np.argmin(gradient, axis=1)
        else:
            sensitivity = 2 * self.lipschitz / self.num_samples
            scores = -self.round_epsilon * gradient / (2 * sensitivity)
            weights = np.exp(scores - scores.max(axis=1, keepdims=True))
            uniforms = np.stack([stream.uniforms(state.round, 1) for stream in keys.counters(Stream.VERTEX)])
            vertex = draw_vertices(weights, uniforms)[:, 0]
        mu = 2.0 / (state.round + 3)                       # mu_t = 2 / (t + 2), t = round + 1
        theta = (1 - mu) * state.theta
        theta[np.arange(theta.shape[0]), vertex] += mu
        return FrankWolfeState(state.round + 1, theta, vertex)

    def releases(self, state: FrankWolfeState) -> np.ndarray:
        """(P,) one vertex per round."""
        return np.ones(state.theta.shape[0], dtype=np.int64)

    def done(self, state: FrankWolfeState) -> np.ndarray:
        return np.full(state.theta.shape[0], state.round >= self.num_steps)

    def output(self, state: FrankWolfeState) -> dict[str, np.ndarray]:
        return {"output": np.concatenate(self.broadcast(state), axis=1)}
