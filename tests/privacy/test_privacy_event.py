"""The planned run as one composed dp-accounting event (``privacy_event.json``): written by the
tracker, read back into an event that dp-accounting's own RDP accountant prices at the epsilon the
run reports."""

import json

import dp_accounting
import numpy as np
import pytest
from dp_accounting import rdp
from mlflow.tracking import MlflowClient

from fedray.plan import make_plan
from fedray.privacy.events import EpsilonDeltaDpEvent, event_from_json, event_to_json
from fedray.runtime.driver import run
from fedray.tracking import PRIVACY_EVENT_ARTIFACT, tracker_from_config
from tests.conftest import compose, mlflow_store
from tests.runtime.test_checkpoint import BASE


def _rdp_epsilon(event, delta: float) -> float:
    accountant = rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    return accountant.compose(event).get_epsilon(delta)


def test_the_main_jobs_planned_event_composes_to_its_reported_epsilon():
    plan = make_plan(compose("experiment=isrl_dp_convex"))
    record = json.loads(json.dumps(plan.privacy.planned_event()))       # through text, as the artifact
    event = event_from_json(record["event"])
    # One participation: a Gaussian on K = 182 records sampled without replacement from the
    # silo's n; the worst silo takes part ``count`` times (the sampler's replay).
    assert isinstance(event, dp_accounting.SelfComposedDpEvent) and event.count == record["count"] > 1
    assert isinstance(event.event, dp_accounting.SampledWithoutReplacementDpEvent)
    assert event.event.sample_size == 182
    assert record["epsilon"] == float(np.max(plan.privacy.planned_epsilon))
    assert _rdp_epsilon(event, record["delta"]) == pytest.approx(record["epsilon"], rel=1e-12)
    assert f"{record['epsilon']:.3f}" == "2.300"             # the README's "eps spent 2.300"
    assert record["unit_id"] == int(np.argmax(plan.privacy.planned_epsilon[0]))


def test_with_per_silo_budgets_the_record_names_the_worst_silo():
    budgets = [1] * 5 + [3] * 20
    plan = make_plan(compose("experiment=isrl_dp_convex", f"privacy.epsilon=[{','.join(map(str, budgets))}]"))
    record = plan.privacy.planned_event()
    planned = plan.privacy.planned_epsilon
    assert not record["units_alike"] and record["unit_id"] >= 5           # a 3-budget silo spends the most
    assert record["epsilon"] == planned.max()
    assert _rdp_epsilon(event_from_json(record["event"]), record["delta"]) == pytest.approx(planned.max(), rel=1e-12)
    cheap = plan.privacy.ledger.accountant.event(0, 0, int(plan.privacy.planned_counts[0, 0]))
    assert _rdp_epsilon(cheap, float(plan.privacy.delta[0])) == pytest.approx(planned[0, 0], rel=1e-12)


def test_json_round_trip_is_exact_and_refuses_foreign_classes():
    event = dp_accounting.ComposedDpEvent([
        dp_accounting.SelfComposedDpEvent(
            dp_accounting.SampledWithoutReplacementDpEvent(1238, 182, dp_accounting.GaussianDpEvent(0.1 + 0.2)), 7),
        EpsilonDeltaDpEvent(1.0, 1e-6), dp_accounting.NonPrivateDpEvent()])
    assert event_from_json(json.loads(json.dumps(event_to_json(event)))) == event
    foreign = {"module_name": "os", "class_name": "system"}
    with pytest.raises(ValueError, match="module_name must be dp_accounting's"):
        event_from_json(foreign)


def test_a_theorem_priced_plan_records_why_it_has_no_event():
    plan = make_plan(compose("experiment=theory_shuffled"))
    record = plan.privacy.planned_event()
    assert record["event"] is None and "composition theorem" in record["why_no_event"]


def test_a_tracked_run_logs_the_event_next_to_the_statement(tmp_path):
    uri = mlflow_store(tmp_path)
    plan = make_plan(compose(*[o for o in BASE if "checkpoint" not in o], f"tracking.uri={uri}",
                             f"tracking.artifact_location={tmp_path}/artifacts", "tracking.figure=false"))
    tracker = tracker_from_config(plan.tracking, run_name="event")
    tracker.log_plan(plan)
    result = run(plan, tracker=tracker, inline=True)
    tracker.finish(plan, result)
    client = MlflowClient(tracking_uri=uri)
    assert {"privacy_statement.json", PRIVACY_EVENT_ARTIFACT} <= {a.path for a in client.list_artifacts(tracker.run_id)}
    with open(client.download_artifacts(tracker.run_id, PRIVACY_EVENT_ARTIFACT, str(tmp_path))) as written:
        record = json.load(written)
    # The planned counts are the sampler's replay, which is what ran: the spend equals the plan's.
    assert record["epsilon"] == pytest.approx(float(result.epsilon_spent.max()), rel=1e-12)
    assert epsilon_pld(record) == pytest.approx(record["epsilon"], rel=1e-12)


def epsilon_pld(record) -> float:
    """BASE prices with fedray's replace-one PLD accountant, which reads the same event."""
    from fedray.privacy.accounting import epsilon_of

    return epsilon_of(event_from_json(record["event"]), record["delta"], "pld")
