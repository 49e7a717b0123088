"""A silo group: many units (silos or users) held by one Ray actor as stacked arrays.

Trust boundary: the group loads its units' records itself, from a dataset spec, and keeps them.
What leaves it: the protocol's client messages (the protocol's client step applies the
client-placed privacy steps before returning), per-unit evaluation parts the protocol marks as
diagnostic, and whatever an oracle function returns (``fedray.core.oracle``; a protocol that
uses such a value names it in its privacy statement). No record is ever returned.

``SiloGroup`` is a plain class (tested without Ray); ``SiloGroupActor`` is its Ray actor form.

Faults: Ray restarts a silo actor whose process or node died by re-running its constructor only.
A restarted actor therefore comes back empty, and the driver's ``restore`` reloads its records
from the dataset spec and sets its job and protocol again; nothing else is carried over, since
every draw is keyed by (seed, stream, round, unit). An actor of a faithful run draws a new secret
seed: its lost call never reached anyone, so that noise was never released.
"""

from __future__ import annotations

import functools
import secrets
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray

from fedray.core.oracle import block_partials
from fedray.core.program import CentralProgram
from fedray.core.protocol import Messages, OneStep, RoundBlock, RoundProtocol, RoundSpec, StepBlock, client_operation
from fedray.data.federation import DataSpec, Federation
from fedray.rng import SiloDraws


@dataclass(frozen=True)
class RoundPayload:
    """What the driver broadcasts once per round (one ray.put)."""

    spec: RoundSpec
    evaluate: np.ndarray | None      # (P, ...) model to evaluate this round, or None
    evaluate_rounds: tuple = ()      # client_rounds: the rounds whose starting model is evaluated


@dataclass(frozen=True)
class RoundReply:
    silo_ids: np.ndarray             # (U,) units that sent a message for some replica
    messages: np.ndarray             # (P, U, ...) privatized; zero where a replica did not sample the unit
    mask: np.ndarray                 # (P, U)
    evaluation: dict | None          # per-unit evaluation parts (diagnostic), see the protocol's evaluate
    claim: object = None             # a block's end state, as the actor's server steps reach it


@dataclass(frozen=True)
class RoundsReply:
    """A block of ordinary rounds from the group holding every unit (``SampledRounds.rounds``),
    packed in a few arrays: Ray moves a few arrays much faster than many small objects."""

    messages: np.ndarray             # (P, S_1 + ... + S_T, ...) each round's messages, in order along the unit axis
    mask: np.ndarray                 # (P, S_1 + ... + S_T)
    sizes: np.ndarray                # (T,) S_t
    evaluation: dict                 # name -> (E, ...) the parts of the E rounds evaluated, in order
    evaluated: tuple                 # those rounds
    claim: object                    # the end state, as the group's server steps reach it

    @classmethod
    def pack(cls, sent: list[Messages], parts: list, first: int, claim) -> RoundsReply:
        evaluated = tuple(first + i for i, part in enumerate(parts) if part is not None)
        parts = [part for part in parts if part is not None]
        stacked = {name: np.stack([part[name] for part in parts]) for name in parts[0]} if parts else {}
        return cls(np.concatenate([m.values for m in sent], axis=1), np.concatenate([m.mask for m in sent], axis=1),
                   np.array([m.mask.shape[1] for m in sent]), stacked, evaluated, claim)

    def rounds(self, first: int) -> list[tuple[Messages, dict | None]]:
        """Each round's messages and evaluation parts (None where not evaluated), from round ``first``."""
        bounds = np.cumsum(self.sizes)[:-1]
        values, masks = np.split(self.messages, bounds, axis=1), np.split(self.mask, bounds, axis=1)
        index = {round_index: i for i, round_index in enumerate(self.evaluated)}
        return [(Messages(v, m), None if first + t not in index else
                 {name: part[index[first + t]] for name, part in self.evaluation.items()})
                for t, (v, m) in enumerate(zip(values, masks))]


class ActorRestarted(RuntimeError):
    """Raised by a restarted silo actor that the driver has not restored yet (it died between two
    calls): the driver restores it and replays the call, as for a call the death cut short."""


