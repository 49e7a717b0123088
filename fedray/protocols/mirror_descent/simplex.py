"""The entropic geometry of the simplex: scores, softmax iterates and vertex draws.

Entropic mirror descent from the uniform point unrolls to x^{t+1} = softmax(s^t) with the score
s^t = -tau sum_{r<=t} g^r (seed-001 §2.2), so the state is the score, kept in float64 and never
renormalised in low precision. A vertex draw from P_x (P[e_i] = x_i) is then the exponential
mechanism with P[i] proportional to exp(s_i): privacy comes from this sampling alone.

Draws are by inverse CDF on exp(s - max s) in float64, found in two levels (block sums, then one
block's cumulative sum), which is exactly P[i] = x_i up to rounding and costs one pass of exp and
one of sums; ``gumbel_vertices`` (argmax of s + Gumbel noise) is the same law, for cross-checks.
Floating-point side channels of the sampler are out of scope (seed-001 §6 item 17).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedray.core.protocol import RoundKeys
from fedray.rng import Stream

BLOCK = 64


def softmax(scores: np.ndarray) -> np.ndarray:
    """(..., d) probabilities of the scores, computed from s - max s."""
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return weights / weights.sum(axis=-1, keepdims=True)


def draw_vertices(weights: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """(P, m) vertices, row p drawn with P[i] = weights[p, i] / sum(weights[p]), one per uniform.

    ``weights`` (P, d) are nonnegative (exp(s - max s)), ``uniforms`` (P, m) in [0, 1); inverse CDF
    in two levels: the block of BLOCK coordinates holding each target, then the coordinate in it.
    """
    p, d = weights.shape
    padded = np.zeros((p, -(-d // BLOCK) * BLOCK))
    padded[:, :d] = weights
    blocks = padded.reshape(p, -1, BLOCK)
    block_cum = np.cumsum(blocks.sum(axis=2), axis=1)                          # (P, nb)
    targets = uniforms * block_cum[:, -1:]                                      # (P, m)
    chosen = np.minimum((block_cum[:, None, :] <= targets[:, :, None]).sum(axis=2), blocks.shape[1] - 1)
    before = np.where(chosen > 0, np.take_along_axis(block_cum, np.maximum(chosen - 1, 0), axis=1), 0.0)
    within = np.cumsum(blocks[np.arange(p)[:, None], chosen], axis=2)          # (P, m, BLOCK)
    offset = np.minimum((within <= (targets - before)[:, :, None]).sum(axis=2), BLOCK - 1)
    vertices = chosen * BLOCK + offset
    # Rounding may land a target on a zero weight (padding, or a coordinate whose exp underflowed):
    # take the nearest positive coordinate after it (or the last one).
    bad = padded[np.arange(p)[:, None], vertices] == 0
    for row, col in zip(*np.nonzero(bad)):
        positive = np.flatnonzero(weights[row] > 0)
        vertices[row, col] = positive[min(np.searchsorted(positive, vertices[row, col]), positive.size - 1)]
    return vertices


def gumbel_vertices(scores: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """(count,) vertices with P[i] proportional to exp(s_i), by Gumbel-max (report-noisy-max)."""
    return np.argmax(scores[None, :] + rng.gumbel(size=(count, scores.shape[0])), axis=1)


def maurey(vertices: np.ndarray, dim: int) -> np.ndarray:
    """(P, dim) the Maurey estimators (1/K) sum_k e_{i_k} of (P, K) vertex draws."""
    p, k = vertices.shape
    out = np.zeros((p, dim))
    np.add.at(out, (np.repeat(np.arange(p), k), vertices.reshape(-1)), 1.0 / k)
    return out


@dataclass(frozen=True)
class VertexDraws:
    """The curator's draws: K + 1 vertices per player and replica, from x = softmax(s) in float64
    (``draw_vertices``), with uniforms from the VERTEX stream of each replica (``keys.counters``) at
    counter = step: a step's draws are the same in any actor."""

    draws: int                    # K

    def __call__(self, score_x: np.ndarray, score_y: np.ndarray, step: int, keys: RoundKeys):
        """(query_x (P, K), drawn_x (P,), query_y, drawn_y, x (P, dx), y (P, dy))."""
        wx = np.exp(score_x - score_x.max(axis=1, keepdims=True))
        wy = np.exp(score_y - score_y.max(axis=1, keepdims=True))
        k = self.draws
        uniforms = np.stack([stream.uniforms(step, 2 * (k + 1)) for stream in keys.counters(Stream.VERTEX)])
        vx, vy = draw_vertices(wx, uniforms[:, :k + 1]), draw_vertices(wy, uniforms[:, k + 1:])
        x = wx / wx.sum(axis=1, keepdims=True)
        y = wy / wy.sum(axis=1, keepdims=True)
        return vx[:, :k], vx[:, k], vy[:, :k], vy[:, k], x, y
