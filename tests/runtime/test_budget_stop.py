"""Budget exhaustion (issue 17 item 5): with ``privacy.enforce_budget=stop`` a run whose schedule
would pass the budget runs the rounds the budget pays for and stops before the first it cannot,
records the spend and the reason, and releases what those rounds produced, no more. The stopping
round depends only on public charges; protocols whose charges do not are refused at planning."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fedray.errors import BudgetError, ConfigError
from fedray.plan import make_plan
from fedray.runtime.driver import InlineGroups, run
from tests.conftest import compose, mlflow_store
from tests.protocols.mirror_descent.test_smd import GAME

# The paper's noise for 6 rounds; the RDP accountant prices silo 2's fifth participation
# (round 5) at eps 4.116 > 4, so planning refuses the run unless told otherwise.
JOB = ["data=synthetic", "data.spec.num_silos=8", "data.spec.samples_per_silo=40", "data.spec.dim=4",
       "participation.silos_per_round=4", "num_rounds=6", "algorithm.batch_size=10", "privacy.epsilon=4.0",
       "progress=false"]


@pytest.mark.slow
def test_a_run_stops_before_the_round_its_budget_cannot_pay_for():
    with pytest.raises(BudgetError):
        make_plan(compose(*JOB))
    stopped = run(make_plan(compose(*JOB, "privacy.enforce_budget=stop")), inline=True)
    overspent = run(make_plan(compose(*JOB, "privacy.enforce_budget=false")), inline=True)

    spend = [float(h["epsilon_max"][0]) for h in overspent.history]
    first_over = next(r for r, eps in enumerate(spend) if eps > 4.0)
    assert first_over == 5 and len(stopped.history) == first_over
    assert stopped.stopped == ("privacy budget: round 5 would take silo 2 of replica 0 to epsilon 4.116 > 4; "
                               "the run ends after 5 rounds")
    assert float(stopped.epsilon_spent.max()) == spend[first_over - 1] <= 4.0
    for kept, full in zip(stopped.history, overspent.history):      # the rounds run are the same rounds
        assert all(np.array_equal(kept[k], full[k]) for k in kept)


@pytest.mark.slow
def test_the_statement_and_the_mlflow_run_record_why_the_run_stopped(tmp_path):
    from mlflow.tracking import MlflowClient

    from fedray.tracking import tracker_from_config

    plan = make_plan(compose(*JOB, "privacy.enforce_budget=stop", f"tracking.uri={mlflow_store(tmp_path)}",
                             f"tracking.artifact_location={tmp_path}/artifacts"))
    tracker = tracker_from_config(plan.tracking, run_name="stopped")
    tracker.log_plan(plan)
    result = run(plan, tracker=tracker, inline=True)
    tracker.finish(plan, result)
    client = MlflowClient(tracking_uri=mlflow_store(tmp_path))
    recorded = client.get_run(tracker.run_id)
    assert recorded.info.status == "FINISHED" and recorded.data.tags["stopped"] == result.stopped
    assert [m.step for m in client.get_metric_history(tracker.run_id, "epsilon_max")] == list(range(5))
    downloaded = client.download_artifacts(tracker.run_id, "privacy_statement.json", str(tmp_path))
    statement = json.loads(Path(downloaded).read_text())
    assert statement["stopped"] == result.stopped and statement["epsilon_per_unit_max"] <= 4.0


def test_blocks_of_steps_stop_at_the_same_step_whatever_their_size():
    # Seed 001's SMD runs blocks of sequential steps; a target below the run's spend (set on the
    # plan: the recipe calibrates tau to the configured epsilon) makes the budget run out mid-run.
    game = [*GAME, "repetitions=1"]
    spent = run(make_plan(compose(*game)), inline=True).epsilon_spent      # the full run's spend (eps 0.5 of 1)

    def stopped_run(block: int, groups: int):
        plan = make_plan(compose(*game, f"algorithm.block_steps={block}"))
        privacy = replace(plan.privacy, target_epsilon=0.6 * spent, stop_at_budget=True)
        plan = replace(plan, protocol=replace(plan.protocol, privacy=privacy))
        return plan, run(plan, inline=True, groups=InlineGroups(plan, groups))

    plan, reference = stopped_run(1, 1)
    assert reference.stopped is not None and 0 < len(reference.history) < plan.num_rounds
    assert np.all(reference.epsilon_spent <= plan.privacy.target_epsilon)
    for block, groups in ((4096, 1), (7, 3)):
        _, other = stopped_run(block, groups)
        assert other.stopped == reference.stopped
        for name in reference.outputs:
            np.testing.assert_array_equal(other.outputs[name], reference.outputs[name])
        np.testing.assert_array_equal(other.epsilon_spent, reference.epsilon_spent)


@pytest.mark.parametrize("overrides, named", [
    (["experiment=user_level_sphere", "data.spec.num_silos=1000"], "a halting curator"),
    (["experiment=output_perturbation_synthetic", "data.spec.num_silos=200"], "a driver-side program"),
])
def test_stopping_at_the_budget_is_refused_where_charges_are_not_public(overrides, named):
    with pytest.raises(ConfigError) as err:
        make_plan(compose(*overrides, "privacy.enforce_budget=stop"))
    assert err.value.key == "privacy.enforce_budget" and named in str(err.value)


def test_enforce_budget_takes_true_false_or_stop():
    with pytest.raises(ConfigError, match="privacy.enforce_budget must be true .* or stop"):
        make_plan(compose(*JOB, "privacy.enforce_budget=halt"))
