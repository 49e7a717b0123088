"""Noise and batch-size calibration from the papers' own formulas ("paper" mode).

Symbols (seed-004): n records per silo, R rounds, K minibatch size (or local steps),
L the per-example replace-one sensitivity bound, (eps, delta) the per-silo target.

fedray writes every formula as a *noise multiplier* (noise std over the l2 sensitivity of the
released quantity under replace-one), the accountant's vocabulary. The experiments' formulas
(seed-004 §5, moments accountant) are stated for a clip L under add/remove; under replace-one a
record moves a clipped sum by 2 * l2_clip, so fedray sets the paper's L to 2 * l2_clip. For the
logistic experiments, where the paper takes L = 2 max||x|| and gradients are bounded by max||x||,
this is exactly the paper's noise (seed-004 §6 item 11).
"""

from __future__ import annotations

import math

import numpy as np


def paper_batch_size(n: int, epsilon: float, num_rounds: int) -> int:
    """K = n sqrt(eps / (4R)) (seed-004 §5), rounded up and clamped to [1, n] (§6 item 18)."""
    return int(min(n, max(1, math.ceil(n * math.sqrt(epsilon / (4.0 * num_rounds)) - 1e-9))))


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

    sigma^2 = 256 L^2 R ln(2.5 R/delta) ln(2/delta) / (n^2 eps^2), sensitivity L / K.
    Hand value (spec T1): L=1, R=100, eps=1, delta=1e-6, n=1000 gives sigma^2 = 7.18217.
    """
    n = np.asarray(n, dtype=np.float64)
    delta = np.asarray(delta, dtype=np.float64)
    var = 256.0 * num_rounds * np.log(2.5 * num_rounds / delta) * np.log(2.0 / delta) / (n * epsilon) ** 2
    return batch_size * np.sqrt(var)


def theory_min_batch_size(n: int, epsilon: float, delta: float, num_rounds: int) -> float:
    """K >= eps n / (4 sqrt(2 R ln(2/delta))) (Theorem 2.1), unrounded."""
    return epsilon * n / (4.0 * math.sqrt(2.0 * num_rounds * math.log(2.0 / delta)))


def default_delta(n: np.ndarray | int) -> np.ndarray:
    """delta = 1/n^2 per silo, the experiments' choice (seed-004 §5)."""
    return 1.0 / np.asarray(n, dtype=np.float64) ** 2
