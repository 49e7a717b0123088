"""The driver loop: start silo-group actors, run rounds, account privacy, report metrics.

Per round: ``protocol.configure`` says who takes part and what to broadcast; the driver puts
(spec, model to evaluate) in the object store ONCE, calls every silo-group actor once, gathers
the client messages (through the shuffler when the protocol's routing says so), runs
``protocol.aggregate``, charges the ledger with the round's charge and hands metrics to the
tracker, until ``protocol.done`` holds for every replica. Units are assigned to actors in
contiguous blocks, so messages arrive in unit order whatever the actor count and the server's
sums are bit-identical for 1 actor or 8. The runtime knows no paper: everything protocol-specific
is behind ``fedray.core.protocol.RoundProtocol``.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import socket
import time
from dataclasses import dataclass, field, replace
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import ray

from fedray.core.evaluation import Metric, split
from fedray.core.oracle import sum_partials
from fedray.core.program import CentralProgram
from fedray.core.protocol import Messages, RoundKeys, RoundProtocol, RoundSpec, Routing
from fedray.data.federation import KnownPopulation
from fedray.privacy.stored import accountant_store
from fedray.runtime import checkpoint, interrupts, strategies
from fedray.runtime.callbacks import Callback, Entry, Progress, Tracker, Tracking, built_in
from fedray.runtime.shuffler import Shuffler, ShufflerActor
from fedray.runtime.silo_group import ActorRestarted, RoundPayload, RoundsReply, SiloGroup, SiloGroupActor
from fedray.runtime.strategies import Call

if TYPE_CHECKING:      # a silo actor imports this package: it needs neither the planner nor dp-accounting
    from fedray.plan import Plan
    from fedray.privacy.ledger import Ledger

SHUFFLER_OUTPUT = {Routing.SHUFFLE: "permutation", Routing.SHUFFLE_SUM: "sum"}
RESTART_TIMEOUT = 300.0      # seconds to wait for a restarted silo actor (a new node may need to start it)


@dataclass
class RunResult:
    """What a run produced: released models, per-round history, privacy spend, timings."""

    outputs: dict                                       # name -> (P, ...) released models, the model first
    history: list[dict] = field(default_factory=list)   # one dict of (P,) arrays per round
    final: dict = field(default_factory=dict)           # evaluation of every output
    diagnostics: set = field(default_factory=set)       # metric names read from data the server would not see
    constants: dict = field(default_factory=dict)       # the protocol's fixed values (clip, noise std)
    epsilon_spent: np.ndarray | None = None             # (P, N)
    stopped: str | None = None                          # why the run ended before its last round
    wall_time: float = 0.0
    time_to_first_round: float = 0.0

    @property
    def last_iterate(self) -> np.ndarray:
        return self.outputs["last"]

    @property
    def model(self) -> np.ndarray:
        """The first released output: what the run's metrics evaluate."""
        return next(iter(self.outputs.values()))


RAY_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"


def _drop_auth_default_warning(record: logging.LogRecord) -> bool:
    """False for Ray's "Token authentication is enabled for this Ray cluster" warning."""
    return not record.getMessage().startswith("Token authentication is enabled for this Ray cluster")


def runtime_env(runtime: dict) -> dict | None:
    """Ray's ``runtime_env`` for the run: ``runtime.py_modules`` (the user's own packages, e.g. a
    protocol written outside fedray) are zipped and shipped to every worker, on every node."""
    names = runtime.get("py_modules") or []
    return {"py_modules": [list(importlib.import_module(name).__path__)[0] for name in names]} if names else None


