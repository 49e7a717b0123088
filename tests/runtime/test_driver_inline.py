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
