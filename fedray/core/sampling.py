"""Who takes part in a round: participation samplers drawn lazily, round by round.

A sampler answers two questions without holding a schedule:

- ``sample(seed, repetitions, round_index, num_units)``: the (P, N) bool mask of round r, drawn
  from the PARTICIPATION stream keyed by (repetition, round), so it is the same in the driver,
  after a restart and whatever the actor layout. It depends on no data.
- ``counts(seed, repetitions, num_rounds, num_units)``: (P, N) participations of every unit over
  the first R rounds, which is what the budget guard charges before the run starts. Samplers with
  a closed form answer in O(P N); the random ones accumulate round by round (O(P N) memory, never
  an (R, P, N) schedule).

Replicas of one repetition take the same draws, as separate runs with that repetition would.
Under ISRL-DP and user-level DP a sampler gives no privacy credit: each unit is charged for the
rounds it took part in. A protocol whose analysis needs who took part to stay hidden from the
server must say so in its privacy statement; the samplers themselves are public randomness.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedray.errors import ConfigError
from fedray.rng import Stream, generator


def _integer(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _per_repetition(seed: int, repetitions: np.ndarray, round_index: int, draw) -> np.ndarray:
    reps, inverse = np.unique(np.asarray(repetitions), return_inverse=True)
    masks = np.stack([draw(generator(seed, Stream.PARTICIPATION, rep, round_index)) for rep in reps])
    return masks[inverse.reshape(-1)]


def _accumulated(sampler, seed: int, repetitions: np.ndarray, num_rounds: int, num_units: int) -> np.ndarray:
    counts = np.zeros((len(repetitions), num_units), dtype=np.int64)
    for r in range(num_rounds):
        counts += sampler.sample(seed, repetitions, r, num_units)
    return counts


@dataclass(frozen=True)
class UniformParticipation:
    """Exactly ``silos_per_round`` (M) distinct units, uniformly at random, every round."""

    silos_per_round: int

    def validate(self, num_units: int) -> None:
        if not _integer(self.silos_per_round) or not 1 <= self.silos_per_round <= num_units:
            raise ConfigError("participation.silos_per_round", self.silos_per_round,
                              f"an integer in [1, {num_units}] (num_silos)")

    def per_round(self, num_units: int) -> int | None:
        """The fixed number of participants per round, or None when it varies."""
        return int(self.silos_per_round)

    def max_rounds(self, num_units: int) -> int | None:
        """The most rounds the sampler can run (None: no limit)."""
        return None

    def sample(self, seed: int, repetitions: np.ndarray, round_index: int, num_units: int) -> np.ndarray:
        def draw(g: np.random.Generator) -> np.ndarray:
            mask = np.zeros(num_units, dtype=bool)
            mask[g.choice(num_units, size=self.silos_per_round, replace=False)] = True
            return mask

        return _per_repetition(seed, repetitions, round_index, draw)

    def counts(self, seed: int, repetitions: np.ndarray, num_rounds: int, num_units: int) -> np.ndarray:
        if self.silos_per_round == num_units:
            return np.full((len(repetitions), num_units), num_rounds, dtype=np.int64)
        return _accumulated(self, seed, repetitions, num_rounds, num_units)


@dataclass(frozen=True)
class PoissonParticipation:
    """Each unit independently with probability ``probability`` (q); a round may have nobody,
    which the protocol runs as an empty round (logged with zero participants, never skipped)."""

    probability: float

    def validate(self, num_units: int) -> None:
        if isinstance(self.probability, bool) or not isinstance(self.probability, (int, float)) \
                or not 0.0 < self.probability <= 1.0:
            raise ConfigError("participation.probability", self.probability, "in (0, 1]")

    def per_round(self, num_units: int) -> int | None:
        return num_units if self.probability == 1.0 else None

    def max_rounds(self, num_units: int) -> int | None:
        return None

    def sample(self, seed: int, repetitions: np.ndarray, round_index: int, num_units: int) -> np.ndarray:
        return _per_repetition(seed, repetitions, round_index, lambda g: g.random(num_units) < self.probability)

    def counts(self, seed: int, repetitions: np.ndarray, num_rounds: int, num_units: int) -> np.ndarray:
        return _accumulated(self, seed, repetitions, num_rounds, num_units)


@dataclass(frozen=True)
class AllUnits:
    """Every unit in every round (full-batch protocols: T rounds cost nothing to plan)."""

    def validate(self, num_units: int) -> None:
        return None

    def per_round(self, num_units: int) -> int | None:
        return num_units

    def max_rounds(self, num_units: int) -> int | None:
        return None

    def sample(self, seed: int, repetitions: np.ndarray, round_index: int, num_units: int) -> np.ndarray:
        return np.ones((len(repetitions), num_units), dtype=bool)

    def counts(self, seed: int, repetitions: np.ndarray, num_rounds: int, num_units: int) -> np.ndarray:
        return np.full((len(repetitions), num_units), num_rounds, dtype=np.int64)


@dataclass(frozen=True)
class SequentialBatches:
    """Round r takes units [r b, (r + 1) b) of a public order: disjoint batches, each unit at most
    once, so a run has at most floor(N / b) rounds (``max_rounds``).

    The order is the unit ids (data is already shuffled at loading); it depends on no data.
    """

    batch_size: int

    def validate(self, num_units: int) -> None:
        if not _integer(self.batch_size) or not 1 <= self.batch_size <= num_units:
            raise ConfigError("participation.batch_size", self.batch_size, f"an integer in [1, {num_units}] (units)")

    def per_round(self, num_units: int) -> int | None:
        return int(self.batch_size)

    def max_rounds(self, num_units: int) -> int | None:
        return num_units // self.batch_size

    def sample(self, seed: int, repetitions: np.ndarray, round_index: int, num_units: int) -> np.ndarray:
        if round_index >= self.max_rounds(num_units):
            raise ValueError(f"round {round_index} needs units [{round_index * self.batch_size}, "
                             f"{(round_index + 1) * self.batch_size}) of {num_units}: at most "
                             f"{self.max_rounds(num_units)} rounds of disjoint batches")
        mask = np.zeros((len(repetitions), num_units), dtype=bool)
        mask[:, round_index * self.batch_size:(round_index + 1) * self.batch_size] = True
        return mask

    def counts(self, seed: int, repetitions: np.ndarray, num_rounds: int, num_units: int) -> np.ndarray:
        counts = np.zeros((len(repetitions), num_units), dtype=np.int64)
        counts[:, :min(num_rounds, self.max_rounds(num_units)) * self.batch_size] = 1
        return counts
