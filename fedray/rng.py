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


# The round coordinate of draws made once per run rather than once per round (the one-pass
# permutation): the largest 32-bit word, which no round index reaches.
EPOCH_ROUND = 2**32 - 1


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

    def epoch_slice(self, sizes: np.ndarray, k: int, round_index: int | None = None) -> np.ndarray:
        """(P, S, k) indices: the ``round_index``-th block of k records of a fixed permutation of silo s.

        One-pass sampling (seed-004 §3.3): each (repetition, silo) draws ONE permutation of its
        sizes[s] records for the whole run and round r takes perm[r k : (r + 1) k], so batches are
        disjoint across rounds and every record is used at most once. The permutation comes from
        the MINIBATCH stream at coordinates (repetition, EPOCH_ROUND, silo): a per-round draw uses
        (repetition, round, silo) with round < EPOCH_ROUND, so the two never share a generator.
        ``round_index`` defaults to this round's index.

        Raises
        ------
        ValueError
            If some silo has fewer than (round_index + 1) k records, i.e. the run has more rounds
            than floor(n / k) for that silo.
        """
        r = self.round_index if round_index is None else int(round_index)
        if not 0 <= r < EPOCH_ROUND:
            raise ValueError(f"round_index must be in [0, {EPOCH_ROUND}); got {r}")
        for silo, n in zip(self.silo_ids, np.asarray(sizes)):
            if (r + 1) * k > int(n):
                raise ValueError(
                    f"one-pass round {r} needs records [{r * k}, {(r + 1) * k}) of silo {silo}, which has "
                    f"n = {int(n)}: the number of rounds must be at most floor(n / K) = {int(n) // k} (K = {k})"
                )
        def block(rep: int, silo: int, n: int) -> np.ndarray:
            return generator(self.run_seed, Stream.MINIBATCH, rep, EPOCH_ROUND, silo).permutation(n)[r * k:(r + 1) * k]

        per_rep = [
            np.stack([block(rep, silo, int(sizes[s])) for s, silo in enumerate(self.silo_ids)])
            for rep in self.unique_reps
        ]
        return np.stack(per_rep)[self.replica_to_rep]
