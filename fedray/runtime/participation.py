"""Which silos take part in a round.

``UniformParticipation`` draws a uniformly random subset of exactly M of the N silos each round
(seed-004 Assumption 1.4 with M_r = M); ``PoissonParticipation`` includes each silo independently
with probability q (so a round may have no silo: it is then skipped by the server step and logged
with zero participants, never silently). Under ISRL-DP neither gives privacy credit: a silo is
charged for the rounds it took part in. Randomness: PARTICIPATION stream keyed by
(repetition, round), shared by every silo, drawn in the driver (it depends on no data).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedray.errors import ConfigError
from fedray.rng import Stream, generator


def _per_repetition(seed: int, repetitions: np.ndarray, round_index: int, draw) -> np.ndarray:
    reps, inverse = np.unique(np.asarray(repetitions), return_inverse=True)
    masks = np.stack([draw(generator(seed, Stream.PARTICIPATION, rep, round_index)) for rep in reps])
    return masks[inverse]


@dataclass(frozen=True)
class UniformParticipation:
    """Exactly ``silos_per_round`` (M) distinct silos, uniformly at random."""

    silos_per_round: int

    def validate(self, num_silos: int) -> None:
        if not 1 <= self.silos_per_round <= num_silos:
            raise ConfigError(
                "participation.silos_per_round", self.silos_per_round, f"an integer in [1, {num_silos}] (num_silos)"
            )

    def expected_fraction(self, num_silos: int) -> float:
        return self.silos_per_round / num_silos

    def sample(self, seed: int, repetitions: np.ndarray, round_index: int, num_silos: int) -> np.ndarray:
        """(P, N) bool mask of the participants of each replica."""

        def draw(g: np.random.Generator) -> np.ndarray:
            mask = np.zeros(num_silos, dtype=bool)
            mask[g.choice(num_silos, size=self.silos_per_round, replace=False)] = True
            return mask

        return _per_repetition(seed, repetitions, round_index, draw)


@dataclass(frozen=True)
class PoissonParticipation:
    """Each silo independently with probability ``probability`` (q)."""

    probability: float

    def validate(self, num_silos: int) -> None:
        if not 0.0 < self.probability <= 1.0:
            raise ConfigError("participation.probability", self.probability, "in (0, 1]")

    def expected_fraction(self, num_silos: int) -> float:
        return self.probability

    def sample(self, seed: int, repetitions: np.ndarray, round_index: int, num_silos: int) -> np.ndarray:
        return _per_repetition(
            seed, repetitions, round_index, lambda g: g.random(num_silos) < self.probability
        )
