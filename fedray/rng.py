"""Seeded random streams keyed by coordinates, so results do not depend on actor layout.

Every draw in fedray comes from a generator built from
``SeedSequence([run_seed, stream, *coords])`` with coordinates such as
(repetition, round, silo). Whichever actor holds a silo,
and however many actors there are, the silo's minibatch and noise in a round are the same.
"""

from __future__ import annotations

import math
from enum import IntEnum
from functools import cached_property, lru_cache
from typing import NamedTuple

import numpy as np


class Stream(IntEnum):
    """Fixed codes, one per purpose; never renumber (that would change every result)."""

    DATA = 1          # data sampling, train/test splits, synthetic generation
    PARTICIPATION = 2  # which silos take part in a round
    MINIBATCH = 3     # which records a silo samples
    NOISE = 4         # privacy noise added inside a silo
    SHUFFLE = 5       # the shuffler's permutation
    INIT = 6          # model initialisation
    OUTPUT_NOISE = 7  # noise a trusted server adds to a released output (central DP)
    SERVER = 8        # a trusted server's other draws (a deletion budget)
    VERTEX = 9        # a curator's vertex draws (the exponential mechanism of entropic mirror descent)
    LEVEL = 10        # a curator's random levels (truncated geometric, multilevel Monte Carlo)
    SMOOTHING = 11    # a client's randomized-smoothing perturbations (uniform in a ball, seed 002's App. D)


# The round coordinate of draws made once per run rather than once per round (the one-pass
# permutation): the largest 32-bit word, which no round index reaches.
EPOCH_ROUND = 2**32 - 1


def generator(run_seed: int, stream: Stream, *coords: int) -> np.random.Generator:
    """A generator for (run_seed, stream, *coords), e.g. (round, silo)."""
    return np.random.default_rng(np.random.SeedSequence([int(run_seed), int(stream), *map(int, coords)]))


# numpy's SeedSequence (pool of 4 words, its hash constants) and PCG64's seeding, which
# ``generators`` runs vectorised over many keys: building each generator alone costs about 36 us
# (most of it the SeedSequence), which a replicated run pays once per replica, round and stream.
_MASK32 = 0xFFFFFFFF
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R = 0xCA01F9DD, 0x4973F715
_PCG_MULT = 0x2360ED051FC65DA44385DF649FCCF645
_SHIFT = np.uint32(16)
VECTORISED_FROM = 12


def _entropy_words(value: int) -> list[int]:
    """A non-negative int as SeedSequence reads it: 32-bit words, least significant first, at least one."""
    value = int(value)
    words = [value & _MASK32]
    while value > _MASK32:
        value >>= 32
        words.append(value & _MASK32)
    return words


def _pcg64_states(words: np.ndarray) -> np.ndarray:
    """(n, 4) uint64 rows (state low, state high, increment low, increment high) of
    ``PCG64(SeedSequence(row))`` for each row of 32-bit entropy words ``words`` (n, k)."""
    n, length = words.shape
    hash_const = _INIT_A

    def hashmix(value):
        nonlocal hash_const
        value = value ^ np.uint32(hash_const)
        hash_const = (hash_const * _MULT_A) & _MASK32
        value = value * np.uint32(hash_const)
        return value ^ (value >> _SHIFT)

    def mix(x, y):
        result = np.uint32(_MIX_L) * x - np.uint32(_MIX_R) * y
        return result ^ (result >> _SHIFT)

    zeros = np.zeros(n, dtype=np.uint32)
    pool = [hashmix(words[:, i] if i < length else zeros) for i in range(4)]
    for src in range(4):
        for dst in range(4):
            if src != dst:
                pool[dst] = mix(pool[dst], hashmix(pool[src]))
    for src in range(4, length):
        for dst in range(4):
            pool[dst] = mix(pool[dst], hashmix(words[:, src]))
    hash_const, state = _INIT_B, np.empty((n, 8), dtype=np.uint32)
    for i in range(8):                          # generate_state(4, np.uint64)
        value = pool[i % 4] ^ np.uint32(hash_const)
        hash_const = (hash_const * _MULT_B) & _MASK32
        value = value * np.uint32(hash_const)
        state[:, i] = value ^ (value >> _SHIFT)
    high_state, low_state, high_seq, low_seq = state.astype("<u4").view("<u8").astype(np.uint64).T
    # PCG64's set_seed, in 128-bit arithmetic on (low, high) word pairs: inc = 2 seq + 1, then
    # state = (inc + initstate) * MULT + inc, all mod 2^128.
    one, bits63 = np.uint64(1), np.uint64(63)
    inc = ((low_seq << one) | one, (high_seq << one) | (low_seq >> bits63))
    state = _mul128(_add128(inc, (low_state, high_state)), _PCG_MULT)
    state = _add128(state, inc)
    return np.stack([state[0], state[1], inc[0], inc[1]], axis=1)


