"""The round protocol contract, and a protocol built from parts (sampler, client and server halves).

A protocol is pure numpy on plain state; the runtime moves its arrays. One round, as data flows::

    spec = protocol.configure(state, keys)                 driver: who takes part, the broadcast
    messages = protocol.client_step(broadcast, shard, draws)    every actor, for its units at once
    [shuffler: permute and drop identity, or forward the sum (``routing``)]
    state, charge, metrics = protocol.aggregate(state, spec, messages, keys)    driver
    ledger.record(charge); until protocol.done(state).all(); then protocol.output(state)

Axis 0 of client messages is the replica (P: step sizes x budgets x repetitions carried by one
run), axis 1 the unit (silo or user). ``charge`` (P, N) marks the (replica, unit) cells this
round's releases touched; the ledger's accountant says what one charge costs. It is known before
the round runs (``protocol.charge(state, spec)``, from the state the round starts from), so the
driver can refuse a round the budget cannot pay for. ``done`` is per replica, so halting and
random stopping need no special path in the driver.

``keys`` (``RoundKeys``) carries the run seed, the replicas' repetitions and stream keys and the
round index, from which every server-side draw is keyed (``fedray.rng``): a round can be replayed
exactly. Every half that draws receives the keys of its own round (step): ``init`` those of round
0, each ``server_step`` those of the round (step) it runs, in the driver or inside an actor's block.
An algorithm holds no seed or stream key of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from collections.abc import Iterator, Mapping
from typing import Any, Callable, ClassVar, NamedTuple, Protocol, runtime_checkable

import numpy as np

from fedray.core.mechanism import ReportsMetrics
from fedray.rng import CounterStream, Stream, generator, generators, stream_rows


class Routing(str, Enum):
    """How client messages reach the server."""

    DIRECT = "direct"              # as sent, in unit order (the server knows who sent what)
    SHUFFLE = "shuffle"            # a shuffler permutes them and drops sender identity
    SHUFFLE_SUM = "shuffle_sum"    # the shuffler forwards only their sum


CLIENT_STEP = "client_step"          # the operation names the shapes below register (``operations``)
CLIENT_BLOCK = "client_block"
CLIENT_ROUNDS = "client_rounds"


@dataclass(frozen=True)
class RoundKeys:
    """The coordinates every draw of one round is keyed by."""

    seed: int
    repetitions: np.ndarray        # (P,) the repetition of each replica: keys public draws (participation)
    round: int
    streams: np.ndarray            # (P, k) each replica's own key (``Replicas.streams``): keys private draws

    def generator(self, stream: Stream, replica: int) -> np.random.Generator:
        """The server's generator of ``stream`` for one replica in this round."""
        return generator(self.seed, stream, *self.streams[replica], self.round)

    def generators(self, stream: Stream) -> Iterator[np.random.Generator]:
        """``generator(stream, p)`` for every replica p in order, the same numbers without a
        SeedSequence per replica (``fedray.rng.generators``): ONE generator re-seeded before each
        yield, so draw from it before asking for the next (``[g.standard_normal(shape) for g in
        keys.generators(stream)]``); a tenth of the time over many replicas."""
        return generators(self.seed, stream, stream_rows(self.streams), self.round)

    def at(self, round_index: int) -> RoundKeys:
        """The keys of round (step) ``round_index`` of the same run."""
        return RoundKeys(self.seed, self.repetitions, int(round_index), self.streams)

    def counters(self, stream: Stream) -> tuple[CounterStream, ...]:
        """Each replica's counter-based stream ``stream`` (``fedray.rng.CounterStream``), keyed by the
        run seed and its row of ``streams`` alone: the caller picks the counter (e.g. the step), so
        a draw is the same whichever side makes it. Built once per process and run."""
        rows = stream_rows(self.streams)
        return _counter_streams(int(self.seed), Stream(stream), rows.tobytes(), rows.shape)


@lru_cache(maxsize=64)
def _counter_streams(seed: int, stream: Stream, rows: bytes, shape: tuple) -> tuple[CounterStream, ...]:
    """The replicas' counter streams (``RoundKeys.counters``): each costs a SeedSequence, which a
    curator's per-step draws must not pay per step."""
    return tuple(CounterStream(seed, stream, *row) for row in np.frombuffer(rows, dtype=np.int64).reshape(shape))