def connect(runtime: dict) -> None:
    """Join ``runtime.address``, or start a private local Ray: ``address="local"`` never joins a
    cluster somebody else started on this machine (which a bare ``ray.init()`` would)."""
    if ray.is_initialized():
        return
    address = runtime.get("address")
    if not address:
        # Ray 2.60 turns token authentication on for a new local instance when RAY_AUTH_MODE is
        # unset, and says so in a warning on every run that asks nothing of the user; that one
        # warning is dropped while the private instance starts (the protection stays on; the
        # one-time note that a token was written to ~/.ray stays). Setting the variable here
        # instead comes too late: Ray reads its config when ray is imported, and the driver then
        # sends no token to a GCS that wants one.
        auth_log = logging.getLogger(RAY_AUTH_LOGGER)
        auth_log.addFilter(_drop_auth_default_warning)
        try:
            # the dashboard costs a second of start-up and a process: opt in with runtime.dashboard
            ray.init(address="local", num_cpus=runtime.get("num_cpus"), include_dashboard=bool(runtime.get("dashboard")),
                     log_to_driver=False, runtime_env=runtime_env(runtime))
        finally:
            auth_log.removeFilter(_drop_auth_default_warning)
        return
    _reachable(str(address), float(runtime.get("connect_timeout") or 30.0))
    try:
        ray.init(address=address, log_to_driver=False, runtime_env=runtime_env(runtime))
    except ConnectionError as err:
        # Ray 2.5x clusters started with `ray start` use token authentication; a driver without
        # RAY_AUTH_MODE=token is refused with a message that does not say so.
        hint = "" if os.environ.get("RAY_AUTH_MODE") == "token" else (
            "; clusters started with `ray start` use token authentication: export RAY_AUTH_MODE=token here "
            "and on every node (README, Running on a Ray cluster)")
        raise ConnectionError(f"runtime.address={address}: the cluster refused the connection ({err}){hint}") from None