def _loaded(method):
    """Refuse ``method`` on a restarted actor still empty (``ActorRestarted``)."""
    @functools.wraps(method)
    def checked(self, *args):
        if self._fed is None:
            raise ActorRestarted("this silo actor was restarted and holds no records yet")
        return method(self, *args)
    return checked


def _restarted_actor() -> bool:
    """True in a Ray actor that Ray restarted after its process or node died."""
    if not ray.is_initialized():
        return False
    context = ray.get_runtime_context()
    return context.get_actor_id() is not None and context.was_current_actor_reconstructed


class SiloGroup:
    """A group of units. With ``secret_draws`` (faithful runs) the units' noise and minibatches come
    from a seed drawn here from OS entropy, which never leaves the actor: not even the run seed
    the driver holds determines them (and the run cannot be reproduced)."""

    def __init__(self, dataset, seed: int, trial: int, silo_ids: np.ndarray, streams: np.ndarray,
                 secret_draws: bool = False):
        self._fed: Any = None            # the federation of this group's units (records stay here)
        self.protocol: RoundProtocol | CentralProgram | None = None
        self._shard: Any = None          # the protocol's view of the records (a round protocol's shard)
        self._round_protocol: RoundProtocol | None = None     # the protocol, checked once to be one
        if _restarted_actor():
            return      # the driver restores the job this actor held when it died
        self.load(dataset, seed, trial, silo_ids)
        self.configure(streams, secret_draws)

    def restore(self, setup: tuple, protocol) -> bool:
        """A restarted (empty) actor takes ``setup`` = (dataset, seed, trial, silo ids, streams,
        secret draws) and ``protocol`` again; one that kept running is left as it is. True if restored."""
        if self._fed is not None:
            return False
        dataset, seed, trial, silo_ids, streams, secret_draws = setup
        self.load(dataset, seed, trial, silo_ids)
        self.configure(streams, secret_draws)
        if protocol is not None:
            self.set_protocol(protocol)
        return True

    def load(self, dataset: DataSpec, seed: int, trial: int, silo_ids: np.ndarray) -> None:
        """(Re)load this group's units: a sweep's next trial reuses the actor process."""
        self.silo_ids = np.asarray(silo_ids, dtype=np.int64)
        self.seed = int(seed)
        self._fed = dataset.load(seed, trial, silo_ids=self.silo_ids)  # only this group's units are built
        # The record axis SiloDraws keys minibatch draws over: a Federation's (generated samples have none).
        self._width = self._fed.x_train.shape[1] if isinstance(self._fed, Federation) else None
        self.protocol, self._shard, self._round_protocol = None, None, None

    def configure(self, streams: np.ndarray, secret_draws: bool = False) -> None:
        """A new job on the same records (a sweep reusing its actors): its replica streams."""
        self.streams = np.asarray(streams)
        self._draw_seed = secrets.randbits(63) if secret_draws else self.seed
        self.protocol, self._shard, self._round_protocol = None, None, None

    @_loaded
    def apply(self, fn, *args):
        """``fn(federation, *args)`` on this group's records, for an oracle (``fedray.core.oracle``)."""
        return fn(self._fed, *args)

    @_loaded
    def unit_sum(self, fn, num_units: int, *args) -> list:
        """The partial sums of ``fn(federation, unit_ids, *args)``'s per-unit rows (``Oracle.unit_sum``)."""
        return block_partials(self.silo_ids, fn(self._fed, self.silo_ids, *args), num_units)

    @_loaded
    def fold(self, fn, state, *args):
        """``fn(federation, unit_ids, state, *args)``: this group's leg of ``Oracle.fold``."""
        return fn(self._fed, self.silo_ids, state, *args)

    def node_id(self) -> str:
        """The Ray node this group runs on ("local" outside Ray): where a run's actors landed."""
        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else "local"

    @_loaded
    def set_protocol(self, protocol) -> None:
        self.protocol = protocol
        # Checked here, once: isinstance against a runtime-checkable Protocol looks up each of its
        # members (about 50 us), twice a round if done per round.
        self._round_protocol = protocol if isinstance(protocol, RoundProtocol) else None
        # A driver-side program (``fedray.core.program``) reads the records through the oracle only.
        self._shard = None if self._round_protocol is None else protocol.shard(self._fed, self.silo_ids)

    @_loaded
    def evaluate(self, params: np.ndarray) -> dict:
        if self.protocol is None:
            raise RuntimeError("evaluate before set_protocol: this group holds no protocol yet")
        return self.protocol.evaluate(params, self._fed)

    @_loaded
    def round(self, payload: RoundPayload) -> RoundReply | RoundsReply:
        """Run the client operation the spec names, looked up in the protocol's ``operations``."""
        operation = client_operation(self._protocol(), payload.spec)
        if isinstance(operation, StepBlock):
            return self._block(payload, operation)
        if isinstance(operation, RoundBlock):
            return self._rounds(payload, operation)
        evaluation = None if payload.evaluate is None else self.evaluate(payload.evaluate)
        return RoundReply(*self._messages(payload.spec), evaluation)

    def _protocol(self) -> RoundProtocol:
        if self._round_protocol is None:
            raise TypeError(f"a round needs a RoundProtocol; this group holds {type(self.protocol).__name__}")
        return self._round_protocol

    def _messages(self, spec: RoundSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """This group's part of one round: the units that take part for some replica, their
        (privatized) messages and the (P, U) mask of which replica took which."""
        protocol = self._protocol()
        operation = client_operation(protocol, spec)
        if not isinstance(operation, OneStep):
            raise TypeError(f"operation {spec.operation!r} of a round is a {type(operation).__name__}; "
                            "a round's units run a OneStep")
        mask = spec.participation[:, self.silo_ids]
        active = np.flatnonzero(mask.any(axis=0))
        if active.size == 0 and not protocol.per_actor_sums:
            shape = np.shape(spec.broadcast)
            return self.silo_ids[:0], np.zeros((mask.shape[0], 0) + shape[1:]), mask[:, :0]
        units = self.silo_ids[active]
        draws = SiloDraws(self._draw_seed, self.streams, spec.round, units, width=self._width)
        sub_mask = mask[:, active]
        rows: np.ndarray | slice = active
        if active.size and active[-1] - active[0] + 1 == active.size:     # contiguous: a view of the records, no copy
            rows = slice(int(active[0]), int(active[-1]) + 1)
        messages = operation.run(spec.broadcast, self._shard.select(rows), draws, sub_mask)
        if protocol.per_actor_sums:
            # A curator's step: one row per replica, the sum over the units of this group it takes
            # (a zero row, masked, where it takes none here).
            return units, messages, np.asarray(sub_mask.any(axis=1, keepdims=True))
        # A replica that did not sample this unit receives nothing from it.
        messages = messages * sub_mask.reshape(sub_mask.shape + (1,) * (messages.ndim - 2))
        return units, messages, sub_mask

    def _rounds(self, payload: RoundPayload, operation: RoundBlock) -> RoundsReply:
        """Several ordinary rounds in the group holding every unit (``SampledRounds.rounds``): each
        round's messages are what an ordinary round sends; with them leave the evaluation parts due
        and the end state the server's steps on those messages reach."""
        due = set(payload.evaluate_rounds)

        def exchange(spec: RoundSpec) -> Messages:
            _, messages, mask = self._messages(spec)
            return Messages(messages, mask)

        def evaluate(round_index: int, state) -> dict | None:
            return self.evaluate(next(iter(self._protocol().output(state).values()))) if round_index in due else None

        sent, evaluated, end = operation.run(payload.spec, exchange, evaluate)
        return RoundsReply.pack(sent, evaluated, payload.spec.round, end)

    def _block(self, payload: RoundPayload, operation: StepBlock) -> RoundReply:
        """A block of sequential steps whose units all live here: only what the block returns leaves
        (per-step sums, or a curator's per-step releases and its end state)."""
        spec = payload.spec
        evaluation = None if payload.evaluate is None else self.evaluate(payload.evaluate)

        def draws_for(step: int, units: np.ndarray) -> SiloDraws:
            return SiloDraws(self._draw_seed, self.streams, step, units, width=self._width)

        sums, end = operation.run(spec, self._shard, self.silo_ids, draws_for)
        units = self.silo_ids[spec.participation[:, self.silo_ids].any(axis=0)]
        return RoundReply(units, sums, np.ones(sums.shape[:2], dtype=bool), evaluation, end)


SiloGroupActor = ray.remote(SiloGroup)