@dataclass(frozen=True)
class RoundSpec:
    """What ``configure`` decides for a round: who takes part and what every actor receives.

    ``operation`` names the client operation, a key of the protocol's ``operations``: here
    ``client_step`` (one step: every participating unit sends a message), ``client_block``
    (``steps`` sequential steps, from step ``round``, run in the one actor that holds their units;
    see ``SequentialSteps``) or ``client_rounds`` (``steps`` ordinary rounds run in the one actor
    that holds every unit; see ``SampledRounds.rounds``).
    """

    round: int
    participation: np.ndarray      # (P, N) bool (a block's: the union over its rounds)
    broadcast: Any                 # arrays the client step starts from (one ray.put per round)
    steps: int = 1
    operation: str = CLIENT_STEP
    schedule: Any = None           # client_rounds: (steps, P, N) bool, the participation of each round, and its keys
    keys: RoundKeys | None = None  # client_block: the keys of step ``round`` (step t's: ``keys.at(t)``)


@dataclass(frozen=True)
class Messages:
    """What the server receives: (P, S, ...) values and a (P, S) mask of the real rows.

    Under ``Routing.DIRECT`` row s is unit s; behind a shuffler the mask is a prefix (how many
    messages arrived, never who sent them).
    """

    values: np.ndarray
    mask: np.ndarray
    claim: Any = None          # a block's end state as the actor that ran it reached it (``SequentialSteps``)


class Aggregated(NamedTuple):
    state: Any
    charge: np.ndarray             # (P, N) bool or int: releases per (replica, unit) this round
    metrics: dict                  # name -> (P,) values (released: they derive from messages), or a
                                   # ``fedray.core.evaluation.Metric`` tagged released or diagnostic


