"""The driver loop: start silo-group actors, run rounds, account privacy, report metrics.

Per round: sample participants (P, N) in the driver, put (round, broadcast, model to evaluate,
participation) in the object store ONCE, call every silo-group actor once, gather privatized
messages, apply the server step, charge the participants' ledgers, hand metrics to the tracker.
Silos are assigned to actors in contiguous blocks, so messages arrive in silo-id order whatever
the actor count and the server's sums are bit-identical for 1 actor or 8.
"""

from __future__ import annotations

import time
from pathlib import Path
from dataclasses import dataclass, field, replace

import numpy as np
import ray

from fedray.algorithms.base import tail_average
from fedray.plan import Plan
from fedray.runtime import checkpoint
from fedray.runtime.shuffler import Shuffler, ShufflerActor
from fedray.runtime.silo_group import RoundPayload, SiloGroup, SiloGroupActor


@dataclass
class RunResult:
    """What a run produced: final models, per-round history, privacy spend, timings."""

    last_iterate: np.ndarray                  # (P, d, C)
    tail_average: np.ndarray                  # (P, d, C)
    history: list[dict] = field(default_factory=list)   # one dict of (P,) arrays per evaluated round
    final: dict = field(default_factory=dict)           # metrics of last iterate and tail average
    epsilon_spent: np.ndarray | None = None   # (P, N)
    l2_clip: float = float("nan")
    noise_std: float = 0.0
    wall_time: float = 0.0
    time_to_first_round: float = 0.0


def _connect(runtime: dict) -> None:
    if ray.is_initialized():
        return
    if runtime.get("address"):
        ray.init(address=runtime["address"], log_to_driver=False)
    else:
        ray.init(num_cpus=runtime.get("num_cpus"), include_dashboard=False, log_to_driver=False)


def _num_actors(runtime: dict, num_silos: int) -> int:
    requested = runtime.get("num_actors")
    if requested is None:
        requested = max(1, int(ray.available_resources().get("CPU", 1)))
    return max(1, min(int(requested), num_silos))


def _gather(replies: list) -> tuple[np.ndarray, np.ndarray, list]:
    """Messages and masks in silo-id order (blocks are contiguous), and the evaluation parts."""
    messages = np.concatenate([reply.messages for reply in replies], axis=1)
    mask = np.concatenate([reply.mask for reply in replies], axis=1)
    return messages, mask, [reply.evaluation for reply in replies]


def _layout_key(plan: Plan, num_actors: int) -> tuple:
    """What fixes which silos each actor holds: jobs with the same layout can share actors."""
    return (plan.shape.num_silos, num_actors, ray.get_runtime_context().get_job_id())


def _data_key(plan: Plan) -> tuple:
    """What fixes the records themselves: the same key means the same loaded silos."""
    return (repr(plan.dataset), plan.seed, plan.trial)


def _shuffler_args(plan: Plan) -> tuple:
    """The shuffler's seed, replicas and output form (an algorithm may ask for the sum only)."""
    return plan.seed, plan.repetitions, getattr(plan.algorithm_class, "SHUFFLE_OUTPUT", "permutation")


