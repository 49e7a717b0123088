"""Alg. 1 on Ray actors (the shared local instance): the same bits as in one process, with a step
straddling the two actors, and a released record that holds vertex draws and metrics only."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedray.plan import make_plan
from fedray.runtime.driver import InlineGroups, run
from fedray.tracking import tracker_from_config
from tests.conftest import compose, mlflow_store

pytestmark = pytest.mark.ray

GAME = ["experiment=smd_bilinear", "data.spec.num_samples=3001", "data.spec.dim=8", "repetitions=2",
        "progress=false", "evaluate_every=3", "algorithm.block_steps=40", "runtime.num_actors=2"]


@pytest.mark.slow
def test_ray_run_equals_the_inline_run_and_releases_only_draws(ray_local, tmp_path):
    plan = make_plan(compose(*GAME, f"tracking.uri={mlflow_store(tmp_path, 'm.db')}"))
    inline = run(plan, inline=True, groups=InlineGroups(plan, 3))
    tracker = tracker_from_config(plan.tracking, run_name="smd")
    result = run(plan, tracker=tracker)
    tracker.finish(plan, result)
    for name in ("output", "iterate_average"):
        np.testing.assert_array_equal(result.outputs[name], inline.outputs[name])
    np.testing.assert_array_equal(result.epsilon_spent, inline.epsilon_spent)
    # Release hygiene (spec §7 test 18): no array of iterate length among the logged values.
    artifacts = tracker.client.download_artifacts(tracker.run_id, "", str(tmp_path / "a"))
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert all(np.size(value) <= plan.num_replicas for value in summary.values())
    statement = json.loads((tmp_path / "a" / "privacy_statement.json").read_text())
    assert statement["trust_model"] == "central" and statement["epsilon_per_unit_max"] <= 1.0
    assert "gap_iterate_average" in statement["diagnostic_metrics"] and artifacts
    assert tracker.client.get_run(tracker.run_id).info.status == "FINISHED"
