"""The concentration score and the randomised outlier filter of user-level DP SCO (seed-002 spec
§2.0, after Asi-Liu 2024 and FriendlyCore): a trusted server's checks on K users' vectors
(averaged gradients or SGD iterates) before it releases their noisy mean.

Points y_1..y_K, threshold thr, "close" meaning ||y_j - y_j'|| <= thr (a point is close to itself):

- ``concentration_score``: s = (1/K) #{ordered pairs (j, j') close}, in [1, K], s = K iff every
  pair is close. Replacing one point changes at most the 2K - 1 pairs it is part of, so s moves by
  less than 2: the score's sensitivity, privatised by AboveThreshold (``sparse_vector``).
- ``outlier_filter``: h_j = #{j' close to j}; keep j independently with probability 0 if h_j < K/2,
  1 if h_j >= 2K/3, (h_j - K/2) / (K/6) between; release the kept points' mean (a given public
  value when nobody is kept).

Closeness is computed from the exact differences (y_j - y_j'), never from a Gram matrix, so each
pair's verdict depends on that pair alone and is symmetric: what the sensitivity argument counts.
Fast path: when max_j ||y_j - mean|| <= (thr / 2)(1 - 1e-9) every pair is close, so s = K and every
h_j = K, in O(K d) instead of O(K^2 d). The margin keeps it exact in floating point: at the
boundary the rounded radius could pass thr / 2 while a pair's computed distance exceeds thr, and
then the path taken (which one point can switch) would flip about K/2 verdicts at once. A NaN or
infinite point takes the pairwise path (it is close to nothing, itself included).

Everything is vectorised over replicas: points (P, K, d), thresholds (P,) or a scalar.
"""

from __future__ import annotations

import numpy as np

PAIR_BLOCK_BYTES = 64 * 2**20        # memory of one block of pairwise differences
FAST_PATH_MARGIN = 1 - 1e-9          # far above the rounding error of a norm, far below any real gap


def neighbour_counts(points: np.ndarray, threshold) -> np.ndarray:
    """(P, K) h_j: how many of the K points (itself included) lie within ``threshold`` of point j."""
    points = np.asarray(points, dtype=np.float64)
    p, k, d = points.shape
    threshold = np.broadcast_to(np.asarray(threshold, dtype=np.float64), (p,))
    counts = np.full((p, k), k, dtype=np.int64)
    # a non-finite or overflowing point gives NaN / inf distances: close to nothing, no warning
    with np.errstate(invalid="ignore", over="ignore"):
        radius = np.linalg.norm(points - points.mean(axis=1, keepdims=True), axis=2).max(axis=1)
        slow = np.flatnonzero(~(radius <= FAST_PATH_MARGIN * threshold / 2))          # NaN: the pairwise path
        block = max(1, PAIR_BLOCK_BYTES // max(1, 8 * k * d))
        for r in slow:
            limit = threshold[r] ** 2
            for start in range(0, k, block):
                rows = points[r, start:start + block]
                squared = ((rows[:, None, :] - points[r][None, :, :]) ** 2).sum(axis=2)
                counts[r, start:start + block] = (squared <= limit).sum(axis=1)
    return counts


def concentration_score(points: np.ndarray, threshold) -> np.ndarray:
    """(P,) s = (1/K) sum_j h_j (module docstring); sensitivity < 2 under replacing one point."""
    return neighbour_counts(points, threshold).sum(axis=1) / np.shape(points)[1]


def keep_probabilities(counts: np.ndarray) -> np.ndarray:
    """(P, K) p(h_j): 0 below K/2, 1 from 2K/3, linear (h - K/2) / (K/6) between."""
    k = counts.shape[1]
    return np.clip((counts - k / 2) / (k / 6), 0.0, 1.0)


def outlier_filter(points: np.ndarray, threshold, uniforms: np.ndarray,
                   empty_value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(kept (P, K) bool, the kept points' mean (P, d), ``empty_value`` (P, d) where none is kept).
    ``uniforms`` (P, K) in [0, 1) are the server's coins: point j is kept when u_j < p(h_j); points
    (1, K, d) are shared by every row of coins (their counts are computed once)."""
    points = np.asarray(points, dtype=np.float64)
    kept = np.asarray(uniforms) < keep_probabilities(neighbour_counts(points, threshold))
    points = np.broadcast_to(points, kept.shape + points.shape[2:])
    sizes = kept.sum(axis=1)
    # where, not a 0/1 weight: 0 * inf is NaN, and a removed non-finite point must leave no trace
    sums = np.where(kept[:, :, None], points, 0.0).sum(axis=1)
    mean = np.where(sizes[:, None] > 0, sums / np.maximum(sizes, 1)[:, None], np.asarray(empty_value, dtype=np.float64))
    return kept, mean
