"""The noise step's report: what the silos' Gaussian step says it added is logged with every round
of the ISRL-DP algorithms, released (not a diagnostic), for the silos that took part."""

import numpy as np
import pytest

from fedray.plan import make_plan
from fedray.privacy.mechanisms import GaussianNoise, NoNoise
from fedray.runtime.driver import run
from tests.conftest import compose
from tests.runtime.test_checkpoint import BASE

# Silos 0-2 on a budget of 1, silos 3-5 on 4: the first three add more noise. The noise is the
# paper's formula whichever accountant prices it; RDP prices six rounds from one curve per budget
# (PLD composes every count anew: 7 s of the fast tier for the same assertions).
OVERRIDES = [o for o in BASE if "checkpoint" not in o and "privacy.epsilon" not in o and "accountant" not in o] + [
    "privacy.epsilon=[1,1,1,4,4,4]", "privacy.enforce_budget=false", "privacy.accountant=rdp"]


@pytest.mark.parametrize("algorithm", ["isrl_dp_mb_sgd", "isrl_dp_local_sgd"])
def test_each_round_logs_the_noise_std_its_participants_added(algorithm):
    plan = make_plan(compose(*OVERRIDES, f"algorithm={algorithm}"))
    result = run(plan, inline=True)
    noise = plan.protocol.build_algorithm(plan.protocol.l2_clip).noise      # the step the silos apply
    cells = (plan.num_replicas, 6, 1, 1)
    _, reported = noise.apply(np.zeros(cells), np.zeros(cells))       # what it says each cell added
    std = reported["noise_std"]                                        # (P, N)
    assert std[0, 0] > std[0, 3]
    seen_both = False
    for r, metrics in enumerate(result.history):
        took_part = plan.protocol.sampler.sample(plan.seed, plan.repetitions, r, 6)           # (P, N)
        added = np.where(took_part, std, np.nan)
        assert metrics["noise_std_added_max"] == pytest.approx(np.nanmax(added, axis=1), rel=1e-12)
        assert metrics["noise_std_added_min"] == pytest.approx(np.nanmin(added, axis=1), rel=1e-12)
        seen_both |= bool(took_part[0, :3].any() and took_part[0, 3:].any())
    assert seen_both
    assert not {"noise_std_added_min", "noise_std_added_max"} & result.diagnostics


def test_no_participant_reports_zero_and_a_baseline_reports_nothing():
    noise = GaussianNoise(np.array([[1.0, 2.0]]), sensitivity=0.5)
    metrics = noise.round_metrics(np.array([[False, False]]))
    assert metrics["noise_std_added_max"].value[0] == 0.0 and metrics["noise_std_added_max"].released
    assert noise.round_metrics(np.array([[False, True]]))["noise_std_added_min"].value[0] == 1.0
    assert NoNoise().round_metrics(np.array([[True]])) == {}
    assert np.all(NoNoise().apply(np.ones((2, 3, 4)))[1]["noise_std"] == 0.0)
