"""Noise and batch-size calibration from the papers' own formulas ("paper" mode).

Symbols (seed-004): n records per silo, R rounds, K minibatch size (or local steps),
(eps, delta) the per-silo target.

fedray writes every formula as a *noise multiplier* (noise std over the l2 sensitivity of the
released quantity under replace-one, 2 l2_clip / K for a clipped mean of K), the accountant's
vocabulary. Two conventions for the papers' L:

- the experiments' formulas (seed-004 §5, moments accountant) are stated for a clip L under
  add/remove; under replace-one a record moves a clipped sum by 2 l2_clip, so L = 2 l2_clip. For
  the logistic experiments, where the paper takes L = 2 max||x|| and gradients are bounded by
  max||x||, this is exactly the paper's noise (seed-004 §6 item 11);
- the theorems (Thm 2.1, G2) take L as the Lipschitz bound, L = l2_clip, and already use the
  replace-one sensitivity 2 L / K.
"""

from __future__ import annotations

import math

import numpy as np


def paper_batch_size(n: int, epsilon: float, num_rounds: int) -> int:
    """K = n sqrt(eps / (4R)) (seed-004 §5), rounded up and clamped to [1, n] (§6 item 18)."""
    return int(min(n, max(1, math.ceil(n * math.sqrt(epsilon / (4.0 * num_rounds)) - 1e-9))))


def authors_batch_size(num_records: int, num_silos: int, epsilon_max: float, num_rounds: int) -> int:
    """The insurance code's K = int(n sqrt(eps_max / (4R))) with n = ceil(records / N) before the
    train/test split (seed-004 §5 E2, §7 T1: 65, 39, 19, 13 for N = 3, 5, 10, 15)."""
    n = math.ceil(int(num_records) / int(num_silos))
    return max(1, int(n * math.sqrt(float(epsilon_max) / (4.0 * int(num_rounds)))))


def paper_minibatch_noise_multiplier(
    n: np.ndarray | int, epsilon: float, delta: np.ndarray | float, num_rounds: int, batch_size: int
) -> np.ndarray:
    """Noise multiplier of ISRL-DP MB-SGD in the experiments (seed-004 §5).

    sigma^2 = 8 L^2 ln(1/delta) R / (n^2 eps^2) on the K-averaged gradient, whose replace-one
    sensitivity is L / K; the multiplier is sigma K / L = K sqrt(8 R ln(1/delta)) / (n eps).
    Hand value: n=1238, R=35, eps=3, delta=1/n^2: sigma^2/L^2 = 2.89108e-4 (spec T1).
    """
    n = np.asarray(n, dtype=np.float64)
    return batch_size * np.sqrt(8.0 * num_rounds * np.log(1.0 / np.asarray(delta))) / (n * epsilon)


def paper_local_sgd_noise_multiplier(
    n: np.ndarray | int, epsilon: float, delta: np.ndarray | float, num_rounds: int, local_steps: int
) -> np.ndarray:
    """Noise multiplier of ISRL-DP Local SGD (seed-004 §3.9a / App. I).

    sigma^2 = 8 L^2 ln(1/delta) R K / (n^2 eps^2) added to each single-record gradient step,
    whose replace-one sensitivity is L: multiplier sqrt(8 R K ln(1/delta)) / (n eps).
    """
    n = np.asarray(n, dtype=np.float64)
    return np.sqrt(8.0 * num_rounds * local_steps * np.log(1.0 / np.asarray(delta))) / (n * epsilon)


def theory_minibatch_noise_multiplier(
    n: np.ndarray | int, epsilon: float, delta: np.ndarray | float, num_rounds: int, batch_size: int
) -> np.ndarray:
    """Theorem 2.1 / D.1 calibration of Alg. 2 (advanced composition route).

    sigma^2 = 256 L^2 R ln(2.5 R/delta) ln(2/delta) / (n^2 eps^2) with L the Lipschitz bound, here
    l2_clip; the theorem's own sensitivity is 2 L / K (G1), so the multiplier is sigma K / (2 L).
    Hand value (spec T1): L=1, R=100, eps=1, delta=1e-6, n=1000 gives sigma^2 = 7.18217.
    """
    n = np.asarray(n, dtype=np.float64)
    delta = np.asarray(delta, dtype=np.float64)
    var = 256.0 * num_rounds * np.log(2.5 * num_rounds / delta) * np.log(2.0 / delta) / (n * epsilon) ** 2
    return batch_size * np.sqrt(var) / 2.0


def theory_min_batch_size(n: int, epsilon: float, delta: float, num_rounds: int) -> float:
    """K >= eps n / (4 sqrt(2 R ln(2/delta))) (Theorem 2.1), unrounded."""
    return epsilon * n / (4.0 * math.sqrt(2.0 * num_rounds * math.log(2.0 / delta)))


def default_delta(n: np.ndarray | int) -> np.ndarray:
    """delta = 1/n^2 per silo, the experiments' choice (seed-004 §5)."""
    return 1.0 / np.asarray(n, dtype=np.float64) ** 2


def one_pass_noise_multiplier(
    n: np.ndarray | int, epsilon: float, delta: np.ndarray | float, num_rounds: int, batch_size: int
) -> np.ndarray:
    """Noise multiplier of one-pass accelerated MB-SGD (seed-004 §3.3, Thm 3.1 / E.1; G2 in §2).

    Each round's release is (eps, delta)-DP on its own by the zCDP Gaussian bound G2, and the
    batches are disjoint, so parallel composition (PC) gives the whole transcript the same
    (eps, delta): sigma^2 = 32 L^2 ln(1.25/delta) / (eps^2 K^2), valid for eps <= 8 ln(1/delta).
    G2's sensitivity is 2 L / K with L = l2_clip (module docstring), so the multiplier is
    sigma K / (2 L) = sqrt(8 ln(1.25/delta)) / eps; it does not depend on R or n.
    Hand value (spec T1): L=1, eps=1, delta=1e-6, K=10: sigma^2 = 32 ln(1.25e6) / 100 = 4.49237.

    Raises
    ------
    ValueError
        If eps > 8 ln(1/delta) for some silo, or if ``num_rounds`` > floor(n / K) for some silo
        (the batches could not be disjoint, and PC would not apply).
    """
    n = np.asarray(n, dtype=np.int64)
    delta = np.asarray(delta, dtype=np.float64)
    limit = 8.0 * np.log(1.0 / delta)
    if np.any(epsilon > limit):
        raise ValueError(
            f"one-pass calibration needs epsilon <= 8 ln(1/delta) = {float(np.min(limit)):.6g}; got {epsilon}"
        )
    max_rounds = n // batch_size
    if np.any(num_rounds > max_rounds):
        raise ValueError(
            f"one-pass needs num_rounds <= floor(n / K) = {int(np.min(max_rounds))} "
            f"(n = {int(np.min(n))}, K = {batch_size}); got {num_rounds}"
        )
    return np.sqrt(8.0 * np.log(1.25 / delta)) / epsilon * np.ones(np.broadcast(n, delta).shape)


def one_pass_num_rounds(n: int, batch_size: int) -> int:
    """R = floor(n / K), the number of disjoint batches of K records (seed-004 §3.3, §6 item 18)."""
    return int(n) // int(batch_size)