def _add128(a, b):
    """(low, high) uint64 word pairs: a + b mod 2^128."""
    low = a[0] + b[0]
    return low, a[1] + b[1] + (low < a[0]).astype(np.uint64)


_LOW32, _32 = np.uint64(_MASK32), np.uint64(32)


def _mul_high64(a, b: int):
    """The high 64 bits of the 128-bit product of uint64 words ``a`` and the constant ``b``."""
    a0, a1 = a & _LOW32, a >> _32
    b0, b1 = np.uint64(b & _MASK32), np.uint64(b >> 32)
    low_low, low_high, high_low = a0 * b0, a0 * b1, a1 * b0
    middle = (low_low >> _32) + (low_high & _LOW32) + (high_low & _LOW32)
    return a1 * b1 + (low_high >> _32) + (high_low >> _32) + (middle >> _32)


def _mul128(a, b: int):
    """(low, high) uint64 word pairs times the 128-bit constant ``b``, mod 2^128."""
    b_low, b_high = b & ((1 << 64) - 1), b >> 64
    return a[0] * np.uint64(b_low), _mul_high64(a[0], b_low) + a[0] * np.uint64(b_high) + a[1] * np.uint64(b_low)


def generators(run_seed: int, stream: Stream, rows: np.ndarray, *suffix: int):
    """``generator(run_seed, stream, *row, *suffix)`` for each row of ``rows`` (R, k), in order, the
    same numbers ~10x cheaper: ONE generator whose state is set before each yield, so draw from
    it before asking for the next."""
    rows = np.asarray(rows, dtype=np.int64).reshape(len(rows), -1)
    # Below VECTORISED_FROM keys the vectorised hashing's fixed ~0.35 ms (a hundred numpy calls on
    # tiny arrays) costs more than one SeedSequence per key: a small federation's round has 1-2.
    few = len(rows) < VECTORISED_FROM
    if few or (rows.size and (rows.min() < 0 or rows.max() > _MASK32)):   # or a coordinate of several words
        for row in rows.tolist():
            yield generator(run_seed, stream, *row, *suffix)
        return
    head = np.array(_entropy_words(run_seed) + _entropy_words(int(stream)), dtype=np.uint32)
    tail = np.array([w for value in suffix for w in _entropy_words(value)], dtype=np.uint32)
    words = np.concatenate([np.broadcast_to(head, (len(rows), head.size)), rows.astype(np.uint32),
                            np.broadcast_to(tail, (len(rows), tail.size))], axis=1)
    bits = np.random.PCG64(0)
    rng = np.random.Generator(bits)
    # Each key's state through PCG64's public ``state`` setter (about 2.9 us a key; no half-word is
    # left over from the previous key's draws). numpy's stream-compatibility policy keeps
    # SeedSequence's and PCG64's seeding fixed, and tests/test_rng.py replays them key by key.
    for low, high, inc_low, inc_high in _pcg64_states(words).tolist():
        bits.state = {"bit_generator": "PCG64", "has_uint32": 0, "uinteger": 0,
                      "state": {"state": (high << 64) | low, "inc": (inc_high << 64) | inc_low}}
        yield rng


class CounterStream:
    """Counter-based draws for (run_seed, stream, *coords): ``words(i, m)`` is draw i's own m words
    (Philox keyed by a SeedSequence of the coordinates, at counter i in its high word, so distinct
    draws never overlap below 2^192 words each), in any order and in any process, at the cost of
    no SeedSequence per draw (generated samples, a curator's per-step draws)."""

    def __init__(self, run_seed: int, stream: Stream, *coords: int):
        key = np.random.SeedSequence([int(run_seed), int(stream), *map(int, coords)]).generate_state(2, dtype=np.uint64)
        self._bits = np.random.Philox(key=key)
        self._state = self._bits.state

    def words(self, counter: int, count: int) -> np.ndarray:
        """(count,) uint64 words at counter ``counter`` (repositions one Philox: 5x cheaper than a new one)."""
        state = self._state
        state["state"]["counter"] = np.array([0, 0, 0, int(counter)], dtype=np.uint64)
        state["buffer_pos"], state["has_uint32"] = 4, 0
        self._bits.state = state
        return self._bits.random_raw(count)

    def uniforms(self, counter: int, count: int) -> np.ndarray:
        """(count,) uniforms in [0, 1) with 53 random bits each."""
        return (self.words(counter, count) >> np.uint64(11)) * 2.0**-53

    def normals(self, counter: int, shape) -> np.ndarray:
        """Standard normals of draw ``counter`` (numpy's sampler on the repositioned Philox)."""
        self.words(counter, 0)
        return np.random.Generator(self._bits).standard_normal(shape)


