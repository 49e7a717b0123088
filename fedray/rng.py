"""Seeded random streams keyed by coordinates, so results do not depend on actor layout.

Every draw in fedray comes from a generator built from
``SeedSequence([run_seed, stream, *coords])`` with coordinates such as
(repetition, round, silo). Whichever actor holds a silo,
and however many actors there are, the silo's minibatch and noise in a round are the same.
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np


class Stream(IntEnum):
    """Fixed codes, one per purpose; never renumber (that would change every result)."""

    DATA = 1          # data sampling, train/test splits, synthetic generation
    PARTICIPATION = 2  # which silos take part in a round
    MINIBATCH = 3     # which records a silo samples
    NOISE = 4         # privacy noise added inside a silo
    SHUFFLE = 5       # the shuffler's permutation
    INIT = 6          # model initialisation


def generator(run_seed: int, stream: Stream, *coords: int) -> np.random.Generator:
    """A generator for (run_seed, stream, *coords), e.g. (round, silo)."""
    return np.random.default_rng(np.random.SeedSequence([int(run_seed), int(stream), *map(int, coords)]))


def data_generator(seed: int, trial: int = 0) -> np.random.Generator:
    """The generator data loaders use for splits and sampling of trial ``trial``."""
    return generator(seed, Stream.DATA, trial)


class SiloDraws:
    """The random inputs of one round for a block of silos, shaped (P replicas, S silos, ...).

    Replica p draws from the streams of its repetition ``repetitions[p]``: replicas that differ
    only in a deterministic setting (a step size) share minibatches and noise, exactly as
    separate runs with that repetition would. Each (repetition, silo) cell has its own generator,
    so a silo's draws do not depend on which other silos share its actor.
    """

    def __init__(self, run_seed: int, repetitions: np.ndarray, round_index: int, silo_ids: np.ndarray):
        self.run_seed = int(run_seed)
        self.unique_reps, self.replica_to_rep = np.unique(np.asarray(repetitions), return_inverse=True)
        self.round_index = int(round_index)
        self.silo_ids = np.asarray(silo_ids, dtype=np.int64)

    def _cells(self, stream: Stream, draw) -> np.ndarray:
        per_rep = [
            np.stack([draw(generator(self.run_seed, stream, rep, self.round_index, silo), s)
                      for s, silo in enumerate(self.silo_ids)])
            for rep in self.unique_reps
        ]
        return np.stack(per_rep)[self.replica_to_rep]

    def standard_normal(self, shape: tuple[int, ...]) -> np.ndarray:
        """(P, S, *shape) standard normals from the NOISE stream."""
        return self._cells(Stream.NOISE, lambda g, s: g.standard_normal(shape))

    def without_replacement(self, sizes: np.ndarray, k: int) -> np.ndarray:
        """(P, S, k) indices: k distinct records of silo s out of its sizes[s] (MINIBATCH stream)."""
        return self._cells(Stream.MINIBATCH, lambda g, s: g.choice(int(sizes[s]), size=k, replace=False))

    def with_replacement(self, sizes: np.ndarray, k: int) -> np.ndarray:
        """(P, S, k) indices drawn uniformly with replacement (MINIBATCH stream)."""
        return self._cells(Stream.MINIBATCH, lambda g, s: g.integers(0, int(sizes[s]), size=k))