class RayGroups:
    """Silo groups as Ray actors: one call per actor per method, gathered with one ray.get."""

    def __init__(self, plan: Plan, num_actors: int, pooled: tuple | None = None):
        blocks = np.array_split(np.arange(plan.shape.num_silos), num_actors)
        if pooled is None:
            POOL.drop_all()  # idle pooled actors hold CPU shares the new ones need
            # A fractional CPU share lets more actors than cores start (useful for tests), and SPREAD
            # places them across the nodes of a cluster.
            share = min(1.0, float(ray.cluster_resources().get("CPU", 1)) / num_actors)
            self.actors = [
                SiloGroupActor.options(num_cpus=share, scheduling_strategy="SPREAD").remote(
                    plan.dataset, plan.seed, plan.trial, block, plan.loss, plan.repetitions
                )
                for block in blocks
            ]
        else:
            data_key, self.actors = pooled
            if data_key != _data_key(plan):  # same processes, new records: skips start-up and imports
                ray.get([a.load.remote(plan.dataset, plan.seed, plan.trial, b) for a, b in zip(self.actors, blocks)])
            ray.get([actor.configure.remote(plan.loss, plan.repetitions) for actor in self.actors])
        self.shuffler = ShufflerActor.remote(*_shuffler_args(plan)) if plan.shuffled else None

    def put(self, value):
        return ray.put(value)

    def map(self, method: str, *args) -> list:
        return ray.get([getattr(actor, method).remote(*args) for actor in self.actors])

    def exchange(self, payload: RoundPayload) -> tuple[np.ndarray, np.ndarray, list]:
        """One round's messages as the server may see them, and the silos' evaluation parts."""
        ref = ray.put(payload)
        if self.shuffler is None:
            return _gather(ray.get([actor.round.remote(ref) for actor in self.actors]))
        # Shuffle model: the replies go from the silo actors to the shuffler as object refs;
        # the driver never holds un-shuffled messages. Evaluation travels in its own call.
        evaluations = [actor.evaluate.remote(payload.evaluate) for actor in self.actors if payload.evaluate is not None]
        bare = ray.put(replace(payload, evaluate=None))
        shuffled = ray.get(self.shuffler.shuffle.remote(payload.round, *[a.round.remote(bare) for a in self.actors]))
        return shuffled.messages, shuffled.mask, ray.get(evaluations)

    def close(self, keep_silos: bool = False) -> None:
        for actor in ([] if keep_silos else self.actors) + ([self.shuffler] if self.shuffler is not None else []):
            ray.kill(actor)


class ActorPool:
    """The silo actors of the last finished job, kept for the next job with the same layout.

    A Hydra sweep runs its jobs in one process. Jobs on the same records (algorithm, budgets or
    step sizes differ) reuse the actors as they are; a new trial reloads its records into the
    same actor processes, skipping process start-up and imports. At most one set is kept (their
    CPU shares stay reserved); a failed job's actors are killed.
    """

    def __init__(self):
        self.layout, self.data, self.actors = None, None, None

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
        if self.actors is not None and ray.is_initialized() and self.layout[-1] == ray.get_runtime_context().get_job_id():
            for actor in self.actors:
                ray.kill(actor)
        self.layout, self.data, self.actors = None, None, None


POOL = ActorPool()


class InlineGroups:
    """The same silo groups in this process, without Ray (tests, the single-process reference)."""

    def __init__(self, plan: Plan, num_groups: int = 1):
        blocks = np.array_split(np.arange(plan.shape.num_silos), num_groups)
        self.groups = [SiloGroup(plan.dataset, plan.seed, plan.trial, b, plan.loss, plan.repetitions) for b in blocks]

        self.shuffler = Shuffler(*_shuffler_args(plan)) if plan.shuffled else None

    def put(self, value):
        return value

    def map(self, method: str, *args) -> list:
        return [getattr(group, method)(*args) for group in self.groups]

    def exchange(self, payload: RoundPayload) -> tuple[np.ndarray, np.ndarray, list]:
        if self.shuffler is None:
            return _gather([group.round(payload) for group in self.groups])
        evaluations = [group.evaluate(payload.evaluate) for group in self.groups if payload.evaluate is not None]
        bare = replace(payload, evaluate=None)
        shuffled = self.shuffler.shuffle(payload.round, *[group.round(bare) for group in self.groups])
        return shuffled.messages, shuffled.mask, evaluations

    def close(self) -> None:
        self.groups = []


def _combine_evaluation(parts: list[dict], num_silos: int) -> dict:
    train = np.concatenate([p["train_loss_mean"] for p in parts], axis=1)      # (P, N)
    errors = np.concatenate([p["test_error_sum"] for p in parts], axis=1)
    counts = np.concatenate([p["test_count"] for p in parts])
    return {"train_loss": train.sum(axis=1) / num_silos, "test_error": errors.sum(axis=1) / counts.sum()}


def start(plan: Plan) -> RayGroups:
    """Connect to Ray and start (or take from the pool) the silo actors; returns without waiting
    for new actors to load, so the caller can set up tracking meanwhile."""
    started = time.perf_counter()
    _connect(plan.runtime)
    num_actors = _num_actors(plan.runtime, plan.shape.num_silos)
    layout = _layout_key(plan, num_actors)
    groups = RayGroups(plan, num_actors, POOL.take(layout))
    groups.layout, groups.started = layout, started
    return groups


