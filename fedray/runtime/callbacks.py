"""Hooks of the driver loop: tracking, progress, checkpoints and the budget stop.

Each is a ``Callback`` (in the spirit of pfl-research's ``after_central_iteration``): the loop
calls ``before_round`` with a call it has configured and ``after_round`` with every history
entry it settles (and with the entries a resumed run replays); either may return a reason to
stop, and the run then ends with the rounds already started, the reason recorded as
``RunResult.stopped``. ``run(plan, callbacks=...)`` adds a user's own after the built-in ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol, runtime_checkable

import numpy as np

from fedray.core.protocol import RoundKeys, RoundSpec
from fedray.runtime import checkpoint

if TYPE_CHECKING:
    from fedray.plan import Plan
    from fedray.privacy.ledger import Ledger
    from fedray.runtime.strategies import PerRound


@runtime_checkable
class Tracker(Protocol):
    """What the driver loop reads of a run's tracker (``fedray.tracking.MlflowTracker`` is one):
    ``log_round`` takes every entry's metrics at its step, and ``run_id`` names the run the rounds
    are logged to (None before one is open), which a checkpoint keeps so a resumed run logs to it."""

    run_id: str | None

    def log_round(self, round_index: int, metrics: dict) -> None: ...


@dataclass(frozen=True)
class Entry:
    """One history entry as the server settled it: its index, the step it is logged at (its last
    step), its metrics and the state it reached (None for one a resumed run replays)."""

    index: int
    step: int
    metrics: dict
    state: Any = None
    replayed: bool = False


class Callback:
    """A hook of the driver loop. The defaults change nothing and never stop."""

    def before_round(self, spec: RoundSpec, state: Any, keys: RoundKeys,
                     strategy: PerRound) -> tuple[RoundSpec | None, str | None]:
        """The call to run in place of ``spec`` (None: none), and a reason to stop after it (or None)."""
        return spec, None

    def after_round(self, entry: Entry) -> str | None:
        """Called with every settled (or replayed) history entry; a reason to stop, or None."""
        return None

    def after_evaluation(self, step: int, values: dict) -> None:
        """Metrics of an entry evaluated after the run (a faithful run's models), logged at ``step``."""


class Tracking(Callback):
    """Every entry's metrics to the tracker (``log_round``); a tracker resuming the same run skips
    the steps it holds."""

    def __init__(self, tracker: Tracker):
        self.tracker = tracker

    def after_round(self, entry: Entry) -> str | None:
        self.tracker.log_round(entry.step, entry.metrics)
        return None

    def after_evaluation(self, step: int, values: dict) -> None:
        self.tracker.log_round(step, values)


class Progress(Callback):
    """Every entry's metrics to the progress display, ``progress(step, metrics)``."""

    def __init__(self, progress: Callable[[int, dict], Any]):
        self.progress = progress

    def after_round(self, entry: Entry) -> str | None:
        self.progress(entry.step, entry.metrics)
        return None


class Checkpointing(Callback):
    """A checkpoint (state, ledger, history) after every ``every``-th entry, at ``path``."""

    def __init__(self, path: str, every: int, config: dict, ledger: Ledger | None, history: list,
                 tracker: Tracker | None):
        self.path, self.every, self.fingerprint = path, every, checkpoint.fingerprint(config)
        self.ledger, self.history, self.tracker = ledger, history, tracker
        self.steps: list[int] = []         # the step each history entry is logged at

    def after_round(self, entry: Entry) -> str | None:
        self.steps.append(entry.step)
        if not entry.replayed and (entry.index + 1) % self.every == 0:
            checkpoint.save(self.path, checkpoint.Checkpoint(
                entry.index + 1, entry.state, self.ledger.state() if self.ledger else {}, self.history,
                self.fingerprint, list(self.steps), None if self.tracker is None else self.tracker.run_id))
        return None


class BudgetStop(Callback):
    """``privacy.enforce_budget=stop``: the rounds the ledger's targets can still pay for. Each
    round's charge is public and known before it runs (``protocol.charge``), so a round that would
    take any (replica, unit) past its target is never started: the run ends with the outputs of the
    rounds paid for, at a round that depends on no data. Counts include rounds started but not yet
    settled (a block in flight). A call of several rounds is paid for round by round, and cut
    before the first refused one (``strategy.shorten``)."""

    def __init__(self, plan: Plan, ledger: Ledger):
        if plan.privacy.target_epsilon is None:
            raise ValueError("privacy.enforce_budget=stop needs target epsilons; this plan has none")
        self.ledger, self.committed = ledger, ledger.counts.copy()
        self.target = np.broadcast_to(plan.privacy.target_epsilon, ledger.counts.shape)

    def before_round(self, spec: RoundSpec, state: Any, keys: RoundKeys,
                     strategy: PerRound) -> tuple[RoundSpec | None, str | None]:
        while True:
            fits, refused = self.affordable(strategy.charges(state, spec), spec.round)
            if refused is None:
                return spec, None
            shorter = strategy.shorten(state, keys, spec, fits)
            if shorter is None or fits:          # the rounds paid for run; the next is refused
                return shorter, refused
            spec = shorter                       # a shorter call, priced afresh

    def refusal(self, charge, round_index: int) -> str | None:
        """None if the budget pays for ``charge``; else why round ``round_index`` is not run."""
        epsilons = self.ledger.epsilons(self.ledger.after(charge, self.committed))
        over = epsilons - self.target * (1 + 1e-9)
        if np.all(over <= 0):
            return None
        p, u = np.unravel_index(int(np.argmax(over)), over.shape)
        return (f"privacy budget: round {round_index} would take {self.ledger.unit} {u} of replica {p} to epsilon "
                f"{epsilons[p, u]:.4g} > {self.target[p, u]:g}; the run ends after {round_index} rounds")

    def commit(self, charge) -> None:
        self.committed = self.ledger.after(charge, self.committed)

    def affordable(self, charges: list, first_round: int) -> tuple[int, str | None]:
        """How many of consecutive rounds' ``charges`` the budget pays for, each checked after the
        ones before it (committed), and why the next is refused (None if every one is paid for)."""
        for i, charge in enumerate(charges):
            refused = self.refusal(charge, first_round + i)
            if refused is not None:
                return i, refused
            self.commit(charge)
        return len(charges), None


def built_in(plan: Plan, ledger: Ledger | None, history: list, tracker: Tracker | None,
             progress: Callable[[int, dict], Any] | None) -> list[Callback]:
    """The plan's callbacks, in the order they run: budget stop, tracking, progress, checkpoints."""
    hooks: list[Callback] = []
    if plan.privacy.stop_at_budget and ledger is not None:
        hooks.append(BudgetStop(plan, ledger))
    if tracker is not None:
        hooks.append(Tracking(tracker))
    if progress is not None:
        hooks.append(Progress(progress))
    path, every = plan.runtime.get("checkpoint_path"), plan.runtime.get("checkpoint_every") or 0
    if path and every:
        hooks.append(Checkpointing(path, every, plan.config, ledger, history, tracker))
    return hooks
