"""How the driver carries rounds to the actors: one execution strategy per shape of run.

The driver loop (``fedray.runtime.driver``) configures a call, exchanges it with the actors,
aggregates on the server and settles each history entry; a strategy says how each step is done
for its shape of run:

- ``PerRound``: one round per actor call; every actor runs the round's ``OneStep`` for its units
  and the driver gathers their messages (through the shuffler when the routing says so).
- ``StepBlockCalls``: blocks of sequential steps (``StepBlocks``), each run in the one actor that
  holds its units; a step whose units straddle two actors runs as an ordinary round.
- ``RoundBlockCalls``: several ordinary rounds per call (``RoundBlocks``), in the one actor that
  holds every unit; the block's size follows the measured pace.

A driver-side program (``fedray.core.program.CentralProgram``) has no rounds: the driver runs it
once over the oracle (``driver._program``).

A block returns the state its actor reached (the claim): the driver configures the next call
from it at once and re-runs the server's steps on the released messages while that call runs
(``settle``), checking that it reaches the same state. Draws are keyed by round (step) index,
so no strategy and no block size changes a bit of what a run reports.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from fedray.core.protocol import (Messages, OneStep, RoundBlock, RoundBlocks, RoundKeys, RoundProtocol, RoundSpec,
                                  StepBlock, StepBlocks, client_operation)
from fedray.runtime.silo_group import RoundPayload

if TYPE_CHECKING:
    from fedray.plan import Plan

ROUNDS_PER_CALL = 64        # the most rounds one actor call runs (``SampledRounds.rounds``)
CALL_SECONDS = 0.1          # what a call of several rounds aims to take: its overhead (~5 ms) stays small


@dataclass(frozen=True)
class Call:
    """A call the actors answered: the history entry it starts at, what was asked and what came
    back (``claim``: the end state a block's actor reported; None for an ordinary round)."""

    index: int
    spec: RoundSpec
    keys: RoundKeys
    messages: Any                   # ``Messages``, or a block of rounds' ``RoundsReply``
    evaluation: list | None         # the units' evaluation parts, or None
    evaluate: bool
    claim: Any = None


Settle = Callable[[Any, int, RoundSpec, RoundKeys, Messages, Any, bool], Any]
"""``settle(state, index, spec, keys, messages, evaluation parts, evaluate) -> state``: one
history entry aggregated on the server and recorded."""


@dataclass
class Evaluation:
    """Which history entries evaluate the model (every ``every``-th and the last step), and the
    models of a faithful run, whose units the driver may not query while the protocol runs: they
    are kept (``deferred``: history index, last step, model) and evaluated after the run."""

    every: int
    num_steps: int
    faithful: bool
    deferred: list

    def due(self, index: int, last_step: int) -> bool:
        """Whether history entry ``index``, whose last step is ``last_step``, is evaluated."""
        return index % self.every == 0 or last_step + 1 == self.num_steps


class PerRound:
    """One round per actor call: ``configure`` as the protocol says, every actor runs its units'
    part and the driver receives the messages (``owner`` None: an ordinary exchange)."""

    def __init__(self, protocol: RoundProtocol):
        self.protocol = protocol

    def configure(self, state: Any, keys: RoundKeys) -> RoundSpec:
        return self.protocol.configure(state, keys)

    def charges(self, state: Any, spec: RoundSpec) -> list[np.ndarray]:
        """The charges of the rounds ``spec`` runs, in order (a budget pays for them one by one)."""
        return [self.protocol.charge(state, spec)]

    def shorten(self, state: Any, keys: RoundKeys, spec: RoundSpec, fits: int) -> RoundSpec | None:
        """The call cut to the ``fits`` rounds a budget pays for, or None where it cannot be cut."""
        return None

    def owner(self, spec: RoundSpec) -> int | None:
        """The actor that runs ``spec`` as a block, or None: every actor takes part."""
        return None

    def entries(self, spec: RoundSpec) -> int:
        """How many history entries the call settles."""
        return 1

    def measured(self, spec: RoundSpec, seconds: float) -> None:
        """A block took ``seconds``: what the next call's size may follow."""

    def entry_index(self, index: int, spec: RoundSpec) -> int:
        """The index evaluation schedules count: the history entry."""
        return index

    def payload(self, index: int, spec: RoundSpec, state: Any, evaluation: Evaluation) -> tuple[RoundPayload, bool]:
        """What the actors receive (the model to evaluate, when due), and whether the parts they
        send back are evaluated at this entry (a faithful run's model is kept for after the run)."""
        last = spec.round + spec.steps - 1
        evaluate = evaluation.due(self.entry_index(index, spec), last)
        model = next(iter(self.protocol.output(state).values())) if evaluate else None
        if evaluation.faithful and model is not None:
            # The driver sees no per-unit statistic while the protocol runs: the model is evaluated
            # after the run, and what comes back is reported as diagnostic.
            evaluation.deferred.append((index, last, model))
            model, evaluate = None, False
        return RoundPayload(spec, model), evaluate

    def settle(self, state: Any, call: Call, settle: Settle) -> Any:
        """The call's history entries settled on the server, from ``state``."""
        return settle(state, call.index, call.spec, call.keys, call.messages, call.evaluation, call.evaluate)


class StepBlockCalls(PerRound):
    """Blocks of sequential steps (``StepBlocks``): a block is cut to the steps whose units live in
    the actor holding its first step, and to the steps before the next evaluated one; a step whose
    units straddle two actors runs as an ordinary round. A history entry is a block, counted by
    its first step for evaluation."""

    def __init__(self, protocol: StepBlocks, ranges: list[tuple[int, int]], evaluate_every: int, num_steps: int):
        super().__init__(protocol)
        self.steps, self.ranges = protocol, ranges
        self.evaluate_every, self.num_steps = evaluate_every, num_steps

    def configure(self, state: Any, keys: RoundKeys) -> RoundSpec:
        spec = self.protocol.configure(state, keys)
        if not isinstance(client_operation(self.protocol, spec), StepBlock):
            return spec
        spec, _ = _fit_block(self.steps, spec, self.ranges)
        if isinstance(client_operation(self.protocol, spec), StepBlock):
            spec = _cut_at_evaluation(self.steps, spec, self.evaluate_every, self.num_steps)
        return spec

    def shorten(self, state: Any, keys: RoundKeys, spec: RoundSpec, fits: int) -> RoundSpec | None:
        """A block the budget refuses runs its first step alone (the budget's last steps, one at a time)."""
        return self.steps.one_step(spec) if isinstance(client_operation(self.protocol, spec), StepBlock) else None

    def owner(self, spec: RoundSpec) -> int | None:
        if isinstance(client_operation(self.protocol, spec), OneStep):
            return None
        lo = self.steps.step_units(spec.round)[0]
        return next(i for i, (a, b) in enumerate(self.ranges) if a <= lo < b)

    def entry_index(self, index: int, spec: RoundSpec) -> int:
        return spec.round


class RoundBlockCalls(PerRound):
    """Several ordinary rounds per call (``RoundBlocks``), where one actor holds every unit and the
    driver may see what the block returns (no shuffler; not a faithful run). The first call runs
    one round, so the first round reports at once; later calls as many (up to ``rounds_per_call``)
    as take about ``CALL_SECONDS`` at the pace measured so far. The actor evaluates the rounds due,
    each at its start; every round settles as its own history entry."""

    def __init__(self, protocol: RoundBlocks, rounds_per_call: int, first_round: int):
        super().__init__(protocol)
        self.blocks, self.rounds_per_call, self.first_round = protocol, rounds_per_call, first_round
        self.size = 1

    def configure(self, state: Any, keys: RoundKeys) -> RoundSpec:
        return self.blocks.rounds(state, keys, min(self.size, self.protocol.num_rounds - keys.round))

    def charges(self, state: Any, spec: RoundSpec) -> list[np.ndarray]:
        return [self.protocol.charge(state, self.blocks.round_in(spec, i, state)[0]) for i in range(spec.steps)]

    def shorten(self, state: Any, keys: RoundKeys, spec: RoundSpec, fits: int) -> RoundSpec | None:
        """The block ends before the first refused round, as one round per call would."""
        return self.blocks.rounds(state, keys, fits) if fits else None

    def owner(self, spec: RoundSpec) -> int | None:
        return 0

    def entries(self, spec: RoundSpec) -> int:
        return spec.steps

    def measured(self, spec: RoundSpec, seconds: float) -> None:
        # the first call's pace includes one-time costs (the actor's first imports): it sets no size
        pace = seconds / spec.steps
        self.size = 2 if spec.round == self.first_round else \
            max(1, min(self.rounds_per_call, int(CALL_SECONDS / max(pace, 1e-6))))

    def payload(self, index: int, spec: RoundSpec, state: Any, evaluation: Evaluation) -> tuple[RoundPayload, bool]:
        due = tuple(t for t in range(index, index + spec.steps) if evaluation.due(t, t))
        return RoundPayload(spec, None, due), False

    def settle(self, state: Any, call: Call, settle: Settle) -> Any:
        for i, (sent, parts) in enumerate(call.messages.rounds(call.spec.round)):
            spec, keys = self.blocks.round_in(call.spec, i, state)
            state = settle(state, call.index + i, spec, keys, sent, [parts], parts is not None)
        return state


def strategy(plan: Plan, protocol: RoundProtocol, ranges: list[tuple[int, int]], shuffled: bool,
             first_round: int) -> PerRound:
    """The execution strategy for ``protocol`` on actors holding the unit ``ranges`` (behind a
    shuffler if ``shuffled``), for a run that starts at history entry ``first_round``."""
    calls = int(plan.runtime.get("rounds_per_call") or ROUNDS_PER_CALL)
    if len(ranges) == 1 and protocol.round_blocks and isinstance(protocol, RoundBlocks) and calls > 1 \
            and not shuffled and not plan.privacy.faithful:
        return RoundBlockCalls(protocol, calls, first_round)
    if isinstance(protocol, StepBlocks):
        return StepBlockCalls(protocol, ranges, plan.evaluate_every, plan.num_rounds)
    return PerRound(protocol)


def _fit_block(protocol: StepBlocks, spec: RoundSpec, ranges: list) -> tuple[RoundSpec, int | None]:
    """The block shortened to the steps whose units live in the actor holding its first step, and
    that actor; or the first step as an ordinary round (no owner) when its units straddle two."""
    lo, hi = protocol.step_units(spec.round)
    owner = next(i for i, (a, b) in enumerate(ranges) if a <= lo < b)
    end = ranges[owner][1]
    if hi > end:
        return protocol.one_step(spec), None
    steps = 1
    while steps < spec.steps and protocol.step_units(spec.round + steps)[1] <= end:
        steps += 1
    if steps < spec.steps:
        participation = np.zeros_like(spec.participation)
        participation[:, lo:protocol.step_units(spec.round + steps - 1)[1]] = True
        spec = replace(spec, steps=steps, participation=participation)
    return spec, owner


def _cut_at_evaluation(protocol: StepBlocks, spec: RoundSpec, evaluate_every: int, num_steps: int) -> RoundSpec:
    """A block of sequential steps that starts at an evaluated step (a multiple of
    ``evaluate_every``, or the last step) shortened to that one step, evaluated at its start like
    an ordinary round; any other block ends before the next evaluated step. So the model is
    evaluated and logged at the steps ``evaluate_every`` names, whatever the block sizes (uncut, a
    block of every step is one history entry, evaluated at its start: the starting model)."""
    first = spec.round
    if first % evaluate_every == 0 or first == num_steps - 1:
        steps = 1
    else:
        steps = min(spec.steps, (first // evaluate_every + 1) * evaluate_every - first, num_steps - 1 - first)
    if steps >= spec.steps:
        return spec
    participation = np.zeros_like(spec.participation)
    participation[:, protocol.step_units(first)[0]:protocol.step_units(first + steps - 1)[1]] = True
    return replace(spec, steps=steps, participation=participation)