def run(plan: Plan, tracker=None, progress=None, inline: bool = False, groups: RayGroups | None = None) -> RunResult:
    """Run ``plan`` on Ray (local or the cluster at ``runtime.address``), or in-process if ``inline``.

    ``groups`` from ``start(plan)`` if the caller started the actors already."""
    if inline:
        started = time.perf_counter()
        groups = InlineGroups(plan)
        try:
            return _rounds(plan, groups, tracker, progress, started)
        finally:
            groups.close()
    groups = groups if groups is not None else start(plan)
    try:
        result = _rounds(plan, groups, tracker, progress, groups.started)
    except BaseException:
        groups.close()
        raise
    groups.close(keep_silos=True)
    POOL.give(groups.layout, _data_key(plan), groups.actors)
    return result


def _rounds(plan: Plan, groups, tracker, progress, started: float) -> RunResult:
    l2_clip = plan.l2_clip
    if l2_clip is None:
        l2_clip = max(groups.map("max_feature_norm"))
    algorithm = plan.build_algorithm(l2_clip)
    groups.map("set_algorithm", algorithm)

    num_silos = plan.shape.num_silos
    params0 = np.zeros((plan.num_replicas, plan.shape.dim, plan.loss.num_outputs))
    state = algorithm.init(params0)
    ledger = plan.privacy.ledger()
    result = RunResult(state.params, state.params, l2_clip=float(l2_clip))
    if plan.privacy.private:
        noise_std = np.asarray(algorithm.noise.noise_std).mean(axis=1)
        result.noise_std = float(noise_std.mean())
    first_round_at = None
    start_round = 0
    ckpt_path, ckpt_every = plan.runtime.get("checkpoint_path"), plan.runtime.get("checkpoint_every") or 0
    fingerprint = checkpoint.fingerprint(plan.config)
    if ckpt_path and plan.runtime.get("resume") and Path(ckpt_path).exists():
        restored = checkpoint.load(ckpt_path, fingerprint)
        state, start_round, result.history = restored.state, restored.next_round, restored.history
        ledger.restore(restored.ledger)
        for r, metrics in enumerate(result.history):
            if tracker is not None:
                tracker.log_round(r, metrics)
            if progress is not None:
                progress(r, metrics)

    for r in range(start_round, plan.num_rounds):
        participation = plan.schedule[r]
        evaluate = r % plan.evaluate_every == 0 or r == plan.num_rounds - 1
        payload = RoundPayload(r, algorithm.broadcast(state), state.params if evaluate else None, participation)
        messages, mask, evaluation = groups.exchange(payload)
        state = algorithm.server_step(state, messages, mask)
        ledger.record(participation)
        metrics = _combine_evaluation(evaluation, num_silos) if evaluate else {}
        metrics["participants"] = participation.sum(axis=1).astype(np.float64)
        if plan.privacy.private:
            eps = ledger.epsilons()
            metrics["epsilon_max"] = eps.max(axis=1)
            metrics["epsilon_mean"] = eps.mean(axis=1)
            metrics["noise_std"] = noise_std
        result.history.append(metrics)
        if tracker is not None:
            tracker.log_round(r, metrics)
        if progress is not None:
            progress(r, metrics)
        if first_round_at is None:
            first_round_at = time.perf_counter()
        if ckpt_path and ckpt_every and (r + 1) % ckpt_every == 0:
            checkpoint.save(ckpt_path, checkpoint.Checkpoint(r + 1, state, ledger.state(), result.history, fingerprint))

    last, avg = state.params, tail_average(state)
    finals = groups.map("evaluate", np.concatenate([last, avg]))
    both = _combine_evaluation(finals, num_silos)
    p = plan.num_replicas
    result.final = {
        "train_loss": both["train_loss"][:p],
        "test_error": both["test_error"][:p],
        "train_loss_avg": both["train_loss"][p:],
        "test_error_avg": both["test_error"][p:],
    }
    result.last_iterate, result.tail_average = last, avg
    result.epsilon_spent = ledger.epsilons() if plan.privacy.private else None
    result.wall_time = time.perf_counter() - started
    result.time_to_first_round = (first_round_at or time.perf_counter()) - started
    return result