def setting_words(value: float) -> tuple[int, int]:
    """A float setting as two 32-bit words, to key a stream by the exact value (a step size, a budget)."""
    low, high = np.array([value], dtype=np.float64).view(np.uint32)
    return int(high), int(low)


def setting_word_rows(values) -> np.ndarray:
    """(n, 2) int64: ``setting_words`` of each of ``values`` (n,), at once (a plan keys 200,000
    replicas by their settings: one call, not 200,000)."""
    words = np.ascontiguousarray(values, dtype=np.float64).reshape(-1).view(np.uint32).reshape(-1, 2)
    return words[:, ::-1].astype(np.int64)


def stream_rows(streams) -> np.ndarray:
    """Replica stream keys as (P, k) int64 rows (``Replicas.streams``; a (P,) array is one word each)."""
    streams = np.asarray(streams, dtype=np.int64)
    return streams.reshape(streams.shape[0], -1)


def data_generator(seed: int, trial: int = 0) -> np.random.Generator:
    """The generator data loaders use for splits and sampling of trial ``trial``."""
    return generator(seed, Stream.DATA, trial)


# Silos draw in fixed blocks of consecutive ids: one generator per (stream, repetition, round,
# block) fills the rows of all BLOCK silos of the block, and a silo takes its own row. The block
# of a silo depends on its id only, so its draws do not depend on which silos share its actor,
# and a round costs one generator per block instead of one per silo. The generators fill rows in
# order, so a call draws only up to the last row it needs: the first h rows of a (BLOCK, ...)
# draw are exactly the (h, ...) draw of the same generator.
BLOCK = 64
# Values a key's block draw may have for ``SiloDraws`` to collect all keys' draws in one buffer.
SMALL_DRAW = 4096


# Rounds repeat the same replicas, and often the same silos: what SiloDraws derives from them is
# found once per process (a round of a small federation would otherwise spend half its time here).
@lru_cache(maxsize=64)
def _distinct_rows(rows: bytes, shape: tuple) -> tuple[np.ndarray, np.ndarray]:
    """The distinct stream rows in order of first use, and each replica's row among them."""
    unique, first, inverse = np.unique(np.frombuffer(rows, dtype=np.int64).reshape(shape), axis=0,
                                       return_index=True, return_inverse=True)
    # Distinct rows in order of first use, so replicas with streams of their own map to themselves.
    order = np.argsort(first)
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    found = unique[order], rank[inverse.reshape(-1)]
    for array in found:
        array.flags.writeable = False       # shared by every round's draws
    return found


class _Member(NamedTuple):
    """The silos of one block among a draw's silos: where they are in ``silo_ids`` (``positions``),
    their rows in the block's draw (``rows``), how many rows to draw (``height``: up to the last
    asked), and, when the block's first ``height`` rows are asked in order at consecutive places,
    that slice of the output (``direct``; None otherwise)."""

    block: int
    positions: np.ndarray
    rows: np.ndarray
    height: int
    direct: slice | None


class _Layout(NamedTuple):
    blocks: np.ndarray          # (B,) int64: the block of each member, in order
    members: tuple


@lru_cache(maxsize=4)     # sampled silos change every round: keep few (a million ids are 8 MB)
def _block_layout(silo_ids: bytes) -> _Layout:
    ids = np.frombuffer(silo_ids, dtype=np.int64)
    block_of = ids // BLOCK
    order = np.argsort(block_of, kind="stable")
    blocks, starts = np.unique(block_of[order], return_index=True)
    members = []
    for block, positions in zip(blocks.tolist(), np.split(order, starts[1:])):
        rows = ids[positions] % BLOCK
        height = int(rows.max()) + 1
        first = int(positions[0])
        in_order = np.array_equal(rows, np.arange(height)) and np.array_equal(positions, np.arange(first, first + height))
        members.append(_Member(block, positions, rows, height, slice(first, first + height) if in_order else None))
    for member in members:
        member.positions.flags.writeable = member.rows.flags.writeable = False
    blocks.flags.writeable = False
    return _Layout(blocks, tuple(members))


