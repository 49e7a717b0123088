"""AboveThreshold (the sparse vector technique, Dwork and Roth Alg. 1; seed-002 spec §2.0, App. A):
a trusted server answers a stream of queries q_1, q_2, ... of sensitivity Delta against a public
threshold and halts at the first answer it must report, spending (eps, 0) however long the stream.

Threshold noise Lap(2 Delta / eps) is drawn once (per phase), each query gets fresh Lap(4 Delta /
eps), and the run halts at the first t with q_t + nu_t >= T + rho ("above"). ``halt_below``
reverses the direction (continue while the noisy score clears the noisy threshold, halt at the
first failure): the same mechanism on negated queries and threshold, since Laplace noise is
symmetric. Seed 002's Alg. 2 runs it with Delta = 2 (the concentration score) at eps / 2:
threshold noise Lap(8 / eps), query noise Lap(16 / eps).

Accuracy (Lemma A.9): over T queries, with probability 1 - gamma every answer is right up to
alpha = 8 Delta ln(2 T / gamma) / eps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedray.errors import ConfigError


@dataclass(frozen=True)
class AboveThreshold:
    """(eps, 0)-DP for one run of queries of sensitivity ``sensitivity`` (module docstring)."""

    epsilon: float
    sensitivity: float = 1.0
    halt_below: bool = False

    def __post_init__(self) -> None:
        for name, value in (("epsilon", self.epsilon), ("sensitivity", self.sensitivity)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ConfigError(f"above_threshold.{name}", value, "a positive finite number")

    @property
    def threshold_scale(self) -> float:
        return 2.0 * self.sensitivity / self.epsilon

    @property
    def query_scale(self) -> float:
        return 4.0 * self.sensitivity / self.epsilon

    def noisy_threshold(self, threshold, rng: np.random.Generator) -> np.ndarray:
        """T + rho, rho ~ Lap(2 Delta / eps): once per run."""
        threshold = np.asarray(threshold, dtype=np.float64)
        return threshold + rng.laplace(0.0, self.threshold_scale, size=threshold.shape)

    def halts(self, score, noisy_threshold, rng: np.random.Generator) -> np.ndarray:
        """Whether the run halts at this query: q + nu >= T + rho (``halt_below``: q + nu < T + rho)."""
        score = np.asarray(score, dtype=np.float64)
        noisy = score + rng.laplace(0.0, self.query_scale, size=score.shape)
        return noisy < noisy_threshold if self.halt_below else noisy >= noisy_threshold

    def accuracy(self, queries: int, failure: float) -> float:
        """alpha = 8 Delta ln(2 T / gamma) / eps (Lemma A.9)."""
        return 8.0 * self.sensitivity * math.log(2.0 * queries / failure) / self.epsilon
