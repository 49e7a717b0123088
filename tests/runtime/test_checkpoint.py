"""A run interrupted after a checkpoint and resumed ends exactly where the uninterrupted run does."""

import numpy as np
import pytest

from fedray.errors import ConfigError
from fedray.plan import make_plan
from fedray.runtime.driver import run
from tests.conftest import compose

BASE = ["data=synthetic", "data.spec.num_silos=6", "data.spec.samples_per_silo=40", "data.spec.dim=4",
        "participation.silos_per_round=3", "num_rounds=6", "algorithm.batch_size=10", "privacy.epsilon=4.0", "privacy.accountant=pld",
        "progress=false", "runtime.checkpoint_every=3"]


class Interrupt(Exception):
    pass


def test_resume_after_interruption_is_bit_identical(tmp_path):
    path = tmp_path / "run.ckpt"
    reference = run(make_plan(compose(*BASE)), inline=True)

    plan = make_plan(compose(*BASE, f"runtime.checkpoint_path={path}", "runtime.resume=true"))

    def stop_at_round_4(r, metrics):
        if r == 4:
            raise Interrupt

    with pytest.raises(Interrupt):
        run(plan, progress=stop_at_round_4, inline=True)
    assert path.exists()
    resumed = run(plan, inline=True)
    assert np.array_equal(resumed.last_iterate, reference.last_iterate)
    assert np.array_equal(resumed.epsilon_spent, reference.epsilon_spent)
    assert len(resumed.history) == 6
    assert [h["train_loss"][0] for h in resumed.history] == [h["train_loss"][0] for h in reference.history]


def test_a_checkpoint_of_another_config_is_refused(tmp_path):
    path = tmp_path / "run.ckpt"
    run(make_plan(compose(*BASE, f"runtime.checkpoint_path={path}")), inline=True)
    other = make_plan(compose(*BASE, f"runtime.checkpoint_path={path}", "runtime.resume=true", "privacy.epsilon=2.0"))
    with pytest.raises(ConfigError, match="runtime.checkpoint_path must be a checkpoint written by a run with the same config"):
        run(other, inline=True)