def _reachable(address: str, timeout: float) -> None:
    """Fail fast, naming the address, when nothing listens at ``host:port`` (``ray.init`` would
    wait for minutes). ``auto`` is left to Ray, which answers at once when no cluster runs here."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    started = time.monotonic()
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout).close()
    except (OSError, ValueError) as err:
        raise ConnectionError(f"runtime.address={address}: no Ray cluster answered within {timeout:g} s "
                              f"({err.__class__.__name__}: {err})") from None
    # Something listens; a Ray GCS (or Ray Client server) speaks gRPC. Anything else would keep
    # ray.init retrying for minutes, printing a gcs_client warning every 30 s.
    import grpc

    channel = grpc.insecure_channel(f"{host or '127.0.0.1'}:{int(port)}")
    try:
        grpc.channel_ready_future(channel).result(timeout=max(timeout - (time.monotonic() - started), 0.1))
    except grpc.FutureTimeoutError:
        raise ConnectionError(f"runtime.address={address}: something listens there, but no Ray cluster answered "
                              f"within {timeout:g} s (it does not speak Ray's gRPC protocol)") from None
    finally:
        channel.close()


SINGLE_ACTOR_WORK = 4e6     # records x dim x replicas of a federation whose round takes a few ms on one core


def _num_actors(plan: Plan) -> int:
    """``runtime.num_actors``, or by default one actor per available CPU, except that a small
    federation (one pass over its records, ``runtime.single_actor_work``) gets one actor: a Ray
    round trip then costs more than the round, and one actor holding every unit can run several
    rounds per call. Results do not depend on the actor count."""
    runtime, num_silos = plan.runtime, plan.shape.num_silos
    requested = runtime.get("num_actors")
    if requested is None:
        work = float(sum(plan.shape.n_train)) * plan.shape.dim * plan.num_replicas
        small = work <= float(runtime.get("single_actor_work") or SINGLE_ACTOR_WORK)
        requested = 1 if small else max(1, int(ray.available_resources().get("CPU", 1)))
    return max(1, min(int(requested), num_silos))


@dataclass(frozen=True)
class _Pending:
    """A started exchange; ``result()`` waits for it."""

    result: object


def _block_result(reply, evaluations: list) -> tuple:
    """(messages, evaluation parts, claimed end state) of a block; a block of rounds gives its
    ``RoundsReply`` as the messages (each round's are unpacked when it settles)."""
    if isinstance(reply, RoundsReply):
        return reply, None, reply.claim
    return Messages(reply.messages, reply.mask, reply.claim), evaluations, reply.claim


def _same_state(a, b) -> bool:
    """Bitwise equality of two protocol states (NamedTuples of arrays and numbers)."""
    return all(np.array_equal(x, y) for x, y in zip(a, b)) and len(a) == len(b)


def _ranges(blocks: list) -> list[tuple[int, int]]:
    """The [lo, hi) unit ids each actor holds (contiguous blocks)."""
    return [(int(b[0]), int(b[-1]) + 1) if b.size else (0, 0) for b in blocks]


def _evaluate_stacked(protocol: RoundProtocol | CentralProgram, groups, models: list,
                      num_replicas: int) -> tuple[list[dict], set]:
    """Several (P, ...) models evaluated in one call per actor, stacked along the replica axis:
    each model's metric values, in order, and the names of the diagnostic metrics."""
    values, diagnostics = split(protocol.combine(groups.call("evaluate", np.concatenate(models))))
    p = num_replicas
    return [{key: value[i * p:(i + 1) * p] for key, value in values.items()} for i in range(len(models))], diagnostics


def _gather(replies: list) -> tuple[Messages, list]:
    """Messages and masks in unit order (blocks are contiguous), and the evaluation parts."""
    messages = np.concatenate([reply.messages for reply in replies], axis=1)
    mask = np.concatenate([reply.mask for reply in replies], axis=1)
    return Messages(messages, mask), [reply.evaluation for reply in replies]


def _layout_key(plan: Plan, num_actors: int) -> tuple:
    """What fixes which silos each actor holds: jobs with the same layout can share actors."""
    return (plan.shape.num_silos, num_actors, ray.get_runtime_context().get_job_id())


def _data_key(plan: Plan) -> tuple:
    """What fixes the records themselves: the same key means the same loaded silos (every element
    and digit of an array-valued spec field, such as a game's payoff, in the repr)."""
    with np.printoptions(threshold=sys.maxsize, floatmode="unique"):
        return (repr(plan.dataset), plan.seed, plan.trial)


def _shuffler_args(plan: Plan) -> tuple | None:
    """The shuffler's seed, replicas and output form, or None when messages go straight to the server."""
    routing = plan.protocol.routing
    seed = None if plan.privacy.faithful else plan.seed     # None: the shuffler's own entropy
    return None if routing is Routing.DIRECT else (seed, plan.replicas.streams, SHUFFLER_OUTPUT[routing])


class GroupOracle:
    """The oracle (``fedray.core.oracle``) over silo groups, through their ``call(method, *args)``
    (one call per group) and ``num_units``."""

    num_units: int

    def call(self, method: str, *args) -> list:
        """One call of ``method`` per group, in group order."""
        raise NotImplementedError

    def map(self, fn, *args) -> list:
        """``fn(federation, *args)`` in every group."""
        return self.call("apply", fn, *args)

    def unit_sum(self, fn, *args) -> np.ndarray:
        return sum_partials([p for parts in self.call("unit_sum", fn, self.num_units, *args) for p in parts])


class RayGroups(GroupOracle):
    """Silo groups as Ray actors: one call per actor per method, gathered with one ray.get.

    Faults: the actors restart (``runtime.max_restarts`` times each) when their process or node
    dies. A call that an actor's death cut short is replayed once the restarted actors are
    restored (``SiloGroup.restore``): every draw is keyed by (seed, stream, round, unit), so the
    replay returns exactly what the lost call would have, and the round is charged once, when it
    settles."""

    def __init__(self, plan: Plan, num_actors: int, pooled: tuple | None = None):
        blocks = np.array_split(np.arange(plan.shape.num_silos), num_actors)
        self.num_units = plan.shape.num_silos
        # Each block's silo ids as a range (the blocks are contiguous): an id array past Ray's 100 KB
        # inline limit (P_SGD's 100,000 users) would make the constructor's arguments objects in the
        # store, which Ray answers with an error-level line that a restart may fail.
        self.setups = [(plan.dataset, plan.seed, plan.trial, range(lo, hi), plan.replicas.streams, plan.privacy.faithful)
                       for lo, hi in _ranges(blocks)]
        self.max_restarts = int(plan.runtime.get("max_restarts", 3))
        self.protocol: RoundProtocol | CentralProgram | None = None
        self.replays = 0
        self.layout: tuple | None = None             # set by ``start``: what a pool keys these actors by
        self.started = time.perf_counter()
        self.pool: ActorPool | None = None
        self.actors: list[Any]                       # Ray actor handles (their methods are typed by Ray as plain methods)
        if pooled is None:
            # A fractional CPU share lets more actors than cores start (useful for tests), and SPREAD
            # places them across the nodes of a cluster.
            share = min(1.0, float(ray.cluster_resources().get("CPU", 1)) / num_actors)
            self.actors = [
                SiloGroupActor.options(num_cpus=share, scheduling_strategy="SPREAD",
                                       max_restarts=self.max_restarts).remote(*setup)
                for setup in self.setups
            ]
        else:
            data_key, self.actors = pooled
            if data_key != _data_key(plan):  # same processes, new records: skips start-up and imports
                self._get(lambda: [a.load.remote(*setup[:4]) for a, setup in zip(self.actors, self.setups)])
            self._get(lambda: [a.configure.remote(*setup[4:]) for a, setup in zip(self.actors, self.setups)])
        shuffler = _shuffler_args(plan)
        self.shuffler: Any = None if shuffler is None else ShufflerActor.options(max_restarts=self.max_restarts).remote(*shuffler)
        self.ranges = _ranges(blocks)

    def _get(self, submit, refs=None):
        """``ray.get(submit())``, replayed after restoring the restarted actors when one died mid-call
        (at most ``max_restarts`` times: past that, Ray has given the actor up and the run fails)."""
        refs = submit() if refs is None else refs
        for attempt in range(self.max_restarts + 1):
            try:
                results = ray.get(refs)
                interrupts.check()      # a Ctrl-C that came meanwhile ends the run here (a safe point)
                return results
            except (ray.exceptions.RayActorError, ActorRestarted):
                if attempt == self.max_restarts:
                    raise
                self.replays += 1
                self._restore()
                refs = submit()

    def _restore(self) -> None:
        """Wait for restarting actors and restore them. One Ray has given up (restarts exhausted)
        raises ``ActorDiedError``; one still restarting after ``RESTART_TIMEOUT`` raises too."""
        deadline = time.monotonic() + RESTART_TIMEOUT
        while True:
            try:
                ray.get([a.restore.remote(setup, self.protocol) for a, setup in zip(self.actors, self.setups)])
                return
            except ray.exceptions.ActorUnavailableError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def set_protocol(self, protocol) -> None:
        self.protocol = protocol
        self.call("set_protocol", protocol)

    def fold(self, fn, state, *args):
        """``Oracle.fold``: each actor's call takes the previous one's result as an object ref,
        so the state passes actor to actor; the driver waits once, for the last."""
        refs = [ray.put(arg) for arg in args]

        def submit():
            folded = state
            for actor in self.actors:
                folded = actor.fold.remote(fn, folded, *refs)
            return folded
        return self._get(submit)

    def node_ids(self) -> list[str]:
        """The Ray node of every silo-group actor (waits for them to start)."""
        return self.call("node_id")

    def call(self, method: str, *args) -> list:
        """One call of ``method`` per actor, gathered with one ray.get."""
        return self._get(lambda: [getattr(actor, method).remote(*args) for actor in self.actors])

    def exchange(self, payload: RoundPayload) -> tuple[Messages, list]:
        """One round's messages as the server may see them, and the units' evaluation parts."""
        ref = ray.put(payload)
        if self.shuffler is None:
            return _gather(self._get(lambda: [actor.round.remote(ref) for actor in self.actors]))
        # Shuffle model: the replies go from the silo actors to the shuffler as object refs;
        # the driver never holds un-shuffled messages. Evaluation travels in its own call.
        bare = ray.put(replace(payload, evaluate=None))

        def submit_shuffled():
            evaluations = [actor.evaluate.remote(payload.evaluate) for actor in self.actors if payload.evaluate is not None]
            shuffled = self.shuffler.shuffle.remote(payload.spec.round, *[a.round.remote(bare) for a in self.actors])
            return [shuffled] + evaluations
        shuffled, *evaluations = self._get(submit_shuffled)
        return Messages(shuffled.messages, shuffled.mask), evaluations

    def submit_block(self, payload: RoundPayload, owner: int):
        """Start a block of sequential steps in the one actor holding their units (``SequentialSteps``);
        ``result()`` of the returned handle gives (messages, evaluation parts, claimed end state)."""
        bare = replace(payload, evaluate=None)      # one actor receives it: no ray.put (a millisecond a call)

        def submit():
            evaluations = [actor.evaluate.remote(payload.evaluate) for actor in self.actors if payload.evaluate is not None]
            reply = self.actors[owner].round.remote(bare)
            return [reply] + evaluations
        refs = submit()

        def result():
            reply, *evaluations = self._get(submit, refs)
            return _block_result(reply, evaluations)
        return _Pending(result)

    def close(self, keep_silos: bool = False) -> None:
        for actor in ([] if keep_silos else self.actors) + ([self.shuffler] if self.shuffler is not None else []):
            ray.kill(actor)


class ActorPool:
    """The silo actors of the last finished job, kept for the next job with the same layout.

    The command line's ``fedray.cli.Jobs`` makes one at its first job and ends it; a Hydra sweep
    runs its jobs in that process. Jobs on the same records (algorithm, budgets or
    step sizes differ) reuse the actors as they are; a new trial reloads its records into the
    same actor processes, skipping process start-up and imports. At most one set is kept (their
    CPU shares stay reserved); a failed job's actors are killed.
    """

    def __init__(self):
        self.layout: tuple | None = None
        self.data: tuple | None = None
        self.actors: list[Any] | None = None

    def take(self, layout: tuple) -> tuple | None:
        """(data key, actors) kept for ``layout``, or None (anything kept is then killed)."""
        if self.actors is None or layout != self.layout:
            self.drop_all()
            return None
        found = (self.data, self.actors)
        self.layout, self.data, self.actors = None, None, None
        return found

    def give(self, layout: tuple, data: tuple, actors: list) -> None:
        self.drop_all()
        self.layout, self.data, self.actors = layout, data, actors

    def drop_all(self) -> None:
        # Actors of an earlier Ray session (ray.shutdown in between) are gone already.
        if self.actors is not None and self.layout is not None and ray.is_initialized() \
                and self.layout[-1] == ray.get_runtime_context().get_job_id():
            for actor in self.actors:
                ray.kill(actor)
        self.layout, self.data, self.actors = None, None, None


class InlineGroups(GroupOracle):
    """The same silo groups in this process, without Ray (tests, the single-process reference)."""

    def __init__(self, plan: Plan, num_groups: int = 1):
        blocks = np.array_split(np.arange(plan.shape.num_silos), num_groups)
        self.num_units = plan.shape.num_silos
        self.groups = [SiloGroup(plan.dataset, plan.seed, plan.trial, b, plan.replicas.streams, plan.privacy.faithful)
                       for b in blocks]
        shuffler = _shuffler_args(plan)
        self.shuffler: Shuffler | None = None if shuffler is None else Shuffler(*shuffler)
        self.ranges = _ranges(blocks)

    def call(self, method: str, *args) -> list:
        return [getattr(group, method)(*args) for group in self.groups]

    def set_protocol(self, protocol) -> None:
        self.call("set_protocol", protocol)

    def fold(self, fn, state, *args):
        for group in self.groups:
            state = group.fold(fn, state, *args)
        return state


    def exchange(self, payload: RoundPayload) -> tuple[Messages, list]:
        if self.shuffler is None:
            return _gather([group.round(payload) for group in self.groups])
        evaluations = [group.evaluate(payload.evaluate) for group in self.groups if payload.evaluate is not None]
        bare = replace(payload, evaluate=None)
        shuffled = self.shuffler.shuffle(payload.spec.round, *[group.round(bare) for group in self.groups])
        return Messages(shuffled.messages, shuffled.mask), evaluations

    def submit_block(self, payload: RoundPayload, owner: int):
        evaluations = [group.evaluate(payload.evaluate) for group in self.groups if payload.evaluate is not None]
        done = _block_result(self.groups[owner].round(replace(payload, evaluate=None)), evaluations)
        return _Pending(lambda: done)

    def close(self) -> None:
        self.groups = []


def start(plan: Plan, pool: ActorPool | None = None) -> RayGroups:
    """Connect to Ray and start the silo actors, or take them from ``pool``; returns without
    waiting for new actors to load, so the caller can set up tracking meanwhile."""
    started = time.perf_counter()
    connect(plan.runtime)
    num_actors = _num_actors(plan)
    layout = _layout_key(plan, num_actors)
    # take() drops idle actors of another layout: they hold CPU shares the new ones need.
    groups = RayGroups(plan, num_actors, pool.take(layout) if pool is not None else None)
    groups.layout, groups.started, groups.pool = layout, started, pool
    return groups


def run(plan: Plan, tracker: Tracker | None = None, progress=None, inline: bool = False,
        groups: RayGroups | InlineGroups | None = None, pool: ActorPool | None = None,
        callbacks: Sequence[Callback] = ()) -> RunResult:
    """Run ``plan`` on Ray (local or the cluster at ``runtime.address``), or in-process if ``inline``.

    ``groups``: from ``start(plan, pool)`` if the caller started the actors already; inline, the
    ``InlineGroups`` to use (default: one group holding every unit). With a ``pool`` the silo
    actors are kept in it for the next job; without one they end with the run. The ledger's
    answers come from the accountant store unless the plan is faithful (as in ``make_plan``).
    ``callbacks`` (``fedray.runtime.callbacks.Callback``) see every round after the built-in
    ones (budget stop, tracking, progress, checkpoints) and may stop the run."""
    with accountant_store(not plan.privacy.faithful):
        return _run(plan, tracker, progress, inline, groups, pool, callbacks)


def _run(plan: Plan, tracker, progress, inline: bool, groups: RayGroups | InlineGroups | None,
         pool: ActorPool | None, callbacks: Sequence[Callback]) -> RunResult:
    if inline:
        started = time.perf_counter()
        groups = groups if groups is not None else InlineGroups(plan)
        try:
            return _rounds(plan, groups, tracker, progress, started, callbacks)
        finally:
            groups.close()
    if groups is None:
        groups = start(plan, pool)
    elif not isinstance(groups, RayGroups):
        raise TypeError(f"groups: the RayGroups of start(plan) (InlineGroups only with inline=True); got {type(groups).__name__}")
    try:
        result = _rounds(plan, groups, tracker, progress, groups.started, callbacks)
    except BaseException:
        groups.close()
        raise
    if groups.pool is None:
        groups.close()
    else:
        groups.close(keep_silos=True)
        groups.pool.give(groups.layout or (), _data_key(plan), groups.actors)
    return result


def _rounds(plan: Plan, groups, tracker, progress, started: float, callbacks: Sequence[Callback] = ()) -> RunResult:
    """The driver loop: configure a call, exchange it with the actors, aggregate on the server and
    settle each history entry, until the protocol is done or a callback stops the run. How a call
    reaches the actors is the strategy's (``fedray.runtime.strategies``); tracking, progress,
    checkpoints and the budget stop are callbacks (``fedray.runtime.callbacks``)."""
    protocol = plan.protocol.build(groups)    # the groups are the oracle for data-dependent constants
    groups.set_protocol(protocol)
    if isinstance(protocol, CentralProgram):
        return _program(plan, protocol, groups, tracker, progress, started, callbacks)
    state = protocol.init(RoundKeys(plan.seed, plan.repetitions, 0, plan.replicas.streams))
    ledger = _fresh_ledger(plan)
    result = RunResult(protocol.output(state), constants=dict(protocol.constants))
    state, first, replay = _restore(plan, state, ledger, result)
    server = _Server(protocol, ledger, result, [*built_in(plan, ledger, result.history, tracker, progress), *callbacks])
    for index, (step, metrics) in enumerate(replay):       # a tracker resuming the same run skips what it holds
        server.after(Entry(index, step, metrics, replayed=True))
    strategy = strategies.strategy(plan, protocol, groups.ranges, groups.shuffler is not None, first)
    evaluation = strategies.Evaluation(plan.evaluate_every, plan.num_rounds, plan.privacy.faithful, [])
    r, pending, ahead = first, None, state      # ahead: what the next call is configured from
    while server.stop is None and not np.all(protocol.done(ahead)):
        keys = RoundKeys(plan.seed, plan.repetitions, r, plan.replicas.streams)
        spec = server.before(strategy.configure(ahead, keys), ahead, keys, strategy)         # configure
        if spec is None:
            break
        payload, evaluate = strategy.payload(r, spec, ahead, evaluation)
        owner = strategy.owner(spec)
        if owner is None:                       # every actor takes part: exchange, then aggregate
            if pending is not None:
                state, pending = server.confirm(state, pending, strategy), None
            messages, parts = groups.exchange(payload)
            state = ahead = strategy.settle(state, Call(r, spec, keys, messages, parts, evaluate), server.settle)
        else:                                   # a block in one actor: its claim configures the next call
            sent_at = time.perf_counter()
            block = groups.submit_block(payload, owner)
            if pending is not None:             # the previous block's server steps, while this one runs
                state = server.confirm(state, pending, strategy)
            messages, parts, claim = block.result()
            pending, ahead = Call(r, spec, keys, messages, parts, evaluate, claim), claim
            strategy.measured(spec, time.perf_counter() - sent_at)
        r += strategy.entries(spec)
    if pending is not None:
        state = server.confirm(state, pending, strategy)
    _evaluate_deferred(plan, protocol, groups, evaluation.deferred, result, server.hooks)
    result.stopped = server.stop
    result.time_to_first_round = (server.first_round_at or time.perf_counter()) - started
    return _finish(plan, protocol, groups, protocol.output(state), result, ledger, started)


class _Server:
    """The server's half of the loop: each history entry aggregated, charged to the ledger,
    recorded and handed to the callbacks (the first reason one gives to stop ends the run)."""

    def __init__(self, protocol: RoundProtocol, ledger: Ledger | None, result: RunResult, hooks: list[Callback]):
        self.protocol, self.ledger, self.result, self.hooks = protocol, ledger, result, hooks
        self.stop: str | None = None
        self.first_round_at: float | None = None

    def before(self, spec: RoundSpec | None, state, keys: RoundKeys, strategy: strategies.PerRound) -> RoundSpec | None:
        """The call the callbacks let run (None: none)."""
        for hook in self.hooks:
            if spec is not None:
                spec, reason = hook.before_round(spec, state, keys, strategy)
                self.stop = self.stop or reason
        return spec

    def after(self, entry: Entry) -> None:
        for hook in self.hooks:
            reason = hook.after_round(entry)
            if not entry.replayed:
                self.stop = self.stop or reason

    def settle(self, state, index: int, spec: RoundSpec, keys: RoundKeys, messages: Messages, evaluation,
               evaluate: bool):
        """Aggregate one history entry on the server and record it (ledger, metrics, callbacks)."""
        state, charge, metrics = self.protocol.aggregate(state, spec, messages, keys)
        metrics, diagnostics = split({k: v if isinstance(v, Metric) else Metric(v, True) for k, v in metrics.items()})
        self.result.diagnostics |= diagnostics
        if evaluate:
            values, diagnostics = split(self.protocol.combine(evaluation))
            metrics = {**values, **metrics}
            self.result.diagnostics |= diagnostics
        if self.ledger is not None:
            self.ledger.record(charge)
            eps = self.ledger.epsilons()
            metrics["epsilon_max"] = eps.max(axis=1)
            metrics["epsilon_mean"] = eps.mean(axis=1)
        metrics.update(self.protocol.round_constants)
        self.result.history.append(metrics)
        self.after(Entry(index, spec.round + spec.steps - 1, metrics, state))     # logged at its last step
        if self.first_round_at is None:
            self.first_round_at = time.perf_counter()
        return state

    def confirm(self, state, call: Call, strategy: strategies.PerRound):
        """Re-run a block's server steps on what it released; the actor must have reached the same state."""
        state = strategy.settle(state, call, self.settle)
        if not _same_state(state, call.claim):
            raise RuntimeError(f"round {call.index}: the server steps re-run on the released messages do not "
                               "reach the state the block's actor reported")
        return state


def _restore(plan: Plan, state, ledger: Ledger | None, result: RunResult) -> tuple[Any, int, list]:
    """The state and history entry a run starts from (a checkpoint's, with ``runtime.resume``),
    and the (step, metrics) of the entries it holds, to replay to the callbacks."""
    restored = checkpoint.resumable(plan.runtime, plan.config)
    if restored is None:
        return state, 0, []
    result.history = restored.history
    if ledger is not None:
        ledger.restore(restored.ledger)
    return restored.state, restored.next_round, list(zip(restored.steps or range(len(result.history)), result.history))


def _evaluate_deferred(plan: Plan, protocol: RoundProtocol, groups, deferred: list, result: RunResult,
                       hooks: list[Callback]) -> None:
    """A faithful run's models, evaluated after the run in one call per actor: their metrics join
    their history entries, as diagnostics."""
    if not deferred:
        return
    evaluated, _ = _evaluate_stacked(protocol, groups, [model for *_, model in deferred], plan.num_replicas)
    for (index, step, _), values in zip(deferred, evaluated):
        result.history[index].update(values)
        result.diagnostics |= set(values)
        for hook in hooks:
            hook.after_evaluation(step, values)


def _fresh_ledger(plan: Plan) -> Ledger | None:
    """A fresh ledger of the plan's, or None for a run without privacy."""
    ledger = plan.privacy.ledger
    return ledger.fresh() if plan.privacy.private and ledger is not None else None


def _finish(plan: Plan, protocol: RoundProtocol | CentralProgram, groups, outputs: dict, result: RunResult,
            ledger: Ledger | None, started: float) -> RunResult:
    """Evaluate the released models (the first is the model; the others' metrics get its name as a
    suffix) and close the result."""
    evaluated, diagnostics = _evaluate_stacked(protocol, groups, list(outputs.values()), plan.num_replicas)
    # Data whose population risk is known in closed form (``population_excess_risk``) give each
    # output's excess risk, a diagnostic (it reads the population's optimum, which no server knows).
    known = plan.dataset if isinstance(plan.dataset, KnownPopulation) else None
    for i, (name, values) in enumerate(zip(outputs, evaluated)):
        suffix = "" if i == 0 else f"_{name}"
        result.final.update({f"{key}{suffix}": value for key, value in values.items()})
        excess = None if known is None else known.population_excess_risk(outputs[name], plan.seed, plan.trial, plan.loss)
        if excess is not None:
            result.final[f"excess_risk{suffix}"] = np.asarray(excess, dtype=np.float64)
            result.diagnostics = result.diagnostics | {f"excess_risk{suffix}"}
    diagnostics = set(evaluated[0]) if plan.privacy.faithful else diagnostics
    diagnostics |= {f"{key}_{name}" for name in list(outputs)[1:] for key in diagnostics}
    result.outputs, result.diagnostics = outputs, result.diagnostics | diagnostics
    result.epsilon_spent = ledger.epsilons() if ledger is not None else None
    result.wall_time = time.perf_counter() - started
    return result


def _program(plan: Plan, program: CentralProgram, groups, tracker, progress, started: float,
             callbacks: Sequence[Callback]) -> RunResult:
    """A driver-side program (``fedray.core.program``): one run over the oracle, one release, one
    history entry (reported to the tracking, progress and user callbacks)."""
    ledger = _fresh_ledger(plan)
    ran = program.run(groups, RoundKeys(plan.seed, plan.repetitions, 0, plan.replicas.streams))
    result = RunResult(ran.outputs, constants=dict(program.constants))
    metrics, result.diagnostics = split(ran.metrics)
    if ledger is not None:
        ledger.record(ran.charge)
        eps = ledger.epsilons()
        metrics["epsilon_max"], metrics["epsilon_mean"] = eps.max(axis=1), eps.mean(axis=1)
    result.history.append(metrics)
    hooks = [*([Tracking(tracker)] if tracker is not None else []), *([Progress(progress)] if progress is not None else []),
             *callbacks]
    for hook in hooks:
        result.stopped = result.stopped or hook.after_round(Entry(0, 0, metrics))
    result.time_to_first_round = time.perf_counter() - started
    return _finish(plan, program, groups, ran.outputs, result, ledger, started)
