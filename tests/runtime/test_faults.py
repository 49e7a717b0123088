"""Actor faults (issue 17 item 1): a silo actor whose process is killed mid-run is restarted by
Ray, restored by the driver and its cut-short call replayed; the run ends bit-identical to an
undisturbed one (released models, ledger, every round's metrics). Protocols of each data flow:
direct messages, shuffled sums in blocks of steps, a curator's per-actor sums with halting, and a
driver-side program whose oracle calls are cut. A worker node lost mid-run is tested on the shared
cluster of tests/runtime/test_cluster.py."""

from __future__ import annotations

import time

import numpy as np
import pytest
import ray

from fedray.plan import make_plan
from fedray.runtime import driver
from fedray.runtime.driver import InlineGroups, run
from tests.conftest import compose
from tests.runtime.test_checkpoint import BASE

CASES = {
    "direct": [*BASE, "runtime.checkpoint_every=null"],
    "shuffled_blocks": ["experiment=p_sgd_synthetic", "data.spec.num_silos=2000", "participation.batch_size=100",
                        "num_rounds=20", "progress=false"],
    "curator_halting": ["experiment=user_level_sphere", "data.spec.num_silos=1000", "data.spec.samples_per_silo=8",
                        "repetitions=2", "progress=false"],
    "program": ["experiment=output_perturbation_synthetic", "data.spec.num_silos=200", "data.spec.samples_per_silo=10",
                "progress=false"],
}
FAULT_ROUND = {"direct": 3, "shuffled_blocks": 12, "curator_halting": 1, "program": 0}


class _KillingGroups(driver.RayGroups):
    """Silo actors of which one has its process killed (Ray restarts it) just after the calls that
    run round ``round_index`` are sent, once: the fault lands while the call is in flight."""

    def __init__(self, plan, num_actors, actor: int, round_index: int):
        super().__init__(plan, num_actors)
        self.fault: tuple[int, int] | None = (actor, round_index)
        self.calling: tuple[int, int] = (0, 1)          # the rounds [first, first + steps) of the call being sent

    def _get(self, submit, refs=None):
        first, steps = self.calling
        if self.fault is not None and self.protocol is not None and first <= self.fault[1] < first + steps:
            refs = submit() if refs is None else refs
            actor, self.fault = self.actors[self.fault[0]], None
            ray.kill(actor, no_restart=False)
        return super()._get(submit, refs)

    def exchange(self, payload):
        self.calling = (payload.spec.round, payload.spec.steps)
        return super().exchange(payload)

    def submit_block(self, payload, owner):
        self.calling = (payload.spec.round, payload.spec.steps)
        return super().submit_block(payload, owner)

    def call(self, method, *args):
        self.calling = (0, 1) if method != "evaluate" else (-1, 0)    # a driver-side program's oracle calls: round 0
        return super().call(method, *args)


def _killing_one_actor(plan, actor: int, round_index: int) -> _KillingGroups:
    groups = _KillingGroups(plan, 2, actor, round_index)
    groups.layout, groups.started = driver._layout_key(plan, 2), time.perf_counter()
    return groups


def _same(a, b) -> None:
    assert a.outputs.keys() == b.outputs.keys()
    for name in a.outputs:
        assert np.array_equal(a.outputs[name], b.outputs[name], equal_nan=True), name
    if a.epsilon_spent is not None:
        assert np.array_equal(a.epsilon_spent, b.epsilon_spent)
    assert len(a.history) == len(b.history)
    for ra, rb in zip(a.history, b.history):
        assert ra.keys() == rb.keys()
        assert all(np.array_equal(ra[k], rb[k], equal_nan=True) for k in ra)
    assert a.final.keys() == b.final.keys()
    assert all(np.array_equal(a.final[k], b.final[k], equal_nan=True) for k in a.final)


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_killed_silo_actor_is_restarted_and_the_run_ends_bit_identical(ray_local, case):
    reference = make_plan(compose(*CASES[case]))
    undisturbed = run(reference, inline=True, groups=InlineGroups(reference, 2))      # the same two blocks of units
    plan = make_plan(compose(*CASES[case], "runtime.num_actors=2"))
    groups = _killing_one_actor(plan, actor=1, round_index=FAULT_ROUND[case])
    disturbed = run(plan, groups=groups)
    assert groups.replays >= 1          # the kill cut a call short, and it was replayed
    _same(disturbed, undisturbed)


@pytest.mark.slow
def test_without_restarts_a_killed_actor_fails_the_run(ray_local):
    plan = make_plan(compose(*CASES["direct"], "runtime.num_actors=2", "runtime.max_restarts=0"))
    with pytest.raises(ray.exceptions.RayActorError):
        run(plan, groups=_killing_one_actor(plan, actor=0, round_index=2))