@dataclass(frozen=True)
class OneStep:
    """A client operation of one round, run by every actor for its participating units:
    ``run(broadcast, shard, draws, participation)`` gives their messages, (P, U, ...), or with
    ``per_actor_sums`` the (P, 1, ...) sum over them (``participation`` is the shard's (P, U) mask)."""

    run: Callable[[Any, Any, Any, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class StepBlock:
    """A block of sequential steps run in the one actor holding their units:
    ``run(spec, shard, unit_ids, draws_for)`` gives the per-step values (steps, P, ...) the block
    releases and the state it reaches; ``draws_for(step, unit_ids)`` keys a step's client draws."""

    run: Callable[[RoundSpec, Any, np.ndarray, Callable[[int, np.ndarray], Any]], tuple[np.ndarray, Any]]


@dataclass(frozen=True)
class RoundBlock:
    """Several ordinary rounds run in the one actor holding every unit: ``run(spec, exchange,
    evaluate)``, where ``exchange(round_spec)`` gives one round's ``Messages`` from the actor's units
    and ``evaluate(round, state)`` the evaluation parts due at that round (or None), gives every
    round's messages and evaluation parts and the end state."""

    run: Callable[[RoundSpec, Callable[[RoundSpec], Messages], Callable[[int, Any], dict | None]],
                  tuple[list[Messages], list[dict | None], Any]]


ClientOperation = OneStep | StepBlock | RoundBlock
"""The kinds of client operation an actor runs; a protocol registers its own in ``operations``."""


class Algorithm(Protocol):
    """What every protocol shape below reads of the algorithm it is built from: its state starts at
    ``init(params0, keys)`` (``keys`` of round 0, for an algorithm that draws before the first
    round), ``broadcast(state)`` is what the units compute at, ``output(state)`` the released
    values. Each shape adds its client and server halves (``RoundsAlgorithm``, ``StepsAlgorithm``,
    ...): every ``server_step`` receives the ``RoundKeys`` of its round or step and makes its
    draws from them (``keys.generator``, or ``fedray.rng`` on ``keys.seed`` and ``keys.streams``)."""

    def init(self, params0: np.ndarray, keys: RoundKeys) -> Any: ...

    def broadcast(self, state: Any) -> Any: ...

    def output(self, state: Any) -> dict[str, np.ndarray]: ...


class RoundsAlgorithm(Algorithm, Protocol):
    """The halves ``SampledRounds`` runs: ``silo_step(broadcast, shard, draws)`` gives the units'
    messages (P, U, ...); ``server_step(state, values, mask, keys)`` takes them (P, S, ...) with
    their (P, S) mask and the round's keys."""

    @property
    def silo_step(self) -> Callable[..., np.ndarray]: ...   # CuratorSampledRounds passes the (P, U) mask too

    def server_step(self, state: Any, values: np.ndarray, mask: np.ndarray, keys: RoundKeys) -> Any: ...


class CuratorRoundsAlgorithm(RoundsAlgorithm, Protocol):
    """The halves ``CuratorSampledRounds`` runs: as ``RoundsAlgorithm`` with
    ``silo_step(broadcast, shard, draws, participation)``, and the curator's own charge, metrics
    and halting."""

    def charge(self, state: Any, participation: np.ndarray) -> np.ndarray: ...

    def metrics(self, state: Any) -> dict: ...

    def done(self, state: Any) -> np.ndarray: ...


class StepsAlgorithm(Algorithm, Protocol):
    """The halves ``SequentialSteps`` runs: ``silo_step(broadcast, shard, draws)`` gives the batch's
    messages (P, U, ...); ``server_step(state, summed, keys)`` takes their sum (P, ...) and the
    step's keys."""

    def silo_step(self, broadcast: Any, shard: Any, draws: Any) -> np.ndarray: ...

    def server_step(self, state: Any, summed: np.ndarray, keys: RoundKeys) -> Any: ...


class CuratorStepsAlgorithm(StepsAlgorithm, Protocol):
    """The halves ``CuratorSteps`` runs: as ``StepsAlgorithm`` (``silo_step`` gives the (P, ...)
    sum over the shard's samples), with what a step released and what steps release."""

    def releases(self, first: int, steps: int) -> np.ndarray: ...

    def released(self, state: Any) -> np.ndarray: ...


class CuratorBatchesAlgorithm(Algorithm, Protocol):
    """The halves ``CuratorRounds`` runs: ``silo_step(broadcast, shard, draws, participation)``
    gives each replica's (P, ...) sum over the shard's units it takes; ``server_step(state,
    summed, keys)`` takes the summed rows and the round's keys."""

    def silo_step(self, broadcast: Any, shard: Any, draws: Any, participation: np.ndarray) -> np.ndarray: ...

    def server_step(self, state: Any, summed: np.ndarray, keys: RoundKeys) -> Any: ...

    def releases(self, state: Any) -> np.ndarray: ...

    def done(self, state: Any) -> np.ndarray: ...


@runtime_checkable
class RoundProtocol(Protocol):
    """What the driver runs: every member the runtime reads. Implementations are frozen
    dataclasses that subclass this class (so the flags below default as declared); state lives in
    ``state``.

    ``operations`` maps each operation name a ``RoundSpec`` may carry to the client operation it
    runs (``OneStep``, ``StepBlock``, ``RoundBlock``), as a Flower ``ClientApp`` registers its
    handlers: the runtime looks the operation up and runs it by its kind, naming none.

    A protocol with ``per_actor_sums = True`` sends one message per actor and replica: the sum over
    the units of that actor the replica takes, shaped (P, 1, ...); only a protocol whose server may
    see un-noised sums (a trusted curator) can ask for it. Otherwise ``client_step`` sends per-unit
    messages, and a replica that did not sample a unit receives a zero row from it.

    ``public_charges``: every round's charge is a function of public randomness (the sampler's
    draws, public levels) and not of the data, so a run may stop when the next round's charge
    would pass the budget (``privacy.enforce_budget=stop``): its stopping round is
    data-independent and its releases are a fixed composition.

    ``round_blocks``: who takes part, and so every round's charge, does not depend on the state,
    so the runtime may run several rounds per actor call (``RoundBlocks``).
    """

    routing: Routing
    constants: dict          # fixed values of the run worth recording once (a clip, a mean noise std)
    round_constants: dict    # name -> (P,) values recorded with every round's metrics
    num_rounds: int          # R, or the most rounds (steps) a halting protocol may run
    per_actor_sums: ClassVar[bool] = False
    public_charges: ClassVar[bool] = True
    round_blocks: ClassVar[bool] = False

    @property
    def operations(self) -> Mapping[str, ClientOperation]: ...

    def init(self, keys: RoundKeys) -> Any: ...

    def configure(self, state: Any, keys: RoundKeys) -> RoundSpec: ...

    def shard(self, federation: Any, unit_ids: np.ndarray) -> Any: ...

    def client_step(self, broadcast: Any, shard: Any, draws: Any, participation: np.ndarray) -> np.ndarray: ...

    def charge(self, state: Any, spec: RoundSpec) -> np.ndarray: ...

    def aggregate(self, state: Any, spec: RoundSpec, messages: Messages, keys: RoundKeys) -> Aggregated: ...

    def done(self, state: Any) -> np.ndarray: ...

    def output(self, state: Any) -> dict[str, np.ndarray]: ...

    def evaluate(self, models: np.ndarray, federation: Any) -> dict: ...

    def combine(self, parts: list[dict]) -> dict: ...


def client_operation(protocol: RoundProtocol, spec: RoundSpec) -> ClientOperation:
    """The client operation ``spec`` names, as ``protocol`` registered it."""
    operations = protocol.operations
    if spec.operation not in operations:
        raise ValueError(f"RoundSpec.operation={spec.operation!r} is not registered by {type(protocol).__name__}; "
                         f"it registers {sorted(operations)}")
    return operations[spec.operation]


@runtime_checkable
class RoundBlocks(RoundProtocol, Protocol):
    """A protocol that can run ``steps`` rounds per actor call (registers a ``RoundBlock``)."""

    def rounds(self, state: Any, keys: RoundKeys, steps: int) -> RoundSpec: ...

    def round_in(self, block: RoundSpec, i: int, state: Any) -> tuple[RoundSpec, RoundKeys]: ...


@runtime_checkable
class StepBlocks(RoundProtocol, Protocol):
    """A protocol of sequential steps run in blocks (registers a ``StepBlock``): a history entry is
    a block of steps, and a round's index is its first step."""

    def step_units(self, step: int) -> tuple[int, int]: ...

    def one_step(self, spec: RoundSpec) -> RoundSpec: ...


class _FromParts(RoundProtocol):
    """What a protocol built from an algorithm's halves delegates to its parts: the algorithm
    (``init``, ``silo_step``, ``output``), the shard view, the evaluation; it ends after
    ``num_rounds`` rounds (steps)."""

    algorithm: Any
    evaluation: Any
    shard_view: Callable[[Any, np.ndarray], Any]
    params0: np.ndarray
    num_units: int

    @property
    def operations(self) -> Mapping[str, ClientOperation]:
        return {CLIENT_STEP: OneStep(self.client_step)}

    def init(self, keys: RoundKeys) -> Any:
        return self.algorithm.init(self.params0, keys)

    def shard(self, federation: Any, unit_ids: np.ndarray) -> Any:
        return self.shard_view(federation, unit_ids)

    def client_step(self, broadcast: Any, shard: Any, draws: Any, participation: np.ndarray) -> np.ndarray:
        return self.algorithm.silo_step(broadcast, shard, draws)

    def done(self, state: Any) -> np.ndarray:
        return np.full(self.params0.shape[0], state.round >= self.num_rounds)

    def output(self, state: Any) -> dict[str, np.ndarray]:
        return self.algorithm.output(state)

    def evaluate(self, models: np.ndarray, federation: Any) -> dict:
        return self.evaluation.shard_parts(models, federation)

    def combine(self, parts: list[dict]) -> dict:
        return self.evaluation.combine(parts, self.num_units)


@dataclass(frozen=True)
class SampledRounds(_FromParts, RoundBlocks):
    """A round protocol from parts: ``sampler`` picks the units of each round, ``algorithm``
    supplies the client and server halves, ``evaluation`` scores models on a shard, and the run
    ends after ``num_rounds`` rounds.

    ``algorithm`` has the halves of a ``RoundsAlgorithm``; its state has ``round``.
    ``shard_view(federation, unit_ids)`` is what its client half reads.
    """

    algorithm: RoundsAlgorithm
    sampler: Any
    evaluation: Any
    shard_view: Callable[[Any, np.ndarray], Any]
    params0: np.ndarray
    num_rounds: int
    num_units: int
    routing: Routing = Routing.DIRECT
    constants: dict = field(default_factory=dict)
    round_constants: dict = field(default_factory=dict)
    # The client-placed privacy step the algorithm applies (the same value): its metrics of the
    # units that applied it this round are logged with the round's.
    client_step_metrics: ReportsMetrics | None = None

    # May run several rounds per actor call (``rounds``): who takes part, and so every round's
    # charge, does not depend on the state.
    round_blocks: ClassVar[bool] = True

    @property
    def operations(self) -> Mapping[str, ClientOperation]:
        return {CLIENT_STEP: OneStep(self.client_step), CLIENT_ROUNDS: RoundBlock(self.client_rounds)}

    def configure(self, state: Any, keys: RoundKeys) -> RoundSpec:
        participation = self.sampler.sample(keys.seed, keys.repetitions, keys.round, self.num_units)
        return RoundSpec(keys.round, participation, self.algorithm.broadcast(state))


    def charge(self, state: Any, spec: RoundSpec) -> np.ndarray:
        """Every unit taking part releases one message (a block of rounds is charged round by round,
        each as ``round_in`` gives it)."""
        return spec.participation

    def aggregate(self, state: Any, spec: RoundSpec, messages: Messages, keys: RoundKeys) -> Aggregated:
        charge = self.charge(state, spec)
        state = self.algorithm.server_step(state, messages.values, messages.mask, keys)
        participants = spec.participation.sum(axis=1).astype(np.float64)
        metrics: dict = {"participants": participants}
        if self.client_step_metrics is not None:        # the client-placed step's report of this round
            metrics.update(self.client_step_metrics.round_metrics(spec.participation))
        return Aggregated(state, charge, metrics)

    # -- several rounds per actor call ---------------------------------------------------------
    # Round t + 1 starts from the server's state after round t, which needs every unit's message,
    # so rounds can only run back to back inside the one actor that holds every unit (a small
    # federation, where a Ray round trip costs more than the round). That actor runs, round by
    # round, exactly what an ordinary round runs: each unit's client step (its noise added there,
    # as always) and then the server's ``aggregate`` on the messages the server would receive, and
    # returns every round's messages and its end state. The driver re-runs ``aggregate`` on those
    # messages and checks it reaches the same state: the server's state is still computed by the
    # server, from the messages alone. Where the server adds noise of its own (a central curator's
    # Gaussian, drawn from streams keyed by (replica, round)), the actor draws the same noise in
    # its copy of the step: nothing reaches the driver that an ordinary round would not send it,
    # and the actor already holds every unit's records. Not used behind a shuffler (the driver
    # would see un-shuffled messages) or in faithful runs (the driver sees no evaluation while the
    # protocol runs).

    def rounds(self, state: Any, keys: RoundKeys, steps: int) -> RoundSpec:
        """A ``client_rounds`` spec: ``steps`` rounds from round ``keys.round``. Participation is
        public randomness keyed by the round, so every round's is known before the block runs."""
        schedule = np.stack([self.sampler.sample(keys.seed, keys.repetitions, keys.round + i, self.num_units)
                             for i in range(steps)])
        return RoundSpec(keys.round, np.asarray(schedule.any(axis=0)), state, steps, CLIENT_ROUNDS, (schedule, keys))

    def round_in(self, block: RoundSpec, i: int, state: Any) -> tuple[RoundSpec, RoundKeys]:
        """Round ``i`` of a block, as ``configure`` would have given it from ``state``, and its keys."""
        schedule, keys = block.schedule
        keys = keys.at(block.round + i)
        return RoundSpec(block.round + i, schedule[i], self.algorithm.broadcast(state)), keys

    def client_rounds(self, block: RoundSpec, exchange: Callable[[RoundSpec], Messages],
                      evaluate: Callable[[int, Any], dict | None]) -> tuple[list[Messages], list[dict | None], Any]:
        """Run a block in the actor holding every unit: ``exchange(spec)`` gives one round's
        ``Messages`` from this actor's units, ``evaluate(round, state)`` the evaluation parts due
        at that round (or None). Returns every round's messages and evaluation parts, and the end state."""
        state, sent, evaluated = block.broadcast, [], []
        for i in range(block.steps):
            spec, keys = self.round_in(block, i, state)
            evaluated.append(evaluate(spec.round, state))
            messages = exchange(spec)
            state = self.aggregate(state, spec, messages, keys).state
            sent.append(messages)
        return sent, evaluated, state


def _block_keys(spec: RoundSpec) -> RoundKeys:
    """The keys a ``client_block`` spec carries (``SequentialSteps.configure`` puts them there)."""
    if spec.keys is None:
        raise ValueError(f"a client_block spec carries the keys of its first step; got none for round {spec.round}")
    return spec.keys


def step_sum(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(P, ...) sum over the unit axis of the real rows: what a summing shuffler forwards, and all
    a sum-based server needs of one step. The same expression everywhere keeps the bits equal."""
    return (values * mask.reshape(mask.shape + (1,) * (values.ndim - 2))).sum(axis=1)


@dataclass(frozen=True)
class SequentialSteps(_FromParts, StepBlocks):
    """A protocol of many tiny sequential steps, run a block of steps per Ray call.

    Step t takes the units of batch t (``sampler``: ``SequentialBatches`` or ``PhasedBatches``, each
    unit once, ``sampler.step_units(t)``), every
    one of them computes its client message at the current iterate (the client-placed mechanisms
    run there, as in any round), the server receives the SUM of the batch's messages (what a
    summing shuffler forwards; under direct routing, a function of what it would receive) and
    ``algorithm.server_step(state, summed, keys)`` (a ``StepsAlgorithm``, with step t's keys) gives
    the next iterate. Step t + 1 needs that iterate,
    so steps cannot run in parallel; one Ray round trip per step would cost more than the step.

    Blocks: ``configure`` asks for up to ``block_steps`` steps; the driver shortens a block to the
    steps whose units live in one actor. That actor runs, step by step, the client messages of the
    step's units, their sum, and the server step on that sum (post-processing of what is released,
    to know the next query point), and returns only the per-step sums (steps, P, ...) and the state
    they lead to. The driver configures the next block from that state at once and, while the next
    block runs, re-runs the server steps on the sums (``aggregate``) and checks it reaches the same
    state: the server's state is computed by the server from the released sums alone. A step whose units straddle two actors runs as an
    ordinary one-step round (every holder sends its units' messages; the sum is formed at the
    server or by the shuffler). Draws are keyed by the step index, so block sizes and actor layout
    change nothing: results are bit-identical for any ``block_steps`` and any number of actors.
    """

    algorithm: StepsAlgorithm
    sampler: Any
    evaluation: Any
    shard_view: Callable[[Any, np.ndarray], Any]
    params0: np.ndarray
    num_rounds: int                # T steps
    num_units: int
    block_steps: int = 4096
    routing: Routing = Routing.DIRECT
    constants: dict = field(default_factory=dict)
    round_constants: dict = field(default_factory=dict)


    @property
    def operations(self) -> Mapping[str, ClientOperation]:
        return {CLIENT_STEP: OneStep(self.client_step), CLIENT_BLOCK: StepBlock(self.client_block)}

    def step_units(self, step: int) -> tuple[int, int]:
        """The unit ids [lo, hi) of step ``step`` (the sampler's disjoint batches)."""
        return self.sampler.step_units(step)

    def configure(self, state: Any, keys: RoundKeys) -> RoundSpec:
        first = int(state.round)
        steps = min(self.block_steps, self.num_rounds - first)
        participation = np.zeros((self.params0.shape[0], self.num_units), dtype=bool)
        participation[:, self.step_units(first)[0]:self.step_units(first + steps - 1)[1]] = True
        return RoundSpec(first, participation, state, steps, CLIENT_BLOCK, keys=keys)

    def one_step(self, spec: RoundSpec) -> RoundSpec:
        """The first step of a block as an ordinary round (for a step whose units straddle actors)."""
        lo, hi = self.step_units(spec.round)
        participation = np.zeros_like(spec.participation)
        participation[:, lo:hi] = True
        return RoundSpec(spec.round, participation, self.algorithm.broadcast(spec.broadcast))


    def client_block(self, spec: RoundSpec, shard: Any, unit_ids: np.ndarray,
                     draws_for: Callable[[int, np.ndarray], Any]) -> tuple[np.ndarray, Any]:
        """The per-step sums (steps, P, ...) of a block whose units all live in ``shard``, and the
        state the server steps on them reach (the driver configures the next block from it while
        it re-runs these steps, and checks that it reaches the same state)."""
        state, sums = spec.broadcast, []
        for step, positions in self._block_steps(spec, unit_ids):
            values = self.algorithm.silo_step(self.algorithm.broadcast(state), shard.select(positions),
                                              draws_for(step, unit_ids[positions]))
            summed = values.sum(axis=1)          # = step_sum with every unit present (x * 1.0 is x)
            state = self.algorithm.server_step(state, summed, _block_keys(spec).at(step))
            sums.append(summed)
        return np.stack(sums), state

    def _block_steps(self, spec: RoundSpec, unit_ids: np.ndarray):
        """(step, positions of its units in the shard) for the steps of a block held by one shard."""
        first_unit = int(unit_ids[0])
        for step in range(spec.round, spec.round + spec.steps):
            lo, hi = self.step_units(step)
            yield step, slice(lo - first_unit, hi - first_unit)

    def charge(self, state: Any, spec: RoundSpec) -> np.ndarray:
        """Every unit of the block's steps releases one message."""
        return spec.participation

    def aggregate(self, state: Any, spec: RoundSpec, messages: Messages, keys: RoundKeys) -> Aggregated:
        charge = self.charge(state, spec)
        sums = messages.values if spec.operation == CLIENT_BLOCK else step_sum(messages.values, messages.mask)[None]
        for step, summed in enumerate(sums, spec.round):
            state = self.algorithm.server_step(state, summed, keys.at(step))
        units = self.step_units(spec.round + spec.steps - 1)[1] - self.step_units(spec.round)[0]
        return Aggregated(state, charge, {"participants": np.full(self.params0.shape[0], float(units))})



@dataclass(frozen=True)
class CuratorSteps(SequentialSteps):
    """Sequential steps of a trusted curator (central DP), run a block of steps per Ray call.

    As ``SequentialSteps`` (disjoint batches, step t + 1 needs step t's result), except for who
    may see what. The curator sees the exact sums of its samples' contributions and its state is
    built from them (mirror descent's scores from raw gradient sums): what it RELEASES is the
    output of its own randomised steps (vertex draws), drawn in ``algorithm.server_step`` from
    the step's keys (``RoundKeys.at(step)``, whichever side runs the step), so draws do not depend
    on the block size or the actor layout.

    A block runs in the actor holding its samples, which acts for the curator there: it forms each
    step's sum, runs the server step and records what the step released
    (``algorithm.released(state)``, (P, ...)); the block returns those releases (steps, P, ...) and
    its end state, which the driver adopts (``Messages.claim``): the raw sums never leave, so there
    is nothing else to re-derive the state from. A step whose samples straddle two actors runs as a
    round in which each holder sends the sum over its part (``per_actor_sums``) and the driver runs
    the server step. A round charges ``algorithm.releases(first_step, steps)`` ((P,) releases of
    those steps) to every sample (each release reads the scores, which read all samples used so
    far): a (P, 1) charge for a population ledger whose one column stands for every sample.
    """

    algorithm: CuratorStepsAlgorithm

    per_actor_sums: ClassVar[bool] = True

    def client_step(self, broadcast: Any, shard: Any, draws: Any, participation: np.ndarray) -> np.ndarray:
        if not participation.all():
            raise ValueError("sequential steps take every unit of a step in every replica")
        return self.algorithm.silo_step(broadcast, shard, draws)[:, None]

    def client_block(self, spec: RoundSpec, shard: Any, unit_ids: np.ndarray,
                     draws_for: Callable[[int, np.ndarray], Any]) -> tuple[np.ndarray, Any]:
        """The releases (steps, P, ...) of a block whose samples all live in ``shard``, and its end state."""
        state, released = spec.broadcast, []
        for step, positions in self._block_steps(spec, unit_ids):
            summed = self.algorithm.silo_step(self.algorithm.broadcast(state), shard.select(positions),
                                              draws_for(step, unit_ids[positions]))
            state = self.algorithm.server_step(state, summed, _block_keys(spec).at(step))
            released.append(self.algorithm.released(state))
        return np.stack(released), state

    def aggregate(self, state: Any, spec: RoundSpec, messages: Messages, keys: RoundKeys) -> Aggregated:
        if spec.operation == CLIENT_BLOCK:
            state = messages.claim
        else:
            state = self.algorithm.server_step(state, step_sum(messages.values, messages.mask), keys.at(spec.round))
        p = self.params0.shape[0]
        units = self.step_units(spec.round + spec.steps - 1)[1] - self.step_units(spec.round)[0]
        return Aggregated(state, self.charge(None, spec), {"participants": np.full(p, float(units))})

    def charge(self, state: Any, spec: RoundSpec) -> np.ndarray:
        """The block's releases, charged to every sample (one population column)."""
        p = self.params0.shape[0]
        return np.asarray(self.algorithm.releases(spec.round, spec.steps), dtype=np.int64).reshape(p, 1)


@dataclass(frozen=True)
class CuratorSampledRounds(SampledRounds):
    """Sampled rounds at a trusted curator that tests, filters and noises the units' messages
    itself, prices its own releases and may halt per replica (seed 002's Alg. 3: each sampled
    user's gradient reaches the server, which runs a sparse-vector test, an outlier filter and
    the Gaussian mechanism; a phase of fresh users is one mechanism over all of them).

    As ``SampledRounds`` (the sampler picks the units, each sends its own message, routed
    directly), except that the server half owns its privacy: ``algorithm.server_step(state,
    values, mask, keys)`` (a ``CuratorRoundsAlgorithm``) makes the curator's draws from the
    round's keys; a round charges ``algorithm.charge(state, participation)`` ((P, N), from
    the state the round started from: e.g. every user of a phase once, at its first round, for
    each replica still running) rather than the participation; ``algorithm.metrics(state)`` adds
    (P,) metrics (``fedray.core.evaluation.Metric``, tagged released or diagnostic); a replica
    ends at ``algorithm.done(state)`` (a failed test halts it), after which none of its units
    takes part (the others' rounds go on); and the client step receives the (P, U) mask of its
    units, so a unit computes only for the replicas that sampled it.
    """

    algorithm: CuratorRoundsAlgorithm
    # The server-placed privacy step the algorithm's server half applies (the same value): its
    # report of the round is logged with the round's metrics.
    server_step_metrics: ReportsMetrics | None = None

    public_charges: ClassVar[bool] = False     # a halted replica (a test outcome) is charged nothing more
    round_blocks: ClassVar[bool] = False       # who takes part depends on the state (halting): one round per call

    def client_step(self, broadcast: Any, shard: Any, draws: Any, participation: np.ndarray) -> np.ndarray:
        """The messages of the (replica, unit) pairs of ``participation`` (the shard's (P, U) mask):
        ``algorithm.silo_step(broadcast, shard, draws, participation)`` computes no other pair."""
        return self.algorithm.silo_step(broadcast, shard, draws, participation)

    def configure(self, state: Any, keys: RoundKeys) -> RoundSpec:
        """As ``SampledRounds``, with no unit taking part for a replica that is done."""
        spec = super().configure(state, keys)
        return RoundSpec(spec.round, spec.participation & ~self.algorithm.done(state)[:, None], spec.broadcast)

    def charge(self, state: Any, spec: RoundSpec) -> np.ndarray:
        return self.algorithm.charge(state, spec.participation)

    def aggregate(self, state: Any, spec: RoundSpec, messages: Messages, keys: RoundKeys) -> Aggregated:
        charge = self.charge(state, spec)
        state = self.algorithm.server_step(state, messages.values, messages.mask, keys)
        metrics = {"participants": spec.participation.sum(axis=1).astype(np.float64), **self.algorithm.metrics(state)}
        if self.server_step_metrics is not None:        # the server-placed step's report of this round
            metrics.update(self.server_step_metrics.round_metrics(spec.participation))
        return Aggregated(state, charge, metrics)

    def done(self, state: Any) -> np.ndarray:
        return self.algorithm.done(state)


@dataclass(frozen=True)
class CuratorRounds(_FromParts):
    """Rounds of a trusted curator (central DP) whose batches differ between replicas and whose
    replicas stop on their own: seed 001's Alg. 3 (random batch sizes, a stopping rule).

    Round t: ``sampler`` gives each replica's units (public randomness, e.g. ``LeveledBatches``),
    ``algorithm.broadcast(state)`` the query the units answer, every actor sends per replica the
    sum over its units of that replica (``per_actor_sums``), and ``algorithm.server_step`` takes
    the summed (P, ...) rows and the round's keys (a ``CuratorBatchesAlgorithm``): the curator's
    own draws are made there, from those keys. Each round charges ``algorithm.releases(state)`` ((P,): what the replica
    released at the state the round started from, 0 once stopped) to every sample: a (P, 1)
    charge for a population ledger. ``algorithm.done(state)`` is per replica.
    """

    algorithm: CuratorBatchesAlgorithm
    sampler: Any
    evaluation: Any
    shard_view: Callable[[Any, np.ndarray], Any]
    params0: np.ndarray
    num_rounds: int                # the most rounds a replica may run
    num_units: int
    routing: Routing = Routing.DIRECT
    constants: dict = field(default_factory=dict)
    round_constants: dict = field(default_factory=dict)

    per_actor_sums: ClassVar[bool] = True

    def configure(self, state: Any, keys: RoundKeys) -> RoundSpec:
        participation = self.sampler.sample(keys.seed, keys.repetitions, keys.round, self.num_units)
        return RoundSpec(keys.round, participation, self.algorithm.broadcast(state))

    def client_step(self, broadcast: Any, shard: Any, draws: Any, participation: np.ndarray) -> np.ndarray:
        return self.algorithm.silo_step(broadcast, shard, draws, participation)[:, None]

    def charge(self, state: Any, spec: RoundSpec) -> np.ndarray:
        """What each replica releases at the state the round starts from, charged to every sample."""
        return np.asarray(self.algorithm.releases(state), dtype=np.int64)[:, None]

    def aggregate(self, state: Any, spec: RoundSpec, messages: Messages, keys: RoundKeys) -> Aggregated:
        charge = self.charge(state, spec)
        state = self.algorithm.server_step(state, step_sum(messages.values, messages.mask), keys)
        return Aggregated(state, charge, {"participants": spec.participation.sum(axis=1).astype(np.float64)})

    def done(self, state: Any) -> np.ndarray:
        return self.algorithm.done(state)
