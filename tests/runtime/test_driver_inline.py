"""The driver loop without Ray: evaluation frequency changes what is measured, never the model."""

import numpy as np

from fedray.plan import make_plan
from fedray.runtime.driver import run
from tests.conftest import compose

BASE = ["data=synthetic", "data.spec.num_silos=5", "data.spec.samples_per_silo=40", "data.spec.dim=4",
        "participation.silos_per_round=5", "num_rounds=7", "algorithm.batch_size=10", "privacy.epsilon=4.0",
        "privacy.accountant=pld", "progress=false"]


def test_evaluating_every_third_round_measures_rounds_0_3_6_and_trains_the_same_model():
    every = run(make_plan(compose(*BASE)), inline=True)
    sparse = run(make_plan(compose(*BASE, "evaluate_every=3")), inline=True)
    assert [r for r, h in enumerate(sparse.history) if "train_loss" in h] == [0, 3, 6]
    assert all("epsilon_max" in h for h in sparse.history)
    assert np.array_equal(every.last_iterate, sparse.last_iterate)
    assert sparse.history[3]["train_loss"][0] == every.history[3]["train_loss"][0]


def test_a_group_asked_for_a_round_without_a_round_protocol_says_what_it_holds():
    """The group checks its protocol once, when it is set; a round asked of a group holding a
    driver-side program (or a protocol swapped for one) is refused, naming what it holds, not run."""
    import pytest

    from fedray.core.protocol import RoundSpec
    from fedray.runtime.silo_group import RoundPayload, SiloGroup

    plan = make_plan(compose(*BASE))
    group = SiloGroup(plan.dataset, plan.seed, plan.trial, np.arange(5), plan.repetitions)
    payload = RoundPayload(RoundSpec(0, np.ones((1, 5), dtype=bool), np.zeros((1, 4, 1))), None)
    group.set_protocol(plan.protocol.build(oracle=None))
    assert group.round(payload).messages.shape[:2] == (1, 5)
    group.set_protocol(object())
    with pytest.raises(TypeError, match="a round needs a RoundProtocol; this group holds object"):
        group.round(payload)
