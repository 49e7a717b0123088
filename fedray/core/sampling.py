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
from functools import lru_cache

import numpy as np

from fedray.errors import ConfigError
from fedray.rng import EPOCH_ROUND, Stream, generator, generators


def _integer(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _list_or_empty(value) -> list:
    """A config list (a ListConfig when Hydra built the sampler) as a list; anything else as []."""
    try:
        return list(value)
    except TypeError:
        return []


def _per_repetition(seed: int, repetitions: np.ndarray, round_index: int, draw) -> np.ndarray:
    # One generator per distinct repetition, built vectorised (``fedray.rng.generators``: the same
    # numbers as ``generator(seed, PARTICIPATION, rep, round)``, ~10x cheaper for many repetitions,
    # as an audit's 200,000 replicas have); ``draw`` consumes each before the next is asked for.
    reps, inverse = np.unique(np.asarray(repetitions), return_inverse=True)
    masks = np.stack([draw(g) for g in generators(seed, Stream.PARTICIPATION, reps[:, None], round_index)])
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
        if self.silos_per_round == num_units:      # everyone: nothing to draw (no later draw reads this stream)
            return np.ones((len(repetitions), num_units), dtype=bool)

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
        if self.probability >= 1.0:     # everyone (a uniform in [0, 1) is below 1): nothing to draw
            return np.ones((len(repetitions), num_units), dtype=bool)
        return _per_repetition(seed, repetitions, round_index, lambda g: g.random(num_units) < self.probability)

    def counts(self, seed: int, repetitions: np.ndarray, num_rounds: int, num_units: int) -> np.ndarray:
        if self.probability >= 1.0:
            return np.full((len(repetitions), num_units), num_rounds, dtype=np.int64)
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

    def step_units(self, step: int) -> tuple[int, int]:
        """The unit ids [lo, hi) of round ``step``."""
        return step * self.batch_size, (step + 1) * self.batch_size

    def sample(self, seed: int, repetitions: np.ndarray, round_index: int, num_units: int) -> np.ndarray:
        return _batch_mask(self, len(repetitions), round_index, num_units)

    def counts(self, seed: int, repetitions: np.ndarray, num_rounds: int, num_units: int) -> np.ndarray:
        return _batch_counts(self, len(repetitions), num_rounds, num_units)


@dataclass(frozen=True)
class PhasedBatches:
    """Phases of disjoint batches: phase j runs ``steps[j]`` rounds of ``batch_sizes[j]`` units each,
    on the units after those of the earlier phases (a fresh group of users per phase, as phased
    methods for strongly convex losses use). Each unit at most once; the order is the unit ids, as
    ``SequentialBatches``."""

    batch_sizes: tuple
    steps: tuple

    def validate(self, num_units: int) -> None:
        sizes, steps = list(self.batch_sizes), list(self.steps)
        if not sizes or len(sizes) != len(steps) or not all(_integer(v) and v >= 1 for v in sizes + steps):
            raise ConfigError("participation", {"batch_sizes": sizes, "steps": steps},
                              "two lists of the same length of integers >= 1 (a batch size and rounds per phase)")
        used = sum(b * t for b, t in zip(sizes, steps))
        if used > num_units:
            raise ConfigError("participation", {"batch_sizes": sizes, "steps": steps},
                              f"phases that use at most the {num_units} units (they use {used})")

    def per_round(self, num_units: int) -> int | None:
        return int(max(self.batch_sizes))

    def max_rounds(self, num_units: int) -> int | None:
        return int(sum(self.steps))

    def step_units(self, step: int) -> tuple[int, int]:
        phase = phase_of(self.steps, step)
        first_step = int(sum(self.steps[:phase]))
        first_unit = int(sum(b * t for b, t in zip(self.batch_sizes[:phase], self.steps[:phase])))
        lo = first_unit + (step - first_step) * int(self.batch_sizes[phase])
        return lo, lo + int(self.batch_sizes[phase])

    def sample(self, seed: int, repetitions: np.ndarray, round_index: int, num_units: int) -> np.ndarray:
        return _batch_mask(self, len(repetitions), round_index, num_units)

    def counts(self, seed: int, repetitions: np.ndarray, num_rounds: int, num_units: int) -> np.ndarray:
        return _batch_counts(self, len(repetitions), num_rounds, num_units)


@dataclass(frozen=True)
class PhasedGroups:
    """Phases on disjoint groups: phase j runs ``rounds`` rounds with every unit of group j, units
    [j g, (j + 1) g) for g = ``group_size`` (fully interactive phased methods: each unit takes part in
    the ``rounds`` rounds of its own phase only). Units after the last group never take part."""

    group_size: int
    rounds: int
    phases: int

    def validate(self, num_units: int) -> None:
        values = (self.group_size, self.rounds, self.phases)
        if not all(_integer(v) and v >= 1 for v in values):
            raise ConfigError("participation", dict(zip(("group_size", "rounds", "phases"), values)),
                              "integers >= 1 (units per group, rounds per phase, phases)")
        if self.group_size * self.phases > num_units:
            raise ConfigError("participation", {"group_size": self.group_size, "phases": self.phases},
                              f"groups that fit in the {num_units} units")

    def per_round(self, num_units: int) -> int | None:
        return int(self.group_size)

    def max_rounds(self, num_units: int) -> int | None:
        return int(self.rounds * self.phases)

    def step_units(self, step: int) -> tuple[int, int]:
        lo = (step // self.rounds) * self.group_size
        return lo, lo + self.group_size

    def sample(self, seed: int, repetitions: np.ndarray, round_index: int, num_units: int) -> np.ndarray:
        return _batch_mask(self, len(repetitions), round_index, num_units)

    def counts(self, seed: int, repetitions: np.ndarray, num_rounds: int, num_units: int) -> np.ndarray:
        counts = np.zeros((len(repetitions), num_units), dtype=np.int64)
        for phase in range(self.phases):
            done = min(max(num_rounds - phase * self.rounds, 0), self.rounds)
            counts[:, phase * self.group_size:(phase + 1) * self.group_size] = done
        return counts


@dataclass(frozen=True)
class PhasedSubsets:
    """Phases of fresh units, a random subset of the phase's units every round: phase j holds
    ``phase_units[j]`` units and runs ``steps[j]`` rounds, each on ``batch_sizes[j]`` of its units
    drawn uniformly without replacement (seed 002's Alg. 3: n_i fresh users per phase, K_i of them
    per step). Which units form phase j: positions [sum of the earlier sizes, + phase_units[j]) of
    a uniform permutation of the ids keyed by the run seed alone (``members``), so every phase is
    spread over the whole population (and over every actor, whose units are a contiguous id
    range) and owes nothing to how ids were assigned. Units of no phase never take part."""

    phase_units: tuple
    steps: tuple
    batch_sizes: tuple

    def __post_init__(self) -> None:
        # Hydra passes ListConfigs, whose element access costs microseconds: every round reads these
        for name in ("phase_units", "steps", "batch_sizes"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, (str, bytes)):
                try:
                    object.__setattr__(self, name, tuple(value))
                except TypeError:
                    pass                    # not a list: ``validate`` names it

    def validate(self, num_units: int) -> None:
        if self.phase_units is None and self.steps is None and self.batch_sizes is None:
            raise ConfigError("participation.phase_units", None, "three lists of phase sizes, rounds and units per "
                              "round (participation=phased is set by accelerated_phased_erm)")
        units, steps, sizes = _list_or_empty(self.phase_units), _list_or_empty(self.steps), \
            _list_or_empty(self.batch_sizes)
        given = {"phase_units": units, "steps": steps, "batch_sizes": sizes}
        if not units or not len(units) == len(steps) == len(sizes) or \
                not all(_integer(v) and v >= 1 for v in units + steps + sizes):
            raise ConfigError("participation", given, "three lists of the same length of integers >= 1 (units, "
                              "rounds and units per round of each phase)")
        if any(b > u for b, u in zip(sizes, units)):
            raise ConfigError("participation", given, "batch_sizes at most their phase's units")
        if sum(units) > num_units:
            raise ConfigError("participation", given, f"phases that fit in the {num_units} units (they use "
                              f"{sum(units)})")

    def per_round(self, num_units: int) -> int | None:
        return int(self.batch_sizes[0]) if len(set(self.batch_sizes)) == 1 else None

    def max_rounds(self, num_units: int) -> int:
        return int(sum(self.steps))

    def phase_range(self, phase: int) -> tuple[int, int]:
        """[lo, hi): the positions of ``phase`` (0-based) in the permutation of ``members``."""
        lo = int(sum(self.phase_units[:phase]))
        return lo, lo + int(self.phase_units[phase])

    def members(self, seed: int, num_units: int) -> np.ndarray:
        """(N,) the phase (0-based) of every unit, -1 for units of no phase."""
        return _phase_members(int(seed), int(num_units), tuple(int(u) for u in self.phase_units))

    def positions(self, seed: int, num_units: int) -> np.ndarray:
        """(N,) every unit's place in its phase (0 .. phase_units[j] - 1, in the permutation's
        order, so consecutive places are a uniform random subset), -1 for units of no phase: what
        cuts a phase into groups (seed 002's Alg. 1)."""
        members = self.members(seed, num_units)
        place = np.empty(int(num_units), dtype=np.int64)
        place[_permutation(int(seed), int(num_units))] = np.arange(int(num_units))
        starts = np.concatenate([[0], np.cumsum(self.phase_units)])
        return np.where(members >= 0, place - starts[np.maximum(members, 0)], -1)

    def sample(self, seed: int, repetitions: np.ndarray, round_index: int, num_units: int) -> np.ndarray:
        if round_index >= self.max_rounds(num_units):
            raise ValueError(f"round {round_index}: the phases run {self.max_rounds(num_units)} rounds")
        phase = phase_of(self.steps, round_index)
        lo, hi = self.phase_range(phase)
        units = _permutation(int(seed), int(num_units))[lo:hi]

        def draw(g: np.random.Generator) -> np.ndarray:
            mask = np.zeros(num_units, dtype=bool)
            mask[units[g.choice(hi - lo, size=int(self.batch_sizes[phase]), replace=False)]] = True
            return mask

        return _per_repetition(seed, repetitions, round_index, draw)

    def counts(self, seed: int, repetitions: np.ndarray, num_rounds: int, num_units: int) -> np.ndarray:
        return _accumulated(self, seed, repetitions, min(num_rounds, self.max_rounds(num_units)), num_units)


@lru_cache(maxsize=8)
def _permutation(seed: int, num_units: int) -> np.ndarray:
    """The public permutation of the unit ids that phases are cut from (keyed by the seed alone:
    every replica and repetition of a run shares the phases)."""
    permutation = generator(seed, Stream.PARTICIPATION, EPOCH_ROUND).permutation(num_units)
    permutation.setflags(write=False)
    return permutation


@lru_cache(maxsize=8)
def _phase_members(seed: int, num_units: int, phase_units: tuple) -> np.ndarray:
    members = np.full(num_units, -1, dtype=np.int64)
    bounds = np.concatenate([[0], np.cumsum(phase_units)])
    permutation = _permutation(seed, num_units)
    for phase, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        members[permutation[lo:hi]] = phase
    members.setflags(write=False)
    return members


@dataclass(frozen=True)
class LeveledBatches:
    """Disjoint batches of random sizes from random levels, until a stopping rule (seed-001 Alg. 3).

    Per repetition, from the LEVEL stream: level N_t ~ TG(1/2, M) (P[N = k] = 2^{-k} / C_M,
    k = 0..M), batch t = the next ceil(max(1, 2^{N_t} / alpha)) units in id order, and steps run
    while sum_{s<t} 2^{N_s} <= U - 2^M, so every repetition stops after its own number of steps,
    with sum_t 2^{N_t} <= U. Public randomness: the levels depend on no data (like any
    participation), and replicas of one repetition share them. ``sample`` is round t's (P, N) mask
    (empty for a repetition that has stopped); ``levels_of`` the levels themselves.
    """

    levels: int            # M
    batch_factor: float    # alpha
    stop: float            # U

    def validate(self, num_units: int) -> None:
        if not _integer(self.levels) or self.levels < 0:
            raise ConfigError("participation.levels", self.levels, "an integer >= 0 (M)")
        for key, value in (("batch_factor", self.batch_factor), ("stop", self.stop)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise ConfigError(f"participation.{key}", value, "a positive number")
        if self.stop < 2**self.levels:
            raise ConfigError("participation.stop", self.stop, f"at least 2^M = {2**self.levels} (U >= 2^M)")

    def per_round(self, num_units: int) -> int | None:
        return None

    def max_rounds(self, num_units: int) -> int | None:
        return int(self.stop)              # each step adds 2^N >= 1 to a sum that stays <= U

    def schedule(self, seed: int, repetition: int) -> tuple[np.ndarray, np.ndarray]:
        """(levels N_t, first unit of batch t plus the end: len T + 1) of one repetition."""
        return _leveled_schedule(self, int(seed), int(repetition))

    def levels_of(self, seed: int, repetitions: np.ndarray, round_index: int) -> np.ndarray:
        """(P,) N_t of round t per replica (-1 where the repetition has stopped)."""
        out = []
        for rep in np.asarray(repetitions).reshape(-1):
            levels, _ = self.schedule(seed, rep)
            out.append(levels[round_index] if round_index < levels.size else -1)
        return np.array(out, dtype=np.int64)

    def batch(self, seed: int, repetition: int, round_index: int, num_units: int) -> tuple[int, int] | None:
        """[lo, hi): the units of round ``round_index`` of one repetition, None once it has stopped."""
        levels, starts = self.schedule(seed, repetition)
        if round_index >= levels.size:
            return None
        if starts[round_index + 1] > num_units:
            raise ValueError(f"round {round_index}: the batch ends at unit {starts[round_index + 1]}, past the "
                             f"{num_units} units (U = {self.stop} with alpha = {self.batch_factor})")
        return int(starts[round_index]), int(starts[round_index + 1])

    def sample(self, seed: int, repetitions: np.ndarray, round_index: int, num_units: int) -> np.ndarray:
        def draw(rep: int) -> np.ndarray:
            mask = np.zeros(num_units, dtype=bool)
            units = self.batch(seed, rep, round_index, num_units)
            if units is not None:
                mask[units[0]:units[1]] = True
            return mask

        return np.stack([draw(int(rep)) for rep in np.asarray(repetitions).reshape(-1)])

    def counts(self, seed: int, repetitions: np.ndarray, num_rounds: int, num_units: int) -> np.ndarray:
        counts = np.zeros((len(repetitions), num_units), dtype=np.int64)
        for row, rep in enumerate(np.asarray(repetitions).reshape(-1)):
            levels, starts = self.schedule(seed, rep)
            counts[row, :starts[min(num_rounds, levels.size)]] = 1
        return counts


def truncated_geometric(levels: int) -> np.ndarray:
    """(M + 1,) P[N = k] = 2^{-k} / C_M, C_M = 2 - 2^{-M}: TG(1/2, M) (seed-001 §3.2, erratum 2)."""
    return 2.0 ** -np.arange(levels + 1) / (2.0 - 2.0 ** -levels)


def draw_truncated_geometric(uniforms, levels: int) -> np.ndarray:
    """Levels N ~ TG(1/2, M), one per uniform in [0, 1), by inverse CDF."""
    cumulative = np.cumsum(truncated_geometric(levels))
    return np.minimum(np.searchsorted(cumulative, uniforms, side="right"), levels)


@lru_cache(maxsize=4096)
def _leveled_schedule(sampler: LeveledBatches, seed: int, repetition: int) -> tuple[np.ndarray, np.ndarray]:
    m = sampler.levels
    rng = generator(seed, Stream.LEVEL, repetition)
    levels, total = [], 0.0
    while total <= sampler.stop - 2**m:
        level = int(draw_truncated_geometric(rng.random(), m))
        levels.append(level)
        total += 2**level
    sizes = np.ceil(np.maximum(1.0, 2.0 ** np.array(levels, dtype=np.float64) / sampler.batch_factor)).astype(np.int64)
    return np.array(levels, dtype=np.int64), np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def phase_of(steps, step: int) -> int:
    """The phase (0-based) that round ``step`` falls in, for phases of ``steps`` rounds each."""
    return int(np.searchsorted(np.cumsum(steps), step, side="right"))


def _batch_mask(sampler, num_replicas: int, round_index: int, num_units: int) -> np.ndarray:
    if round_index >= sampler.max_rounds(num_units):
        raise ValueError(f"round {round_index} of {num_units} units: at most {sampler.max_rounds(num_units)} "
                         "rounds of disjoint batches")
    lo, hi = sampler.step_units(round_index)
    mask = np.zeros((num_replicas, num_units), dtype=bool)
    mask[:, lo:hi] = True
    return mask


def _batch_counts(sampler, num_replicas: int, num_rounds: int, num_units: int) -> np.ndarray:
    counts = np.zeros((num_replicas, num_units), dtype=np.int64)
    rounds = min(num_rounds, sampler.max_rounds(num_units))
    if rounds:
        counts[:, :sampler.step_units(rounds - 1)[1]] = 1
    return counts