class SiloDraws:
    """The random inputs of one round for some silos, shaped (P replicas, S silos, ...).

    Replica p draws from the streams keyed by its row ``streams[p]`` (``Replicas.streams``: its
    repetition and, unless the run asks for common random numbers, its own settings), so a replica
    draws exactly what a separate run with its settings would. Replicas with equal rows share
    their draws: with ``by_repetition=True`` a draw is returned once per distinct row, shaped
    (U, S, ...), and replica p uses row ``replica_to_rep[p]`` (the same numbers, without copying
    them P times). ``width`` is the padded record axis of the silo arrays (the same in every
    actor); without it the largest of ``sizes`` is used, which is only layout-independent for
    balanced silos.
    """

    def __init__(self, run_seed: int, streams: np.ndarray, round_index: int, silo_ids: np.ndarray,
                 width: int | None = None):
        # Cheap to build: a step that draws nothing (a non-private step of a sequential protocol,
        # 10^5 of them per run) pays for no index work; the first draw does it once.
        self.run_seed = int(run_seed)
        self._streams = streams
        self.round_index = int(round_index)
        self.silo_ids = np.asarray(silo_ids, dtype=np.int64)
        self.width = width

    @cached_property
    def _replicas(self) -> tuple[np.ndarray, np.ndarray]:
        rows = stream_rows(self._streams)
        return _distinct_rows(rows.tobytes(), rows.shape)

    @property
    def unique_reps(self) -> np.ndarray:
        return self._replicas[0]

    @property
    def replica_to_rep(self) -> np.ndarray:
        return self._replicas[1]

    @cached_property
    def _layout(self) -> _Layout:
        """Which block each silo is in and where its rows go, found once per set of silos: no
        per-block scan over all silos, and no draw beyond the block's last requested row."""
        return _block_layout(self.silo_ids.tobytes())

    def _rows(self, stream: Stream, round_coord: int, shape: tuple, fill, by_repetition: bool = False) -> np.ndarray:
        """(P, S, *shape), or (U, S, *shape) by repetition, from ``fill(generator, out)``, which fills
        ``out`` (h, *shape) with the first h rows of what it would draw for h = BLOCK (numpy's
        samplers fill an ``out`` array in order, so ``g.random(out=out)`` is ``g.random(out.shape)``).
        """
        layout, reps, shape = self._layout, self.unique_reps, tuple(shape)
        num, size = len(reps), math.prod(shape)
        rngs = generators(self.run_seed, stream, self._block_keys(reps, round_coord))
        out = np.empty((num, self.silo_ids.size) + shape)
        # Per block, where its draws go. A block whose rows are all asked for, in order, at
        # consecutive places: straight into the output (Local SGD's noise is U S K d values a
        # round, too large to copy twice). Small draws: into one buffer for all keys, gathered
        # once (per-call copies would cost more than such a draw). Other large draws: into one
        # scratch draw, whose asked rows are copied out, so memory stays that of the output.
        plans = [("direct", m.direct, None, None) if m.direct is not None else
                 ("buffered", m.positions, m.rows, np.empty((num, m.height) + shape)) if m.height * size <= SMALL_DRAW else
                 ("scratch", m.positions, m.rows, np.empty((m.height,) + shape)) for m in layout.members]
        for u in range(num):
            for (how, where, wanted, buffer), rng in zip(plans, rngs):
                if how == "direct":
                    fill(rng, out[u, where])
                elif how == "buffered":
                    fill(rng, buffer[u])
                else:
                    fill(rng, buffer)
                    out[u, where] = buffer[wanted]
        for how, where, wanted, buffer in plans:
            if how == "buffered":
                out[:, where] = buffer[:, wanted]
        return out if by_repetition else self.per_replica(out)

    def blockwise(self, stream: Stream, values: np.ndarray, step) -> np.ndarray:
        """(P, S, ...) = ``step(padded, generator)[rows]`` per replica and block of silos, for draws
        that depend on the silos' own values (a randomizer run on each silo's input).

        ``padded`` (BLOCK, ...) holds the block's rows of ``values[p]`` (P, S, ...) at their row
        positions and zeros elsewhere, so a silo's draws never depend on which other silos of its
        block share the call, even when ``step`` makes several draws in sequence.
        """
        out, members = None, self._layout.members
        rngs = generators(self.run_seed, stream, self._block_keys(self.unique_reps[self.replica_to_rep], self.round_index))
        for p in range(len(self.replica_to_rep)):
            for member, rng in zip(members, rngs):
                padded = np.zeros((BLOCK,) + values.shape[2:], dtype=values.dtype)
                padded[member.rows] = values[p, member.positions]
                result = step(padded, rng)[member.rows]
                if out is None:
                    out = np.empty(values.shape[:2] + result.shape[1:], dtype=result.dtype)
                out[p, member.positions] = result
        return out

    def _block_keys(self, reps: np.ndarray, round_coord: int) -> np.ndarray:
        """(R B, k + 2) generator keys: each row of ``reps`` (R, k) with the round and each of the
        B blocks, rep-major (the order the draw loops take them)."""
        blocks = self._layout.blocks
        keys = np.empty((len(reps), blocks.size, reps.shape[1] + 2), dtype=np.int64)
        keys[:, :, :-2] = reps[:, None, :]
        keys[:, :, -2] = round_coord
        keys[:, :, -1] = blocks
        return keys.reshape(-1, reps.shape[1] + 2)

    def per_replica(self, values: np.ndarray) -> np.ndarray:
        """(P, ...) from a by-repetition draw (U, ...): replica p gets row ``replica_to_rep[p]``."""
        return values[self.replica_to_rep]

    def _keys(self, sizes: np.ndarray, round_coord: int) -> np.ndarray:
        """(U, S, W) uniform sort keys by repetition, +inf beyond each silo's records (random keys)."""
        width = int(self.width if self.width is not None else np.max(sizes))
        keys = self._rows(Stream.MINIBATCH, round_coord, (width,), lambda g, out: g.random(out=out), by_repetition=True)
        sizes = np.asarray(sizes)
        if np.any(sizes < width):
            keys[:, np.arange(width)[None, :] >= sizes[:, None]] = np.inf
        return keys

    def standard_normal(self, shape: tuple[int, ...], by_repetition: bool = False) -> np.ndarray:
        """(P, S, *shape) standard normals from the NOISE stream ((U, S, *shape) by repetition)."""
        return self._rows(Stream.NOISE, self.round_index, tuple(shape), lambda g, out: g.standard_normal(out=out),
                          by_repetition)

    def ball_projections(self, width: int, dim: int) -> np.ndarray:
        """(P, S, width) <y, u> / r for y uniform in the d-ball of radius r and any unit vector u,
        one per record (SMOOTHING stream): 2 B - 1 with B ~ Beta((d + 1) / 2, (d + 1) / 2), the
        marginal of the uniform ball (density proportional to (1 - t^2)^((d - 1) / 2)). For a linear
        model a record's perturbed margin <w + y, x> is <w, x> + r ||x|| t, so one scalar per record
        draws exactly what a d-vector y would."""
        shape = (dim + 1) / 2
        def fill(g, out):
            out[...] = 2.0 * g.beta(shape, shape, size=out.shape) - 1.0

        return self._rows(Stream.SMOOTHING, self.round_index, (width,), fill)

    def without_replacement(self, sizes: np.ndarray, k: int, by_repetition: bool = False) -> np.ndarray:
        """(P, S, k) indices: k distinct records of silo s out of its sizes[s] (MINIBATCH stream).

        The k smallest of i.i.d. uniform keys form a uniformly random k-subset. (U, S, k) by repetition.
        """
        keys = self._keys(sizes, self.round_index)
        idx = np.argpartition(keys, k - 1, axis=-1)[..., :k] if k < keys.shape[-1] else np.argsort(keys, axis=-1)
        return idx if by_repetition else self.per_replica(idx)

    def with_replacement(self, sizes: np.ndarray, k: int, by_repetition: bool = False) -> np.ndarray:
        """(P, S, k) indices drawn uniformly with replacement (MINIBATCH stream); (U, S, k) by repetition."""
        u = self._rows(Stream.MINIBATCH, self.round_index, (k,), lambda g, out: g.random(out=out), by_repetition=True)
        sizes = np.asarray(sizes)[None, :, None]
        idx = np.minimum((u * sizes).astype(np.int64), sizes - 1)
        return idx if by_repetition else self.per_replica(idx)

    def epoch_slice(self, sizes: np.ndarray, k: int, round_index: int | None = None) -> np.ndarray:
        """(P, S, k) indices: the ``round_index``-th block of k records of a fixed permutation of silo s.

        One-pass sampling (seed-004 §3.3): each (repetition, silo) draws ONE permutation of its
        sizes[s] records for the whole run and round r takes perm[r k : (r + 1) k], so batches are
        disjoint across rounds and every record is used at most once. The permutation comes from
        the MINIBATCH stream at round coordinate EPOCH_ROUND, which no per-round draw uses.
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
        permutation = np.argsort(self._keys(sizes, EPOCH_ROUND), axis=-1, kind="stable")
        return self.per_replica(permutation[..., r * k:(r + 1) * k])
