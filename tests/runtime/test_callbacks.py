"""Callbacks of the driver loop (``run(plan, callbacks=...)``): they see every settled history
entry once, in order, and a reason one returns ends the run there, whatever the strategy."""

from __future__ import annotations

import numpy as np
import pytest

from fedray.plan import make_plan
from fedray.runtime.callbacks import Callback, Entry
from fedray.runtime.driver import InlineGroups, run
from tests.conftest import compose

ROUNDS = ["data=synthetic", "data.spec.num_silos=7", "data.spec.samples_per_silo=40", "data.spec.dim=4",
          "num_rounds=12", "algorithm.batch_size=10", "privacy.epsilon=8.0", "privacy.enforce_budget=false",
          "evaluate_every=3", "progress=false", "participation=poisson", "participation.probability=0.5"]
STEPS = ["experiment=smd_bilinear", "data.spec.num_samples=3000", "data.spec.dim=8", "repetitions=1",
         "evaluate_every=100", "algorithm.block_steps=37", "progress=false"]


class Recorder(Callback):
    """Records the entries it sees; after entry ``stop_after`` (if given) asks the run to end."""

    def __init__(self, stop_after: int | None = None):
        self.entries: list[Entry] = []
        self.stop_after = stop_after

    def after_round(self, entry: Entry) -> str | None:
        self.entries.append(entry)
        return "enough" if entry.index == self.stop_after else None


class RefuseFrom(Callback):
    """Refuses every call that starts at or after step ``first``."""

    def __init__(self, first: int):
        self.first = first

    def before_round(self, spec, state, keys, strategy):
        return (None, f"refused at {spec.round}") if spec.round >= self.first else (spec, None)


def _run(overrides, groups=1, *callbacks):
    plan = make_plan(compose(*overrides))
    return plan, run(plan, inline=True, groups=InlineGroups(plan, groups), callbacks=callbacks)


def _same_history(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x)
                                    for x, y in zip(a, b))


@pytest.mark.parametrize("overrides,groups", [(ROUNDS + ["runtime.rounds_per_call=1"], 1), (ROUNDS, 3), (STEPS, 3)])
def test_a_callback_sees_every_entry_once_in_order(overrides, groups):
    recorder = Recorder()
    plan, result = _run(overrides, groups, recorder)
    assert [e.index for e in recorder.entries] == list(range(len(result.history)))
    assert [e.metrics for e in recorder.entries] == result.history
    steps = [e.step for e in recorder.entries]
    assert steps == sorted(set(steps)) and steps[-1] == plan.num_rounds - 1
    assert result.stopped is None


# Ordinary rounds stop right after the entry; blocks of steps (and of rounds) settle the call
# already running as well: its releases were made, so they are recorded and charged.
@pytest.mark.parametrize("overrides,groups,extra", [(ROUNDS + ["runtime.rounds_per_call=1"], 1, 0), (ROUNDS, 3, 0),
                                                    (STEPS, 3, 1), (ROUNDS + ["runtime.rounds_per_call=2"], 1, 2)])
def test_a_stop_after_an_entry_ends_the_run_with_the_calls_started(overrides, groups, extra):
    _, full = _run(overrides, groups)
    stop_after = len(full.history) // 2
    _, stopped = _run(overrides, groups, Recorder(stop_after))
    settled = len(stopped.history)
    assert stopped.stopped == "enough"
    assert stop_after < settled < len(full.history) and (extra or settled == stop_after + 1)
    assert _same_history(stopped.history, full.history[:settled])
    assert np.array_equal(stopped.epsilon_spent.max(axis=1), full.history[settled - 1]["epsilon_max"])


def test_a_refusal_before_a_call_runs_nothing_from_there():
    _, full = _run(ROUNDS, 1)
    _, refused = _run(ROUNDS + ["runtime.rounds_per_call=1"], 1, RefuseFrom(5))
    assert refused.stopped == "refused at 5"
    assert _same_history(refused.history, full.history[:5])
