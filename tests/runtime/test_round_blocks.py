"""Several rounds per actor call (SampledRounds.rounds): a small federation held by one actor runs
blocks of ordinary rounds, and nothing a run reports may depend on it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fedray.core.protocol import SampledRounds
from fedray.plan import make_plan
from fedray.runtime import driver
from fedray.runtime.callbacks import BudgetStop
from fedray.runtime.driver import InlineGroups, run
from tests.conftest import compose

# Poisson participation: rounds differ in how many silos take part, so a block packs messages of
# different widths; evaluation every third round, so some rounds of a block carry no evaluation.
JOB = ["data=synthetic", "data.spec.num_silos=7", "data.spec.samples_per_silo=40", "data.spec.dim=4",
       "num_rounds=23", "algorithm.batch_size=10", "privacy.epsilon=8.0", "privacy.enforce_budget=false",
       "evaluate_every=3", "progress=false"]
POISSON = ["participation=poisson", "participation.probability=0.5"]


class CountingGroups(InlineGroups):
    """Inline groups that record how many rounds each block call ran."""

    def __init__(self, plan):
        super().__init__(plan)
        self.blocks = []

    def submit_block(self, payload, owner):
        self.blocks.append(payload.spec.steps)
        return super().submit_block(payload, owner)


def _run(*overrides: str, participation=POISSON):
    plan = make_plan(compose(*JOB, *participation, *overrides))
    groups = CountingGroups(plan)
    return run(plan, inline=True, groups=groups), groups.blocks


@pytest.mark.slow
def test_blocks_of_rounds_report_exactly_what_one_round_per_call_does():
    blocked, blocks = _run()
    single, singles = _run("runtime.rounds_per_call=1")
    assert max(blocks) > 1 and sum(blocks) == 23 and blocks[0] == 1
    assert singles == []                      # one round per call: the ordinary exchange
    assert np.array_equal(blocked.last_iterate, single.last_iterate)
    assert np.array_equal(blocked.epsilon_spent, single.epsilon_spent)
    assert len(blocked.history) == len(single.history) == 23
    for a, b in zip(blocked.history, single.history):
        assert a.keys() == b.keys()
        assert all(np.array_equal(a[key], b[key]) for key in a)
    assert [r for r, h in enumerate(blocked.history) if "train_loss" in h] == [0, 3, 6, 9, 12, 15, 18, 21, 22]
    assert len({h["participants"][0] for h in blocked.history}) > 1        # widths differ between rounds


def test_a_cap_of_two_rounds_per_call_is_honoured():
    result, blocks = _run("runtime.rounds_per_call=2")
    assert set(blocks) == {1, 2} and sum(blocks) == 23
    assert np.array_equal(result.last_iterate, _run()[0].last_iterate)


def test_a_block_whose_actor_reports_another_end_state_is_refused(monkeypatch):
    honest = SampledRounds.client_rounds

    def tampered(self, block, exchange, evaluate):
        sent, evaluated, state = honest(self, block, exchange, evaluate)
        return sent, evaluated, state._replace(params=state.params + 1e-12)

    monkeypatch.setattr(SampledRounds, "client_rounds", tampered)
    with pytest.raises(RuntimeError, match="do not reach the state the block's actor reported"):
        _run()


def test_a_budget_stop_ends_at_the_same_round_with_blocks():
    # test_budget_stop's job: silo 2's fifth participation (round 5) would pass eps = 4
    stop = ["data.spec.num_silos=8", "num_rounds=6", "privacy.epsilon=4.0", "privacy.calibration=paper",
            "privacy.enforce_budget=stop", "evaluate_every=1"]
    uniform = ["participation=uniform", "participation.silos_per_round=4"]
    blocked, blocks = _run(*stop, participation=uniform)
    single, _ = _run(*stop, "runtime.rounds_per_call=1", participation=uniform)
    assert max(blocks) > 1
    assert blocked.stopped == single.stopped is not None and len(blocked.history) == len(single.history) == 5
    assert np.array_equal(blocked.last_iterate, single.last_iterate)


def test_a_small_federation_gets_one_actor_and_an_explicit_count_is_kept():
    plan = make_plan(compose(*JOB, *POISSON))
    assert driver._num_actors(plan) == 1               # 7 x 40 records x 4 dims: far below the threshold
    assert driver._num_actors(replace(plan, runtime={**plan.runtime, "num_actors": 3})) == 3
    assert driver._num_actors(replace(plan, runtime={**plan.runtime, "num_actors": 30})) == 7     # capped by the silos


@pytest.mark.ray
def test_a_large_federation_gets_an_actor_per_cpu(ray_local):
    plan = make_plan(compose(*JOB, *POISSON, "runtime.single_actor_work=100"))
    assert driver._num_actors(plan) == 2               # the shared local Ray has 2 CPUs


def test_a_block_is_paid_for_round_by_round_even_where_charges_do_not_add_up():
    """A federation-wide accountant charges every unit once per round anybody took part in: the
    sum of three rounds' participation is not three rounds' charge. The budget must price a block
    as its rounds one after another."""
    from types import SimpleNamespace

    from fedray.privacy.ledger import Ledger, RoundsAccountant

    ledger = Ledger(RoundsAccountant(lambda rounds: float(rounds), "rounds", 1e-6, per_unit=False), (1, 3))
    budget = BudgetStop(SimpleNamespace(privacy=SimpleNamespace(target_epsilon=2.0)), ledger)
    rounds = [np.array([[True, False, False]]), np.array([[False, True, False]]), np.array([[False, False, True]])]
    fits, refused = budget.affordable(rounds, 7)
    assert fits == 2 and refused.startswith("privacy budget: round 9 would take silo 0 of replica 0 to epsilon 3")
    assert np.array_equal(budget.committed, [[2, 2, 2]])
    assert np.array_equal(ledger.after(sum(rounds)), [[1, 1, 1]])        # what a summed charge would have priced


# P_GD with a central Gaussian: the server's noise is drawn in every server step, by the actor
# running a block (its copy of each round) and by the driver re-running it (``aggregate``).
CENTRAL_PGD = ["data=synthetic", "data.spec.num_silos=60", "data.spec.samples_per_silo=1", "data.spec.dim=4",
               "data.spec.test_samples_per_silo=1", "algorithm=p_gd", "participation=all",
               "privacy=central_gaussian", "num_rounds=6", "progress=false"]


def test_a_server_that_draws_gets_each_rounds_keys_inside_a_block():
    """Each server step of a block draws from its own round's keys (``round_in``): the driver's
    re-run reaches the actor's state (else the run is refused) and the run equals one round per
    call bit for bit; the noise is there (another run without it differs)."""
    plan = make_plan(compose(*CENTRAL_PGD))
    groups = CountingGroups(plan)
    blocked = run(plan, inline=True, groups=groups)
    single = run(make_plan(compose(*CENTRAL_PGD, "runtime.rounds_per_call=1")), inline=True)
    quiet = run(make_plan(compose(*CENTRAL_PGD, "privacy=none")), inline=True)
    assert max(groups.blocks) > 1 and sum(groups.blocks) == 6
    assert np.array_equal(blocked.last_iterate, single.last_iterate)
    for a, b in zip(blocked.history, single.history, strict=True):
        assert all(np.array_equal(a[key], b[key]) for key in a)
    assert not np.allclose(blocked.last_iterate, quiet.last_iterate)
