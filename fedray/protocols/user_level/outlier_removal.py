"""One step of seed 002's Alg. 2 at the trusted server (spec §2.2): the concentration test,
the outlier filter and the Gaussian noise on K sampled users' averaged gradients.

Trust model: central user-level DP (the server sees each sampled user's averaged gradient q(Z)).
Unit: a user (m items); relation: replace one user. Per phase the server draws the noisy pass
level Delta_i = 4 K / 5 + xi, xi ~ Lap(8 / eps), once; per step, with threshold 2 tau:

    s = ConcScore(q_1..q_K, 2 tau);  halt if s + Lap(16 / eps) < Delta_i   (AboveThreshold, reversed)
    S, g = OutlierFilter(q_1..q_K, 2 tau);  release g + N(0, sigma^2 I_d)

AboveThreshold over the phase's steps is eps/2-DP (the score's sensitivity is < 2); given a pass
the filtered mean moves by O(tau log(1/zeta) / K) under replacing one user (Lemma C.2), which
sigma covers together with subsampling and advanced composition over the phase (the paper's
argument, spec §2.3). A halted replica releases nothing more in the run (Alg. 3 aborts): its
gradient is NaN and the caller outputs the public constant. Every draw comes from the replica's own
generator; the Gaussian is ``noise`` (``ServerGaussianNoise``, the phase's step of the
``PhaseGaussianNoise`` the ledger prices), which continues each generator after the test's
Laplace draws and the filter's uniforms.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from fedray.privacy.mechanisms import ServerGaussianNoise
from fedray.privacy.outliers import concentration_score, outlier_filter
from fedray.privacy.sparse_vector import AboveThreshold

PASS_FRACTION = 0.8          # Delta_i = 4 K / 5 + xi


class StepResult(NamedTuple):
    halted: np.ndarray       # (P,) the replica halted at this step (nothing released)
    gradient: np.ndarray     # (P, d) the released noisy mean, NaN where halted
    kept: np.ndarray         # (P,) users kept by the filter (diagnostic: reads the data)
    score: np.ndarray        # (P,) the concentration score (diagnostic)


@dataclass(frozen=True)
class OutlierRemovalStep:
    """The server's step (module docstring) for a phase with budget ``epsilon``."""

    epsilon: float
    threshold: float          # tau: users are close when their gradients are within 2 tau
    noise: ServerGaussianNoise    # sigma_i, one std per replica the step runs on

    @property
    def test(self) -> AboveThreshold:
        """AboveThreshold on the score (sensitivity 2) at eps / 2, halting at the first failure:
        threshold noise Lap(8 / eps), query noise Lap(16 / eps)."""
        return AboveThreshold(self.epsilon / 2, sensitivity=2.0, halt_below=True)

    def pass_level(self, batch: int, generators: list) -> np.ndarray:
        """(P,) Delta_i = 4 K / 5 + Lap(8 / eps), once per phase."""
        return np.array([float(self.test.noisy_threshold(PASS_FRACTION * batch, rng)) for rng in generators])

    def __call__(self, vectors: np.ndarray, pass_level: np.ndarray, generators: list,
                 halted: np.ndarray | None = None) -> StepResult:
        """``vectors`` (P, K, d) the sampled users' averaged gradients per replica; ``halted`` (P,)
        the replicas that halted earlier in the phase (they stay halted and release nothing)."""
        p, k, d = vectors.shape
        score = concentration_score(vectors, 2 * self.threshold)
        earlier = np.zeros(p, dtype=bool) if halted is None else np.asarray(halted, dtype=bool)
        halted = earlier | np.array([bool(self.test.halts(score[r], pass_level[r], rng))
                                     for r, rng in enumerate(generators)])
        uniforms = np.stack([rng.random(k) for rng in generators])
        kept, mean = outlier_filter(vectors, 2 * self.threshold, uniforms, np.zeros((p, d)))
        noisy, _ = self.noise.apply(mean, generators)
        gradient = np.where(halted[:, None], np.nan, noisy)
        return StepResult(halted, gradient, kept.sum(axis=1), score)
